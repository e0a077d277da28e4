//! Answers in today's dialect: what differs from this server's own answers.
//!
//! Error codes: an fs NotFound is -32004 (v0: -32603) and PermissionDenied
//! -32600; paths are file URIs; the Linux sandbox is `linuxSeccomp`; a write
//! that cannot be applied is a `status`, not an error.

use std::path::Path;

use serde_json::Value;

use super::{uri, Dialect, Numbering};
use crate::process::Shape;
use crate::protocol::{ErrorObject, SandboxType, WriteResult, WriteStatus};

/// Today's code for an fs NotFound.
pub(crate) const NOT_FOUND: i64 = -32004;

/// `error` as the dialect reports it.
pub(crate) fn error(dialect: Dialect, mut error: ErrorObject) -> ErrorObject {
    if dialect == Dialect::Today {
        match error.data.as_ref().and_then(|d| d.get("kind")).and_then(Value::as_str) {
            Some("notFound") => error.code = NOT_FOUND,
            Some("permissionDenied") => error.code = crate::protocol::codes::INVALID_REQUEST,
            _ => {}
        }
        error.message = os_error_text(&error);
    }
    error
}

/// Upstream's message for an fs error: the OS error's own text (`No such
/// file or directory (os error 2)`), without our `cannot read PATH: `
/// before it (the path is in `data`, and the model would read it twice).
fn os_error_text(error: &ErrorObject) -> String {
    let path = error.data.as_ref().and_then(|d| d.get("path")).and_then(Value::as_str);
    let ours = path.and_then(|path| {
        let (_, text) = error.message.rsplit_once(&format!("{path}: "))?;
        text.ends_with(')').then(|| text.to_owned())
    });
    ours.unwrap_or_else(|| error.message.clone())
}

/// A path in a result: a file URI in today's dialect, else the path (lossy
/// for names that are not UTF-8: the caller adds a base64 twin).
pub(crate) fn path(dialect: Dialect, path: &Path) -> String {
    match dialect {
        Dialect::Today => uri::from_path(path),
        Dialect::V0 => path.to_string_lossy().into_owned(),
    }
}

/// The shape of a process's answers in `dialect`: today's numbers exit and
/// close in the output's sequence when started with a file-URI cwd
/// (`numbering`, decided by [`super::inbound`]), calls the Linux sandbox
/// `linuxSeccomp` and always names it in the start result; exec-server.v0
/// names it only when a sandbox was asked for (Part A's start result is
/// exactly `{"processId"}`). As upstream, today's sandboxed program that
/// cannot run under its profile starts and exits non-zero with the reason on
/// stderr; exec-server.v0 fails the start as without a sandbox. Today's
/// exits and reads say whether a failure looks like the sandbox's refusal
/// (`sandboxDenied`), and reads carry `failure` (null); a failed start says
/// only the OS error, as upstream's does.
pub(crate) fn start_shape(dialect: Dialect, numbering: Numbering) -> Shape {
    match dialect {
        Dialect::Today => Shape {
            numbering,
            landlock_name: SandboxType::LinuxSeccomp,
            always_name_sandbox: true,
            exit_on_exec_failure: true,
            report_denials: true,
            bare_start_errors: true,
            eperm_sockets: true,
        },
        Dialect::V0 => Shape { numbering, ..Shape::default() },
    }
}

/// A refused write in today's dialect: the status that says why, when there is one.
pub(crate) fn write_refusal(dialect: Dialect, refusal: WriteStatus) -> Option<WriteResult> {
    (dialect == Dialect::Today).then_some(WriteResult { accepted: false, status: refusal })
}
