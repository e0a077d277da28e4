//! MCP 2026-07-28, the stateless revision: no `initialize`; every request
//! carries `_meta` with the protocol version and the client's capabilities,
//! a client learns the server from `server/discover`, every result says its
//! `resultType`, and a call that needs the client's roots answers
//! `input_required` (a `roots/list` to fulfil) and is retried with them.
//! Nothing is kept between requests but the exec tools' session ids.

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::rpc::{error, error_with_data, INVALID_PARAMS, UNSUPPORTED_VERSION};
use super::VERSIONS;

/// The revision of this era.
pub(super) const MODERN: &str = "2026-07-28";
/// `_meta` keys of the request envelope.
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The key of the one input request this server makes.
const ROOTS_REQUEST: &str = "roots";
/// How long a client may cache `server/discover` and `tools/list` (they never change).
const TTL_MS: u64 = 3_600_000;

/// Every version served, in both eras.
pub(super) fn supported() -> Vec<&'static str> {
    let mut all = VERSIONS.to_vec();
    all.push(MODERN);
    all
}

/// Whether a request speaks this era: `server/discover`, or a request
/// whose `_meta` names a protocol version.
pub(super) fn speaks(method: &str, params: &Value) -> bool {
    method == "server/discover"
        || params.pointer("/_meta").and_then(|m| m.get(PROTOCOL_VERSION)).is_some()
}

/// The -32022 answer to a request for `requested`.
pub(super) fn unsupported(id: &Value, requested: &str) -> String {
    let supported = supported();
    error_with_data(
        id,
        UNSUPPORTED_VERSION,
        &format!(
            "unsupported protocol version {requested:?}: this server speaks {}",
            supported.join(", ")
        ),
        json!({"supported": supported, "requested": requested}),
    )
}

/// The -32022 answer to an `initialize` on a connection of this era.
pub(super) fn handshake_refused(id: &Value, requested: &str) -> String {
    error_with_data(
        id,
        UNSUPPORTED_VERSION,
        &format!(
            "this connection speaks MCP {MODERN} since its first request, which has no initialize"
        ),
        json!({"supported": [MODERN], "requested": requested}),
    )
}

/// What a request of this era declares of its client.
pub(super) struct Envelope {
    /// The client declared `roots`.
    pub(super) roots: bool,
}

/// Checks a request's envelope: Err is the error line to send.
pub(super) fn envelope(id: &Value, params: &Value) -> Result<Envelope, String> {
    let meta = params.get("_meta").and_then(Value::as_object);
    let version = meta.and_then(|m| m.get(PROTOCOL_VERSION));
    let capabilities = meta.and_then(|m| m.get(CLIENT_CAPABILITIES));
    let (Some(version), Some(capabilities)) = (version, capabilities) else {
        return Err(error(
            id,
            INVALID_PARAMS,
            &format!("invalid params: _meta must carry {PROTOCOL_VERSION} and {CLIENT_CAPABILITIES} (MCP {MODERN})"),
        ));
    };
    let Some(version) = version.as_str() else {
        return Err(error(
            id,
            INVALID_PARAMS,
            &format!("invalid params: _meta {PROTOCOL_VERSION} must be a string"),
        ));
    };
    if version != MODERN {
        return Err(unsupported(id, version));
    }
    let Some(capabilities) = capabilities.as_object() else {
        return Err(error(
            id,
            INVALID_PARAMS,
            &format!("invalid params: _meta {CLIENT_CAPABILITIES} must be an object"),
        ));
    };
    Ok(Envelope { roots: capabilities.get("roots").is_some_and(|r| !r.is_null()) })
}

/// A result of this era: `resultType` added.
pub(super) fn complete(mut result: Value) -> Value {
    if let Some(object) = result.as_object_mut() {
        object.insert("resultType".into(), json!("complete"));
    }
    result
}

/// `server/discover`'s result.
pub(super) fn discover(instructions: &str) -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": supported(),
        "capabilities": {"tools": {"listChanged": false}},
        "instructions": instructions,
        "ttlMs": TTL_MS,
        "cacheScope": "public",
        "_meta": {SERVER_INFO: {"name": env!("CARGO_PKG_NAME"), "version": env!("CARGO_PKG_VERSION")}},
    })
}

/// `tools/list`'s result, cacheable.
pub(super) fn tools(list: Value) -> Value {
    let mut result = complete(list);
    if let Some(object) = result.as_object_mut() {
        object.insert("ttlMs".into(), json!(TTL_MS));
        object.insert("cacheScope".into(), json!("public"));
    }
    result
}

/// The roots of a retried call (`inputResponses.roots`), `None` when it
/// carries none; Err says why the response cannot be used.
pub(super) fn answered_roots(params: &Value) -> Result<Option<Vec<PathBuf>>, String> {
    let Some(response) = params.pointer("/inputResponses").and_then(|r| r.get(ROOTS_REQUEST))
    else {
        return Ok(None);
    };
    let Some(listed) = response.get("roots").and_then(Value::as_array) else {
        return Err(
            "inputResponses.roots must be a roots/list result ({\"roots\": [...]})".to_owned()
        );
    };
    Ok(Some(super::roots_from(listed)))
}

/// The `input_required` answer that asks the client for its roots.
pub(super) fn ask_for_roots() -> Value {
    let mut requests = Map::new();
    requests.insert(ROOTS_REQUEST.into(), json!({"method": "roots/list", "params": {}}));
    json!({"resultType": "input_required", "inputRequests": requests})
}
