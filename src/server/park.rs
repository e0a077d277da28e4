//! A detached session: its processes keep running and their output is
//! retained (the table's bounds hold as ever), while nobody is told. It waits
//! for a resume, and ends (its processes killed) when the ttl passes, when it
//! is evicted as the oldest of too many, or when the server stops.

use std::future::Future;
use std::pin::Pin;

use tokio::time::{sleep_until, Instant};

use super::session::Session;
use super::{Handoff, KILL_DRAIN};
use crate::sessions::Wake;

/// Parks `session` until a connection resumes it (its link is returned), or
/// ends it (`None`: its processes were killed and drained).
pub(super) async fn park<S>(session: &mut Session, shutdown: &mut Pin<&mut S>) -> Option<Handoff>
where
    S: Future<Output = ()>,
{
    let Session { state, events, registration } = &mut *session;
    let registration = registration.as_ref()?;
    let registry = registration.registry().clone();
    let id = registration.id().clone();
    let mut woken = registry.detach(&id, state.table.has_processes());
    let mut expiry = Some(Instant::now() + registry.ttl);
    // Notifications go nowhere; the client catches up with process/read.
    let mut out = Vec::new();
    // Nobody has been told of the exits yet: keep them readable.
    state.table.hold_exited(true, Instant::now());
    loop {
        let timer = state.table.next_deadline();
        tokio::select! {
            wake = &mut woken => match wake {
                Ok(Wake::Resume(handoff)) => return Some(handoff),
                Ok(Wake::End) => break,
                // The claimer went away without handing over: nobody can resume it now.
                Err(_) => break,
            },
            Some(event) = events.recv() => state.table.on_event(event, Instant::now(), &mut out),
            done = state.table.next_done() => {
                if let Some(line) = done {
                    state.on_started(line, &mut out);
                }
            }
            () = sleep_until(timer.unwrap_or_else(Instant::now)), if timer.is_some() => {
                state.table.on_timers(Instant::now(), &mut out);
            }
            () = sleep_until(expiry.unwrap_or_else(Instant::now)), if expiry.is_some() => {
                if registry.expire(&id) {
                    tracing::info!(session = %id, ttl = ?registry.ttl, "detached session not resumed in time; ending it");
                    break;
                }
                // Claimed at the last moment: the handoff is on its way.
                expiry = None;
            }
            () = shutdown.as_mut() => break,
        }
        out.clear();
    }
    // Every family stopped, recorded and killed (setsid'd descendants
    // included), then whatever started meanwhile.
    let ended = tokio::task::spawn_blocking(state.table.family_ender()).await;
    if let Some(count) = ended.ok().filter(|&count| count > 0) {
        tracing::debug!(count, "killed the session's families");
    }
    state.table.kill_all();
    let deadline = Instant::now() + KILL_DRAIN;
    while !state.table.is_settled() {
        tokio::select! {
            Some(event) = events.recv() => state.table.on_event(event, Instant::now(), &mut out),
            done = state.table.next_done() => drop(done),
            () = sleep_until(deadline) => break,
        }
        out.clear();
    }
    None
}
