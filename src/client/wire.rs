//! One connection's wire: a request sent and its answer awaited, the
//! handshake, and the reader that routes every line from the server.

use std::sync::Arc;

use tokio::io::{AsyncRead, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::routing::Shared;
use crate::dialect::{requests, Dialect};
use crate::error::Error;
use crate::protocol::{
    encode_request, GetMetadata, Initialize, InitializeParams, InitializeResult, Message, Method,
    NotificationMethod, ProcessClosed, ProcessList, ProcessRead, ProcessWrite, ReadDirectory,
    ReadFile, RequestId, PROTOCOL_VERSION,
};
use crate::transport::{self, ReadLine};

/// Longest line the client accepts (a 512 MiB `fs/readFile` is about 700 MiB of base64).
const MAX_INCOMING_LINE: usize = 1 << 30;

/// Sends request `M` with `id` and awaits its decoded result.
pub(super) async fn round_trip<M: Method>(
    shared: &Shared,
    outgoing: &mpsc::Sender<String>,
    id: RequestId,
    params: &M::Params,
) -> Result<M::Result, Error> {
    let line = encode_request::<M>(&id, params)
        .map_err(|e| Error::Encode(format!("{} params: {e}", M::NAME)))?;
    let line = requests::request_line(shared.dialect(), line);
    line_round_trip::<M>(shared, outgoing, id, line).await
}

/// Sends `line`, request `M` already encoded with `id`, and awaits its decoded result.
pub(super) async fn line_round_trip<M: Method>(
    shared: &Shared,
    outgoing: &mpsc::Sender<String>,
    id: RequestId,
    line: String,
) -> Result<M::Result, Error> {
    let (tx, rx) = oneshot::channel();
    if retryable(M::NAME, &line) {
        shared.add_retryable(id.clone(), tx, &line)?;
    } else {
        shared.add_pending(id.clone(), tx)?;
    }
    if outgoing.send(line).await.is_err() {
        shared.remove_pending(&id);
        return Err(shared.closed_error());
    }
    let value = rx.await.map_err(|_| shared.closed_error())?.map_err(Error::Rpc)?;
    serde_json::from_value(value)
        .map_err(|e| Error::Protocol(format!("bad {} result: {e}", M::NAME)))
}

/// `initialize` (id 1) and the version check.
pub(super) async fn handshake(
    shared: &Shared,
    outgoing: &mpsc::Sender<String>,
    params: InitializeParams,
) -> Result<InitializeResult, Error> {
    let info = round_trip::<Initialize>(shared, outgoing, RequestId::from(1), &params).await?;
    check_server(shared.dialect(), &info)?;
    Ok(info)
}

/// Whether the `initialize` result is of a server this client can speak to.
pub(super) fn check_server(dialect: Dialect, info: &InitializeResult) -> Result<(), Error> {
    match dialect {
        Dialect::V0 if info.protocol_version.is_empty() => Err(Error::Protocol(
            "the server's initialize result has no protocolVersion (for a server of today's dialect, set ClientOptions::dialect to Dialect::Today)".into(),
        )),
        Dialect::V0 if info.protocol_version != PROTOCOL_VERSION => Err(Error::Protocol(format!(
            "server speaks {}, not {PROTOCOL_VERSION}",
            info.protocol_version
        ))),
        Dialect::Today if info.session_id.is_none() => Err(Error::Protocol(
            "the server's initialize result has no sessionId (today's dialect needs one)".into(),
        )),
        _ => Ok(()),
    }
}

/// Whether the server sends `process/closed` (Part B), from its capabilities.
pub(super) fn sends_closed(info: &InitializeResult) -> bool {
    info.capabilities
        .as_ref()
        .is_some_and(|c| c.notifications.iter().any(|n| n == ProcessClosed::NAME))
}

pub(super) async fn read_loop<R: AsyncRead + Unpin>(reader: R, shared: Arc<Shared>) {
    read_lines(reader, &shared).await;
    shared.close();
}

/// Routes every message from `reader` until it ends.
pub(super) async fn read_lines<R: AsyncRead + Unpin>(reader: R, shared: &Shared) {
    let mut reader = BufReader::with_capacity(transport::INPUT_BUFFER, reader);
    let routed = transport::for_each_line(&mut reader, MAX_INCOMING_LINE, |line| match line {
        ReadLine::Line(line) if shared.dispatch_fast(line) => {}
        ReadLine::Line(line) => match Message::decode(line) {
            Ok(message) => shared.dispatch(message),
            Err(error) => tracing::warn!(%error, "ignoring a malformed line from the server"),
        },
        ReadLine::TooLong => tracing::warn!("ignoring a line from the server over the size limit"),
    })
    .await;
    if let Err(error) = routed {
        tracing::warn!(%error, "reading from the server failed");
    }
}

/// Methods that are safe to send again: they change nothing.
const SAFE: [&str; 5] =
    [ProcessRead::NAME, ProcessList::NAME, ReadFile::NAME, GetMetadata::NAME, ReadDirectory::NAME];

/// Whether the request `line` of `method` may be sent again after a resume.
fn retryable(method: &str, line: &str) -> bool {
    // Inside a JSON string a quote is escaped, so this key cannot come from a value.
    SAFE.contains(&method) || (method == ProcessWrite::NAME && line.contains("\"writeId\":"))
}
