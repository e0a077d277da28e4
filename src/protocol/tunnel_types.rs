//! The params and results of tunnels (a TCP stream through the connection)
//! and of the session's listening ports (Part B).

use serde::{Deserialize, Serialize};

use super::Base64;

/// `tunnel/open` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TunnelOpenParams {
    /// The client's name for the tunnel, unique among its open tunnels.
    pub tunnel_id: String,
    /// Where the server connects: an IP address or a host name.
    pub host: String,
    /// The TCP port, 1 to 65535.
    pub port: u16,
}

impl TunnelOpenParams {
    /// A tunnel `tunnel_id` to `host:port`.
    pub fn new(tunnel_id: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        TunnelOpenParams { tunnel_id: tunnel_id.into(), host: host.into(), port }
    }
}

/// `tunnel/write` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TunnelWriteParams {
    /// The tunnel.
    pub tunnel_id: String,
    /// Bytes to send to the remote side (may be empty).
    #[serde(default)]
    pub chunk: Base64,
    /// After the chunk, half-close the write side (the remote side reads EOF).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close_write: bool,
}

impl TunnelWriteParams {
    /// Sends `chunk` through `tunnel_id`.
    pub fn new(tunnel_id: impl Into<String>, chunk: Vec<u8>, close_write: bool) -> Self {
        TunnelWriteParams { tunnel_id: tunnel_id.into(), chunk: Base64(chunk), close_write }
    }
}

/// `tunnel/close` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TunnelIdParams {
    /// The tunnel.
    pub tunnel_id: String,
}

impl TunnelIdParams {
    /// Names `tunnel_id`.
    pub fn new(tunnel_id: impl Into<String>) -> Self {
        TunnelIdParams { tunnel_id: tunnel_id.into() }
    }
}

/// `tunnel/ack` params (a client notification): `bytes` of `tunnel/data`
/// consumed, which the server may send again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TunnelAckParams {
    /// The tunnel.
    pub tunnel_id: String,
    /// Bytes consumed since the last ack.
    pub bytes: u64,
}

impl TunnelAckParams {
    /// Grants `bytes` more to `tunnel_id`.
    pub fn new(tunnel_id: impl Into<String>, bytes: u64) -> Self {
        TunnelAckParams { tunnel_id: tunnel_id.into(), bytes }
    }
}

/// `tunnel/data` params: bytes from the remote side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TunnelDataParams {
    /// The tunnel.
    pub tunnel_id: String,
    /// Numbered from 1 per tunnel.
    pub seq: u64,
    /// The bytes.
    pub chunk: Base64,
}

/// Why a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TunnelEnd {
    /// The remote side finished sending.
    Eof,
    /// The remote side reset the connection.
    Reset,
    /// Any other failure; `message` says which.
    Error,
}

/// `tunnel/closed` params: the tunnel is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TunnelClosedParams {
    /// The tunnel.
    pub tunnel_id: String,
    /// Why.
    pub reason: TunnelEnd,
    /// The OS's words, for `reset` and `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One TCP socket listening in a process of the session.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ListeningPort {
    /// The local address it is bound to (`0.0.0.0`, `127.0.0.1`, `::`, ...).
    pub address: String,
    /// The port.
    pub port: u16,
    /// The process holding the socket (the lowest pid when several do).
    pub pid: u32,
    /// The started process it descends from.
    pub process_id: String,
    /// The holder's `argv[0]`.
    pub command: String,
}

/// `ports/list` result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PortsResult {
    /// Ordered by port, then address, then pid.
    pub ports: Vec<ListeningPort>,
}

/// `ports/changed` params.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PortsChangedParams {
    /// Sockets listening since the last notification (the first one after
    /// `ports/watch` lists every port already open).
    pub opened: Vec<ListeningPort>,
    /// Sockets gone since.
    pub closed: Vec<ListeningPort>,
}
