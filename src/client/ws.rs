//! The client over WebSocket: each frame is one message, bridged to the line
//! transport the rest of the client speaks.

use std::io;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{header, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as Frame;

use crate::error::Error;

/// Largest frame accepted from the server (a 512 MiB read is ~700 MiB of base64).
const MAX_FRAME: usize = 1 << 30;

/// Opens the WebSocket and returns the client's end of a byte pipe carrying
/// NDJSON, and the task that moves frames across (it ends with the connection).
pub(super) async fn open(
    url: &str,
    bearer_token: Option<&str>,
) -> Result<(DuplexStream, JoinHandle<io::Result<()>>), Error> {
    let failed = |e: &dyn std::fmt::Display| {
        Error::io(format!("cannot connect to {url}"), io::Error::other(e.to_string()))
    };
    let mut request = url.into_client_request().map_err(|e| failed(&e))?;
    if let Some(token) = bearer_token {
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| failed(&e))?;
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME));
    let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
        .await
        .map_err(|e| failed(&e))?;
    let (client_end, bridge_end) = tokio::io::duplex(1 << 20);
    let bridge = tokio::spawn(async move {
        let (mut sink, mut frames) = ws.split();
        let (bridge_read, mut bridge_write) = tokio::io::split(bridge_end);
        let mut lines = BufReader::new(bridge_read);
        let mut line = Vec::new();
        loop {
            tokio::select! {
                read = lines.read_until(b'\n', &mut line) => {
                    if read? == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(line.trim_ascii_end()).into_owned();
                    line.clear();
                    sink.send(Frame::text(text)).await.map_err(io::Error::other)?;
                }
                frame = frames.next() => match frame {
                    Some(Ok(Frame::Text(text))) => {
                        bridge_write.write_all(text.as_bytes()).await?;
                        bridge_write.write_all(b"\n").await?;
                    }
                    Some(Ok(Frame::Binary(bytes))) => {
                        bridge_write.write_all(&bytes).await?;
                        bridge_write.write_all(b"\n").await?;
                    }
                    Some(Ok(Frame::Close(_))) | None => break,
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(io::Error::other(error)),
                },
            }
        }
        let _ = sink.close().await;
        bridge_write.shutdown().await
    });
    Ok((client_end, bridge))
}
