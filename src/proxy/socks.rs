//! The SOCKS5 door (RFC 1928): no authentication, CONNECT only, the name
//! resolved by the proxy (`socks5h`). A refusal is reply 0x02.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::gate::{Gate, Refused};
use crate::dial::DialError;

/// How long the greeting and request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const VERSION: u8 = 5;
const NO_AUTHENTICATION: u8 = 0;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CONNECT: u8 = 1;

/// Reply codes.
const SUCCEEDED: u8 = 0;
const GENERAL_FAILURE: u8 = 1;
const NOT_ALLOWED: u8 = 2;
const NETWORK_UNREACHABLE: u8 = 3;
const HOST_UNREACHABLE: u8 = 4;
const CONNECTION_REFUSED: u8 = 5;
const COMMAND_NOT_SUPPORTED: u8 = 7;
const ADDRESS_NOT_SUPPORTED: u8 = 8;

pub(super) async fn serve(mut stream: TcpStream, gate: &Gate) {
    let asked = tokio::time::timeout(REQUEST_TIMEOUT, request(&mut stream)).await;
    let (host, port) = match asked {
        Ok(Ok(Ok(target))) => target,
        Ok(Ok(Err(code))) => return reply(&mut stream, code).await,
        Ok(Err(_)) | Err(_) => return,
    };
    match gate.admit(&host, port).await {
        Ok(admitted) => {
            if write_reply(&mut stream, SUCCEEDED).await.is_ok() {
                super::splice::splice(stream, admitted, &[]).await;
            }
        }
        Err(Refused::Policy(_) | Refused::Malformed(_)) => reply(&mut stream, NOT_ALLOWED).await,
        Err(Refused::Dial(error)) => reply(&mut stream, code_of(&error)).await,
    }
}

/// The greeting and the request: the target, or the reply that refuses it.
async fn request(stream: &mut TcpStream) -> std::io::Result<Result<(String, u16), u8>> {
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await?;
    if head[0] != VERSION {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    stream.read_exact(&mut methods).await?;
    if !methods.contains(&NO_AUTHENTICATION) {
        stream.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
        return Err(std::io::ErrorKind::PermissionDenied.into());
    }
    stream.write_all(&[VERSION, NO_AUTHENTICATION]).await?;
    let mut request = [0u8; 4];
    stream.read_exact(&mut request).await?;
    let [version, command, _, kind] = request;
    if version != VERSION {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    let host = match kind {
        1 => {
            let mut octets = [0u8; 4];
            stream.read_exact(&mut octets).await?;
            Ipv4Addr::from(octets).to_string()
        }
        3 => {
            let length = stream.read_u8().await?;
            let mut name = vec![0u8; usize::from(length)];
            stream.read_exact(&mut name).await?;
            match String::from_utf8(name) {
                Ok(name) if !name.is_empty() => name,
                _ => return Ok(Err(ADDRESS_NOT_SUPPORTED)),
            }
        }
        4 => {
            let mut octets = [0u8; 16];
            stream.read_exact(&mut octets).await?;
            Ipv6Addr::from(octets).to_string()
        }
        _ => return Ok(Err(ADDRESS_NOT_SUPPORTED)),
    };
    let port = stream.read_u16().await?;
    if command != CONNECT {
        return Ok(Err(COMMAND_NOT_SUPPORTED));
    }
    Ok(Ok((host, port)))
}

async fn reply(stream: &mut TcpStream, code: u8) {
    let _ = write_reply(stream, code).await;
    let _ = stream.shutdown().await;
}

async fn write_reply(stream: &mut TcpStream, code: u8) -> std::io::Result<()> {
    stream.write_all(&[VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0]).await
}

/// The reply for a failed dial.
fn code_of(error: &DialError) -> u8 {
    match error.io().and_then(std::io::Error::raw_os_error) {
        Some(libc::ECONNREFUSED) => CONNECTION_REFUSED,
        Some(libc::ENETUNREACH) => NETWORK_UNREACHABLE,
        Some(libc::EHOSTUNREACH | libc::ETIMEDOUT) => HOST_UNREACHABLE,
        _ => match error {
            DialError::Resolve(..) => HOST_UNREACHABLE,
            DialError::Connect(e) if e.kind() == std::io::ErrorKind::TimedOut => HOST_UNREACHABLE,
            _ => GENERAL_FAILURE,
        },
    }
}
