//! Where the server's own connections may go, decided in one place: a
//! name is resolved with the server's resolver (`/etc/hosts` honoured), each
//! address is checked when it is dialled, and the connect goes to exactly
//! the address checked. Tunnels (`--tunnels`), `http/request` and the
//! sandbox's proxy (`proxy`) all dial here; the proxy also keeps off this
//! host ([`Reach::OffHost`]) and applies a network policy ([`Rules`]).

mod guard;
mod rules;

pub(crate) use self::rules::{checked_host, unbracketed, Rules, Verdict};

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Lookups under way at once in the whole server. Each runs on a thread of
/// its own (not the runtime's blocking pool, which fs calls need), and holds
/// its slot until getaddrinfo returns, however long a resolver makes it
/// take: a caller that gave up does not free the slot early.
const MAX_LOOKUPS: usize = 16;
static LOOKUPS: Semaphore = Semaphore::const_new(MAX_LOOKUPS);

/// Which addresses a dial may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Any address the name resolves to (tunnels and `http/request` check
    /// their own policies first).
    Anywhere,
    /// None of this host's (see `guard`): a sandbox's proxy.
    OffHost,
}

/// Why a dial did not connect.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    /// The name or an address is this host's, under [`Reach::OffHost`].
    #[error("resolves to this host")]
    ThisHost,
    /// The name could not be resolved.
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, io::Error),
    /// Every address refused or failed; the last failure.
    #[error("{0}")]
    Connect(io::Error),
}

impl DialError {
    /// The OS error under it, for a caller that names error kinds.
    pub(crate) fn io(&self) -> Option<&io::Error> {
        match self {
            DialError::ThisHost => None,
            DialError::Resolve(_, error) | DialError::Connect(error) => Some(error),
        }
    }
}

/// The addresses of `host` (a name, or an IP literal with or without
/// brackets) at `port`, checked against `reach`: on a blocking thread (the
/// resolver and the host's address list block).
pub(crate) async fn resolve(
    host: &str,
    port: u16,
    reach: Reach,
    slot: Option<OwnedSemaphorePermit>,
) -> Result<Vec<SocketAddr>, DialError> {
    let bare = unbracketed(host);
    // A name's final dot is the root's: `/etc/hosts` lists names without it.
    let bare = bare.strip_suffix('.').unwrap_or(bare).to_owned();
    let work = move || -> Result<Vec<SocketAddr>, DialError> {
        let addresses: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            // `localhost` and its subdomains are loopback (RFC 6761): never looked up.
            Err(_) if is_localhost(&bare) => vec![
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
                SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
            ],
            Err(_) => (bare.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| DialError::Resolve(bare.clone(), e))?
                .collect(),
        };
        if reach == Reach::OffHost {
            // An unknown list refuses everything: the check fails closed.
            let host = guard::ThisHost::now().map_err(|_| DialError::ThisHost)?;
            if addresses.iter().any(|a| host.holds(a.ip())) {
                return Err(DialError::ThisHost);
            }
        }
        Ok(addresses)
    };
    let turn = LOOKUPS.acquire().await.map_err(|e| DialError::Connect(io::Error::other(e)))?;
    let (answer, answered) = tokio::sync::oneshot::channel();
    let lookup = move || {
        let result = work();
        // Both slots are held until the lookup has really ended.
        drop((turn, slot));
        let _ = answer.send(result);
    };
    std::thread::Builder::new().name("exec-server-lookup".to_owned()).spawn(lookup).map_err(
        |e| DialError::Connect(io::Error::other(format!("cannot start a lookup thread: {e}"))),
    )?;
    answered.await.unwrap_or_else(|_| {
        Err(DialError::Connect(io::Error::other("the lookup thread ended without an answer")))
    })
}

/// [`resolve`] then [`connect`], both within `timeout`; `slot`, when given,
/// is held until the lookup ends (see [`resolve`]).
pub(crate) async fn dial(
    host: &str,
    port: u16,
    (reach, slot): (Reach, Option<OwnedSemaphorePermit>),
    timeout: Duration,
) -> Result<TcpStream, DialError> {
    let attempt = async {
        let addresses = resolve(host, port, reach, slot).await?;
        connect(&addresses, timeout).await
    };
    tokio::time::timeout(timeout, attempt).await.unwrap_or_else(|_| {
        Err(DialError::Connect(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {}s", timeout.as_secs()),
        )))
    })
}

/// Connects to each of `addresses` in turn within `timeout`; the last failure.
pub(crate) async fn connect(
    addresses: &[SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, DialError> {
    let attempt = async {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
        for address in addresses {
            match TcpStream::connect(address).await {
                Ok(stream) => return Ok(stream),
                Err(error) => last = error,
            }
        }
        Err(DialError::Connect(last))
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(DialError::Connect(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {}s", timeout.as_secs()),
        ))),
    }
}

/// `localhost` or a subdomain of it, any case, a final dot ignored.
pub(crate) fn is_localhost(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// `host:port` as messages show it (`[::1]:80` for an IPv6 literal).
pub(crate) fn shown(host: &str, port: u16) -> String {
    if host.parse::<Ipv6Addr>().is_ok() {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
