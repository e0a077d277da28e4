//! Deny globs: an absolute pattern matched component by component (`*`, `?`
//! and `[...]` stay inside one component, `**` spans any number of them),
//! and the scan that finds its matches when a sandbox is made. Names are
//! matched as bytes (a name that is not UTF-8 still matches `*`), and in
//! time linear in the pattern times the name, whatever the pattern.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
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
    rest: Vec<Part>,
    /// How many directories deep beneath `base` matches are looked for.
    max_depth: Option<u32>,
}

/// One component of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// `**`: any number of components.
    Any,
    /// A component pattern, as tokens.
    Name(Vec<Token>),
}

/// One token of a component pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters.
    Star,
    /// `?`: one character.
    One,
    /// `[...]`: one character in (or, negated, not in) the ranges.
    Class { negated: bool, ranges: Vec<(u32, u32)> },
    /// A character as it is.
    Literal(u32),
}

/// A name's characters: UTF-8 characters as themselves, each byte of an
/// invalid sequence as a value no character has, so that it matches only
/// `*`, `?` and negated classes.
fn units(name: &[u8]) -> Vec<u32> {
    let mut units = Vec::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        units.extend(chunk.valid().chars().map(u32::from));
        units.extend(chunk.invalid().iter().map(|&b| 0x11_0000 + u32::from(b)));
    }
    units
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
        let rest = parts[fixed..].iter().map(|p| parse(p)).collect();
        Ok(Pattern { text: text.to_owned(), base, rest, max_depth })
    }

    /// The same pattern with its fixed prefix given as it resolves now
    /// (links followed as far as the path exists), since the paths it is
    /// matched against are canonical.
    pub(crate) fn resolved(mut self, resolve: impl FnOnce(&Path) -> PathBuf) -> Pattern {
        self.base = resolve(&self.base);
        self
    }

    /// The fixed prefix, as given or as [`Pattern::resolved`] made it.
    pub(crate) fn base(&self) -> &Path {
        &self.base
    }

    /// Whether `path` is a match (within the depth a scan would look).
    pub(crate) fn matches(&self, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(&self.base) else { return false };
        let names: Vec<&OsStr> = rel.iter().collect();
        if self.max_depth.is_some_and(|max| names.len() > max as usize + 1) {
            return false;
        }
        if self.rest.is_empty() {
            return names.is_empty();
        }
        !names.is_empty() && matches(&self.rest, &names)
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
        // A directory that vanished mid-scan holds nothing; any other error
        // fails the scan, since what it could not read could hold a match.
        let unreadable = |dir: &Path, e: std::io::Error| {
            ErrorObject::invalid_request(format!(
                "sandbox deny glob {:?} cannot be scanned: cannot read {}: {e}",
                self.text,
                dir.display()
            ))
        };
        let vanished =
            |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR));
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(unreadable(&dir, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| unreadable(&dir, e))?;
                visited += 1;
                if visited > GLOB_SCAN_MAX_ENTRIES {
                    return Err(ErrorObject::invalid_request(format!(
                        "sandbox deny glob {:?} visits more than {GLOB_SCAN_MAX_ENTRIES} entries; narrow it or set a scan depth",
                        self.text
                    )));
                }
                let path = entry.path();
                let kind = match entry.file_type() {
                    Ok(kind) => kind,
                    Err(e) if vanished(&e) => continue,
                    Err(e) => return Err(unreadable(&path, e)),
                };
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

/// One pattern component, parsed.
fn parse(part: &str) -> Part {
    if part == "**" {
        return Part::Any;
    }
    let chars: Vec<char> = part.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let token = match chars[i] {
            '*' => Token::Star,
            '?' => Token::One,
            '[' => match class(&chars[i + 1..]) {
                Some((token, used)) => {
                    i += used;
                    token
                }
                None => Token::Literal(u32::from('[')),
            },
            c => Token::Literal(u32::from(c)),
        };
        // Runs of `*` are one `*`.
        if !(token == Token::Star && tokens.last() == Some(&Token::Star)) {
            tokens.push(token);
        }
        i += 1;
    }
    Part::Name(tokens)
}

/// The class after a `[` and how many characters it used (with its `]`);
/// `None` when it is not closed (the `[` is then a literal).
fn class(chars: &[char]) -> Option<(Token, usize)> {
    let (negated, start) = match chars.first() {
        Some('!' | '^') => (true, 1),
        _ => (false, 0),
    };
    // A `]` right after the opening is a member, not the close.
    let close = start + 1 + chars.get(start + 1..)?.iter().position(|&c| c == ']')?;
    let members = &chars[start..close];
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < members.len() {
        if i + 2 < members.len() && members[i + 1] == '-' {
            ranges.push((u32::from(members[i]), u32::from(members[i + 2])));
            i += 3;
        } else {
            ranges.push((u32::from(members[i]), u32::from(members[i])));
            i += 1;
        }
    }
    Some((Token::Class { negated, ranges }, close + 1))
}

/// Whether `names` (the components below the fixed prefix) match `parts`:
/// `**` as a wildcard over whole components, with the usual single
/// backtrack point, so that the time is at most parts × names matches.
fn matches(parts: &[Part], names: &[&OsStr]) -> bool {
    let units: Vec<Vec<u32>> = names.iter().map(|n| units(n.as_bytes())).collect();
    wildcard(
        parts,
        &units,
        |part| matches!(part, Part::Any),
        |part, name| match part {
            Part::Any => true,
            Part::Name(tokens) => component(tokens, name),
        },
    )
}

/// One component against one pattern component.
fn component(tokens: &[Token], name: &[u32]) -> bool {
    wildcard(
        tokens,
        name,
        |t| *t == Token::Star,
        |token, &unit| match token {
            Token::Star | Token::One => true,
            Token::Literal(c) => *c == unit,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&unit)) != *negated
            }
        },
    )
}

/// Wildcard matching of `items` against `pattern`, where `star` tells the
/// tokens that match any run of items and `one` whether a token matches one
/// item. When a later token fails, only the last star is given one more
/// item: earlier stars never need to take more, so this is exact, and it
/// makes at most `pattern.len() × items.len()` comparisons.
fn wildcard<P, I>(
    pattern: &[P],
    items: &[I],
    star: impl Fn(&P) -> bool,
    one: impl Fn(&P, &I) -> bool,
) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while i < items.len() {
        if p < pattern.len() && star(&pattern[p]) {
            backtrack = Some((p, i));
            p += 1;
        } else if p < pattern.len() && one(&pattern[p], &items[i]) {
            p += 1;
            i += 1;
        } else if let Some((star_at, taken)) = backtrack {
            p = star_at + 1;
            i = taken + 1;
            backtrack = Some((star_at, taken + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(pattern: &str, path: impl AsRef<Path>) -> bool {
        Pattern::new(pattern, None).unwrap().matches(path.as_ref())
    }

    #[test]
    fn names_match_as_bytes_and_characters() {
        use std::os::unix::ffi::OsStrExt;
        let raw = Path::new(OsStr::from_bytes(b"/w/s\xffcret.env"));
        assert!(glob("/w/*.env", raw), "a name that is not UTF-8 matches `*`");
        assert!(glob("/w/s?cret.env", raw), "an invalid byte is one character to `?`");
        assert!(!glob("/w/s[a-z]cret.env", raw));
        assert!(glob("/w/s[!a-z]cret.env", raw));
        assert!(glob("/w/?.txt", "/w/é.txt"), "`?` is one character, not one byte");
        assert!(glob("/w/[é]", "/w/é"));
        assert!(glob("/w/[]]", "/w/]"));
        assert!(glob("/w/[x", "/w/[x"), "an unclosed `[` is itself");
    }

    #[test]
    fn matching_takes_linear_time_whatever_the_pattern() {
        // Backtracking into every star would take about 40^8 steps here.
        let name = "a".repeat(40);
        assert!(!glob("/w/*a*a*a*a*a*a*a*a*b", format!("/w/{name}")));
        assert!(glob("/w/*a*a*a*a*a*a*a*a*", format!("/w/{name}")));
        let deep = format!("/w/{}", ["a"; 40].join("/"));
        assert!(!glob("/w/**/a/**/a/**/a/**/a/**/a/**/a/**/b", &deep));
        assert!(glob("/w/**/a/**/a/**/a/**/a/**/a/**/a/**/a", &deep));
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
