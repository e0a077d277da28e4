//! Whether a proxied connection may go, and the dial when it may: the
//! policy's verdict, the client's decision for a host no rule names (kept
//! for the process's life), a slot of [`MAX_CONNECTIONS`], room for its
//! buffers, and a connect off this host. Every outcome is reported.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Report, Reporter};
use crate::account::Account;
use crate::dial::{self, DialError, Reach, Rules, Verdict};
use crate::hold::Held;

/// Proxied connections of one process at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Decisions a client gave that one process remembers; beyond, it asks again.
const MAX_REMEMBERED: usize = 4096;
/// How long the connect may take, the lookup included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// What one spliced connection holds: a buffer each way.
pub(super) const HELD_BYTES: usize = 2 * super::BUFFER;

/// One process's gate.
pub(super) struct Gate {
    rules: Arc<Rules>,
    reporter: Reporter,
    slots: Arc<Semaphore>,
    room: Arc<Semaphore>,
    account: Arc<Account>,
    /// What the client decided, by lowercase host and port.
    decided: Mutex<HashMap<(String, u16), bool>>,
    /// This process's lookup under way (one at a time).
    lookups: Arc<Semaphore>,
}

/// A connection that may go: the upstream stream, its slot and its bytes.
pub(super) struct Admitted {
    pub(super) upstream: TcpStream,
    pub(super) _slot: OwnedSemaphorePermit,
    pub(super) held: Held,
}

/// Why a connection did not go.
#[derive(Debug)]
pub(super) enum Refused {
    /// The policy, the client, a bound or this host's address: said as is.
    Policy(String),
    /// Allowed, but the dial failed.
    Dial(DialError),
    /// The host is not a host name or an IP literal.
    Malformed(String),
}

impl Gate {
    pub(super) fn new(
        rules: Arc<Rules>,
        reporter: Reporter,
        room: Arc<Semaphore>,
        account: Arc<Account>,
    ) -> Gate {
        Gate {
            rules,
            reporter,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            room,
            account,
            decided: Mutex::new(HashMap::new()),
            lookups: Arc::new(Semaphore::new(1)),
        }
    }

    /// Room for `bytes` of a request being read, now or never (the
    /// connection is then closed unread).
    pub(super) fn hold(&self, bytes: usize) -> Option<Held> {
        Held::try_take(&[&self.room], &self.account, bytes)
    }

    /// Decides, then dials, `host:port`; reported either way (a host that
    /// is not one is reported escaped and cut short).
    pub(super) async fn admit(&self, host: &str, port: u16) -> Result<Admitted, Refused> {
        if let Err(why) = dial::checked_host(host) {
            let shown: String = host.escape_default().take(80).collect();
            let reason = format!("not a host name or an IP literal: {why}");
            let report =
                Report::Connection { host: shown, port, allowed: false, reason: reason.clone() };
            (self.reporter)(report).await;
            return Err(Refused::Malformed(reason));
        }
        let outcome = self.decide_and_dial(host, port).await;
        let (allowed, reason) = match &outcome {
            Ok((_, reason)) => (true, reason.clone()),
            Err(Refused::Policy(reason) | Refused::Malformed(reason)) => (false, reason.clone()),
            Err(Refused::Dial(error)) => (false, format!("cannot connect: {error}")),
        };
        let report = Report::Connection { host: host.to_owned(), port, allowed, reason };
        (self.reporter)(report).await;
        outcome.map(|(admitted, _)| admitted)
    }

    async fn decide_and_dial(&self, host: &str, port: u16) -> Result<(Admitted, String), Refused> {
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
            Refused::Policy(format!(
                "at most {MAX_CONNECTIONS} proxied connections of one process at once"
            ))
        })?;
        let reason = match self.rules.decide(host, port) {
            Verdict::Allowed(reason) => reason,
            Verdict::Refused(reason) => return Err(Refused::Policy(reason)),
            Verdict::Ask => self.ask(host, port).await.map_err(Refused::Policy)?,
        };
        let held = Held::try_take(&[&self.room], &self.account, HELD_BYTES).ok_or_else(|| {
            Refused::Policy(
                "the server holds all the buffered bytes it may (--max-retained-bytes)".to_owned(),
            )
        })?;
        // One lookup of this process at a time, held until it ends: a
        // resolver that never answers takes one lookup slot per process.
        let waited = tokio::time::timeout(CONNECT_TIMEOUT, self.lookups.clone().acquire_owned());
        let lookup = waited.await.map_err(|_| {
            let waiting = "this process's previous lookup has not ended".to_owned();
            Refused::Dial(DialError::Resolve(host.to_owned(), std::io::Error::other(waiting)))
        })?;
        let lookup = lookup.ok();
        let reach = (Reach::OffHost, lookup);
        let upstream = match dial::dial(host, port, reach, CONNECT_TIMEOUT).await {
            Ok(upstream) => upstream,
            Err(DialError::ThisHost) => {
                return Err(Refused::Policy(DialError::ThisHost.to_string()))
            }
            Err(error) => return Err(Refused::Dial(error)),
        };
        let _ = upstream.set_nodelay(true);
        Ok((Admitted { upstream, _slot: slot, held }, reason))
    }

    /// The client's decision on a host no rule names: remembered once
    /// given; no answer in time denies, and is not remembered.
    async fn ask(&self, host: &str, port: u16) -> Result<String, String> {
        let key = (host.trim_end_matches('.').to_ascii_lowercase(), port);
        let remembered = self.decided.lock().map(|d| d.get(&key).copied()).unwrap_or(None);
        let allow = match remembered {
            Some(allow) => allow,
            None => {
                let (answer, answered) = tokio::sync::oneshot::channel();
                (self.reporter)(Report::Decide { host: host.to_owned(), port, answer }).await;
                let wait = Duration::from_millis(self.rules.ask_timeout_ms);
                match tokio::time::timeout(wait, answered).await {
                    Ok(Ok(allow)) => {
                        if let Ok(mut decided) = self.decided.lock() {
                            if decided.len() < MAX_REMEMBERED {
                                decided.insert(key, allow);
                            }
                        }
                        allow
                    }
                    Ok(Err(_)) => return Err("the client gave no decision".to_owned()),
                    Err(_) => {
                        return Err(format!(
                            "no decision from the client within {} ms",
                            self.rules.ask_timeout_ms
                        ))
                    }
                }
            }
        };
        match allow {
            true => Ok("allowed by the client".to_owned()),
            false => Err("denied by the client".to_owned()),
        }
    }
}
