//! A sandbox's proxy: the only way out of a network namespace that holds
//! nothing but its loopback. The trampoline listens on 127.0.0.1:3128 (HTTP:
//! plain requests and CONNECT) and 127.0.0.1:1080 (SOCKS5 CONNECT, names
//! resolved here) inside the namespace and hands both listeners to the
//! server; this task accepts on them from outside, so nothing in the sandbox
//! can reach the proxy's own network but through it.
//!
//! Each connection is decided (`gate`: the policy, then the client when it
//! asks), dialled off this host (`crate::dial`), reported
//! (`network/connection`), and spliced with its bytes held in the server's
//! room (`--max-retained-bytes`). Bounds: [`MAX_CONNECTIONS`] spliced at once
//! per process, twice that being read, every wait timed.
//!
//! Layout: `gate` (decisions and the dial), `http` and `socks` (the two
//! front doors), `splice` (the bytes both ways).

mod gate;
mod http;
mod socks;
mod splice;

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::account::Account;
use crate::dial::Rules;

pub(crate) use self::gate::MAX_CONNECTIONS;

/// One direction's buffer of a spliced connection.
const BUFFER: usize = 64 * 1024;

/// What the proxy tells the process's owner.
#[derive(Debug)]
pub(crate) enum Report {
    /// A connection was decided (`network/connection`).
    Connection { host: String, port: u16, allowed: bool, reason: String },
    /// A host no rule names: the client decides (`network/decide`);
    /// `answer` dropped unanswered means deny.
    Decide { host: String, port: u16, answer: oneshot::Sender<bool> },
}

/// Where reports go: the process's events, to its connection's loop.
pub(crate) type Reporter = Arc<dyn Fn(Report) -> BoxFuture<'static, ()> + Send + Sync>;

/// A running proxy; it ends, with every connection it carries, when dropped.
pub(crate) struct Proxy(JoinHandle<()>);

impl Drop for Proxy {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Which front door a connection came through.
#[derive(Debug, Clone, Copy)]
enum Door {
    Http,
    Socks,
}

impl Proxy {
    /// Starts accepting on `doors` (in the runtime's context).
    pub(crate) fn start(
        doors: crate::sandbox::Listeners,
        rules: Arc<Rules>,
        reporter: Reporter,
        (room, account): (Arc<Semaphore>, Arc<Account>),
    ) -> std::io::Result<Proxy> {
        let listener = |fd: OwnedFd| TcpListener::from_std(std::net::TcpListener::from(fd));
        let (http, socks) = (listener(doors.http)?, listener(doors.socks)?);
        let gate = Arc::new(gate::Gate::new(rules, reporter, room, account));
        Ok(Proxy(tokio::spawn(accept(http, socks, gate))))
    }
}

/// Accepts until dropped; each connection is a task of its own, ended with this one.
async fn accept(http: TcpListener, socks: TcpListener, gate: Arc<gate::Gate>) {
    let mut tasks = JoinSet::new();
    // Connections being read or refused, besides those spliced: a flood of
    // idle ones is closed at once rather than held.
    let reading = Arc::new(Semaphore::new(2 * MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            accepted = http.accept() => accepted.map(|(stream, _)| (Door::Http, stream)),
            accepted = socks.accept() => accepted.map(|(stream, _)| (Door::Socks, stream)),
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let (door, stream) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // EMFILE and the like: the next accept is tried after a pause.
                tracing::warn!(%error, "the sandbox proxy cannot accept");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = reading.clone().try_acquire_owned() else { continue };
        let gate = gate.clone();
        tasks.spawn(async move {
            serve(door, stream, &gate).await;
            drop(permit);
        });
    }
}

async fn serve(door: Door, stream: TcpStream, gate: &gate::Gate) {
    let _ = stream.set_nodelay(true);
    match door {
        Door::Http => http::serve(stream, gate).await,
        Door::Socks => socks::serve(stream, gate).await,
    }
}

/// The variables that lead a program's HTTP clients to the proxy; they
/// replace any the start named.
pub(crate) fn set_env(env: &mut BTreeMap<String, String>) {
    let http = format!("http://127.0.0.1:{}", crate::sandbox::PROXY_HTTP_PORT);
    let socks = format!("socks5h://127.0.0.1:{}", crate::sandbox::PROXY_SOCKS_PORT);
    for (name, value) in [
        ("HTTP_PROXY", &http),
        ("HTTPS_PROXY", &http),
        ("ALL_PROXY", &socks),
        ("NO_PROXY", &"localhost,127.0.0.1,::1".to_owned()),
    ] {
        env.insert(name.to_owned(), value.clone());
        env.insert(name.to_ascii_lowercase(), value.clone());
    }
}
