//! What a WebSocket upgrade must present (`Authorization: Bearer TOKEN`), as
//! upstream's flags name it: nothing (then only the server's own uid, on
//! loopback, gets in), a capability token (kept as its sha256 and compared in
//! constant time), or an HS256 JWT signed with a shared secret whose `exp`
//! (required), `nbf`, `iss` and `aud` are checked within a clock skew.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The largest `exp`, `nbf` or `iat` taken: 2^53 seconds, what a JSON number holds exactly.
const MAX_SECONDS: u64 = 1 << 53;

/// The shortest `--ws-shared-secret-file` secret: an HS256 key of 256 bits (RFC 7518 §3.2).
pub const MIN_SHARED_SECRET_BYTES: usize = 32;

/// Upstream's default `--ws-max-clock-skew-seconds`.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(30);

/// How upgrades are authenticated.
#[derive(Clone, Default)]
pub enum Auth {
    /// No token: a loopback peer is served only when it runs as the server's uid.
    #[default]
    OwnerOnly,
    /// `--ws-auth capability-token`: the sha256 of the one token accepted.
    Capability {
        /// SHA-256 of the token.
        sha256: [u8; 32],
    },
    /// `--ws-auth signed-bearer-token`: an HS256 JWT.
    Signed(SignedBearer),
}

/// The checks of a signed bearer token.
#[derive(Clone)]
pub struct SignedBearer {
    /// The HMAC-SHA256 key.
    pub secret: Vec<u8>,
    /// The `iss` the token must carry, if any.
    pub issuer: Option<String>,
    /// The `aud` the token must name (a string or one of a list), if any.
    pub audience: Option<String>,
    /// Tolerance on `exp` and `nbf`.
    pub max_clock_skew: Duration,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.write_str(match self {
            Auth::OwnerOnly => "OwnerOnly",
            Auth::Capability { .. } => "Capability",
            Auth::Signed(_) => "Signed",
        })
    }
}

impl Auth {
    /// A capability token given in clear.
    pub fn capability(token: &str) -> Auth {
        Auth::Capability { sha256: Sha256::digest(token.as_bytes()).into() }
    }

    /// Whether a token is required (then the peer's uid does not matter).
    pub fn needs_token(&self) -> bool {
        !matches!(self, Auth::OwnerOnly)
    }

    /// Checks the request's `Authorization` header; the error says why it fails.
    pub(crate) fn check(&self, authorization: Option<&str>) -> Result<(), &'static str> {
        // The scheme is case-insensitive (RFC 9110); the header's value was trimmed.
        let presented = || {
            authorization
                .and_then(|value| value.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim_start())
                .filter(|token| !token.is_empty())
                .ok_or("a bearer token is required")
        };
        match self {
            Auth::OwnerOnly => Ok(()),
            Auth::Capability { sha256 } => {
                let digest: [u8; 32] = Sha256::digest(presented()?.as_bytes()).into();
                if same_secret(&digest, sha256) {
                    Ok(())
                } else {
                    Err("the bearer token is not valid")
                }
            }
            Auth::Signed(signed) => signed.check(presented()?, now()),
        }
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl SignedBearer {
    fn check(&self, token: &str, now: u64) -> Result<(), &'static str> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("the bearer token is not a JWT");
        };
        let decode = |part: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part);
        // Strictly: a member named twice refuses the token (readers differ on which counts).
        let json = |bytes: Vec<u8>| -> Result<serde_json::Value, bool> {
            let text = String::from_utf8(bytes).map_err(|_| false)?;
            crate::protocol::strict_json(&text)
                .map_err(|e| e.to_string().starts_with("duplicate key"))
        };
        let header = match decode(header).map_err(|_| false).and_then(json) {
            Ok(serde_json::Value::Object(header)) => header,
            Err(true) => return Err("the bearer token's header names a member twice"),
            _ => return Err("the bearer token's header is not base64url JSON"),
        };
        if header.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
            return Err("the bearer token is not signed with HS256");
        }
        // RFC 7515 §4.1.11: an extension the server does not know refuses the token.
        if header.contains_key("crit") {
            return Err("the bearer token's header has crit (no extension is supported)");
        }
        let signature =
            decode(signature).map_err(|_| "the bearer token's signature is not base64url")?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret)
            .map_err(|_| "the shared secret cannot key HMAC-SHA256")?;
        let signed_len = token.len() - signature_len(token);
        mac.update(&token.as_bytes()[..signed_len]);
        mac.verify_slice(&signature).map_err(|_| "the bearer token's signature is not valid")?;
        let claims = match decode(payload).map_err(|_| false).and_then(json) {
            Ok(serde_json::Value::Object(claims)) => claims,
            Err(true) => return Err("the bearer token's claims name a member twice"),
            _ => return Err("the bearer token's claims are not base64url JSON"),
        };
        let skew = self.max_clock_skew.as_secs();
        // JSON integers in 0..=2^53 (so `1e300` is no "never", and no float rounds).
        let seconds = |v: &serde_json::Value| v.as_u64().filter(|n| *n <= MAX_SECONDS);
        let number = |name: &str| claims.get(name).map(seconds);
        if let Some(None) = number("iat") {
            return Err("the bearer token's iat is not a whole number of seconds in 0..=2^53");
        }
        match number("exp") {
            None => return Err("the bearer token has no exp"),
            Some(None) => {
                return Err("the bearer token's exp is not a whole number of seconds in 0..=2^53")
            }
            Some(Some(exp)) if now > exp.saturating_add(skew) => {
                return Err("the bearer token has expired")
            }
            Some(Some(_)) => {}
        }
        match number("nbf") {
            Some(None) => {
                return Err("the bearer token's nbf is not a whole number of seconds in 0..=2^53")
            }
            Some(Some(nbf)) if now.saturating_add(skew) < nbf => {
                return Err("the bearer token is not valid yet (nbf)")
            }
            _ => {}
        }
        if let Some(issuer) = &self.issuer {
            if claims.get("iss").and_then(|v| v.as_str()) != Some(issuer) {
                return Err("the bearer token's issuer (iss) is not accepted");
            }
        }
        if let Some(audience) = &self.audience {
            let named = match claims.get("aud") {
                Some(serde_json::Value::String(aud)) => aud == audience,
                Some(serde_json::Value::Array(list)) => {
                    list.iter().any(|aud| aud.as_str() == Some(audience.as_str()))
                }
                _ => false,
            };
            if !named {
                return Err("the bearer token's audience (aud) is not this server");
            }
        }
        Ok(())
    }
}

/// The length of the `.SIGNATURE` tail of a JWT.
fn signature_len(token: &str) -> usize {
    token.rfind('.').map_or(0, |dot| token.len() - dot)
}

/// Compares two secrets in time that depends only on their lengths.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parses `--ws-token-sha256 HEX`.
pub(crate) fn parse_sha256(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("--ws-token-sha256 {hex}: expected 64 hex digits"));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("--ws-token-sha256 {hex}: expected 64 hex digits"))?;
    }
    Ok(out)
}

/// An HS256 JWT of `claims` signed with `secret` (for tests and clients).
pub fn sign_hs256(claims: &serde_json::Value, secret: &[u8]) -> String {
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = engine.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = engine.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let signature = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(signed.as_bytes());
            engine.encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    };
    format!("{signed}.{signature}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn signed(issuer: Option<&str>, audience: Option<&str>) -> SignedBearer {
        SignedBearer {
            secret: b"shared".to_vec(),
            issuer: issuer.map(str::to_owned),
            audience: audience.map(str::to_owned),
            max_clock_skew: DEFAULT_CLOCK_SKEW,
        }
    }

    #[test]
    fn capability_tokens_compare_by_digest() {
        let auth = Auth::capability("s3cret");
        assert_eq!(auth.check(Some("Bearer s3cret")), Ok(()));
        assert_eq!(auth.check(Some("Bearer s3creT")), Err("the bearer token is not valid"));
        assert_eq!(auth.check(None), Err("a bearer token is required"));
        assert_eq!(auth.check(Some("Basic s3cret")), Err("a bearer token is required"));
        assert_eq!(auth.check(Some("bearer s3cret")), Ok(()));
        assert_eq!(auth.check(Some("Bearer  s3cret")), Ok(()));
        let hex = "8a8d5b2e2b5ff22d4c3ad3e2e4e6b7e5c6bb0a1b8d0e1a5f6c7d8e9f0a1b2c3d";
        assert_eq!(parse_sha256(hex).map(|d| d.len()), Ok(32));
        assert!(parse_sha256("abc").is_err());
    }

    #[test]
    fn signed_tokens_check_signature_and_claims() {
        let now = 1_800_000_000;
        let good = json!({"exp": now + 60, "nbf": now - 1, "iss": "i", "aud": ["x", "a"]});
        let check = |claims: &serde_json::Value, secret: &[u8], rules: &SignedBearer| {
            rules.check(&sign_hs256(claims, secret), now)
        };
        let rules = signed(Some("i"), Some("a"));
        assert_eq!(check(&good, b"shared", &rules), Ok(()));
        assert_eq!(
            check(&good, b"other", &rules),
            Err("the bearer token's signature is not valid")
        );
        assert_eq!(
            check(&json!({"exp": now - 31}), b"shared", &signed(None, None)),
            Err("the bearer token has expired")
        );
        assert_eq!(check(&json!({"exp": now - 29}), b"shared", &signed(None, None)), Ok(()));
        assert_eq!(
            check(&json!({"exp": 1e300}), b"shared", &signed(None, None)),
            Err("the bearer token's exp is not a whole number of seconds in 0..=2^53")
        );
        let raw = |header: &str, claims: &str| {
            let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let signed = format!("{}.{}", engine.encode(header), engine.encode(claims));
            let mut mac = Hmac::<Sha256>::new_from_slice(b"shared").unwrap();
            mac.update(signed.as_bytes());
            format!("{signed}.{}", engine.encode(mac.finalize().into_bytes()))
        };
        let plain = signed(None, None);
        let header = r#"{"alg":"HS256"}"#;
        assert_eq!(plain.check(&raw(header, &format!(r#"{{"exp":{}}}"#, now + 60)), now), Ok(()));
        assert_eq!(
            plain.check(
                &raw(r#"{"alg":"HS256","crit":["b64"],"b64":false}"#, r#"{"exp":1900000000}"#),
                now
            ),
            Err("the bearer token's header has crit (no extension is supported)")
        );
        assert_eq!(
            plain.check(&raw(r#"{"alg":"none","alg":"HS256"}"#, r#"{"exp":1900000000}"#), now),
            Err("the bearer token's header names a member twice")
        );
        assert_eq!(
            plain.check(&raw(header, r#"{"exp":1,"exp":1900000000}"#), now),
            Err("the bearer token's claims name a member twice")
        );
        for exp in ["9007199254740993", "1900000000.0", "1.9e9", "-1", "\"1900000000\""] {
            assert_eq!(
                plain.check(&raw(header, &format!(r#"{{"exp":{exp}}}"#)), now),
                Err("the bearer token's exp is not a whole number of seconds in 0..=2^53"),
                "{exp}"
            );
        }
        assert_eq!(
            plain.check(&raw(header, r#"{"exp":9007199254740992}"#), now),
            Ok(()),
            "2^53 itself is taken"
        );
        assert_eq!(
            plain.check(&raw(header, r#"{"exp":1900000000,"iat":0.5}"#), now),
            Err("the bearer token's iat is not a whole number of seconds in 0..=2^53")
        );
        assert_eq!(
            check(&json!({"exp": now + 60, "nbf": now + 31}), b"shared", &signed(None, None)),
            Err("the bearer token is not valid yet (nbf)")
        );
        assert_eq!(
            check(&json!({"nbf": now}), b"shared", &signed(None, None)),
            Err("the bearer token has no exp")
        );
        assert_eq!(
            check(&json!({"exp": now + 60, "aud": "b"}), b"shared", &signed(None, Some("a"))),
            Err("the bearer token's audience (aud) is not this server")
        );
        assert_eq!(
            check(&json!({"exp": now + 60, "iss": "j"}), b"shared", &signed(Some("i"), None)),
            Err("the bearer token's issuer (iss) is not accepted")
        );
        assert_eq!(rules.check("a.b", now), Err("the bearer token is not a JWT"));
        let none_alg = format!(
            "{}.{}.",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(good.to_string())
        );
        assert_eq!(rules.check(&none_alg, now), Err("the bearer token is not signed with HS256"));
    }
}
