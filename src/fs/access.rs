//! A sandbox's access list, resolved: canonical paths and what each allows,
//! and deny globs, each match of which is a deny entry at the matched path.
//! The entry nearest above a path (or at it) decides; a path no entry covers
//! is denied. fs calls check the real path of what they open against it.

use std::path::{Path, PathBuf};

use super::glob::Pattern;
use crate::protocol::{Access, ErrorObject};

/// Canonical paths with their access, one entry per path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AccessMap {
    /// Sorted by path; at one path only the strongest access is kept.
    entries: Vec<(PathBuf, Access)>,
    /// Deny globs matched as paths are checked (not scanned beforehand).
    globs: Vec<Pattern>,
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
        AccessMap { entries, globs: Vec::new() }
    }

    /// This map with deny globs, matched against each path checked.
    pub(crate) fn with_globs(self, globs: Vec<Pattern>) -> AccessMap {
        AccessMap { globs, ..self }
    }

    /// The entries, sorted by path (a parent before what lies beneath it).
    pub(crate) fn entries(&self) -> &[(PathBuf, Access)] {
        &self.entries
    }

    /// The access at `path`: its nearest entry's, or `None` (denied).
    pub(crate) fn at(&self, path: &Path) -> Option<Access> {
        self.nearest(path).map(|(_, access)| access)
    }

    /// The nearest entry at or above `path`; a glob's match at the same
    /// depth or deeper denies.
    pub(crate) fn nearest<'a>(&'a self, path: &'a Path) -> Option<(&'a Path, Access)> {
        let entry = self
            .entries
            .iter()
            .filter(|(entry, _)| path.starts_with(entry))
            .max_by_key(|(entry, _)| entry.components().count())
            .map(|(entry, access)| (entry.as_path(), *access));
        let depth = entry.map_or(0, |(entry, _)| entry.components().count());
        let matched = path
            .ancestors()
            .take_while(|ancestor| ancestor.components().count() >= depth)
            .find(|ancestor| self.globs.iter().any(|glob| glob.matches(ancestor)));
        match matched {
            Some(ancestor) => Some((ancestor, Access::Deny)),
            None => entry,
        }
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

    /// The first path strictly beneath `dir` that allows less than `need`
    /// (an entry, or a glob's match found by scanning `dir`): a tree walked
    /// from `dir` would reach it.
    pub(crate) fn narrower_beneath(
        &self,
        dir: &Path,
        need: Need,
    ) -> Result<Option<PathBuf>, ErrorObject> {
        let entry = self
            .entries
            .iter()
            .filter(|(entry, _)| entry != dir && entry.starts_with(dir))
            .find(|(entry, _)| !self.allows(entry, need));
        if let Some((entry, _)) = entry {
            return Ok(Some(entry.clone()));
        }
        for glob in &self.globs {
            if let Some(found) = glob.scan(dir)?.into_iter().find(|found| found != dir) {
                return Ok(Some(found));
            }
        }
        Ok(None)
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
        let narrower = |dir: &str, need| map.narrower_beneath(Path::new(dir), need).unwrap();
        assert_eq!(narrower("/w", Need::Write), Some(PathBuf::from("/w/secret")));
        assert_eq!(narrower("/w/secret/open", Need::Read), None);
        let globbed = map.clone().with_globs(vec![Pattern::new("/w/**/*.env", None).unwrap()]);
        assert_eq!(globbed.at(Path::new("/w/a/prod.env")), Some(Access::Deny));
        assert_eq!(globbed.at(Path::new("/w/a.env/inside")), Some(Access::Deny));
        assert_eq!(globbed.at(Path::new("/w/secret/open/x.env")), Some(Access::Deny));
        assert_eq!(globbed.at(Path::new("/w/a/prod.txt")), Some(Access::Write));
    }
}
