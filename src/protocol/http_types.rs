//! The params and results of `http/request` and its `http/request/bodyDelta`
//! notifications (today's dialect, DIALECT.md).

use serde::{Deserialize, Serialize};

use super::Base64;

/// One header of a request or a response; names repeat, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HttpHeader {
    /// The header's name (lowercase in responses).
    pub name: String,
    /// The value; with `valueEnvVar`, the part before the variable's value.
    pub value: String,
    /// Requests only: append the server's value of this environment variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_env_var: Option<String>,
}

impl HttpHeader {
    /// A header `name: value`.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        HttpHeader { name: name.into(), value: value.into(), value_env_var: None }
    }
}

/// What a request does with a 3xx answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedirectPolicy {
    /// Follow up to 10 redirects.
    #[default]
    Follow,
    /// Answer with the 3xx itself.
    Stop,
}

/// `http/request` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HttpRequestParams {
    /// `GET`, `POST`, ... (any token).
    pub method: String,
    /// An `http` or `https` URL; its fragment is never sent.
    pub url: String,
    /// Request headers, in order.
    #[serde(default)]
    pub headers: Vec<HttpHeader>,
    /// The request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<Base64>,
    /// Bound on the whole exchange, body included (absent or null: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `follow` (the default) or `stop`.
    #[serde(default)]
    pub redirect_policy: RedirectPolicy,
    /// The client's name for the request; a streamed one's is reserved until its last delta.
    pub request_id: String,
    /// Answer with status and headers at once and send the body as `http/request/bodyDelta`.
    #[serde(default)]
    pub stream_response: bool,
}

impl HttpRequestParams {
    /// A buffered `GET url` named `request_id`.
    pub fn get(request_id: impl Into<String>, url: impl Into<String>) -> Self {
        HttpRequestParams {
            method: "GET".to_owned(),
            url: url.into(),
            headers: Vec::new(),
            body_base64: None,
            timeout_ms: None,
            redirect_policy: RedirectPolicy::Follow,
            request_id: request_id.into(),
            stream_response: false,
        }
    }
}

/// `http/request` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HttpResponse {
    /// The final status (a 3xx with `redirectPolicy: stop`).
    pub status: u16,
    /// Response headers, names lowercase; values that are not visible ASCII are left out.
    pub headers: Vec<HttpHeader>,
    /// The body; `""` for a streamed request.
    pub body_base64: Base64,
}

impl HttpResponse {
    /// Its status and headers, with an empty body.
    pub(crate) fn clone_head(&self) -> HttpResponse {
        HttpResponse {
            status: self.status,
            headers: self.headers.clone(),
            body_base64: Base64::default(),
        }
    }
}

/// `http/request/bodyDelta` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct BodyDeltaParams {
    /// The streamed request.
    pub request_id: String,
    /// 1, 2, ... per request; the terminal frame takes the next.
    pub seq: u64,
    /// At most 1 MiB of body; empty in the terminal frame.
    pub delta_base64: Base64,
    /// The terminal frame.
    pub done: bool,
    /// In a terminal frame: why the body ended early.
    #[serde(default)]
    pub error: Option<String>,
}

/// Encodes an `http/request/bodyDelta` by hand, the delta straight into the
/// line; the same text [`super::encode_notification`] makes.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn encode_body_delta(
    request_id: &str,
    seq: u64,
    delta: &[u8],
    done: bool,
    error: Option<&str>,
) -> String {
    let id = serde_json::to_string(request_id).expect("a string always serializes");
    let error = serde_json::to_string(&error).expect("a string always serializes");
    let head = format!(
        r#"{{"method":"http/request/bodyDelta","params":{{"requestId":{id},"seq":{seq},"deltaBase64":""#
    );
    super::line_with_base64(&head, delta, &format!(r#"","done":{done},"error":{error}}}}}"#))
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;
    use crate::protocol::{encode_notification, HttpBodyDelta};

    #[test]
    fn the_hand_made_delta_is_the_serialized_one() {
        for (delta, done, error) in
            [(&b"hi"[..], false, None), (&b""[..], true, Some("cut \"short\""))]
        {
            let params = BodyDeltaParams {
                request_id: "r\u{e9}".to_owned(),
                seq: 7,
                delta_base64: Base64(delta.to_vec()),
                done,
                error: error.map(str::to_owned),
            };
            let line = encode_body_delta("r\u{e9}", 7, delta, done, error);
            assert_eq!(line, encode_notification::<HttpBodyDelta>(&params, 0));
        }
        assert_eq!(
            encode_body_delta("s", 2, b"", true, None),
            r#"{"method":"http/request/bodyDelta","params":{"requestId":"s","seq":2,"deltaBase64":"","done":true,"error":null}}"#
        );
    }
}
