//! An `http/request` checked before any connection is made: its method, URL
//! (WHATWG: IDNA hosts become punycode, the fragment is dropped), headers
//! (with `valueEnvVar` resolved against the server's environment, never one
//! of the protected variables), body and timeout. The error texts are
//! upstream's, all -32602.

use std::time::Duration;

use base64::Engine as _;
use http::{HeaderName, HeaderValue, Method};
use hyper::body::Bytes;
use url::Url;

use crate::protocol::{ErrorObject, HttpRequestParams, RedirectPolicy};

/// Variables whose values a header may never carry (upstream's list; case-insensitive).
pub(crate) const PROTECTED_ENV_VARS: [&str; 14] = [
    "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
    "OPENAI_FEDERATION_RULE_ID",
    "OPENAI_IDENTITY_TOKEN_FILE",
    "OPENAI_WORKLOAD_IDENTITY_CONTEXT",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "CODEX_ACCESS_TOKEN",
    "CODEX_CONNECTORS_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET",
    "AZURE_FEDERATED_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// A request ready to send.
#[derive(Debug, Clone)]
pub(super) struct Prepared {
    pub(super) method: Method,
    pub(super) url: Url,
    /// In order; names may repeat.
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    pub(super) body: Bytes,
    pub(super) timeout: Option<Duration>,
    pub(super) redirect: RedirectPolicy,
}

/// Checks `params`, resolving header variables; -32602 with upstream's text.
pub(super) fn prepare(params: &HttpRequestParams) -> Result<Prepared, ErrorObject> {
    let method = Method::from_bytes(params.method.as_bytes())
        .map_err(|e| invalid(format!("http/request method is invalid: {e}")))?;
    let url = Url::parse(&params.url)
        .map_err(|e| invalid(format!("http/request url is invalid: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "http/request only supports http and https URLs, got {}",
            url.scheme()
        )));
    }
    let mut headers = Vec::with_capacity(params.headers.len() + 1);
    for header in &params.headers {
        let name = HeaderName::from_bytes(header.name.as_bytes())
            .map_err(|e| invalid(format!("http/request header name is invalid: {e}")))?;
        let mut value = header.value.clone().into_bytes();
        if let Some(var) = &header.value_env_var {
            value.extend_from_slice(&env_value(&header.name, var)?);
        }
        let value = HeaderValue::from_bytes(&value).map_err(|e| {
            invalid(format!("http/request header value is invalid for {}: {e}", header.name))
        })?;
        headers.push((name, value));
    }
    if let Some(authorization) = basic_auth(&url) {
        if !headers.iter().any(|(name, _)| name == http::header::AUTHORIZATION) {
            headers.push((http::header::AUTHORIZATION, authorization));
        }
    }
    let body = params.body_base64.as_ref().map(|b| Bytes::from(b.0.clone())).unwrap_or_default();
    Ok(Prepared {
        method,
        url,
        headers,
        body,
        timeout: params.timeout_ms.map(Duration::from_millis),
        redirect: params.redirect_policy,
    })
}

/// The server's value of `var` for header `name`: never a protected one, never unset or empty.
fn env_value(name: &str, var: &str) -> Result<Vec<u8>, ErrorObject> {
    if PROTECTED_ENV_VARS.iter().any(|protected| protected.eq_ignore_ascii_case(var)) {
        return Err(invalid(format!(
            "http/request header {name} cannot use executor environment variable {var}"
        )));
    }
    // A name the environment cannot hold (empty, `=`, NUL) is simply not set.
    let value =
        if var.is_empty() || var.contains(['=', '\0']) { None } else { std::env::var_os(var) };
    let Some(value) = value else {
        return Err(invalid(format!(
            "http/request header {name} requires executor environment variable {var}"
        )));
    };
    if value.is_empty() {
        return Err(invalid(format!(
            "http/request header {name} requires a non-empty executor environment variable {var}"
        )));
    }
    Ok(std::os::unix::ffi::OsStringExt::into_vec(value))
}

/// `authorization: Basic ...` from the URL's user and password, as reqwest sends it.
fn basic_auth(url: &Url) -> Option<HeaderValue> {
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |text: &str| percent_decode(text);
    let mut credentials = decode(url.username());
    credentials.push(b':');
    credentials.extend(decode(url.password().unwrap_or("")));
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `%XX` escapes of a URL's user or password made bytes again.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes.get(at + 1..at + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[at], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    out
}

fn invalid(message: String) -> ErrorObject {
    ErrorObject::invalid_params(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HttpHeader;

    fn params(url: &str) -> HttpRequestParams {
        HttpRequestParams::get("r", url)
    }

    #[test]
    fn a_unicode_host_becomes_punycode_and_the_fragment_stays_out_of_the_target() {
        let prepared = prepare(&params("http://münich.invalid:8080/mcp?case=x#frag")).unwrap();
        assert_eq!(prepared.url.host_str(), Some("xn--mnich-kva.invalid"));
        let target = &prepared.url[url::Position::BeforePath..url::Position::AfterQuery];
        assert_eq!(target, "/mcp?case=x");
    }

    #[test]
    fn upstream_texts_for_bad_method_url_scheme_and_headers() {
        let check = |params: HttpRequestParams, text: &str| {
            let error = prepare(&params).unwrap_err();
            assert_eq!((error.code, error.message.as_str()), (-32602, text));
        };
        let mut bad_method = params("http://h/");
        bad_method.method = "GE T".into();
        check(bad_method, "http/request method is invalid: invalid HTTP method");
        check(params("not a url"), "http/request url is invalid: relative URL without a base");
        check(params("ftp://h/x"), "http/request only supports http and https URLs, got ftp");
        let mut bad_name = params("http://h/");
        bad_name.headers = vec![HttpHeader::new("a b", "v")];
        check(bad_name, "http/request header name is invalid: invalid HTTP header name");
        let mut bad_value = params("http://h/");
        bad_value.headers = vec![HttpHeader::new("x-a", "line\nbreak")];
        check(
            bad_value,
            "http/request header value is invalid for x-a: failed to parse header value",
        );
        let mut protected = params("http://h/");
        let mut header = HttpHeader::new("authorization", "Bearer ");
        header.value_env_var = Some("openai_api_key".into());
        protected.headers = vec![header];
        check(
            protected,
            "http/request header authorization cannot use executor environment variable openai_api_key",
        );
        let mut unset = params("http://h/");
        let mut header = HttpHeader::new("x-token", "");
        header.value_env_var = Some("EXEC_SERVER_SURELY_UNSET_VARIABLE".into());
        unset.headers = vec![header];
        check(
            unset,
            "http/request header x-token requires executor environment variable EXEC_SERVER_SURELY_UNSET_VARIABLE",
        );
    }

    #[test]
    fn url_credentials_become_basic_authorization() {
        let prepared = prepare(&params("http://us%40er:p%3Ass@h/")).unwrap();
        let (name, value) = &prepared.headers[0];
        assert_eq!(name, "authorization");
        assert_eq!(value, "Basic dXNAZXI6cDpzcw==");
    }
}
