//! Deny globs: an absolute pattern matched component by component (`*`, `?`
//! and `[...]` stay inside one component, `**` spans any number of them),
//! and the scan that finds its matches when a sandbox is made.

use std::path::{Path, PathBuf};

use crate::protocol::ErrorObject;

/// Entries a pattern's scan visits at most, so that a pattern over a huge
/// tree is refused instead of stalling the call.
pub(crate) const GLOB_SCAN_MAX_ENTRIES: usize = 100_000;

/// A deny glob, parsed: its fixed prefix and the components after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    text: String,
    base: PathBuf,
    rest: Vec<String>,
    /// How many directories deep beneath `base` matches are looked for.
    max_depth: Option<u32>,
}

impl Pattern {
    /// Parses an absolute pattern; -32602 naming it when it is relative or holds `..`.
    pub(crate) fn new(text: &str, max_depth: Option<u32>) -> Result<Pattern, ErrorObject> {
        if !text.starts_with('/') {
            return Err(ErrorObject::invalid_params(format!(
                "sandbox deny glob {text:?} must be an absolute pattern"
            )));
        }
        let parts: Vec<&str> = text.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
        if parts.contains(&"..") {
            return Err(ErrorObject::invalid_params(format!(
                "sandbox deny glob {text:?} must not hold `..`"
            )));
        }
        let fixed = parts.iter().take_while(|p| !is_wild(p)).count();
        let mut base = PathBuf::from("/");
        base.extend(&parts[..fixed]);
        let rest = parts[fixed..].iter().map(|p| (*p).to_owned()).collect();
        Ok(Pattern { text: text.to_owned(), base, rest, max_depth })
    }

    /// Whether `path` is a match (within the depth a scan would look).
    pub(crate) fn matches(&self, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(&self.base) else { return false };
        let names: Option<Vec<&str>> = rel.iter().map(|n| n.to_str()).collect();
        let Some(names) = names else { return false };
        if self.max_depth.is_some_and(|max| names.len() > max as usize + 1) {
            return false;
        }
        let rest: Vec<&str> = self.rest.iter().map(String::as_str).collect();
        if rest.is_empty() {
            return names.is_empty();
        }
        !names.is_empty() && matches(&rest, &names)
    }

    /// The existing matches at or beneath `dir` (all of them when `dir` is
    /// `/`). Symlinks are neither followed nor returned.
    pub(crate) fn scan(&self, dir: &Path) -> Result<Vec<PathBuf>, ErrorObject> {
        let start = if dir.starts_with(&self.base) {
            dir.to_path_buf()
        } else if self.base.starts_with(dir) {
            self.base.clone()
        } else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        if std::fs::symlink_metadata(&start).is_ok_and(|m| !m.file_type().is_symlink())
            && self.matches(&start)
        {
            found.push(start.clone());
        }
        let depth = |path: &Path| path.strip_prefix(&self.base).map_or(0, |r| r.iter().count());
        let mut visited = 0;
        let mut stack = vec![start];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                visited += 1;
                if visited > GLOB_SCAN_MAX_ENTRIES {
                    return Err(ErrorObject::invalid_request(format!(
                        "sandbox deny glob {:?} visits more than {GLOB_SCAN_MAX_ENTRIES} entries; narrow it or set a scan depth",
                        self.text
                    )));
                }
                let path = entry.path();
                let Ok(kind) = entry.file_type() else { continue };
                if kind.is_symlink() {
                    continue;
                }
                if self.matches(&path) {
                    found.push(path.clone());
                }
                let deeper = self.max_depth.is_none_or(|max| depth(&path) <= max as usize);
                if kind.is_dir() && deeper {
                    stack.push(path);
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

fn is_wild(part: &str) -> bool {
    part.contains(['*', '?', '['])
}

/// Whether `names` (the components below the fixed prefix) match `parts`.
fn matches(parts: &[&str], names: &[&str]) -> bool {
    match parts.split_first() {
        None => names.is_empty(),
        Some((&"**", rest)) => (0..=names.len()).any(|skip| matches(rest, &names[skip..])),
        Some((part, rest)) => match names.split_first() {
            Some((name, names)) => {
                component(part.as_bytes(), name.as_bytes()) && matches(rest, names)
            }
            None => false,
        },
    }
}

/// One component against one pattern component.
fn component(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| component(rest, &name[skip..])),
        Some((b'?', rest)) => !name.is_empty() && component(rest, &name[1..]),
        Some((b'[', rest)) => {
            let Some(close) = rest.iter().skip(1).position(|&b| b == b']').map(|i| i + 1) else {
                return name.first() == Some(&b'[') && component(rest, &name[1..]);
            };
            let (class, after) = (&rest[..close], &rest[close + 1..]);
            let Some((&first, name_rest)) = name.split_first() else { return false };
            let (negated, class) = match class.split_first() {
                Some((b'!' | b'^', class)) => (true, class),
                _ => (false, class),
            };
            in_class(class, first) != negated && component(after, name_rest)
        }
        Some((&literal, rest)) => name.first() == Some(&literal) && component(rest, &name[1..]),
    }
}

fn in_class(class: &[u8], byte: u8) -> bool {
    let mut i = 0;
    while i < class.len() {
        if i + 2 < class.len() && class[i + 1] == b'-' {
            if (class[i]..=class[i + 2]).contains(&byte) {
                return true;
            }
            i += 3;
        } else {
            if class[i] == byte {
                return true;
            }
            i += 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(pattern: &str, path: &str) -> bool {
        let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
        let names: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        matches(&parts, &names)
    }

    #[test]
    fn stars_stay_in_a_component_and_double_stars_span_them() {
        assert!(glob("/w/**/*.env", "/w/.env"));
        assert!(glob("/w/**/*.env", "/w/a/b/prod.env"));
        assert!(!glob("/w/*.env", "/w/a/prod.env"));
        assert!(glob("/w/*.env", "/w/prod.env"));
        assert!(glob("/w/?.txt", "/w/a.txt"));
        assert!(!glob("/w/?.txt", "/w/ab.txt"));
        assert!(glob("/w/[a-c]x", "/w/bx"));
        assert!(!glob("/w/[!a-c]x", "/w/bx"));
        assert!(glob("/w/**", "/w/a/b"));
        assert!(!glob("/w/*", "/w/a/b"));
        let pattern = Pattern::new("/w/x/**/*.env", Some(1)).unwrap();
        assert_eq!(pattern.base, Path::new("/w/x"));
        assert!(pattern.matches(Path::new("/w/x/a/b.env")));
        assert!(!pattern.matches(Path::new("/w/x/a/b/c.env")), "deeper than asked");
    }

    #[test]
    fn the_scan_finds_matches_to_the_depth_asked() {
        let dir = std::env::temp_dir().join(format!("exec-server-glob-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        for file in [".env", "a/x.env", "a/b/y.env", "a/b/keep.txt"] {
            std::fs::write(dir.join(file), "").unwrap();
        }
        std::os::unix::fs::symlink("/etc/hostname", dir.join("a/link.env")).unwrap();
        let pattern = format!("{}/**/*.env", dir.display());
        let all = Pattern::new(&pattern, None).unwrap().scan(Path::new("/")).unwrap();
        assert_eq!(all, [dir.join(".env"), dir.join("a/b/y.env"), dir.join("a/x.env")]);
        let shallow = Pattern::new(&pattern, Some(1)).unwrap().scan(Path::new("/")).unwrap();
        assert_eq!(shallow, [dir.join(".env"), dir.join("a/x.env")]);
        let beneath = Pattern::new(&pattern, None).unwrap().scan(&dir.join("a/b")).unwrap();
        assert_eq!(beneath, [dir.join("a/b/y.env")]);
        assert!(Pattern::new("relative/*.env", None).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
