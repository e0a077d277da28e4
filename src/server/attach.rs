//! The loop of a session attached to a connection: it only routes.
//!
//! It reacts to input messages, process events, finished fs calls and sweeps,
//! room in the writer's queue, timers and the shutdown signal, and never awaits
//! anything another party can hold up: fs calls run on blocking threads
//! (`fs_calls`), `/proc` sweeps are blocking tasks of the table, and replies
//! wait in a bounded `Outbox` instead of in a `send().await`. While the
//! outbox is full the loop stops taking input and process events, which is what
//! pushes back on a client that does not read, down to the children's pipes.
//!
//! When the connection ends, a detachable session (see `Session::detachable`)
//! returns [`Ended::Detached`] with its processes running; any other is killed
//! and drained, as Part A asks of EOF.

use std::future::Future;
use std::pin::Pin;

use tokio::time::{sleep_until, Instant};

use super::link::Link;
use super::session::Session;
use super::{Config, Ended, Handoff, OnEof, EOF_LINGER, KILL_DRAIN};
use crate::process::ProcessTable;

pub(super) async fn attach<S>(
    mut link: Link,
    session: &mut Session,
    config: &Config,
    shutdown: &mut Pin<&mut S>,
) -> Ended
where
    S: Future<Output = ()>,
{
    let Session { state, events, registration } = &mut *session;
    let mut out = Vec::new();
    let mut input_open = true;
    let mut drain_deadline: Option<Instant> = None;
    // The connection went while the session can live on without it.
    let mut detaching = false;
    // The input ended: detach once what was asked before is answered.
    let mut detach_when_quiet = false;
    // An `initialize` that resumes another session, which takes the link over.
    let mut claimed = None;
    // Fires when a resume with `takeover` wants this connection closed.
    let mut kicked = registration.as_ref().map(|r| r.registry().attached(r.id()));
    loop {
        // A closed connection leaves this session detached rather than ended.
        let live = registration.is_some() && state.initialized() && state.client_resumes();
        let timer = state.table.next_deadline();
        let room = link.outbox.has_room();
        // A full fs queue holds the input back too (pipelined calls wait).
        let take_input = room && state.fs.has_room() && state.watches.has_room();
        let spin = state.fs.spinning();
        tokio::select! {
            message = link.incoming.recv(), if input_open && take_input => match message {
                Some(message) => {
                    state.on_incoming(message, &mut out);
                    claimed = state.take_claimed();
                }
                None => {
                    tracing::debug!("input ended");
                    input_open = false;
                    if live {
                        // What was sent before the end is answered first (a
                        // bridge half-closes after the last line), then the
                        // session detaches; a client that stops reading
                        // cannot hold it beyond the linger.
                        detach_when_quiet = true;
                        drain_deadline = Some(Instant::now() + EOF_LINGER);
                    } else if config.on_eof == OnEof::Kill {
                        state.table.kill_all();
                        drain_deadline = Some(Instant::now() + KILL_DRAIN);
                    }
                }
            },
            // The input ended while the loop takes none (replies wait for the
            // client to read): the processes are killed now, as EOF asks; the
            // lines before the end are still answered once the client reads,
            // and the connection ends at the EOF itself as usual.
            ended = &mut link.input_ended, if input_open && !take_input && !link.ending_seen => {
                link.ending_seen = true;
                if ended.is_ok() && live {
                    // The lines before the end are still answered; the
                    // session detaches once they are, or at the linger.
                    tracing::debug!("input ended while replies wait");
                    detach_when_quiet = true;
                    drain_deadline.get_or_insert(Instant::now() + EOF_LINGER);
                } else if ended.is_ok() && config.on_eof == OnEof::Kill {
                    tracing::debug!("input ended while replies wait; killing the processes");
                    state.table.kill_all();
                    // A client that stopped reading cannot keep the server alive.
                    drain_deadline.get_or_insert(Instant::now() + EOF_LINGER);
                }
            }
            Some(event) = events.recv(), if room => state.table.on_event(event, Instant::now(), &mut out),
            // Finished fs calls are taken only while the outbox has room: an
            // unread reply holds its slot, and no more calls start meanwhile.
            line = state.fs.next_reply(), if room => out.push(line),
            line = state.watches.next_line(), if room => out.push(line.into()),
            event = state.tunnels.next_event(), if room => state.on_tunnel(event, &mut out),
            wake = state.ports.next(), if room => state.on_ports(wake, &mut out),
            event = state.http.next_event(), if room => state.on_http(event, &mut out),
            // Polls again (after a non-blocking look at I/O) while a fresh fs call runs.
            () = tokio::task::yield_now(), if spin => {}
            done = state.table.next_done() => {
                if let Some(line) = done {
                    state.on_started(line, &mut out);
                }
            }
            permit = link.lines.reserve(), if link.outbox.has_lines() => match permit {
                Ok(permit) => link.outbox.send(permit, &link.lines),
                Err(_) => {
                    input_open = false;
                    detaching |= output_gone(&mut link.outbox, live, &mut state.table, &mut drain_deadline);
                }
            },
            // The writer gave up (a peer gone silent, a write error) while
            // nothing was waiting to be sent: the connection is over all the same.
            () = link.lines.closed(), if !link.outbox.is_closed() => {
                input_open = false;
                detaching |= output_gone(&mut link.outbox, live, &mut state.table, &mut drain_deadline);
            }
            kick = async {
                match kicked.as_mut() {
                    Some(kicked) => kicked.await,
                    None => std::future::pending().await,
                }
            }, if kicked.is_some() => {
                kicked = None;
                if kick.is_ok() {
                    tracing::info!("another connection took the session over; closing this one");
                    input_open = false;
                    detaching |= output_gone(&mut link.outbox, live, &mut state.table, &mut drain_deadline);
                }
            }
            () = sleep_until(timer.unwrap_or_else(Instant::now)), if timer.is_some() => {
                state.table.on_timers(Instant::now(), &mut out);
            }
            () = shutdown.as_mut(), if drain_deadline.is_none() || detach_when_quiet => {
                tracing::info!("shutting down on request");
                input_open = false;
                detaching = false;
                detach_when_quiet = false;
                state.table.kill_all();
                drain_deadline = Some(Instant::now() + KILL_DRAIN);
            }
            () = sleep_until(drain_deadline.unwrap_or_else(Instant::now)), if drain_deadline.is_some() => {
                if detach_when_quiet {
                    tracing::info!("requests still busy after the input ended; detaching");
                    detaching = true;
                    break;
                }
                tracing::warn!("processes, fs calls, tunnels or requests still busy after the connection ended; closing");
                break;
            }
        }
        if state.take_ended() {
            // The client ended its session (`session/end`): nobody can
            // resume it, nothing more is read, and the connection closes
            // once its processes are gone and the reply is out.
            tracing::info!(session = %state.session_id(), "session ended by its client");
            *registration = None;
            kicked = None;
            input_open = false;
            detach_when_quiet = false;
            drain_deadline = Some(Instant::now() + KILL_DRAIN);
        }
        link.outbox.extend(&mut out);
        link.outbox.send_ready(&link.lines);
        if let Some((wake, request, session_id)) = claimed.take() {
            return Ended::Resume { wake, handoff: Handoff { link, request, session_id } };
        }
        if detach_when_quiet && !input_open && state.is_quiet() && !link.outbox.has_lines() {
            detaching = true;
        }
        if detaching {
            break;
        }
        if !input_open
            && state.table.is_settled()
            && state.fs.is_idle()
            && state.links_idle()
            && !link.outbox.has_lines()
        {
            break;
        }
    }
    state.table.answer_all_parked(&mut out);
    state.refuse_waiting(&mut out);
    if detaching {
        tracing::info!(session = %state.session_id(), "connection closed; session detached");
        state.detach();
        // The old connection may still read what was queued for it; it is
        // not waited for beyond the final flush.
        let _ = link.finish(&mut out).await;
        return Ended::Detached;
    }
    let result = link.finish(&mut out).await;
    // Dropping the state kills what is left; fs calls still in a syscall are abandoned.
    Ended::Finished(result)
}

/// The output is gone: nothing more can be said, so the connection ends; a
/// live session detaches (true), any other is killed.
fn output_gone(
    outbox: &mut super::outbox::Outbox,
    detachable: bool,
    table: &mut ProcessTable,
    drain: &mut Option<Instant>,
) -> bool {
    tracing::debug!("output closed; ending the connection");
    outbox.close();
    if detachable {
        return true;
    }
    table.kill_all();
    drain.get_or_insert(Instant::now() + KILL_DRAIN);
    false
}
