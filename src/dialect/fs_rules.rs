//! Where today's dialect and exec-server.v0 part on the fs methods: the plain
//! options the core takes ([`handle_rules`]) and today's wording of the
//! refusals that upstream's client and tests match on ([`refusal`]).

use super::{outbound, Dialect};
use crate::fs::{FsRules, HandleRules, Refusal, WalkRules};
use crate::protocol::ErrorObject;

/// Upstream's limit of open handles per connection.
const TODAY_HANDLES: usize = 128;

/// The choices of the other fs methods: today's skips special files in a
/// recursive copy, lists only entries whose type is known, and walks as
/// upstream does (bounds refused, a file root empty, links only as followed
/// directories, lossy names), reads `followSymlinks: false` as "no
/// component of the path is a symlink", and writes a hard-linked file in
/// place (as upstream's plain write does).
pub(crate) fn fs_rules(dialect: Dialect) -> FsRules {
    match dialect {
        Dialect::V0 => FsRules::default(),
        Dialect::Today => FsRules {
            skip_special_in_copies: true,
            list_only_known: true,
            walk: WalkRules {
                refuse_bad_bounds: true,
                non_directory_root_is_empty: true,
                links_only_as_directories: true,
                lossy_names: true,
            },
            no_link_components: true,
            write_linked_in_place: true,
        },
    }
}

/// How a connection's `fs/open` handles behave. Today's: at most 128 open,
/// an empty id accepted, every handle call checks the id's length, and a
/// failed read closes its handle.
pub(crate) fn handle_rules(dialect: Dialect) -> HandleRules {
    match dialect {
        Dialect::V0 => HandleRules::default(),
        Dialect::Today => HandleRules {
            limit: TODAY_HANDLES,
            empty_ids: true,
            check_ids: true,
            close_on_read_error: true,
        },
    }
}

/// `refusal` as the dialect words it.
pub(crate) fn refusal(dialect: Dialect, refusal: Refusal) -> ErrorObject {
    if dialect == Dialect::V0 {
        return refusal.into();
    }
    let invalid = |message: String| ErrorObject::invalid_request(message);
    match refusal {
        Refusal::NotAFile { path, followed: true, .. } => {
            invalid(format!("path `{}` is not a file", path.display()))
        }
        Refusal::NotAFile { followed: false, .. } => invalid("path is not a regular file".into()),
        Refusal::BadHandleId(_) => invalid(format!(
            "file read handle ID must not exceed {} bytes",
            crate::fs::MAX_HANDLE_ID
        )),
        Refusal::HandleExists(id) => invalid(format!("file read handle `{id}` already exists")),
        Refusal::UnknownHandle(id) => {
            ErrorObject::new(outbound::NOT_FOUND, format!("unknown file read handle `{id}`"))
        }
        Refusal::TooManyHandles(limit) => {
            invalid(format!("at most {limit} file reads may be open per connection"))
        }
        Refusal::BadBlockLength(_) => invalid(format!(
            "file read block length must be between 1 and {}",
            crate::fs::MAX_BLOCK
        )),
        Refusal::Fs(error) => outbound::error(dialect, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes;
    use std::path::PathBuf;

    #[test]
    fn today_words_refusals_as_upstream() {
        let own = ErrorObject::invalid_request("cannot read /p: it is a FIFO, not a regular file");
        let fifo = |followed| Refusal::NotAFile {
            path: PathBuf::from("/p"),
            followed,
            own: Box::new(own.clone()),
        };
        let today = |r| {
            let e = refusal(Dialect::Today, r);
            (e.code, e.message)
        };
        assert_eq!(today(fifo(true)), (-32600, "path `/p` is not a file".into()));
        assert_eq!(today(fifo(false)), (-32600, "path is not a regular file".into()));
        assert_eq!(refusal(Dialect::V0, fifo(true)), own);
        assert_eq!(
            today(Refusal::UnknownHandle("h".into())),
            (-32004, "unknown file read handle `h`".into())
        );
        assert_eq!(
            today(Refusal::BadBlockLength(0)),
            (-32600, "file read block length must be between 1 and 1048576".into())
        );
        let v0 = refusal(Dialect::V0, Refusal::BadHandleId("".into()));
        assert_eq!(
            (v0.code, v0.message.as_str()),
            (codes::INVALID_PARAMS, "handleId must be 1 to 32 bytes; \"\" is 0")
        );
    }
}
