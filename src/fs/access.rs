//! A sandbox's access list, resolved: canonical paths and what each allows.
//! The entry nearest above a path (or at it) decides; a path no entry covers
//! is denied. fs calls check the real path of what they open against it.

use std::path::{Path, PathBuf};

use crate::protocol::Access;

/// Canonical paths with their access, one entry per path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AccessMap {
    /// Sorted by path; at one path only the strongest access is kept.
    entries: Vec<(PathBuf, Access)>,
}

/// What a call needs of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    Read,
    Write,
}

impl AccessMap {
    /// The map of `entries`; ties at one path go deny > write > read.
    pub(crate) fn new(mut entries: Vec<(PathBuf, Access)>) -> AccessMap {
        entries.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        entries.dedup_by(|later, kept| later.0 == kept.0);
        AccessMap { entries }
    }

    /// The entries, sorted by path (a parent before what lies beneath it).
    pub(crate) fn entries(&self) -> &[(PathBuf, Access)] {
        &self.entries
    }

    /// The access at `path`: its nearest entry's, or `None` (denied).
    pub(crate) fn at(&self, path: &Path) -> Option<Access> {
        self.nearest(path).map(|(_, access)| access)
    }

    /// The nearest entry at or above `path`.
    pub(crate) fn nearest(&self, path: &Path) -> Option<(&Path, Access)> {
        self.entries
            .iter()
            .filter(|(entry, _)| path.starts_with(entry))
            .max_by_key(|(entry, _)| entry.components().count())
            .map(|(entry, access)| (entry.as_path(), *access))
    }

    /// The access inherited at `path` from the entries strictly above it.
    pub(crate) fn above(&self, path: &Path) -> Option<Access> {
        self.entries
            .iter()
            .filter(|(entry, _)| entry != path && path.starts_with(entry))
            .max_by_key(|(entry, _)| entry.components().count())
            .map(|(_, access)| *access)
    }

    /// Whether `path` may be used as `need` says.
    pub(crate) fn allows(&self, path: &Path, need: Need) -> bool {
        matches!((self.at(path), need), (Some(Access::Write), _) | (Some(Access::Read), Need::Read))
    }

    /// The first entry strictly beneath `dir` that allows less than `need`:
    /// a tree walked from `dir` would reach it.
    pub(crate) fn narrower_beneath(&self, dir: &Path, need: Need) -> Option<&Path> {
        self.entries
            .iter()
            .filter(|(entry, _)| entry != dir && entry.starts_with(dir))
            .find(|(entry, _)| !self.allows(entry, need))
            .map(|(entry, _)| entry.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, Access)]) -> AccessMap {
        AccessMap::new(entries.iter().map(|(p, a)| (PathBuf::from(p), *a)).collect())
    }

    #[test]
    fn the_most_specific_entry_wins_and_ties_go_to_deny() {
        let map = map(&[
            ("/w", Access::Write),
            ("/w/.git", Access::Read),
            ("/w/.git", Access::Write),
            ("/w/secret", Access::Deny),
            ("/w/secret", Access::Read),
            ("/w/secret/open", Access::Read),
            ("/usr", Access::Read),
        ]);
        let at = |p: &str| map.at(Path::new(p));
        assert_eq!(at("/w/a/b"), Some(Access::Write));
        assert_eq!(at("/w/.git/config"), Some(Access::Write), "write beats read at one path");
        assert_eq!(at("/w/secret/x"), Some(Access::Deny), "deny beats read at one path");
        assert_eq!(at("/w/secret/open/x"), Some(Access::Read));
        assert_eq!(at("/wx"), None, "components, not bytes");
        assert_eq!(at("/etc/passwd"), None);
        assert!(map.allows(Path::new("/usr/bin/sh"), Need::Read));
        assert!(!map.allows(Path::new("/usr/bin/sh"), Need::Write));
        assert_eq!(map.above(Path::new("/w/secret")), Some(Access::Write));
        assert_eq!(
            map.narrower_beneath(Path::new("/w"), Need::Write),
            Some(Path::new("/w/secret"))
        );
        assert_eq!(map.narrower_beneath(Path::new("/w/secret/open"), Need::Read), None);
    }
}
