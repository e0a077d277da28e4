//! The face of a stdio connection, chosen from its first line: the Model
//! Context Protocol when an MCP client opens it (or `--mcp`), else the
//! exec-server protocol, as always. The line is read, looked at, and handed
//! on with the rest of the input.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::server::Config;

/// The most of the first line looked at to choose the face.
const SNIFF_LIMIT: usize = 64 * 1024;

/// How the MCP face is chosen and confines commands.
#[derive(Debug, Clone)]
pub(crate) struct Face {
    /// `--mcp`: MCP whatever the first message.
    pub(crate) forced: bool,
    pub(crate) confinement: crate::mcp::Confinement,
}

/// Serves stdio: MCP when the first message is MCP's (or `--mcp`), else the
/// exec-server protocol, as always.
pub(crate) async fn serve_stdio<R, W, S>(
    mut reader: R,
    writer: W,
    config: Config,
    face: Face,
    shutdown: S,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: std::future::Future<Output = ()>,
{
    tokio::pin!(shutdown);
    let first = tokio::select! {
        first = first_line(&mut reader) => first?,
        () = &mut shutdown => return Ok(()),
    };
    let mcp = face.forced || crate::mcp::opens_mcp(first_non_blank(&first));
    let reader = std::io::Cursor::new(first).chain(reader);
    if mcp {
        crate::mcp::serve(reader, writer, config, face.confinement, shutdown).await
    } else {
        crate::server::run_until(reader, writer, config, shutdown).await
    }
}

/// The bytes up to the first line that is not blank (with its newline), at
/// most [`SNIFF_LIMIT`], or up to the end of input.
async fn first_line<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = bytes.iter().position(|b| *b == b'\n') {
            if !bytes[..end].iter().all(u8::is_ascii_whitespace) {
                return Ok(bytes);
            }
        }
        if bytes.len() >= SNIFF_LIMIT {
            return Ok(bytes);
        }
        let read = reader.read(&mut chunk).await?;
        if read == 0 {
            return Ok(bytes);
        }
        bytes.extend_from_slice(&chunk[..read]);
    }
}

fn first_non_blank(bytes: &[u8]) -> &[u8] {
    bytes
        .split(|b| *b == b'\n')
        .find(|line| !line.iter().all(u8::is_ascii_whitespace))
        .unwrap_or(&[])
}
