//! Wire envelope of exec-server.v0: ids, messages, error objects and byte payloads (no IO).

mod b64;
mod build;
mod fs_types;
mod http_types;
mod limit_types;
mod methods;
pub(crate) mod names;
mod network_types;
mod process_types;
mod sandbox_types;
mod strict;
mod today_types;
mod tunnel_types;

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

#[cfg(feature = "server")]
pub(crate) use b64::encoded_len as b64_len;
#[cfg(feature = "server")]
pub(crate) use http_types::encode_body_delta;
#[cfg(feature = "server")]
pub(crate) use limit_types::{
    Field as LimitField, CPU as CPU_LIMIT, MEMORY as MEMORY_LIMIT, PROCESSES as PROCESSES_LIMIT,
};
pub use limit_types::{
    LimitHit, ProcessLimits, MAX_CPU_PERCENT, MAX_MEMORY_BYTES, MAX_PROCESSES, MIN_MEMORY_BYTES,
};
pub use methods::*;
#[cfg(feature = "server")]
pub(crate) use strict::from_str as strict_json;

/// Largest read `fs/readFile` returns: 512 MiB.
pub const READ_LIMIT: u64 = 512 * 1024 * 1024;

/// The protocol version this server speaks (`initialize` result).
pub const PROTOCOL_VERSION: &str = "exec-server.v0";

/// JSON-RPC error codes used by the protocol.
pub mod codes {
    /// Malformed message, lifecycle violation or a refused request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params did not decode.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The server failed while carrying out the request (I/O, spawn).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The session to resume is attached to another live connection.
    pub const SESSION_ATTACHED: i64 = -32010;
}

/// A request id: an integer or a string, as the client chose it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(IdRepr);

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
enum IdRepr {
    Int(i64),
    /// An integer above `i64::MAX` (JSON-RPC allows any integer; u64 is the edge).
    Big(u64),
    Str(String),
}

impl RequestId {
    /// The id as an integer, when it is one that fits an i64.
    pub fn as_i64(&self) -> Option<i64> {
        match self.0 {
            IdRepr::Int(id) => Some(id),
            IdRepr::Big(_) | IdRepr::Str(_) => None,
        }
    }
}

impl From<i64> for RequestId {
    fn from(id: i64) -> RequestId {
        RequestId(IdRepr::Int(id))
    }
}

impl From<String> for RequestId {
    fn from(id: String) -> RequestId {
        RequestId(IdRepr::Str(id))
    }
}

impl From<&str> for RequestId {
    fn from(id: &str) -> RequestId {
        RequestId(IdRepr::Str(id.to_owned()))
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            IdRepr::Int(id) => write!(f, "{id}"),
            IdRepr::Big(id) => write!(f, "{id}"),
            IdRepr::Str(id) => write!(f, "{id:?}"),
        }
    }
}

/// The `error` member of an error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct ErrorObject {
    /// JSON-RPC error code, see [`codes`].
    pub code: i64,
    /// Human-readable message naming what was wrong.
    pub message: String,
    /// Structured detail, such as `{"kind", "path"}` for I/O errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with `code` and `message` and no data.
    pub fn new(code: i64, message: impl Into<String>) -> ErrorObject {
        ErrorObject { code, message: message.into(), data: None }
    }

    /// -32600: a request the server refuses.
    pub fn invalid_request(message: impl Into<String>) -> ErrorObject {
        ErrorObject::new(codes::INVALID_REQUEST, message)
    }

    /// -32602: params that do not decode or make no sense.
    pub fn invalid_params(message: impl Into<String>) -> ErrorObject {
        ErrorObject::new(codes::INVALID_PARAMS, message)
    }

    /// -32603: the server failed to carry out the request.
    pub fn internal(message: impl Into<String>) -> ErrorObject {
        ErrorObject::new(codes::INTERNAL_ERROR, message)
    }

    /// The same error with `data` attached.
    pub fn with_data(mut self, data: Value) -> ErrorObject {
        self.data = Some(data);
        self
    }
}

/// A request: a method call that expects a response.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Id echoed in the response.
    pub id: RequestId,
    /// Method name such as `process/start`.
    pub method: String,
    /// Params, `Value::Null` when absent.
    pub params: Value,
}

/// A notification: a message without id that expects no response.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// Notification name such as `process/output`.
    pub method: String,
    /// Params, `Value::Null` when absent.
    pub params: Value,
}

/// A response: the result or error of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The id of the request answered.
    pub id: RequestId,
    /// `result` on success, `error` on failure.
    pub result: Result<Value, ErrorObject>,
}

/// Any message of the protocol, in either direction.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A method call.
    Request(Request),
    /// A response to a method call.
    Response(Response),
    /// A one-way message.
    Notification(Notification),
}

/// Why a line is not a protocol message. The display text is sent to the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not UTF-8.
    #[error("failed to parse JSON-RPC message: invalid UTF-8 at byte {0}")]
    Utf8(usize),
    /// The text is not JSON.
    #[error("failed to parse JSON-RPC message: {0}")]
    Json(String),
    /// The JSON is not an object.
    #[error("failed to parse JSON-RPC message: expected a JSON object, got {0}")]
    NotObject(&'static str),
    /// The object has no usable `method`, `result` or `error`.
    #[error("failed to parse JSON-RPC message: {0}")]
    Shape(String),
    /// The `id` is neither an integer nor a string.
    #[error("failed to parse JSON-RPC message: id must be an integer or a string, got {0}")]
    BadId(String),
}

impl DecodeError {
    /// The problem alone, without the leading "failed to parse JSON-RPC message: ".
    pub fn detail(&self) -> String {
        let text = self.to_string();
        match text.strip_prefix("failed to parse JSON-RPC message: ") {
            Some(detail) => detail.to_owned(),
            None => text,
        }
    }
}

impl Message {
    /// Decodes one line (without its newline) into a message.
    pub fn decode(line: &[u8]) -> Result<Message, DecodeError> {
        let text = std::str::from_utf8(line).map_err(|e| DecodeError::Utf8(e.valid_up_to()))?;
        let value = strict::from_str(text).map_err(|e| DecodeError::Json(e.to_string()))?;
        let Value::Object(mut object) = value else {
            return Err(DecodeError::NotObject(json_kind(&value)));
        };
        let id = match object.remove("id") {
            None => None,
            Some(raw) => Some(decode_id(raw)?),
        };
        let params = object.remove("params").unwrap_or(Value::Null);
        if let Some(method) = object.remove("method") {
            let Value::String(method) = method else {
                return Err(DecodeError::Shape(format!(
                    "method must be a string, got {}",
                    json_kind(&method)
                )));
            };
            return Ok(match id {
                Some(id) => Message::Request(Request { id, method, params }),
                None => Message::Notification(Notification { method, params }),
            });
        }
        let result = match (object.remove("result"), object.remove("error")) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(serde_json::from_value::<ErrorObject>(error)
                .map_err(|e| DecodeError::Shape(format!("invalid error object: {e}")))?),
            (Some(_), Some(_)) => {
                return Err(DecodeError::Shape("a response has both result and error".into()))
            }
            (None, None) => {
                return Err(DecodeError::Shape(
                    "a message needs a method, a result or an error".into(),
                ))
            }
        };
        let id = id.ok_or_else(|| DecodeError::Shape("a response needs an id".into()))?;
        Ok(Message::Response(Response { id, result }))
    }

    /// Encodes the message as one line of JSON, without the newline.
    pub fn encode(&self) -> String {
        let wire = match self {
            Message::Request(r) => Wire {
                id: Some(&r.id),
                method: Some(&r.method),
                params: params(&r.params),
                ..Wire::default()
            },
            Message::Notification(n) => {
                Wire { method: Some(&n.method), params: params(&n.params), ..Wire::default() }
            }
            Message::Response(r) => Wire {
                id: Some(&r.id),
                result: r.result.as_ref().ok(),
                error: r.result.as_ref().err(),
                ..Wire::default()
            },
        };
        serde_json::to_string(&wire).expect("a message of JSON values always serializes")
    }
}

fn params(value: &Value) -> Option<&Value> {
    (!value.is_null()).then_some(value)
}

#[derive(Default, Serialize)]
struct Wire<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RequestId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObject>,
}

/// Encodes the response to `id` straight from a typed result, without a `Value`.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn encode_response<T: Serialize>(
    id: &RequestId,
    result: &Result<T, ErrorObject>,
) -> String {
    #[derive(Serialize)]
    struct ResponseWire<'a, T> {
        id: &'a RequestId,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<&'a T>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a ErrorObject>,
    }
    let wire = ResponseWire { id, result: result.as_ref().ok(), error: result.as_ref().err() };
    to_line(&wire, 128).unwrap_or_else(|e| {
        let error = ErrorObject::internal(format!("failed to encode the result: {e}"));
        Message::Response(Response { id: id.clone(), result: Err(error) }).encode()
    })
}

/// Encodes request `M` straight from its params, without a `Value`. Fails only
/// for params that JSON cannot carry, such as a path that is not UTF-8.
pub(crate) fn encode_request<M: Method>(
    id: &RequestId,
    params: &M::Params,
) -> serde_json::Result<String> {
    if let Some(write) = (params as &dyn std::any::Any).downcast_ref::<WriteFileParams>() {
        if let Some(line) = encode_write_file(id, write) {
            return line;
        }
    }
    encode_request_generic::<M>(id, params)
}

/// [`encode_request`] through serde alone.
fn encode_request_generic<M: Method>(
    id: &RequestId,
    params: &M::Params,
) -> serde_json::Result<String> {
    #[derive(Serialize)]
    struct RequestWire<'a, P> {
        id: &'a RequestId,
        method: &'a str,
        params: &'a P,
    }
    let wire = RequestWire { id, method: M::NAME, params };
    to_line(&wire, 128)
}

/// `fs/writeFile` with its data spliced in as it is: valid base64 needs no
/// JSON escaping, so a payload of megabytes skips serde_json's per-byte escape
/// scan and the growth of the line. The rest is the generic encoder's text,
/// so the line is exactly what it would make. None for data that is not valid
/// base64 (the generic encoder then escapes it as for any string).
fn encode_write_file(
    id: &RequestId,
    params: &WriteFileParams,
) -> Option<serde_json::Result<String>> {
    if !b64::is_valid(params.data_base64.as_bytes()) {
        return None;
    }
    splice_write_file(id, params, params.data_base64.len(), |line| {
        line.extend_from_slice(params.data_base64.as_bytes())
    })
}

/// An `fs/writeFile` request for `params` (its `dataBase64` ignored) carrying
/// `data`, encoded straight into the line: no base64 string of its own.
pub(crate) fn encode_write_file_bytes(
    id: &RequestId,
    params: &WriteFileParams,
    data: &[u8],
) -> serde_json::Result<String> {
    let encoded_len = b64::encoded_len(data.len());
    splice_write_file(id, params, encoded_len, |line| b64::encode_into(data, line))
        .unwrap_or_else(|| encode_request_generic::<WriteFile>(id, &with_data(params, data)))
}

/// The generic encoding of `params` with empty data, `put_data` writing the
/// base64 (`data_len` bytes, no character that JSON escapes) between its quotes.
fn splice_write_file(
    id: &RequestId,
    params: &WriteFileParams,
    data_len: usize,
    put_data: impl FnOnce(&mut Vec<u8>),
) -> Option<serde_json::Result<String>> {
    const EMPTY_DATA: &str = r#""dataBase64":"""#;
    let text = match encode_request_generic::<WriteFile>(id, &with_data(params, b"")) {
        Ok(text) => text,
        Err(error) => return Some(Err(error)),
    };
    // Quotes inside JSON strings are escaped, so this text can only be the key.
    let at = text.find(EMPTY_DATA)? + EMPTY_DATA.len() - 1;
    let mut line = Vec::with_capacity(text.len() + data_len);
    line.extend_from_slice(&text.as_bytes()[..at]);
    put_data(&mut line);
    line.extend_from_slice(&text.as_bytes()[at..]);
    // Checked (a fast ASCII scan) rather than assumed from what `put_data` wrote.
    Some(Ok(String::from_utf8(line).ok()?))
}

/// `params` with `data` (encoded) in place of its own.
fn with_data(params: &WriteFileParams, data: &[u8]) -> WriteFileParams {
    WriteFileParams {
        path: params.path.clone(),
        data_base64: b64::encode(data),
        append: params.append,
        follow_symlinks: params.follow_symlinks,
    }
}

/// Encodes notification `N` straight from its params; `size_hint` presizes the line.
pub(crate) fn encode_notification<N: NotificationMethod>(
    params: &N::Params,
    size_hint: usize,
) -> String {
    #[derive(Serialize)]
    struct NotificationWire<'a, P> {
        method: &'a str,
        params: &'a P,
    }
    let wire = NotificationWire { method: N::NAME, params };
    to_line(&wire, size_hint).expect("notification params always serialize")
}

/// Encodes a `process/output` notification by hand: the hot path of the server.
/// The base64 alphabet needs no JSON escaping, so the chunk is encoded straight
/// into the line; the result is the same text [`encode_notification`] makes.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn encode_output(process_id: &str, seq: u64, stream: Stream, bytes: &[u8]) -> String {
    let stream = match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
        Stream::Pty => "pty",
    };
    let id = serde_json::to_string(process_id).expect("a string always serializes");
    let head = format!(
        r#"{{"method":"process/output","params":{{"processId":{id},"seq":{seq},"stream":"{stream}","chunk":""#
    );
    line_with_base64(&head, bytes, r#""}}"#)
}

/// Encodes a `tunnel/data` notification by hand, as [`encode_output`] does.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn encode_tunnel_data(tunnel_id: &str, seq: u64, bytes: &[u8]) -> String {
    let id = serde_json::to_string(tunnel_id).expect("a string always serializes");
    let head =
        format!(r#"{{"method":"tunnel/data","params":{{"tunnelId":{id},"seq":{seq},"chunk":""#);
    line_with_base64(&head, bytes, r#""}}"#)
}

/// Encodes the `fs/readFile` result by hand, the data straight into the line;
/// the same text [`encode_response`] makes.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn encode_read_file(id: &RequestId, data: &[u8]) -> String {
    let id = serde_json::to_string(id).expect("an id always serializes");
    line_with_base64(&format!(r#"{{"id":{id},"result":{{"dataBase64":""#), data, r#""}}"#)
}

/// Encodes an `http/request` answer with its body straight into the line
/// (no base64 string beside it); the same text [`encode_response`] makes.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn encode_http_response(id: &RequestId, response: &HttpResponse) -> String {
    let empty = response.clone_head();
    let whole = encode_response(id, &Ok::<_, ErrorObject>(empty));
    // `bodyBase64` is the last member: the line ends with `""}}`.
    match whole.strip_suffix(r#""}}"#) {
        Some(head) => line_with_base64(head, &response.body_base64.0, r#""}}"#),
        // Never reached while `bodyBase64` is the last member (a test checks
        // the two encodings agree); the whole answer then, the slow way.
        None => encode_response(id, &Ok::<_, ErrorObject>(response)),
    }
}

/// `head`, the base64 of `bytes` encoded straight into the line, then `tail`.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
fn line_with_base64(head: &str, bytes: &[u8], tail: &str) -> String {
    // One byte more: the writer ends the line with `\n` in place.
    let mut line = Vec::with_capacity(head.len() + b64::encoded_len(bytes.len()) + tail.len() + 1);
    line.extend_from_slice(head.as_bytes());
    b64::encode_into(bytes, &mut line);
    line.extend_from_slice(tail.as_bytes());
    // SAFETY: `head` and `tail` are strings (UTF-8) and base64 is ASCII.
    unsafe { String::from_utf8_unchecked(line) }
}

fn to_line<T: Serialize>(value: &T, size_hint: usize) -> serde_json::Result<String> {
    let mut line = Vec::with_capacity(size_hint);
    serde_json::to_writer(&mut line, value)?;
    // serde_json writes only UTF-8.
    Ok(String::from_utf8(line).expect("serde_json output is UTF-8"))
}

/// Bytes carried on the wire as a base64 string.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Base64(pub Vec<u8>);

impl Base64 {
    /// Decodes standard base64 text.
    pub fn decode(text: &str) -> Result<Base64, base64::DecodeError> {
        b64::decode(text.as_bytes()).map(Base64)
    }

    /// [`Base64::decode`] of bytes (any byte that is not base64 is an error).
    pub(crate) fn decode_ascii(text: &[u8]) -> Result<Vec<u8>, base64::DecodeError> {
        b64::decode(text)
    }

    /// [`Base64::decode`], decoding into the text's own buffer (no second
    /// allocation for a large payload); results and errors are the same.
    pub fn decode_string(text: String) -> Result<Base64, base64::DecodeError> {
        b64::decode_owned(text).map(Base64)
    }

    /// Encodes `bytes` as standard base64 text, without copying them first.
    pub fn encode_bytes(bytes: &[u8]) -> String {
        b64::encode(bytes)
    }

    /// Encodes the bytes as standard base64 text.
    pub fn encode(&self) -> String {
        b64::encode(&self.0)
    }
}

impl fmt::Debug for Base64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Base64({:?})", String::from_utf8_lossy(&self.0))
    }
}

impl Serialize for Base64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.encode())
    }
}

impl<'de> Deserialize<'de> for Base64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Base64, D::Error> {
        let decoded = match <std::borrow::Cow<'de, str>>::deserialize(deserializer)? {
            std::borrow::Cow::Borrowed(text) => Base64::decode(text),
            std::borrow::Cow::Owned(text) => Base64::decode_string(text),
        };
        decoded.map_err(|e| serde::de::Error::custom(format!("invalid base64: {e}")))
    }
}

fn decode_id(raw: Value) -> Result<RequestId, DecodeError> {
    match raw {
        Value::Number(n) => n
            .as_i64()
            .map(RequestId::from)
            .or_else(|| n.as_u64().map(|big| RequestId(IdRepr::Big(big))))
            .ok_or_else(|| DecodeError::BadId(format!("the number {n}"))),
        Value::String(s) => Ok(RequestId::from(s)),
        other => Err(DecodeError::BadId(json_kind(&other).to_owned())),
    }
}

pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
