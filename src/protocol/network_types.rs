//! What a sandbox's proxy tells the client (Part B): each connection it
//! decided, and the hosts no rule names, asked of a client that takes decisions.

use serde::{Deserialize, Serialize};

/// `network/connection` params: one proxied request and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConnectionParams {
    /// The sandboxed process that asked.
    pub process_id: String,
    /// The host as the program named it (a name or an IP literal).
    pub host: String,
    /// The port it asked for.
    pub port: u16,
    /// Whether the proxy connected it.
    pub allowed: bool,
    /// The rule, the client's decision, or why it was refused.
    pub reason: String,
}

/// `network/decide`: a request the server sends a client that said
/// `networkDecisions: true`, for a host no rule of an asking policy names.
#[derive(Debug)]
pub enum NetworkDecide {}

impl NetworkDecide {
    /// The method's name.
    pub const NAME: &'static str = "network/decide";
}

/// `network/decide` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDecideParams {
    /// The sandboxed process that asked.
    pub process_id: String,
    /// The host it wants to reach.
    pub host: String,
    /// The port.
    pub port: u16,
}

/// `network/decide` result: whether this host and port may be reached
/// (for the rest of the process's life).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkDecision {
    /// true: connect; false: refuse.
    pub allow: bool,
}
