//! JSON-RPC 2.0 as the MCP face speaks it: what comes in, classified into a
//! request, a notification or a response (or the error line that refuses
//! it), and what goes out (results, errors with named codes, the face's own
//! requests and notifications), each encoded in one place. The codes the
//! core names are shared with it; MCP adds a parse error and an unsupported
//! protocol version.

use serde::Serialize;
use serde_json::Value;

pub(super) use crate::protocol::codes::{
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
};

/// The line is not JSON.
pub(super) const PARSE_ERROR: i64 = -32700;
/// The request names a protocol version this server does not speak (MCP).
pub(super) const UNSUPPORTED_VERSION: i64 = -32022;

const VERSION: &str = "2.0";

/// A message from the client.
#[derive(Debug, PartialEq)]
pub(super) enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// An answer to one of the face's own requests (`roots/list`).
    Response {
        id: Value,
        message: Value,
    },
}

impl Incoming {
    /// Classifies a parsed message; Err is the error line to send (None:
    /// nothing, for a notification that cannot be answered).
    pub(super) fn classify(message: Value) -> Result<Incoming, Option<String>> {
        let id = message.get("id").cloned();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let method = match message.get("method") {
            None => None,
            Some(Value::String(method)) => Some(method.clone()),
            Some(_) => {
                let id = id.unwrap_or(Value::Null);
                let refusal = "invalid request: method must be a string";
                return Err(Some(error(&id, INVALID_REQUEST, refusal)));
            }
        };
        if method.is_some() && message.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
            let refusal = "invalid request: jsonrpc must be \"2.0\"";
            return Err(id.map(|id| error(&id, INVALID_REQUEST, refusal)));
        }
        match (method, id) {
            (Some(method), Some(id)) => Ok(Incoming::Request { id, method, params }),
            (Some(method), None) => Ok(Incoming::Notification { method, params }),
            (None, Some(id)) => Ok(Incoming::Response { id, message }),
            (None, None) => {
                let refusal = "invalid request: no method and no id";
                Err(Some(error(&Value::Null, INVALID_REQUEST, refusal)))
            }
        }
    }
}

#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(flatten)]
    outcome: Outcome<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum Outcome<'a> {
    Result(&'a Value),
    Error(ErrorBody<'a>),
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
}

#[derive(Serialize)]
struct Outgoing<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    method: &'a str,
    params: &'a Value,
}

fn line(value: &impl Serialize) -> String {
    // Serializing these plain structs of JSON values cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

/// A result line.
pub(super) fn result(id: &Value, result: Value) -> String {
    line(&Response { jsonrpc: VERSION, id, outcome: Outcome::Result(&result) })
}

/// An error line.
pub(super) fn error(id: &Value, code: i64, message: &str) -> String {
    let body = ErrorBody { code, message, data: None };
    line(&Response { jsonrpc: VERSION, id, outcome: Outcome::Error(body) })
}

/// An error line with `data`.
pub(super) fn error_with_data(id: &Value, code: i64, message: &str, data: Value) -> String {
    let body = ErrorBody { code, message, data: Some(&data) };
    line(&Response { jsonrpc: VERSION, id, outcome: Outcome::Error(body) })
}

/// A request of the face's own (`roots/list`).
pub(super) fn request(id: &str, method: &str, params: Value) -> String {
    line(&Outgoing { jsonrpc: VERSION, id: Some(id), method, params: &params })
}

/// A notification (`notifications/progress`).
pub(super) fn notification(method: &str, params: Value) -> String {
    line(&Outgoing { jsonrpc: VERSION, id: None, method, params: &params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_are_json_rpc_2_0() {
        assert_eq!(result(&json!(1), json!({})), r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(
            error(&json!("a"), METHOD_NOT_FOUND, "method not found: x"),
            r#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"method not found: x"}}"#
        );
        assert_eq!(
            error_with_data(&json!(2), UNSUPPORTED_VERSION, "no", json!([1])),
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32022,"message":"no","data":[1]}}"#
        );
        assert_eq!(
            request("roots-1", "roots/list", json!({})),
            r#"{"jsonrpc":"2.0","id":"roots-1","method":"roots/list","params":{}}"#
        );
        assert_eq!(
            notification("notifications/progress", json!({"progress": 1})),
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#
        );
    }

    #[test]
    fn messages_are_classified_or_refused_by_name() {
        let request = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
        assert_eq!(
            Incoming::classify(request),
            Ok(Incoming::Request { id: json!(3), method: "ping".into(), params: Value::Null })
        );
        let no_version = json!({"id": 3, "method": "ping"});
        assert_eq!(
            Incoming::classify(no_version),
            Err(Some(error(
                &json!(3),
                INVALID_REQUEST,
                "invalid request: jsonrpc must be \"2.0\""
            )))
        );
        assert_eq!(Incoming::classify(json!({"method": "x"})), Err(None));
        assert_eq!(
            Incoming::classify(json!({"jsonrpc": "2.0", "method": 7, "id": 1})),
            Err(Some(error(
                &json!(1),
                INVALID_REQUEST,
                "invalid request: method must be a string"
            )))
        );
    }
}
