//! I/O failures of fs/* methods as JSON-RPC errors: the message names the path, `data` has kind and path.

use std::io;
use std::path::Path;

use serde_json::json;

use crate::protocol::{codes, ErrorObject};

/// What the method was doing, for the message.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FsOp {
    Read,
    Write,
    CreateDirectory,
    Stat,
    List,
    Remove,
    Copy,
    Rename,
    Watch,
    Canonicalize,
    Walk,
    Open,
}

impl FsOp {
    fn verb(self) -> &'static str {
        match self {
            FsOp::Read => "read",
            FsOp::Write => "write",
            FsOp::CreateDirectory => "create directory",
            FsOp::Stat => "stat",
            FsOp::List => "read directory",
            FsOp::Remove => "remove",
            FsOp::Copy => "copy",
            FsOp::Rename => "rename",
            FsOp::Watch => "watch",
            FsOp::Canonicalize => "canonicalize",
            FsOp::Walk => "walk",
            FsOp::Open => "open",
        }
    }
}

/// Maps an I/O error on `path` to -32603 (-32600 for invalid input) with `{kind, path}`.
pub(crate) fn io_error(op: FsOp, path: &Path) -> impl FnOnce(io::Error) -> ErrorObject + '_ {
    move |error| {
        let message = format!("cannot {} {}: {error}", op.verb(), path.display());
        with_kind(message, path, error.kind())
    }
}

/// An error of a two-path operation; `blamed` is the path that caused it.
pub(crate) fn io_error_between(
    op: FsOp,
    source: &Path,
    destination: &Path,
    blamed: &Path,
    error: io::Error,
) -> ErrorObject {
    let message = format!(
        "cannot {} {} to {}: {}: {error}",
        op.verb(),
        source.display(),
        destination.display(),
        blamed.display()
    );
    with_kind(message, blamed, error.kind())
}

/// Copying or renaming a file onto itself (same device and inode): -32600, kind invalidInput.
pub(crate) fn same_file(op: FsOp, source: &Path, destination: &Path) -> ErrorObject {
    let message = format!(
        "cannot {} {} to {}: they are the same file",
        op.verb(),
        source.display(),
        destination.display()
    );
    with_kind(message, destination, io::ErrorKind::InvalidInput)
}

/// A request that makes no sense for `path` (kind invalidInput, -32600).
pub(crate) fn invalid_input(op: FsOp, path: &Path, detail: String) -> ErrorObject {
    let message = format!("cannot {} {}: {detail}", op.verb(), path.display());
    with_kind(message, path, io::ErrorKind::InvalidInput)
}

fn with_kind(message: String, path: &Path, kind: io::ErrorKind) -> ErrorObject {
    let name = kind_name(kind);
    let code = if kind == io::ErrorKind::InvalidInput {
        codes::INVALID_REQUEST
    } else {
        codes::INTERNAL_ERROR
    };
    ErrorObject::new(code, message).with_data(json!({"kind": name, "path": path.to_string_lossy()}))
}

/// The Part B name of an error kind.
pub(crate) fn kind_name(kind: io::ErrorKind) -> &'static str {
    use io::ErrorKind as K;
    match kind {
        K::NotFound => "notFound",
        K::PermissionDenied => "permissionDenied",
        K::AlreadyExists => "alreadyExists",
        K::NotADirectory => "notADirectory",
        K::IsADirectory => "isADirectory",
        K::DirectoryNotEmpty => "directoryNotEmpty",
        K::InvalidInput => "invalidInput",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path_and_kind() {
        let error = io::Error::from_raw_os_error(libc::ENOENT);
        let object = io_error(FsOp::Read, Path::new("/nope"))(error);
        assert_eq!(
            serde_json::to_string(&object).unwrap(),
            r#"{"code":-32603,"message":"cannot read /nope: No such file or directory (os error 2)","data":{"kind":"notFound","path":"/nope"}}"#
        );
        let object = invalid_input(FsOp::Read, Path::new("/f"), "bad offset".into());
        assert_eq!(object.code, -32600);
        assert_eq!(object.data.unwrap()["kind"], "invalidInput");
    }

    #[test]
    fn kinds_of_os_errors() {
        let kind = |errno| kind_name(io::Error::from_raw_os_error(errno).kind());
        assert_eq!(kind(libc::EACCES), "permissionDenied");
        assert_eq!(kind(libc::EEXIST), "alreadyExists");
        assert_eq!(kind(libc::ENOTDIR), "notADirectory");
        assert_eq!(kind(libc::EISDIR), "isADirectory");
        assert_eq!(kind(libc::ENOTEMPTY), "directoryNotEmpty");
        assert_eq!(kind(libc::EINVAL), "invalidInput");
        assert_eq!(kind(libc::EIO), "other");
    }
}
