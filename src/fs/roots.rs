//! `--root` confinement: a path is allowed when, with symlinks and `..` resolved, it lies inside a root.
//!
//! This confines the server's own file operations and the starting directories
//! of processes; it is not a sandbox for what those processes do.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::protocol::ErrorObject;

/// Symlinks followed in one resolution before giving up (as Linux's ELOOP).
const MAX_LINKS: u32 = 40;

/// The allowed roots, resolved once; empty means no confinement.
#[derive(Debug, Clone, Default)]
pub(crate) struct Roots {
    roots: Vec<PathBuf>,
}

/// How much of a path to resolve before the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    /// Resolve every component: the operation follows a final symlink.
    All,
    /// Resolve the parent only: the operation acts on the final entry itself.
    Parent,
}

impl Roots {
    /// No confinement.
    pub(crate) const EMPTY: Roots = Roots { roots: Vec::new() };

    /// Resolves each root; a root must be an existing directory.
    pub(crate) fn new(roots: &[PathBuf]) -> io::Result<Roots> {
        let mut resolved = Vec::new();
        for root in roots {
            let path = std::fs::canonicalize(root)
                .map_err(|e| io::Error::new(e.kind(), format!("root {}: {e}", root.display())))?;
            if !path.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("root {} is not a directory", root.display()),
                ));
            }
            resolved.push(path);
        }
        Ok(Roots { roots: resolved })
    }

    /// Fails with -32602 for a relative path and -32600 for a path outside every root.
    pub(crate) fn check(&self, path: &Path, follow: Follow) -> Result<(), ErrorObject> {
        if !path.is_absolute() {
            return Err(ErrorObject::invalid_params(format!(
                "path must be absolute: {}",
                path.display()
            )));
        }
        self.check_absolute(path, follow)
    }

    /// Like [`Roots::check`] for a path already known to be absolute.
    pub(crate) fn check_absolute(&self, path: &Path, follow: Follow) -> Result<(), ErrorObject> {
        if self.roots.is_empty() {
            return Ok(());
        }
        let resolved = match (follow, path.file_name()) {
            (Follow::Parent, Some(name)) => {
                let parent = path.parent().unwrap_or(Path::new("/"));
                resolve(parent, &mut 0).map(|p| p.join(name))
            }
            _ => resolve(path, &mut 0),
        };
        match resolved {
            Ok(resolved) if self.roots.iter().any(|root| resolved.starts_with(root)) => Ok(()),
            _ => Err(ErrorObject::invalid_request(format!(
                "path {} is outside the allowed roots",
                path.display()
            ))),
        }
    }
}

/// Resolves `path` component by component, following symlinks (even dangling
/// ones) and `..`; the part that does not exist is taken as written.
pub(crate) fn resolve(path: &Path, links: &mut u32) -> io::Result<PathBuf> {
    let mut resolved = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => resolved = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(name) => {
                let next = resolved.join(name);
                match std::fs::symlink_metadata(&next) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        *links += 1;
                        if *links > MAX_LINKS {
                            return Err(io::Error::other(format!(
                                "too many levels of symbolic links at {}",
                                next.display()
                            )));
                        }
                        let target = std::fs::read_link(&next)?;
                        resolved = resolve(&resolved.join(target), links)?;
                    }
                    _ => resolved = next,
                }
            }
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("exec-server-roots-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/sub")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        std::fs::canonicalize(dir).unwrap()
    }

    #[test]
    fn confines_paths_after_resolving_links_and_dotdot() {
        let dir = scratch("confine");
        let root = dir.join("root");
        symlink(dir.join("outside"), root.join("escape")).unwrap();
        symlink(root.join("sub"), root.join("inner")).unwrap();
        symlink(dir.join("outside/nothing-here"), root.join("dangling")).unwrap();
        let roots = Roots::new(std::slice::from_ref(&root)).unwrap();
        let allowed = |p: PathBuf| roots.check(&p, Follow::All).is_ok();
        assert!(allowed(root.join("sub/new-file")));
        assert!(allowed(root.join("inner/x")));
        assert!(allowed(root.clone()));
        assert!(!allowed(root.join("escape/x")));
        assert!(!allowed(root.join("dangling")));
        assert!(!allowed(root.join("sub/../../outside")));
        assert!(!allowed(root.join("missing/../../outside")));
        assert!(!allowed(dir.join("outside")));
        // Removing or renaming the link itself stays inside.
        assert!(roots.check(&root.join("escape"), Follow::Parent).is_ok());
        assert_eq!(
            roots.check(&dir.join("outside"), Follow::All).unwrap_err().message,
            format!("path {} is outside the allowed roots", dir.join("outside").display())
        );
        assert_eq!(
            roots.check(Path::new("rel/x"), Follow::All).unwrap_err().message,
            "path must be absolute: rel/x"
        );
    }

    #[test]
    fn no_roots_means_no_confinement() {
        assert!(Roots::default().check(Path::new("/etc/passwd"), Follow::All).is_ok());
    }

    #[test]
    fn link_loops_are_refused() {
        let dir = scratch("loop");
        let root = dir.join("root");
        symlink(root.join("b"), root.join("a")).unwrap();
        symlink(root.join("a"), root.join("b")).unwrap();
        let roots = Roots::new(std::slice::from_ref(&root)).unwrap();
        assert!(roots.check(&root.join("a"), Follow::All).is_err());
    }
}
