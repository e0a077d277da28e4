//! A `restricted` sandbox given as an access list, resolved against the
//! filesystem when it is used (off the loop): each path canonical (a link
//! such as `/bin` → `usr/bin` resolved once), missing ones skipped, the names
//! kept read-only beneath writable entries added, deny globs scanned. The
//! result serves processes ([`Policy::from_map`]: Landlock, binds and masks) and fs
//! calls (the map itself) alike.

use std::path::{Path, PathBuf};

use crate::fs::{AccessMap, Pattern, Roots};
use crate::protocol::{Access, ErrorObject, Sandbox};

/// How deny globs are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Globs {
    /// Scanned now, each match a deny entry (a process's masks).
    Scan,
    /// Kept in the map and matched against each path checked (fs calls).
    Match,
}

/// The access map `sandbox` (which has an `access` list) describes now.
pub(crate) fn resolve_map(
    sandbox: &Sandbox,
    roots: &Roots,
    globs: Globs,
) -> Result<AccessMap, ErrorObject> {
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    let mut to_make = Vec::new();
    // Where each write entry is meant, even one missing (a `make` entry
    // it names is left to it).
    let mut meant_writable = Vec::new();
    for entry in sandbox.access.iter().flatten() {
        if entry.make && entry.access == Access::Read {
            to_make.push(&entry.path);
            continue;
        }
        if entry.access == Access::Write {
            meant_writable.push(as_meant(&entry.path));
        }
        match canonical(&entry.path)? {
            Some(path) => {
                if entry.access != Access::Deny {
                    check_inside_roots(&path, roots)?;
                }
                entries.push((path, entry.access));
            }
            None if entry.access == Access::Deny && !entry.optional => missing.push(&entry.path),
            None => {}
        }
    }
    let writable: Vec<PathBuf> =
        entries.iter().filter(|(_, a)| *a == Access::Write).map(|(p, _)| p.clone()).collect();
    for entry in sandbox.access.iter().flatten() {
        let what = format!("sandbox access path {}", entry.path.display());
        check_links(&entry.path, &writable, &what)?;
    }
    for path in to_make {
        if let Some(made) = made(path, &writable, &meant_writable, globs)? {
            entries.push((made, Access::Read));
        }
    }
    let mut patterns = Vec::new();
    for text in sandbox.deny_globs.iter().flatten() {
        // Checked paths are canonical, so the fixed prefix is made so too
        // (a cwd given through a link still finds its matches).
        let pattern = Pattern::new(text, sandbox.glob_scan_max_depth)?;
        check_links(pattern.base(), &writable, &format!("sandbox deny glob {text:?}"))?;
        let pattern = pattern.resolved(as_meant);
        if globs == Globs::Match {
            patterns.push(pattern);
            continue;
        }
        for found in pattern.scan(Path::new("/"))? {
            if let Some(path) = canonical(&found)? {
                entries.push((path, Access::Deny));
            }
        }
    }
    let names = sandbox.keep_read_only.as_deref().unwrap_or_default();
    let kept = kept_read_only(&AccessMap::new(entries.clone()), names, &writable)?;
    entries.extend(kept);
    let map = AccessMap::new(entries).with_globs(patterns);
    for path in missing {
        if let Some((writable, Access::Write)) = map.nearest(&as_meant(path)) {
            return Err(ErrorObject::invalid_request(format!(
                "sandbox deny path {} does not exist inside writable {}, so it cannot be kept hidden (it could be created); mark it optional to skip it",
                path.display(),
                writable.display()
            )));
        }
    }
    Ok(map)
}

/// A `make` entry, by its real path: kept only directly inside a write
/// entry (it grants nothing elsewhere) and not named by a write entry of its
/// own; when it does not exist, made now for a process (so that a read-only
/// mount can go there), or only named for an fs call (whose checks need no
/// mount).
fn made(
    path: &Path,
    writable: &[PathBuf],
    meant_writable: &[PathBuf],
    globs: Globs,
) -> Result<Option<PathBuf>, ErrorObject> {
    let (existing, rest) = nearest_existing(path);
    let at = existing.join(&rest);
    let parent = at.parent().unwrap_or(&at);
    if rest.components().count() > 1 || !writable.iter().any(|w| w == parent) {
        return Ok(None);
    }
    if meant_writable.contains(&at) {
        return Ok(None);
    }
    if rest.as_os_str().is_empty() || globs == Globs::Match {
        return Ok(Some(at));
    }
    match std::fs::create_dir(&at) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(ErrorObject::invalid_request(format!(
                "sandbox access path {} cannot be made to keep it read-only: {e}",
                path.display()
            )))
        }
    }
    // Made by someone else meanwhile, as a link: refused as a link would be.
    if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
        return Err(ErrorObject::invalid_request(format!(
            "sandbox access path {} was made meanwhile, and not as a directory",
            path.display()
        )));
    }
    Ok(Some(at))
}

/// `path` with its links resolved; `None` when it does not exist.
fn canonical(path: &Path) -> Result<Option<PathBuf>, ErrorObject> {
    let named = |problem: String| {
        ErrorObject::invalid_request(format!("sandbox access path {} {problem}", path.display()))
    };
    match std::fs::canonicalize(path) {
        Ok(canonical) => Ok(Some(canonical)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(named(format!("cannot be used: {e}"))),
    }
}

/// Under `--root`, a granted path must lie inside a root, except `/`
/// itself: everything, which grants a process nothing that running without
/// a sandbox would not (a context that keeps only the network), while fs calls stay
/// inside the roots whatever the list says.
fn check_inside_roots(path: &Path, roots: &Roots) -> Result<(), ErrorObject> {
    if !roots.confined() || path.parent().is_none() {
        return Ok(());
    }
    let inside = roots.locate(path).ok().and_then(|located| located.open(libc::O_PATH).ok());
    match inside {
        Some(_) => Ok(()),
        None => Err(ErrorObject::invalid_request(format!(
            "sandbox access path {} is outside the allowed roots",
            path.display()
        ))),
    }
}

/// Refuses `what` (an entry, a glob's fixed prefix, a gitdir), whose path
/// goes through a symlink that lies inside a writable entry: a process could
/// have pointed it anywhere since (a read entry through it would grant what
/// it chose, a deny entry or glob hide nothing).
pub(super) fn check_links(
    path: &Path,
    writable: &[PathBuf],
    what: &str,
) -> Result<(), ErrorObject> {
    let mut at = PathBuf::from("/");
    for part in path.components().skip(1) {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else { return Ok(()) };
        if !meta.file_type().is_symlink() {
            continue;
        }
        let parent = at.parent().and_then(|p| std::fs::canonicalize(p).ok());
        let place = parent.map(|p| p.join(part));
        if let Some(root) = place.and_then(|place| writable.iter().find(|w| place.starts_with(w))) {
            return Err(ErrorObject::invalid_request(format!(
                "{what} goes through the symlink {}, which lies inside writable {} (a process could have pointed it anywhere)",
                at.display(),
                root.display()
            )));
        }
        // Later components resolve from where the link leads.
        match std::fs::canonicalize(&at) {
            Ok(target) => at = target,
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

/// The read entries for `names` beneath each writable directory entry: a
/// directory of that name, or a `.git` file and the directory it points to
/// (only where the map makes it writable: a `.git` file, which a process may
/// have written, never grants anything). An entry given for the very path
/// wins. A name that is a symlink, or a gitdir reached through one inside a
/// writable entry, is refused: a process could point it elsewhere, and what
/// was kept read-only would no longer be what git or the agent reads.
fn kept_read_only(
    map: &AccessMap,
    names: &[String],
    writable: &[PathBuf],
) -> Result<Vec<(PathBuf, Access)>, ErrorObject> {
    let entries = map.entries();
    let given = |path: &Path| entries.iter().any(|(p, _)| p == path);
    let mut kept = Vec::new();
    for (root, access) in entries {
        if *access != Access::Write || !root.is_dir() {
            continue;
        }
        for name in names.iter().filter(|n| !n.is_empty() && !n.contains('/') && *n != "..") {
            let path = root.join(name);
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if given(&path) {
                continue;
            }
            if meta.file_type().is_symlink() {
                return Err(ErrorObject::invalid_request(format!(
                    "sandbox keeps {} read-only, but it is a symlink inside writable {} (a process could point it anywhere)",
                    path.display(),
                    root.display()
                )));
            }
            if meta.is_dir() {
                kept.push((path, Access::Read));
            } else if meta.is_file() && name == ".git" {
                let gitdir = std::fs::read_to_string(&path).ok().and_then(|text| {
                    Some(root.join(text.lines().next()?.strip_prefix("gitdir:")?.trim()))
                });
                if let Some(gitdir) = &gitdir {
                    let what = format!("the gitdir {} of {}", gitdir.display(), path.display());
                    check_links(gitdir, writable, &what)?;
                }
                let target = gitdir.and_then(|dir| std::fs::canonicalize(dir).ok());
                kept.push((path, Access::Read));
                let writable = |t: &PathBuf| map.at(t) == Some(Access::Write);
                if let Some(target) = target.filter(|t| t.is_dir() && !given(t) && writable(t)) {
                    kept.push((target, Access::Read));
                }
            }
        }
    }
    Ok(kept)
}

/// `path` with the links of its existing part resolved: where it is meant,
/// whether or not it exists.
fn as_meant(path: &Path) -> PathBuf {
    let (existing, rest) = nearest_existing(path);
    existing.join(rest)
}

/// The nearest existing ancestor of `path`, canonical, and the rest.
fn nearest_existing(path: &Path) -> (PathBuf, PathBuf) {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(at) {
            return (canonical, rest.iter().rev().collect());
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                at = parent;
            }
            _ => return (PathBuf::from("/"), path.strip_prefix("/").unwrap_or(path).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::AccessEntry;

    #[test]
    fn missing_paths_are_skipped_unless_a_deny_could_be_created() {
        let dir = std::env::temp_dir().join(format!("exec-server-access-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("w/.git")).unwrap();
        std::fs::create_dir_all(dir.join("w/.codex")).unwrap();
        let entry =
            |path: PathBuf, access, optional| AccessEntry { path, access, optional, make: false };
        let mut sandbox = Sandbox::access([
            entry(dir.join("w"), Access::Write, false),
            entry(dir.join("gone"), Access::Read, false),
            entry(dir.join("w/.codex"), Access::Write, false),
        ]);
        sandbox.keep_read_only = Some(vec![".git".into(), ".codex".into(), ".agents".into()]);
        let map = resolve_map(&sandbox, &Roots::empty(), Globs::Scan).unwrap();
        let canonical = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(
            map.entries(),
            [
                (canonical.join("w"), Access::Write),
                (canonical.join("w/.codex"), Access::Write),
                (canonical.join("w/.git"), Access::Read),
            ]
        );
        // A .git file pointing outside the writable entries grants nothing.
        std::fs::remove_dir(dir.join("w/.git")).unwrap();
        std::fs::write(dir.join("w/.git"), "gitdir: /etc\n").unwrap();
        let map = resolve_map(&sandbox, &Roots::empty(), Globs::Scan).unwrap();
        assert_eq!(map.at(Path::new("/etc/passwd")), None);
        assert_eq!(map.at(&canonical.join("w/.git")), Some(Access::Read));
        // An entry through a link inside a writable entry is refused.
        std::os::unix::fs::symlink("/etc", dir.join("w/link")).unwrap();
        let mut linked = sandbox.clone();
        linked.access.as_mut().unwrap().push(entry(dir.join("w/link/ssh"), Access::Read, false));
        let error = resolve_map(&linked, &Roots::empty(), Globs::Scan).unwrap_err();
        assert_eq!(
            error.message,
            format!(
                "sandbox access path {} goes through the symlink {}, which lies inside writable {} (a process could have pointed it anywhere)",
                dir.join("w/link/ssh").display(),
                canonical.join("w/link").display(),
                canonical.join("w").display()
            )
        );
        // A glob whose fixed prefix goes through that link is refused too.
        let mut globbed = sandbox.clone();
        globbed.deny_globs = Some(vec![format!("{}/w/link/**/*.env", dir.display())]);
        let error = resolve_map(&globbed, &Roots::empty(), Globs::Scan).unwrap_err();
        assert_eq!(
            error.message,
            format!(
                "sandbox deny glob \"{}/w/link/**/*.env\" goes through the symlink {}, which lies inside writable {} (a process could have pointed it anywhere)",
                dir.display(),
                canonical.join("w/link").display(),
                canonical.join("w").display()
            )
        );
        // So is a gitdir reached through it, and a kept name that is a link.
        std::fs::write(dir.join("w/.git"), "gitdir: link/x\n").unwrap();
        let error = resolve_map(&sandbox, &Roots::empty(), Globs::Scan).unwrap_err();
        assert_eq!(
            error.message,
            format!(
                "the gitdir {} of {} goes through the symlink {}, which lies inside writable {} (a process could have pointed it anywhere)",
                canonical.join("w/link/x").display(),
                canonical.join("w/.git").display(),
                canonical.join("w/link").display(),
                canonical.join("w").display()
            )
        );
        std::fs::remove_file(dir.join("w/.git")).unwrap();
        std::os::unix::fs::symlink("link", dir.join("w/.git")).unwrap();
        let error = resolve_map(&sandbox, &Roots::empty(), Globs::Scan).unwrap_err();
        assert_eq!(
            error.message,
            format!(
                "sandbox keeps {} read-only, but it is a symlink inside writable {} (a process could point it anywhere)",
                canonical.join("w/.git").display(),
                canonical.join("w").display()
            )
        );
        std::fs::remove_file(dir.join("w/.git")).unwrap();
        sandbox.access.as_mut().unwrap().push(entry(dir.join("w/new"), Access::Deny, false));
        let error = resolve_map(&sandbox, &Roots::empty(), Globs::Scan).unwrap_err();
        assert!(error.message.contains("does not exist inside writable"), "{}", error.message);
        sandbox.access.as_mut().unwrap().last_mut().unwrap().optional = true;
        assert!(resolve_map(&sandbox, &Roots::empty(), Globs::Scan).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
