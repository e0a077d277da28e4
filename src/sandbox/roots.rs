//! The policy's directories, opened once in the trampoline's mount namespace
//! without following any symlink: the mount view and the Landlock rules both
//! use these descriptors, so a directory swapped for a link (or another
//! directory) at any moment cannot make the two confine different things.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::policy::Policy;
use super::sys;

/// A root and its `O_PATH` descriptor.
pub(crate) struct Opened {
    pub(crate) path: PathBuf,
    pub(crate) dir: OwnedFd,
}

/// The writable and readable roots of a policy, opened.
pub(crate) struct Roots {
    pub(crate) writable: Vec<Opened>,
    /// `None`: reads everywhere.
    pub(crate) readable: Option<Vec<Opened>>,
}

impl Roots {
    /// Opens every root (each already resolved by the server); one that is
    /// now reached through a symlink (swapped since) is an error.
    pub(crate) fn open(policy: &Policy) -> Result<Roots, String> {
        let open_all = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|path| Ok(Opened { path: path.clone(), dir: sys::open_dir_nofollow(path)? }))
                .collect::<Result<Vec<_>, String>>()
        };
        let writable = open_all(&policy.writable)?;
        let readable = policy.readable.as_deref().map(open_all).transpose()?;
        Ok(Roots { writable, readable })
    }

    /// The writable roots that no other contains (a copy of the outer one
    /// holds the inner), as (path, descriptor).
    pub(crate) fn outermost_writable(&self) -> Vec<&Opened> {
        let mut sorted: Vec<&Opened> = self.writable.iter().collect();
        sorted.sort_by(|a, b| a.path.cmp(&b.path));
        let mut kept: Vec<&Opened> = Vec::new();
        for root in sorted {
            if !kept.iter().any(|outer| root.path.starts_with(&outer.path)) {
                kept.push(root);
            }
        }
        kept
    }
}

/// Whether `path` is `/`.
pub(crate) fn is_root(path: &Path) -> bool {
    path.parent().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_roots_are_covered_by_the_outer_one() {
        let open = |path: &str| Opened {
            path: PathBuf::from(path),
            dir: sys::open_dir_nofollow(Path::new("/")).unwrap(),
        };
        let roots = Roots {
            writable: vec![open("/a/b"), open("/a"), open("/ab"), open("/a")],
            readable: None,
        };
        let kept: Vec<&Path> =
            roots.outermost_writable().iter().map(|r| r.path.as_path()).collect();
        assert_eq!(kept, [Path::new("/a"), Path::new("/ab")]);
    }
}
