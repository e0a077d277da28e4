//! process/start's `envPolicy` (today's dialect): the child's environment
//! built from the server's own, before `env` is laid on top.
//!
//! In order: `inherit` takes all of the server's variables, none, or the
//! core ones (HOME, LOGNAME, PATH, SHELL, TMPDIR, TEMP, TMP, USER,
//! USERNAME); unless `ignoreDefaultExcludes`, names containing KEY, SECRET
//! or TOKEN are dropped; `exclude` drops names matching its patterns; `set`
//! adds variables; a non-empty `includeOnly` keeps only names matching its
//! patterns. Patterns are globs (`*`, `?`), matched without regard to case.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::ErrorObject;

/// Patterns per list, and bytes per pattern: matching costs their product
/// with the name, and all of it runs on the connection's loop.
const MAX_PATTERNS: usize = 64;
const MAX_PATTERN_BYTES: usize = 256;
/// The longest variable name a pattern is matched against (longer ones never match).
const MAX_MATCHED_NAME: usize = 4096;
/// Matching steps one policy may take (about 50 ms): a policy built to be
/// slow is refused instead of holding the connection's loop.
const MATCH_BUDGET: u64 = 50_000_000;
const CORE: [&str; 9] =
    ["HOME", "LOGNAME", "PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "USER", "USERNAME"];
const DEFAULT_EXCLUDES: [&str; 3] = ["*KEY*", "*SECRET*", "*TOKEN*"];

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EnvPolicy {
    #[serde(default)]
    inherit: Inherit,
    #[serde(default)]
    ignore_default_excludes: bool,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    include_only: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Inherit {
    Core,
    #[default]
    All,
    None,
}

/// The environment `policy` makes of `server_env`, with `env` on top.
pub(crate) fn apply(
    policy: Value,
    server_env: impl Iterator<Item = (String, String)>,
    env: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ErrorObject> {
    let policy: EnvPolicy = serde_json::from_value(policy).map_err(|e| {
        ErrorObject::invalid_params(format!("invalid params for process/start: envPolicy: {e}"))
    })?;
    for (name, list) in [("exclude", &policy.exclude), ("includeOnly", &policy.include_only)] {
        if list.len() > MAX_PATTERNS || list.iter().any(|p| p.len() > MAX_PATTERN_BYTES) {
            return Err(ErrorObject::invalid_params(format!(
                "invalid params for process/start: envPolicy.{name} takes at most {MAX_PATTERNS} patterns of at most {MAX_PATTERN_BYTES} bytes"
            )));
        }
    }
    let mut built: BTreeMap<String, String> = match policy.inherit {
        Inherit::All => server_env.collect(),
        Inherit::Core => server_env.filter(|(name, _)| CORE.contains(&name.as_str())).collect(),
        Inherit::None => BTreeMap::new(),
    };
    let mut budget = MATCH_BUDGET;
    let mut any =
        |patterns: &[&str], name: &str| patterns.iter().any(|p| matches(p, name, &mut budget));
    if !policy.ignore_default_excludes {
        built.retain(|name, _| !any(&DEFAULT_EXCLUDES, name));
    }
    let exclude: Vec<&str> = policy.exclude.iter().map(String::as_str).collect();
    built.retain(|name, _| !any(&exclude, name));
    built.extend(policy.set);
    if !policy.include_only.is_empty() {
        let include: Vec<&str> = policy.include_only.iter().map(String::as_str).collect();
        built.retain(|name, _| any(&include, name));
    }
    if budget == 0 {
        return Err(ErrorObject::invalid_params(
            "invalid params for process/start: envPolicy takes too long to evaluate: fewer or simpler patterns, or shorter names",
        ));
    }
    built.extend(env);
    Ok(built)
}

/// Whether `name` matches the glob `pattern` (`*` any run, `?` any byte),
/// ignoring ASCII case; a `*` in the name is an ordinary character. At most
/// pattern length times name length steps.
fn matches(pattern: &str, name: &str, budget: &mut u64) -> bool {
    let (pattern, name) = (pattern.as_bytes(), name.as_bytes());
    if name.len() > MAX_MATCHED_NAME {
        return false;
    }
    // Greedy matching with one backtrack point.
    let (mut p, mut n, mut star, mut mark) = (0, 0, None, 0);
    while n < name.len() {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some(p);
            mark = n;
            p += 1;
        } else if p < pattern.len()
            && (pattern[p] == b'?' || pattern[p].eq_ignore_ascii_case(&name[n]))
        {
            p += 1;
            n += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            n = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server() -> impl Iterator<Item = (String, String)> {
        [
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("API_KEY", "k"),
            ("GH_TOKEN", "t"),
            ("LANG", "C"),
            ("RUST_LOG", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    }

    fn keys(map: &BTreeMap<String, String>) -> Vec<&str> {
        map.keys().map(String::as_str).collect()
    }

    #[test]
    fn policies_combine_in_order() {
        let env = BTreeMap::from([("EXTRA".to_owned(), "1".to_owned())]);
        let all = apply(json!({}), server(), env.clone()).unwrap();
        assert_eq!(keys(&all), ["EXTRA", "HOME", "LANG", "PATH", "RUST_LOG"]);
        let core = apply(json!({"inherit": "core"}), server(), BTreeMap::new()).unwrap();
        assert_eq!(keys(&core), ["HOME", "PATH"]);
        let none = apply(json!({"inherit": "none", "set": {"A": "b"}}), server(), env).unwrap();
        assert_eq!(keys(&none), ["A", "EXTRA"]);
        let raw = apply(
            json!({"ignoreDefaultExcludes": true, "exclude": ["rust_*"]}),
            server(),
            BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(keys(&raw), ["API_KEY", "GH_TOKEN", "HOME", "LANG", "PATH"]);
        let only =
            apply(json!({"includeOnly": ["P?TH", "*A*"]}), server(), BTreeMap::new()).unwrap();
        assert_eq!(keys(&only), ["LANG", "PATH"]);
        // A pattern built to be slow is refused, not evaluated for minutes.
        let slow = format!("*{}b", "a".repeat(250));
        let names: BTreeMap<String, String> =
            (0..4000).map(|n| (format!("{n}{}", "a".repeat(4000)), String::new())).collect();
        let policy = json!({"inherit": "none", "set": names, "includeOnly": vec![slow; 64]});
        let error = apply(policy, server(), BTreeMap::new()).unwrap_err();
        assert!(error.message.contains("takes too long to evaluate"), "{}", error.message);
        let error = apply(json!({"inherit": "some"}), server(), BTreeMap::new()).unwrap_err();
        assert!(
            error
                .message
                .starts_with("invalid params for process/start: envPolicy: unknown variant `some`"),
            "{}",
            error.message
        );
    }

    #[test]
    fn globs_match_without_case() {
        let mut budget = MATCH_BUDGET;
        let mut m = |pattern: &str, name: &str| matches(pattern, name, &mut budget);
        assert!(m("*KEY*", "*xKEY"), "a star in the name is an ordinary character");
        assert!(m("a*b", "a*xb"));
        let long = "a".repeat(MAX_MATCHED_NAME + 1);
        assert!(!m("*", &long));
        assert!(m("*key*", "API_KEY"));
        assert!(m("A*B*C", "AxxBxxC"));
        assert!(!m("A*B", "AxxC"));
        assert!(m("*", ""));
        assert!(!m("?", ""));
    }
}
