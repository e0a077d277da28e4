//! The policy's paths, opened once in the trampoline's mount namespace
//! without following any symlink: the mount view and the Landlock rules both
//! use these descriptors, so a directory swapped for a link (or another
//! directory) at any moment cannot make the two confine different things.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::policy::Policy;
use super::sys;

/// A path of the policy (a directory, or a file) and its `O_PATH`
/// descriptor (`dir`, which may be a file's).
pub(crate) struct Opened {
    pub(crate) path: PathBuf,
    pub(crate) dir: OwnedFd,
}

/// The paths of a policy, opened.
pub(crate) struct Roots {
    pub(crate) writable: Vec<Opened>,
    /// `None`: reads everywhere.
    pub(crate) readable: Option<Vec<Opened>>,
    /// Shown read-only inside writable or masked ones.
    pub(crate) read_only: Vec<Opened>,
    /// Shown empty.
    pub(crate) masked: Vec<Opened>,
    /// Mount points of themselves, inside writable ones.
    pub(crate) pinned: Vec<Opened>,
}

impl Roots {
    /// Opens every root (each already resolved by the server); one that is
    /// now reached through a symlink (swapped since) is an error.
    pub(crate) fn open(policy: &Policy) -> Result<Roots, String> {
        let open_all = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|path| Ok(Opened { path: path.clone(), dir: sys::open_nofollow(path)? }))
                .collect::<Result<Vec<_>, String>>()
        };
        let writable = open_all(&policy.writable)?;
        let readable = policy.readable.as_deref().map(open_all).transpose()?;
        let read_only = open_all(&policy.read_only)?;
        let masked = open_all(&policy.masked)?;
        let pinned = open_all(&policy.pinned)?;
        Ok(Roots { writable, readable, read_only, masked, pinned })
    }

    /// The mount view's layers, a parent before what lies beneath it, each
    /// with the kind of the nearest layer above it (`None`: the read-only
    /// base). Only layers that change what the one above shows are kept: a
    /// writable path inside a writable one, a read-only one outside a
    /// writable or masked one, a mask inside a mask, show nothing new; a
    /// pin is kept only inside a writable one, and is writable to what
    /// lies beneath it.
    pub(crate) fn layers(&self) -> Vec<Layer<'_>> {
        let mut all: Vec<(&Opened, Kind)> = Vec::new();
        all.extend(self.pinned.iter().map(|o| (o, Kind::Pinned)));
        all.extend(self.writable.iter().map(|o| (o, Kind::Writable)));
        all.extend(self.read_only.iter().map(|o| (o, Kind::ReadOnly)));
        all.extend(self.masked.iter().map(|o| (o, Kind::Masked)));
        // At one path the mask wins, then read-only (as the policy resolved
        // it), then a pin.
        all.sort_by(|a, b| a.0.path.cmp(&b.0.path).then(b.1.cmp(&a.1)));
        all.dedup_by(|later, kept| later.0.path == kept.0.path);
        let mut kept: Vec<Layer<'_>> = Vec::new();
        for (opened, kind) in all {
            let above = kept
                .iter()
                .filter(|layer| opened.path.starts_with(&layer.opened.path))
                .max_by_key(|layer| layer.opened.path.components().count())
                .map(|layer| match layer.kind {
                    Kind::Pinned => Kind::Writable,
                    kind => kind,
                });
            let changes = match kind {
                Kind::Pinned => above == Some(Kind::Writable),
                Kind::Writable => above != Some(Kind::Writable),
                Kind::ReadOnly => matches!(above, Some(Kind::Writable | Kind::Masked)),
                Kind::Masked => above != Some(Kind::Masked),
            };
            if changes {
                kept.push(Layer { opened, kind, above });
            }
        }
        kept
    }
}

/// How a layer of the view shows its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Writable,
    /// A writable directory mounted on itself, so that it cannot be renamed
    /// (at one path it beats a writable entry, which would be left out).
    Pinned,
    ReadOnly,
    Masked,
}

/// One mount of the view.
pub(crate) struct Layer<'a> {
    pub(crate) opened: &'a Opened,
    pub(crate) kind: Kind,
    /// The kind of the nearest layer above (`None`: the read-only base; a
    /// pin's is `Writable`).
    pub(crate) above: Option<Kind>,
}

/// Whether `path` is `/`.
pub(crate) fn is_root(path: &Path) -> bool {
    path.parent().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_keep_what_changes_the_view() {
        let open = |path: &str| Opened {
            path: PathBuf::from(path),
            dir: sys::open_nofollow(Path::new("/")).unwrap(),
        };
        let roots = Roots {
            writable: vec![
                open("/a/b"),
                open("/a"),
                open("/ab"),
                open("/a"),
                open("/m/w"),
                open("/a/p"),
            ],
            readable: None,
            read_only: vec![open("/a/.git"), open("/r"), open("/m/r")],
            masked: vec![open("/a/secret"), open("/m"), open("/m/x"), open("/a/p/q/s")],
            pinned: vec![open("/a/p"), open("/a/p/q"), open("/r/p")],
        };
        let kept: Vec<(&Path, Kind, Option<Kind>)> =
            roots.layers().iter().map(|l| (l.opened.path.as_path(), l.kind, l.above)).collect();
        let (w, r, m, p) = (Kind::Writable, Kind::ReadOnly, Kind::Masked, Kind::Pinned);
        assert_eq!(
            kept,
            [
                (Path::new("/a"), w, None),
                (Path::new("/a/.git"), r, Some(w)),
                (Path::new("/a/p"), p, Some(w)),
                (Path::new("/a/p/q"), p, Some(w)),
                (Path::new("/a/p/q/s"), m, Some(w)),
                (Path::new("/a/secret"), m, Some(w)),
                (Path::new("/ab"), w, None),
                (Path::new("/m"), m, None),
                (Path::new("/m/r"), r, Some(m)),
                (Path::new("/m/w"), w, Some(m)),
            ]
        );
    }
}
