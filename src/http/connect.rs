//! One HTTP/1.1 exchange on a connection of its own: TCP to the URL's host
//! (looked up on a blocking thread by tokio), TLS for https (rustls, ring,
//! the system's roots), the request, the response head. No pool: each hop of
//! a request connects anew, and the connection ends with its response.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method, Request, Response};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;
use url::{Host, Position, Url};

/// How long the connect may take (the lookup included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The task that drives a response's connection; aborted when dropped, so
/// it ends with the response (and with the request's task).
pub(super) struct Connection(JoinHandle<()>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `method url` with `headers` and `body`; the response head, its body
/// still to read while the [`Connection`] is kept.
pub(super) async fn exchange(
    method: &Method,
    url: &Url,
    headers: &[(HeaderName, HeaderValue)],
    body: Bytes,
) -> Result<(Response<Incoming>, Connection), String> {
    let port = url.port_or_known_default().ok_or_else(|| format!("{url} has no port"))?;
    let host = match url.host() {
        Some(Host::Domain(name)) => name.to_owned(),
        Some(Host::Ipv4(ip)) => ip.to_string(),
        Some(Host::Ipv6(ip)) => ip.to_string(),
        None => return Err(format!("{url} has no host")),
    };
    let reach = (crate::dial::Reach::Anywhere, None);
    let dialled = crate::dial::dial(&host, port, reach, CONNECT_TIMEOUT);
    let stream =
        dialled.await.map_err(|e| format!("cannot connect to {}: {}", authority(url), shown(e)))?;
    let _ = stream.set_nodelay(true);
    let request = request(method, url, headers, body)?;
    if url.scheme() == "https" {
        let name = match url.host() {
            Some(Host::Domain(name)) => ServerName::try_from(name.to_owned()),
            Some(Host::Ipv4(ip)) => Ok(ServerName::from(std::net::IpAddr::V4(ip))),
            Some(Host::Ipv6(ip)) => Ok(ServerName::from(std::net::IpAddr::V6(ip))),
            None => return Err(format!("{url} has no host")),
        }
        .map_err(|e| format!("invalid TLS server name: {e}"))?;
        let connector = TlsConnector::from(tls_config().await?);
        let tls = connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS handshake with {} failed: {e}", authority(url)))?;
        send(TokioIo::new(tls), request).await
    } else {
        send(TokioIo::new(stream), request).await
    }
}

async fn send<T>(
    io: TokioIo<T>,
    request: Request<Full<Bytes>>,
) -> Result<(Response<Incoming>, Connection), String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    let connection = Connection(tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "http/request connection ended");
        }
    }));
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    Ok((response, connection))
}

/// The request as it goes on the wire: origin-form target (no fragment),
/// `host` and `accept` unless given, then the client's headers in order.
fn request(
    method: &Method,
    url: &Url,
    headers: &[(HeaderName, HeaderValue)],
    body: Bytes,
) -> Result<Request<Full<Bytes>>, String> {
    let target = &url[Position::BeforePath..Position::AfterQuery];
    let target = if target.is_empty() { "/" } else { target };
    let mut builder = Request::builder().method(method.clone()).uri(target);
    let given = |wanted: &HeaderName| headers.iter().any(|(name, _)| name == wanted);
    if !given(&http::header::HOST) {
        builder = builder.header(http::header::HOST, authority(url));
    }
    if !given(&http::header::ACCEPT) {
        builder = builder.header(http::header::ACCEPT, "*/*");
    }
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    builder.body(Full::new(body)).map_err(|e| e.to_string())
}

/// `host[:port]` of `url` (the port only when not the scheme's default).
fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// The TLS client settings: the system's roots, loaded once (off the reactor).
async fn tls_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return config.clone();
    }
    tokio::task::spawn_blocking(|| CONFIG.get_or_init(load_tls_config).clone())
        .await
        .map_err(|e| e.to_string())?
}

fn load_tls_config() -> Result<Arc<ClientConfig>, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(format!(
            "no trusted root certificates were found on this machine ({} errors loading them)",
            found.errors.len()
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A dial's failure as the OS worded it (the same words as before the
/// dialer was shared).
fn shown(error: crate::dial::DialError) -> String {
    match error.io() {
        Some(error) => error.to_string(),
        None => error.to_string(),
    }
}
