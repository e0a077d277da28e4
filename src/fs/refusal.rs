//! The refusals of file reads and handles that a caller may word its own
//! way: the facts, and this server's own wording (`Display`, [`ErrorObject`]).

use std::path::PathBuf;

use crate::protocol::{codes, ErrorObject};

/// The longest handle id, in bytes.
pub(crate) const MAX_HANDLE_ID: usize = 32;
/// The largest block read or written at once.
pub(crate) const MAX_BLOCK: u64 = 1024 * 1024;

/// Why a file read, an `fs/open` or a handle call was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    /// The path names no regular file (a FIFO, socket, device, directory...).
    /// `followed`: a final symlink was followed. `own` is this server's error.
    #[error("{}", own.message)]
    NotAFile { path: PathBuf, followed: bool, own: Box<ErrorObject> },
    /// A handle id that is empty (when refused) or longer than [`MAX_HANDLE_ID`].
    #[error("handleId must be 1 to {MAX_HANDLE_ID} bytes; {0:?} is {len}", len = .0.len())]
    BadHandleId(String),
    #[error("file handle {0:?} is already open")]
    HandleExists(String),
    #[error("unknown file handle {0:?}")]
    UnknownHandle(String),
    #[error(
        "too many open file handles: the limit is {0} per connection; close some with fs/close"
    )]
    TooManyHandles(usize),
    #[error("len must be 1 to {MAX_BLOCK}; got {0}")]
    BadBlockLength(u64),
    /// Any other failure, worded alike by every caller.
    #[error("{}", .0.message)]
    Fs(ErrorObject),
}

impl From<ErrorObject> for Refusal {
    fn from(error: ErrorObject) -> Refusal {
        Refusal::Fs(error)
    }
}

impl From<Refusal> for ErrorObject {
    /// This server's own wording (exec-server.v0 and Part B).
    fn from(refusal: Refusal) -> ErrorObject {
        let message = refusal.to_string();
        match refusal {
            Refusal::NotAFile { own, .. } => *own,
            Refusal::Fs(own) => own,
            Refusal::BadHandleId(_) | Refusal::BadBlockLength(_) => {
                ErrorObject::new(codes::INVALID_PARAMS, message)
            }
            Refusal::HandleExists(_) | Refusal::UnknownHandle(_) | Refusal::TooManyHandles(_) => {
                ErrorObject::new(codes::INVALID_REQUEST, message)
            }
        }
    }
}
