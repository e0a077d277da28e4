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
    let mut built: BTreeMap<String, String> = match policy.inherit {
        Inherit::All => server_env.collect(),
        Inherit::Core => server_env.filter(|(name, _)| CORE.contains(&name.as_str())).collect(),
        Inherit::None => BTreeMap::new(),
    };
    if !policy.ignore_default_excludes {
        built.retain(|name, _| !DEFAULT_EXCLUDES.iter().any(|p| matches(p, name)));
    }
    built.retain(|name, _| !policy.exclude.iter().any(|p| matches(p, name)));
    built.extend(policy.set);
    if !policy.include_only.is_empty() {
        built.retain(|name, _| policy.include_only.iter().any(|p| matches(p, name)));
    }
    built.extend(env);
    Ok(built)
}

/// Whether `name` matches the glob `pattern`, ignoring ASCII case.
fn matches(pattern: &str, name: &str) -> bool {
    let (pattern, name) = (pattern.as_bytes(), name.as_bytes());
    // Greedy matching with one backtrack point: linear in practice.
    let (mut p, mut n, mut star, mut mark) = (0, 0, None, 0);
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p].eq_ignore_ascii_case(&name[n])) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some(p);
            mark = n;
            p += 1;
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
        assert!(matches("*key*", "API_KEY"));
        assert!(matches("A*B*C", "AxxBxxC"));
        assert!(!matches("A*B", "AxxC"));
        assert!(matches("*", ""));
        assert!(!matches("?", ""));
    }
}
