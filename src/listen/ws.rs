//! One upgraded WebSocket as the server loop's channels: a reader task
//! (frames → messages, pongs, closes) and a writer task (lines → text
//! frames, pings every period, the close), and the TCP options that let the
//! kernel drop a peer that vanished.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::frames::{self, Event, MessageBudget, Reader};
use super::{FRAME_ERROR, MESSAGE_BUDGET};
use crate::server::Channels;
use crate::transport::{Incoming, Line};

/// Lets the kernel end a connection whose peer vanished without a word (keepalive
/// probes after 30 s idle, and data unacknowledged for 60 s), which a writer
/// blocked on a full send buffer could not notice by pinging.
pub(super) fn drop_dead_peers(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let options: [(libc::c_int, libc::c_int, libc::c_int); 5] = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 30),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, 60_000),
    ];
    for (level, name, value) in options {
        // SAFETY: setsockopt reads one c_int from `value` for the socket we own.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                std::ptr::addr_of!(value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

/// What the reader asks the writer to send besides lines.
enum Control {
    Pong(Vec<u8>),
    Close(u16, &'static str),
}

/// The reader and writer tasks of one WebSocket, as the loop's channels.
pub(super) fn bridge(
    stream: TcpStream,
    leftover: Vec<u8>,
    limit: usize,
    budget: MessageBudget,
    ping_interval: Duration,
) -> Channels {
    let (read_half, write_half) = stream.into_split();
    let (incoming_tx, incoming) = mpsc::channel(2);
    let (outgoing, mut lines) = mpsc::channel::<Line>(crate::transport::WRITER_QUEUE);
    let (control_tx, mut control) = mpsc::channel::<Control>(8);
    let heard = Arc::new(AtomicBool::new(true));
    let heard_by_reader = heard.clone();
    let reader = tokio::spawn(async move {
        let mut frames = Reader::new(read_half, leftover, limit, budget);
        loop {
            let event = match frames.next().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(error) => {
                    tracing::info!(%error, "WebSocket read failed; closing");
                    break;
                }
            };
            heard_by_reader.store(true, Ordering::Relaxed);
            let message = match event {
                Event::Message { text, bytes, _held } => {
                    if text && std::str::from_utf8(&bytes).is_err() {
                        let _ = control_tx
                            .send(Control::Close(
                                frames::CLOSE_INVALID,
                                "a text frame was not UTF-8",
                            ))
                            .await;
                        break;
                    }
                    let message = Incoming::decode(&bytes, FRAME_ERROR);
                    drop(bytes);
                    drop(_held);
                    message
                }
                Event::TooLong => Incoming::TooLong { limit },
                Event::Starved => Incoming::Malformed(format!(
                    "the message was discarded: the server's budget for incoming messages ({} MiB across connections) stayed full for {:?}; send it again later",
                    MESSAGE_BUDGET >> 20,
                    frames::BUDGET_WAIT
                )),
                Event::Ping(payload) => {
                    let _ = control_tx.send(Control::Pong(payload)).await;
                    continue;
                }
                // Heard (above): that is all a pong says.
                Event::Pong => continue,
                Event::Close(code) => {
                    tracing::debug!(?code, "the peer closed the WebSocket");
                    let _ = control_tx.send(Control::Close(frames::CLOSE_NORMAL, "")).await;
                    break;
                }
                Event::Broken { code, reason } => {
                    tracing::info!(reason, "the peer broke the WebSocket protocol; closing");
                    let _ = control_tx.send(Control::Close(code, reason)).await;
                    break;
                }
            };
            if incoming_tx.send(message).await.is_err() {
                break;
            }
        }
    });
    let writer = tokio::spawn(async move {
        let mut sink = BufWriter::with_capacity(64 * 1024, write_half);
        let mut ping = tokio::time::interval(ping_interval);
        // A write that took longer than an interval is no reason to tick
        // twice at once (the second tick would find nothing heard yet).
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        // A peer that takes our frames is alive even if its pong waits behind them.
        let mut delivered = false;
        let mut closing: Option<(u16, &'static str)> = None;
        let mut control_open = true;
        loop {
            tokio::select! {
                line = lines.recv() => match line {
                    Some(line) => {
                        frames::write_frame(&mut sink, frames::OP_TEXT, line.text().as_bytes()).await?;
                        while let Ok(line) = lines.try_recv() {
                            frames::write_frame(&mut sink, frames::OP_TEXT, line.text().as_bytes()).await?;
                        }
                        sink.flush().await?;
                        delivered = true;
                    }
                    None => break,
                },
                request = control.recv(), if control_open => match request {
                    Some(Control::Pong(payload)) => {
                        frames::write_frame(&mut sink, frames::OP_PONG, &payload).await?;
                        sink.flush().await?;
                    }
                    Some(Control::Close(code, reason)) => {
                        // The loop ends once the reader has ended; its last replies still go out.
                        closing = Some((code, reason));
                        control_open = false;
                    }
                    None => control_open = false,
                },
                _ = ping.tick() => {
                    let progressed = std::mem::take(&mut delivered);
                    if !heard.swap(false, Ordering::Relaxed) && !progressed {
                        tracing::info!("the peer answered no ping for {ping_interval:?}; closing");
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "peer went silent"));
                    }
                    frames::write_frame(&mut sink, frames::OP_PING, b"").await?;
                    sink.flush().await?;
                }
            }
        }
        let (code, reason) = closing.unwrap_or((frames::CLOSE_NORMAL, ""));
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(reason.as_bytes());
        let _ = frames::write_frame(&mut sink, frames::OP_CLOSE, &payload).await;
        let _ = sink.flush().await;
        let _ = sink.shutdown().await;
        Ok(())
    });
    // A close frame ends the reader after the frames before it are taken.
    let (_, input_ended) = oneshot::channel();
    Channels { incoming, outgoing, reader, writer, input_ended }
}
