//! Which face a stdio connection gets, from its first line: MCP when it is
//! JSON-RPC 2.0 (`"jsonrpc": "2.0"`) and either an `initialize` whose params
//! carry MCP's `protocolVersion` and `clientInfo`, or a `server/discover`
//! probe (MCP 2026-07-28 clients send it first), or any request whose
//! `_meta` names an MCP protocol version (a 2026-07-28 client that skips the
//! probe). Everything else, including
//! our own `initialize {"clientName"}` with or without `"jsonrpc"`, is the
//! exec-server protocol.

/// Whether `line` opens an MCP connection.
pub(crate) fn opens_mcp(line: &[u8]) -> bool {
    let Ok(message) = serde_json::from_slice::<serde_json::Value>(line) else { return false };
    if message.get("jsonrpc").and_then(|v| v.as_str()) != Some("2.0") {
        return false;
    }
    match message.get("method").and_then(|v| v.as_str()) {
        Some("server/discover") => true,
        Some("initialize") => {
            let params = message.get("params");
            let has = |name: &str| params.and_then(|p| p.get(name)).is_some();
            has("protocolVersion") && has("clientInfo")
        }
        _ => message
            .pointer("/params/_meta")
            .and_then(|meta| meta.get("io.modelcontextprotocol/protocolVersion"))
            .is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_is_chosen_by_what_the_client_sends() {
        let mcp = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#;
        assert!(opens_mcp(mcp));
        assert!(opens_mcp(br#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}"#));
        assert!(!opens_mcp(br#"{"id":1,"method":"initialize","params":{"clientName":"x"}}"#));
        assert!(!opens_mcp(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientName":"x"}}"#
        ));
        assert!(!opens_mcp(br#"{"id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","clientInfo":{}}}"#));
        assert!(!opens_mcp(b"not json"));
        assert!(opens_mcp(
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#
        ));
        assert!(!opens_mcp(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#));
    }
}
