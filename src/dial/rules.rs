//! A network policy's patterns and what they decide for a host and port.
//!
//! A pattern is a host name (case-insensitive, a trailing dot ignored),
//! `*.NAME` (every subdomain of NAME at any depth, not NAME itself), an IPv4
//! literal or a bracketed IPv6 literal (only a request for that literal),
//! each with an optional `:PORT`. Deny wins over allow.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::protocol::NetworkPolicy;

/// How long a host no rule names waits for the client's decision by default.
pub(crate) const DEFAULT_ASK_TIMEOUT_MS: u64 = 30_000;
/// The most patterns one policy may hold (allow and deny together).
pub(crate) const MAX_PATTERNS: usize = 1024;

/// Why a pattern is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sandbox network pattern {pattern:?} is malformed: {reason}")]
pub(crate) struct BadPattern {
    pattern: String,
    reason: &'static str,
}

/// What a pattern names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Name(String),
    Subdomains(String),
    Ip(IpAddr),
}

/// One pattern, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    host: Host,
    port: Option<u16>,
    /// As written, for the reasons that name it.
    text: String,
}

/// One list of rules: a start's policy, or the server's (`--sandbox-allow-host`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Set {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
    ask: bool,
}

/// The rules a proxy applies: every set must allow a host (the server's,
/// then the start's, which may only narrow it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rules {
    sets: Vec<Set>,
    /// How long an asked decision may take.
    pub(crate) ask_timeout_ms: u64,
}

/// What the rules say of a host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Allowed by this rule.
    Allowed(String),
    /// Refused, for this reason (as the 403 and the audit say it).
    Refused(String),
    /// No rule names it and the policy asks the client.
    Ask,
}

/// The reason for a host no list names.
pub(crate) const NOT_LISTED: &str = "not in the sandbox's allow list";

impl Rules {
    /// The rules of `policy`, or the first malformed pattern.
    pub(crate) fn parse(policy: &NetworkPolicy) -> Result<Rules, BadPattern> {
        Ok(Rules {
            sets: vec![Set::parse(policy)?],
            ask_timeout_ms: policy.ask_timeout_ms.unwrap_or(DEFAULT_ASK_TIMEOUT_MS),
        })
    }

    /// Rules that allow no host.
    pub(crate) fn nothing() -> Rules {
        let none = Set { allow: Vec::new(), deny: Vec::new(), ask: false };
        Rules { sets: vec![none], ask_timeout_ms: DEFAULT_ASK_TIMEOUT_MS }
    }

    /// Only what both `self` and `narrower` allow (the asking, and its
    /// timeout, are the narrower's).
    pub(crate) fn narrowed(&self, narrower: &Rules) -> Rules {
        let mut sets: Vec<Set> =
            self.sets.iter().cloned().map(|set| Set { ask: false, ..set }).collect();
        sets.extend(narrower.sets.iter().cloned());
        Rules { sets, ask_timeout_ms: narrower.ask_timeout_ms }
    }

    /// What the rules decide for `host` (a name, or an IP literal, brackets
    /// optional) and `port`.
    pub(crate) fn decide(&self, host: &str, port: u16) -> Verdict {
        let wanted = Wanted::of(host);
        let mut allowed = None;
        for set in &self.sets {
            if let Some(rule) = set.deny.iter().find(|p| p.matches(&wanted, port)) {
                return Verdict::Refused(format!("denied by rule {}", rule.text));
            }
            match set.allow.iter().find(|p| p.matches(&wanted, port)) {
                Some(rule) => allowed = Some(rule.text.clone()),
                None if set.ask => return Verdict::Ask,
                None => return Verdict::Refused(NOT_LISTED.to_owned()),
            }
        }
        match allowed {
            Some(rule) => Verdict::Allowed(format!("allowed by rule {rule}")),
            None => Verdict::Refused(NOT_LISTED.to_owned()),
        }
    }
}

impl Set {
    fn parse(policy: &NetworkPolicy) -> Result<Set, BadPattern> {
        if policy.allow.len() + policy.deny.len() > MAX_PATTERNS {
            return Err(BadPattern {
                pattern: format!("{} patterns", policy.allow.len() + policy.deny.len()),
                reason: "a policy holds at most 1024 patterns",
            });
        }
        let parse =
            |list: &[String]| list.iter().map(|p| Pattern::parse(p)).collect::<Result<Vec<_>, _>>();
        Ok(Set { allow: parse(&policy.allow)?, deny: parse(&policy.deny)?, ask: policy.ask })
    }
}

/// A requested host, normalised once.
enum Wanted {
    Name(String),
    Ip(IpAddr),
}

impl Wanted {
    fn of(host: &str) -> Wanted {
        let bare = unbracketed(host);
        match bare.parse::<IpAddr>() {
            // `[::ffff:10.0.0.1]` is 10.0.0.1, and matches (or is denied) as it.
            Ok(ip) => Wanted::Ip(ip.to_canonical()),
            Err(_) => Wanted::Name(bare.trim_end_matches('.').to_ascii_lowercase()),
        }
    }
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, BadPattern> {
        let bad = |reason| BadPattern { pattern: text.to_owned(), reason };
        if text.is_empty() || text.len() > 260 {
            return Err(bad("a pattern is a host name, *.NAME or an IP literal, with an optional :PORT, of at most 260 bytes"));
        }
        let (host, port) = split_port(text).map_err(bad)?;
        let host = if let Some(v6) = host.strip_prefix('[') {
            let v6 = v6.strip_suffix(']').ok_or_else(|| bad("an unclosed `[`"))?;
            Host::Ip(
                IpAddr::V6(
                    v6.parse::<Ipv6Addr>()
                        .map_err(|_| bad("not an IPv6 address inside `[...]`"))?,
                )
                .to_canonical(),
            )
        } else if let Ok(v4) = host.parse::<Ipv4Addr>() {
            Host::Ip(IpAddr::V4(v4))
        } else if let Some(name) = host.strip_prefix("*.") {
            Host::Subdomains(checked_name(name).map_err(bad)?)
        } else {
            Host::Name(checked_name(host).map_err(bad)?)
        };
        Ok(Pattern { host, port, text: text.to_owned() })
    }

    fn matches(&self, wanted: &Wanted, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, wanted) {
            (Host::Ip(ip), Wanted::Ip(asked)) => ip == asked,
            (Host::Name(name), Wanted::Name(asked)) => name == asked,
            (Host::Subdomains(name), Wanted::Name(asked)) => asked
                .strip_suffix(name.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            _ => false,
        }
    }
}

/// `host` and its port, when the pattern names one.
fn split_port(text: &str) -> Result<(&str, Option<u16>), &'static str> {
    let port_at = if text.starts_with('[') {
        match text.find(']') {
            Some(end) if end + 1 == text.len() => None,
            Some(end) if text[end + 1..].starts_with(':') => Some(end + 1),
            Some(_) => return Err("text after `]` other than :PORT"),
            None => return Err("an unclosed `[`"),
        }
    } else {
        match text.matches(':').count() {
            0 => None,
            1 => text.find(':'),
            _ => return Err("an IPv6 literal must be written in brackets, as [::1]:443"),
        }
    };
    let Some(at) = port_at else { return Ok((text, None)) };
    let port = text[at + 1..]
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or("the port must be a number from 1 to 65535")?;
    Ok((&text[..at], Some(port)))
}

/// A host name: lowercase, without its trailing dot, of letters, digits,
/// `-` and `_` in non-empty labels, the last not starting with a digit.
fn checked_name(name: &str) -> Result<String, &'static str> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err("a host name is dot-separated labels of letters, digits, `-` and `_` (`*` only as a leading `*.`)");
    }
    // `2130706433`, `10.1`, `0x7f.1` or `012.0.0.1`: the resolver reads
    // them as addresses; no top-level domain starts with a digit.
    if name.rsplit('.').next().is_some_and(|last| last.starts_with(|c: char| c.is_ascii_digit())) {
        return Err(
            "an IPv4 address is written as four decimal numbers (1.2.3.4), an IPv6 one in brackets",
        );
    }
    Ok(name)
}

/// `host` without the brackets of an IPv6 literal (`[::1]` is `::1`).
pub(crate) fn unbracketed(host: &str) -> &str {
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

/// Whether a requested `host` may be decided at all: an IP literal
/// (brackets optional for IPv6), or a host name as [`checked_name`] takes
/// it. Anything else (control characters, 64 KiB of text, an address in a
/// form only the resolver reads) is refused before the policy, the client
/// or the resolver see it.
pub(crate) fn checked_host(host: &str) -> Result<(), &'static str> {
    if unbracketed(host).parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    checked_name(host).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str], ask: bool) -> Rules {
        let policy = NetworkPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
            ask,
            ask_timeout_ms: None,
        };
        Rules::parse(&policy).unwrap()
    }

    #[test]
    fn names_subdomains_literals_and_ports() {
        let rules = rules(
            &["PyPI.org.", "*.pythonhosted.org", "github.com:443", "10.20.0.5:8080", "[::1]"],
            &["upload.pypi.org"],
            false,
        );
        let allowed = |host, port| matches!(rules.decide(host, port), Verdict::Allowed(_));
        assert!(allowed("pypi.org", 80));
        assert!(allowed("PYPI.ORG.", 443));
        assert!(allowed("files.pythonhosted.org", 443));
        assert!(allowed("a.b.pythonhosted.org", 1));
        assert!(!allowed("pythonhosted.org", 443), "*. does not match the name itself");
        assert!(!allowed("xpythonhosted.org", 443));
        assert!(allowed("github.com", 443));
        assert!(!allowed("github.com", 80));
        assert!(allowed("10.20.0.5", 8080));
        assert!(!allowed("10.20.0.5", 80));
        assert!(allowed("[::1]", 5));
        assert!(allowed("::1", 5));
        assert_eq!(
            rules.decide("upload.pypi.org", 443),
            Verdict::Refused("denied by rule upload.pypi.org".into())
        );
        assert_eq!(rules.decide("example.com", 80), Verdict::Refused(NOT_LISTED.into()));
        assert_eq!(
            rules.decide("pypi.org", 80),
            Verdict::Allowed("allowed by rule PyPI.org.".into())
        );
    }

    #[test]
    fn deny_wins_over_a_wildcard_and_unlisted_hosts_are_asked() {
        let rules = rules(&["*.example.com"], &["secret.example.com"], true);
        assert_eq!(
            rules.decide("secret.example.com", 443),
            Verdict::Refused("denied by rule secret.example.com".into())
        );
        assert_eq!(rules.decide("other.org", 443), Verdict::Ask);
        assert!(matches!(rules.decide("a.example.com", 443), Verdict::Allowed(_)));
    }

    #[test]
    fn other_spellings_of_an_address_are_the_address_or_refused() {
        let rules = rules(&[], &["10.46.0.3", "[::ffff:10.46.0.4]"], true);
        for host in ["[::ffff:10.46.0.3]", "::ffff:10.46.0.3", "10.46.0.3"] {
            assert_eq!(rules.decide(host, 80), Verdict::Refused("denied by rule 10.46.0.3".into()));
        }
        assert!(matches!(rules.decide("10.46.0.4", 80), Verdict::Refused(_)));
        for host in ["170786819", "0x0a2e0003", "10.46.3", "012.056.0.3", "a\nb", &"a".repeat(300)]
        {
            assert!(checked_host(host).is_err(), "{host}");
        }
        for host in ["pypi.org", "PyPI.org.", "[::1]", "::1", "1.2.3.4", "under_score.example"] {
            assert_eq!(checked_host(host), Ok(()), "{host}");
        }
    }

    #[test]
    fn a_narrowed_policy_needs_both() {
        let server = rules(&["*.org"], &[], false);
        let start = rules(&["pypi.org", "example.com"], &[], true);
        let both = server.narrowed(&start);
        assert!(matches!(both.decide("pypi.org", 443), Verdict::Allowed(_)));
        assert_eq!(both.decide("example.com", 443), Verdict::Refused(NOT_LISTED.into()));
        assert_eq!(both.decide("python.org", 443), Verdict::Ask);
    }

    #[test]
    fn malformed_patterns_are_named() {
        let cases = [
            ("", "a pattern is a host name, *.NAME or an IP literal, with an optional :PORT, of at most 260 bytes"),
            ("::1", "an IPv6 literal must be written in brackets, as [::1]:443"),
            ("[::1", "an unclosed `[`"),
            ("[nope]", "not an IPv6 address inside `[...]`"),
            ("host:0", "the port must be a number from 1 to 65535"),
            ("host:http", "the port must be a number from 1 to 65535"),
            ("a..b", "a host name is dot-separated labels of letters, digits, `-` and `_` (`*` only as a leading `*.`)"),
            ("*", "a host name is dot-separated labels of letters, digits, `-` and `_` (`*` only as a leading `*.`)"),
            ("a.*.b", "a host name is dot-separated labels of letters, digits, `-` and `_` (`*` only as a leading `*.`)"),
            ("2130706433", "an IPv4 address is written as four decimal numbers (1.2.3.4), an IPv6 one in brackets"),
            ("0x7f.1", "an IPv4 address is written as four decimal numbers (1.2.3.4), an IPv6 one in brackets"),
            ("01.2.3.4", "an IPv4 address is written as four decimal numbers (1.2.3.4), an IPv6 one in brackets"),
            ("*.1.2.3.4", "an IPv4 address is written as four decimal numbers (1.2.3.4), an IPv6 one in brackets"),
        ];
        for (pattern, reason) in cases {
            let policy = NetworkPolicy { allow: vec![pattern.into()], ..NetworkPolicy::default() };
            assert_eq!(
                Rules::parse(&policy).err().map(|e| e.to_string()),
                Some(format!("sandbox network pattern {pattern:?} is malformed: {reason}"))
            );
        }
    }
}
