//! Deny globs: an absolute pattern matched component by component (`*`, `?`
//! and `[...]` stay inside one component, `**` spans any number of them),
//! and the scan that finds its matches when a sandbox is made.

use std::path::PathBuf;

use crate::protocol::ErrorObject;

/// Entries a pattern's scan visits at most, so that a pattern over a huge
/// tree is refused instead of stalling the start.
pub(crate) const GLOB_SCAN_MAX_ENTRIES: usize = 100_000;

/// The existing paths `pattern` matches, found beneath its fixed prefix to
/// `max_depth` directories deep (`None`: as deep as the tree goes). Symlinks
/// are neither followed nor returned.
pub(crate) fn scan(pattern: &str, max_depth: Option<u32>) -> Result<Vec<PathBuf>, ErrorObject> {
    let refuse =
        |why: String| ErrorObject::invalid_request(format!("sandbox deny glob {pattern:?} {why}"));
    if !pattern.starts_with('/') {
        return Err(ErrorObject::invalid_params(format!(
            "sandbox deny glob {pattern:?} must be an absolute pattern"
        )));
    }
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.contains(&"..") {
        return Err(ErrorObject::invalid_params(format!(
            "sandbox deny glob {pattern:?} must not hold `..`"
        )));
    }
    let fixed = parts.iter().take_while(|p| !is_wild(p)).count();
    let mut base = PathBuf::from("/");
    base.extend(&parts[..fixed]);
    let rest = &parts[fixed..];
    let mut found = Vec::new();
    if rest.is_empty() {
        if std::fs::symlink_metadata(&base).is_ok_and(|m| !m.file_type().is_symlink()) {
            found.push(base);
        }
        return Ok(found);
    }
    let mut visited = 0;
    let mut stack = vec![(base.clone(), 0u32)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            visited += 1;
            if visited > GLOB_SCAN_MAX_ENTRIES {
                return Err(refuse(format!(
                    "visits more than {GLOB_SCAN_MAX_ENTRIES} entries; narrow it or set globScanMaxDepth"
                )));
            }
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_symlink() {
                continue;
            }
            let Ok(rel) = path.strip_prefix(&base) else { continue };
            let names: Vec<&str> = rel.iter().filter_map(|n| n.to_str()).collect();
            if names.len() == rel.iter().count() && matches(rest, &names) {
                found.push(path.clone());
            }
            if kind.is_dir() && max_depth.is_none_or(|max| depth < max) {
                stack.push((path, depth + 1));
            }
        }
    }
    found.sort();
    Ok(found)
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

/// The fixed prefix of `pattern`, where its scan starts.
#[cfg(test)]
fn prefix_of(pattern: &str) -> PathBuf {
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
    let mut base = PathBuf::from("/");
    base.extend(parts.iter().take_while(|p| !is_wild(p)));
    base
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
        assert_eq!(prefix_of("/w/x/**/*.env"), Path::new("/w/x"));
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
        let all = scan(&pattern, None).unwrap();
        assert_eq!(all, [dir.join(".env"), dir.join("a/b/y.env"), dir.join("a/x.env")]);
        let shallow = scan(&pattern, Some(1)).unwrap();
        assert_eq!(shallow, [dir.join(".env"), dir.join("a/x.env")]);
        assert!(scan("relative/*.env", None).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
