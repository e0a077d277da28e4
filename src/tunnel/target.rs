//! Where a tunnel may connect (`--tunnels`), and the errors of a connect.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use serde_json::json;

use crate::protocol::{codes, ErrorObject};

/// How long a `tunnel/open` waits for its connect (name lookup included).
pub const TUNNEL_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest `host` (a DNS name has at most 253 bytes; an IPv6 literal with a
/// zone and brackets fits too).
pub(super) const MAX_HOST_BYTES: usize = 253;

/// Which addresses tunnels may reach (`--tunnels`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TunnelPolicy {
    /// No tunnels: `tunnel/open` is refused.
    None,
    /// Loopback addresses only: 127.0.0.0/8, ::1 and `localhost`.
    #[default]
    Loopback,
    /// Any address or host name.
    Any,
}

/// What a tunnel connects to, once allowed.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// Addresses to try in order.
    Addresses(Vec<SocketAddr>),
    /// A name to look up first (`--tunnels any`).
    Name(String, u16),
}

/// Checks `host` against `policy`: the target, or -32600 naming the address and the flag.
pub(super) fn allow(policy: TunnelPolicy, host: &str, port: u16) -> Result<Target, ErrorObject> {
    let shown = shown(host, port);
    if port == 0 {
        return Err(ErrorObject::invalid_request(format!(
            "tunnel to {shown} refused: port 0 cannot be connected to"
        )));
    }
    if policy == TunnelPolicy::None {
        return Err(ErrorObject::invalid_request(format!(
            "tunnel to {shown} refused: tunnels are off on this server (--tunnels none)"
        )));
    }
    let literal = crate::dial::unbracketed(host);
    if let Ok(ip) = literal.parse::<IpAddr>() {
        if policy == TunnelPolicy::Loopback && !ip.to_canonical().is_loopback() {
            return Err(not_loopback(&shown));
        }
        return Ok(Target::Addresses(vec![SocketAddr::new(ip, port)]));
    }
    // `localhost` is loopback by definition (RFC 6761): never looked up.
    if host.trim_end_matches('.').eq_ignore_ascii_case("localhost") {
        return Ok(Target::Addresses(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
        ]));
    }
    if policy == TunnelPolicy::Loopback {
        return Err(not_loopback(&shown));
    }
    if host.is_empty() {
        return Err(ErrorObject::invalid_request(format!(
            "tunnel to {shown} refused: the host is empty"
        )));
    }
    Ok(Target::Name(host.to_owned(), port))
}

fn not_loopback(shown: &str) -> ErrorObject {
    ErrorObject::invalid_request(format!(
        "tunnel to {shown} refused: only loopback addresses (127.0.0.0/8, ::1, localhost) may be reached (--tunnels loopback; --tunnels any allows every address)"
    ))
}

pub(super) use crate::dial::shown;

/// Connects to `target` within [`TUNNEL_CONNECT_TIMEOUT`] (the lookup
/// included): each address in turn, the last failure reported.
pub(super) async fn connect(target: Target) -> io::Result<tokio::net::TcpStream> {
    use crate::dial::{self, DialError, Reach};
    let attempt = async {
        let addresses = match target {
            Target::Addresses(addresses) => addresses,
            Target::Name(name, port) => dial::resolve(&name, port, Reach::Anywhere, None).await?,
        };
        dial::connect(&addresses, TUNNEL_CONNECT_TIMEOUT).await
    };
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {}s", TUNNEL_CONNECT_TIMEOUT.as_secs()),
        )
    };
    match tokio::time::timeout(TUNNEL_CONNECT_TIMEOUT, attempt).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(DialError::Connect(error))) => Err(error),
        Ok(Err(DialError::Resolve(_, error))) => {
            Err(io::Error::new(io::ErrorKind::NotFound, error.to_string()))
        }
        Ok(Err(error @ DialError::ThisHost)) => Err(io::Error::other(error.to_string())),
        Err(_) => Err(timed_out()),
    }
}

/// A failed connect: -32603 with the OS's words and `data.kind`.
pub(super) fn connect_error(id: &str, shown: &str, error: &io::Error) -> ErrorObject {
    ErrorObject::new(codes::INTERNAL_ERROR, format!("cannot open tunnel {id} to {shown}: {error}"))
        .with_data(json!({"kind": kind(error), "address": shown}))
}

/// The Part B name of a connect or stream error.
pub(super) fn kind(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::ECONNREFUSED) => "connectionRefused",
        Some(libc::ECONNRESET) => "connectionReset",
        Some(libc::ETIMEDOUT) => "timedOut",
        Some(libc::EHOSTUNREACH) => "hostUnreachable",
        Some(libc::ENETUNREACH) => "networkUnreachable",
        Some(libc::EADDRNOTAVAIL) => "addressNotAvailable",
        Some(libc::EACCES | libc::EPERM) => "permissionDenied",
        _ => match error.kind() {
            io::ErrorKind::TimedOut => "timedOut",
            io::ErrorKind::NotFound => "notFound",
            _ => "other",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_policy_takes_loopback_literals_and_localhost_only() {
        let allowed = ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "::ffff:127.0.0.1", "LOCALHOST."];
        for host in allowed {
            assert!(allow(TunnelPolicy::Loopback, host, 80).is_ok(), "{host}");
        }
        for host in ["0.0.0.0", "10.0.0.1", "::", "example.com", "localhost.example"] {
            let error = allow(TunnelPolicy::Loopback, host, 80).err().map(|e| e.message);
            assert_eq!(
                error,
                Some(format!("tunnel to {} refused: only loopback addresses (127.0.0.0/8, ::1, localhost) may be reached (--tunnels loopback; --tunnels any allows every address)", shown(host, 80))),
            );
        }
    }

    #[test]
    fn none_refuses_and_any_takes_names() {
        let error = allow(TunnelPolicy::None, "127.0.0.1", 80).err().map(|e| e.message);
        assert_eq!(
            error.as_deref(),
            Some("tunnel to 127.0.0.1:80 refused: tunnels are off on this server (--tunnels none)")
        );
        assert!(matches!(allow(TunnelPolicy::Any, "example.com", 80), Ok(Target::Name(_, 80))));
        assert_eq!(
            allow(TunnelPolicy::Any, "::1", 0).err().map(|e| e.message).as_deref(),
            Some("tunnel to [::1]:0 refused: port 0 cannot be connected to")
        );
    }
}
