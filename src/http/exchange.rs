//! A request with its redirects: `follow` takes up to [`MAX_REDIRECTS`] hops
//! the way reqwest's default policy does (301/302 turn a POST into a GET,
//! 303 anything but HEAD; 307/308 keep method and body; credentials are
//! dropped when the origin changes); `stop` answers with the 3xx itself, its
//! target never requested.

use http::header::{
    AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, LOCATION,
    PROXY_AUTHORIZATION, TRANSFER_ENCODING, WWW_AUTHENTICATE,
};
use http::{Method, Response, StatusCode};
use hyper::body::{Bytes, Incoming};

use super::connect::{self, Connection};
use super::prepare::Prepared;
use super::MAX_REDIRECTS;
use crate::protocol::RedirectPolicy;

/// The final response head (its body still to read while the connection is kept).
pub(super) async fn send(prepared: &Prepared) -> Result<(Response<Incoming>, Connection), String> {
    let mut method = prepared.method.clone();
    let mut url = prepared.url.clone();
    let mut headers = prepared.headers.clone();
    let mut body = prepared.body.clone();
    let mut hops = 0;
    loop {
        let (response, connection) =
            connect::exchange(&method, &url, &headers, body.clone()).await?;
        let status = response.status();
        if prepared.redirect == RedirectPolicy::Stop || !status.is_redirection() {
            return Ok((response, connection));
        }
        let next = response
            .headers()
            .get(LOCATION)
            .and_then(|location| location.to_str().ok())
            .and_then(|location| url.join(location).ok());
        let Some(next) = next else { return Ok((response, connection)) };
        if !matches!(
            status,
            StatusCode::MOVED_PERMANENTLY
                | StatusCode::FOUND
                | StatusCode::SEE_OTHER
                | StatusCode::TEMPORARY_REDIRECT
                | StatusCode::PERMANENT_REDIRECT
        ) {
            return Ok((response, connection));
        }
        if hops == MAX_REDIRECTS {
            return Err(format!(
                "too many redirects (more than {MAX_REDIRECTS}) from {}",
                prepared.url
            ));
        }
        if !matches!(next.scheme(), "http" | "https") {
            return Err(format!(
                "redirect to {next} refused: only http and https URLs are followed"
            ));
        }
        hops += 1;
        let to_get = match status {
            StatusCode::SEE_OTHER => method != Method::HEAD,
            StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => method == Method::POST,
            _ => false,
        };
        if to_get {
            method = Method::GET;
            body = Bytes::new();
            headers.retain(|(name, _)| {
                ![CONTENT_TYPE, CONTENT_LENGTH, CONTENT_ENCODING, TRANSFER_ENCODING].contains(name)
            });
        }
        let same_origin = next.scheme() == url.scheme()
            && next.host_str() == url.host_str()
            && next.port_or_known_default() == url.port_or_known_default();
        if !same_origin {
            headers.retain(|(name, _)| {
                ![AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION, WWW_AUTHENTICATE].contains(name)
            });
        }
        drop((response, connection));
        url = next;
    }
}
