//! The client half of today's dialect: this crate's requests rewritten as
//! today's client writes them (every path a file URI), for a [`crate::Client`]
//! whose [`crate::ClientOptions::dialect`] is [`Dialect::Today`].

use std::path::PathBuf;

use serde_json::Value;

use super::uri::PATH_KEYS;
use super::{uri, Dialect};
use crate::protocol::Base64;

/// `line`, an encoded request, in `dialect`.
pub(crate) fn request_line(dialect: Dialect, line: String) -> String {
    if dialect == Dialect::V0 {
        return line;
    }
    let Ok(mut message) = serde_json::from_str::<Value>(&line) else { return line };
    let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
        return line;
    };
    for key in PATH_KEYS {
        let twin = format!("{key}Base64");
        let path = match (params.get(key), params.get(&twin)) {
            (Some(Value::String(text)), _) if text.starts_with('/') => Some(PathBuf::from(text)),
            (_, Some(Value::String(text))) => {
                Base64::decode(text).ok().map(|bytes| crate::protocol::names::from_bytes(bytes.0))
            }
            _ => None,
        };
        if let Some(path) = path {
            params.remove(&twin);
            params.insert(key.to_owned(), Value::String(uri::from_path(&path)));
        }
    }
    serde_json::to_string(&message).unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_uris() {
        let line = r#"{"id":3,"method":"fs/copy","params":{"sourcePath":"/a b","destinationPathBase64":"L3Qv/w=="}}"#;
        assert_eq!(
            request_line(Dialect::Today, line.to_owned()),
            r#"{"id":3,"method":"fs/copy","params":{"sourcePath":"file:///a%20b","destinationPath":"file:///t/%FF"}}"#
        );
        assert_eq!(request_line(Dialect::V0, line.to_owned()), line);
    }
}
