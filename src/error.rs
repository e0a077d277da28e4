//! The error of the client side: the cases callers branch on.

use std::io;
use std::time::Duration;

use crate::protocol::ErrorObject;

/// Why a client call, a process handle or the launcher failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection to the server is gone (closed, crashed, or shut down).
    #[error("connection to exec-server closed")]
    Closed,
    /// The connection dropped and its session could not be resumed (the ttl
    /// passed, the server restarted): what ran in it is gone.
    #[error("exec-server session lost: {0}")]
    SessionLost(String),
    /// The server answered with an error object (code, message, data).
    #[error("exec-server error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
    /// Local I/O failed, such as spawning the server.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The request cannot be put on the wire (a path that is not UTF-8, say).
    #[error("cannot encode the request: {0}")]
    Encode(String),
    /// The server sent something that does not fit the protocol.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A deadline passed.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        timeout: Duration,
    },
}

impl Error {
    /// The error object, when the server refused the request.
    pub fn rpc(&self) -> Option<&ErrorObject> {
        match self {
            Error::Rpc(object) => Some(object),
            _ => None,
        }
    }

    /// The Part B I/O error kind (`notFound`, `permissionDenied`, ...) of an fs error.
    pub fn io_kind(&self) -> Option<&str> {
        self.rpc()?.data.as_ref()?.get("kind")?.as_str()
    }

    /// True for an fs error of kind `notFound`.
    pub fn is_not_found(&self) -> bool {
        self.io_kind() == Some("notFound")
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_are_read_from_error_data() {
        let error = Error::Rpc(
            ErrorObject::internal("cannot read /x: gone")
                .with_data(json!({"kind": "notFound", "path": "/x"})),
        );
        assert!(error.is_not_found());
        assert_eq!(error.to_string(), "exec-server error -32603: cannot read /x: gone");
        assert_eq!(Error::Closed.io_kind(), None);
        assert_eq!(
            Error::Timeout { what: "initialize", timeout: Duration::from_secs(1) }.to_string(),
            "timed out after 1s waiting for initialize"
        );
    }
}
