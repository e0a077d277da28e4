//! `file:` URIs, as today's dialect writes every path: `file:///tmp/a%20b`.
//!
//! Decoding accepts `file:///P` and `file://localhost/P` (RFC 8089), with
//! percent-escapes of any byte, so names that are not UTF-8 survive; a
//! query, a fragment or another host is refused. Encoding escapes every
//! byte but the unreserved ones, `/` and a few safe punctuation marks.

use std::path::Path;
use std::path::PathBuf;

use crate::protocol::names;

/// The params that hold a path (each but `cwd` with a base64 twin, `pathBase64`),
/// written as file URIs in today's dialect.
pub(crate) const PATH_KEYS: [&str; 4] = ["path", "sourcePath", "destinationPath", "cwd"];

/// Whether `text` is written as a file URI (and must decode as one).
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn is_uri(text: &str) -> bool {
    text.get(..5).is_some_and(|scheme| scheme.eq_ignore_ascii_case("file:"))
}

/// The path a `file:` URI names.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn to_path(uri: &str) -> Result<PathBuf, String> {
    let rest = uri
        .get(5..)
        .filter(|_| is_uri(uri))
        .ok_or_else(|| format!("{uri:?} is not a file: URI"))?;
    let path = if let Some(authority_and_path) = rest.strip_prefix("//") {
        let slash = authority_and_path.find('/').unwrap_or(authority_and_path.len());
        let (host, path) = authority_and_path.split_at(slash);
        if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
            return Err(format!(
                "file URI {uri:?} names host {host:?}; only local paths are served"
            ));
        }
        path
    } else {
        rest
    };
    if !path.starts_with('/') {
        return Err(format!("file URI {uri:?} has no absolute path"));
    }
    if path.contains(['?', '#']) {
        return Err(format!("file URI {uri:?} has a query or fragment"));
    }
    let mut bytes = Vec::with_capacity(path.len());
    let mut iter = path.bytes();
    while let Some(byte) = iter.next() {
        if byte != b'%' {
            bytes.push(byte);
            continue;
        }
        let hex = [iter.next(), iter.next()];
        let value = match hex {
            [Some(high), Some(low)] => hex_value(high).zip(hex_value(low)).map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match value {
            Some(0) | None => return Err(format!("file URI {uri:?} has a bad percent-escape")),
            Some(value) => bytes.push(value),
        }
    }
    Ok(names::from_bytes(bytes))
}

#[cfg_attr(not(feature = "server"), allow(dead_code))]
fn hex_value(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|value| value as u8)
}

/// The `file:` URI of an absolute path.
pub(crate) fn from_path(path: &Path) -> String {
    let mut uri = String::from("file://");
    for &byte in names::to_bytes(path).iter() {
        if byte.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_any_name() {
        assert_eq!(to_path("file:///tmp/a%20b"), Ok(PathBuf::from("/tmp/a b")));
        assert_eq!(to_path("file://localhost/etc"), Ok(PathBuf::from("/etc")));
        assert_eq!(to_path("FILE:///x"), Ok(PathBuf::from("/x")));
        let odd = names::from_bytes(b"/t/\xff x%".to_vec());
        assert_eq!(from_path(&odd), "file:///t/%FF%20x%25");
        assert_eq!(to_path(&from_path(&odd)), Ok(odd));
        assert_eq!(from_path(Path::new("/a/b.txt")), "file:///a/b.txt");
    }

    #[test]
    fn other_hosts_queries_and_bad_escapes_are_refused() {
        assert!(to_path("file://server/share").is_err());
        assert!(to_path("file:///a?b").is_err());
        assert!(to_path("file:///a%2").is_err());
        assert!(to_path("file:///a%00b").is_err());
        assert!(to_path("file:relative").is_err());
        assert!(to_path("/plain").is_err());
        assert!(is_uri("file:///x") && !is_uri("/x") && !is_uri("fil"));
    }
}
