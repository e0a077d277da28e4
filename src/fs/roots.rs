//! `--root` confinement: lexical path cleaning, which root a path falls under, and the root directory descriptors.
//!
//! Every path is first cleaned lexically: empty components (`//`), `.` and a
//! trailing `/` are dropped and `..` removes the component before it, so a path
//! means the same for every method. The cleaned path must then start with a
//! root; the rest is resolved by the kernel beneath that root's descriptor
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, see `open.rs`), so
//! no symlink inside a root leads out of it. This confines the server's own
//! file operations and the starting directories of processes; it is not a
//! sandbox for what those processes do.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use std::sync::Arc;

use super::access::{AccessMap, Need};
use super::mounts::OwnedMounts;
use super::sys;
use crate::protocol::ErrorObject;

/// The allowed roots, opened once; empty means no confinement.
#[derive(Debug, Default)]
pub(crate) struct Roots {
    roots: Vec<Root>,
    /// Where a cached `fs/getMetadata` may be trusted (`mounts.rs`).
    pub(crate) owned: OwnedMounts,
    /// A sandbox's access list and what the call needs of its paths: every
    /// descriptor a call opens is checked against it by its real path.
    pub(crate) guard: Option<Guard>,
}

/// An access list and what a call needs of the paths it names.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    pub(crate) map: Arc<AccessMap>,
    pub(crate) need: Need,
}

#[derive(Debug)]
struct Root {
    /// The root as given on the command line, cleaned.
    given: PathBuf,
    /// The root with symlinks resolved.
    canonical: PathBuf,
    /// An `O_PATH` descriptor of the root directory.
    dir: OwnedFd,
}

impl Roots {
    /// No confinement.
    pub(crate) const fn empty() -> Roots {
        Roots { roots: Vec::new(), owned: OwnedMounts::new(), guard: None }
    }

    /// These roots for a call under `map` that needs `need` of its paths.
    pub(crate) fn guarded(&self, map: Arc<AccessMap>, need: Need) -> io::Result<Roots> {
        let roots = self
            .roots
            .iter()
            .map(|root| {
                Ok(Root {
                    given: root.given.clone(),
                    canonical: root.canonical.clone(),
                    dir: root.dir.try_clone()?,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Roots { roots, owned: OwnedMounts::new(), guard: Some(Guard { map, need }) })
    }

    /// Opens each root; a root must be an existing directory.
    pub(crate) fn new(roots: &[PathBuf]) -> io::Result<Roots> {
        let mut opened = Vec::new();
        for root in roots {
            let named =
                |e: io::Error| io::Error::new(e.kind(), format!("root {}: {e}", root.display()));
            let canonical = std::fs::canonicalize(root).map_err(named)?;
            let c_root = sys::c_path(&canonical).map_err(named)?;
            let cwd = std::fs::File::open("/").map_err(named)?;
            let dir = sys::openat2(cwd.as_fd(), &c_root, libc::O_PATH | libc::O_DIRECTORY, 0, 0)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOTDIR) => io::Error::new(
                        io::ErrorKind::NotADirectory,
                        format!("root {} is not a directory", root.display()),
                    ),
                    _ => named(e),
                })?;
            let given = clean(&std::path::absolute(root).map_err(named)?);
            opened.push(Root { given, canonical, dir });
        }
        Ok(Roots { roots: opened, owned: OwnedMounts::new(), guard: None })
    }

    /// Roots narrowed to the directories `inner`, each opened beneath these
    /// roots (so none leads outside them, whatever its links); for fs calls
    /// confined by a sandbox context.
    pub(crate) fn within(&self, inner: &[PathBuf]) -> Result<Roots, ErrorObject> {
        let mut opened = Vec::new();
        for root in inner {
            let located = self.locate(root)?;
            let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
            let dir = located.open(flags).map_err(|e| match e.raw_os_error() {
                Some(libc::EXDEV) => outside(root),
                _ => ErrorObject::invalid_request(format!(
                    "sandbox writable root {} cannot be used: {e}",
                    root.display()
                )),
            })?;
            let canonical = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
                .map_err(|e| {
                    ErrorObject::internal(format!("cannot resolve {}: {e}", root.display()))
                })?;
            opened.push(Root { given: clean(root), canonical, dir });
        }
        Ok(Roots { roots: opened, owned: OwnedMounts::new(), guard: None })
    }

    /// The roots with symlinks resolved, in command-line order.
    pub(crate) fn canonical(&self) -> Vec<PathBuf> {
        self.roots.iter().map(|root| root.canonical.clone()).collect()
    }

    /// Whether any root is configured.
    pub(crate) fn confined(&self) -> bool {
        !self.roots.is_empty()
    }

    /// The root a cleaned path falls under (the closest one): its directory,
    /// and the rest of the path.
    pub(super) fn best_root<'p>(&self, cleaned: &'p Path) -> Option<(&OwnedFd, &'p Path)> {
        self.roots
            .iter()
            .flat_map(|root| [(root, &root.given), (root, &root.canonical)])
            .filter_map(|(root, prefix)| Some((&root.dir, cleaned.strip_prefix(prefix).ok()?)))
            .min_by_key(|(_, rel)| rel.components().count())
    }

    /// Opens `path` (`O_PATH | flags`) as [`Roots::locate`] and `Located::open`
    /// would, but from the kernel's caches alone ([`sys::openat2_cached`]):
    /// never a wait on a disk or a server, so the server loop may call it.
    /// None when that is not enough or anything fails; the caller then takes
    /// the ordinary path, which gives the error.
    pub(crate) fn open_cached(&self, path: &Path, flags: libc::c_int) -> Option<OwnedFd> {
        if !path.is_absolute() {
            return None;
        }
        let cleaned = clean(path);
        if self.roots.is_empty() {
            return sys::openat2_cached(libc::AT_FDCWD, &sys::c_path(&cleaned).ok()?, flags, 0)
                .ok();
        }
        let (root, rel) = self.best_root(&cleaned)?;
        let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
        let c_rel = sys::c_path(rel).ok()?;
        sys::openat2_cached(root.as_raw_fd(), &c_rel, flags, sys::CONFINED).ok()
    }
}

/// A process's checked starting directory: its cleaned path and, under
/// `--root`, the directory itself, opened (`O_PATH`) beneath a root.
#[derive(Debug)]
pub(crate) struct Cwd {
    pub(crate) path: PathBuf,
    pub(crate) dir: Option<std::os::fd::OwnedFd>,
}

// The server shares one `Roots` between blocking fs calls (`Arc<Roots>`).
const _: fn() = || {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Roots>();
};

/// -32600 `path P is outside the allowed roots`.
pub(crate) fn outside(path: &Path) -> ErrorObject {
    ErrorObject::invalid_request(format!("path {} is outside the allowed roots", path.display()))
}

/// Whether a confined resolution failed because it would leave the root (EXDEV).
/// A magic link or a symlink loop is ELOOP, an ordinary I/O error.
pub(crate) fn is_escape(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::EXDEV)
}

/// The lexical cleaning every fs path goes through (see the module docs).
pub(crate) fn clean(path: &Path) -> PathBuf {
    let mut cleaned = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => cleaned.push(name),
            Component::ParentDir => {
                cleaned.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning_is_lexical() {
        let cases = [
            ("/a/b/", "/a/b"),
            ("/a/b/.", "/a/b"),
            ("//a//b", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/b/../c", "/a/c"),
            ("/../..", "/"),
            ("/a/..", "/"),
        ];
        for (path, expected) in cases {
            assert_eq!(clean(Path::new(path)), Path::new(expected), "{path}");
        }
    }

    #[test]
    fn relative_and_outside_paths_are_refused() {
        let dir = std::env::temp_dir().join(format!("exec-server-roots-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("root")).unwrap();
        let roots = Roots::new(&[dir.join("root")]).unwrap();
        assert_eq!(
            roots.locate(Path::new("rel/x")).unwrap_err().message,
            "path must be absolute: rel/x"
        );
        let escape = dir.join("root/../x");
        assert_eq!(
            roots.locate(&escape).unwrap_err().message,
            format!("path {} is outside the allowed roots", escape.display())
        );
        assert!(roots.locate(&dir.join("root/a/../b")).is_ok());
        assert!(Roots::default().locate(Path::new("/etc/passwd")).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
