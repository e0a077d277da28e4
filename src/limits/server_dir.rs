//! The server's own directory in each hierarchy, `exec-server-PID` beside
//! (v1) or below (v2) its cgroup, made at the first limited start. Its
//! children are the starts' cgroups. Made once per hierarchy (a v2 one gets
//! controllers enabled as starts need them); it is removed at the
//! process's normal exit, and the watcher removes it when the server ends,
//! however it ends. (Another server does
//! not remove it: in another PID namespace, a live server's pid can look
//! dead.) A v2 directory needs the
//! controllers delegated: the server's processes move to a leaf
//! (`exec-server-PID/server`, since a v2 cgroup with processes cannot hand
//! controllers to its children) and the controllers are enabled on the way.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

use super::file::write;
use super::hierarchy::{Controller, Version};

/// Made directories, by the server's cgroup they are in.
static MADE: Mutex<Option<HashMap<PathBuf, PathBuf>>> = Mutex::new(None);

/// The prefix of a server's directory; the pid follows.
const PREFIX: &str = "exec-server-";

/// The server's directory under `home`, made (and delegated) if it is not yet.
pub(crate) fn ensure(
    home: &Path,
    version: Version,
    controllers: &[Controller],
) -> Result<PathBuf, String> {
    let mut made = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let made = made.get_or_insert_with(HashMap::new);
    let dir = home.join(format!("{PREFIX}{}", std::process::id()));
    remove_at_exit();
    match version {
        Version::V1 => {
            if made.contains_key(home) {
                return Ok(dir);
            }
            make(&dir)?;
        }
        Version::V2 => {
            // The server's processes move out once; controllers are enabled
            // at every call (a later start may need one not enabled yet).
            let first = !made.contains_key(home);
            delegate(home, &dir, controllers, std::process::id(), first)?;
        }
    }
    made.insert(home.to_path_buf(), dir.clone());
    Ok(dir)
}

/// Registers, once, the removal of this process's directories when it exits
/// normally (`exit(3)` runs it): a server embedded in a program has no
/// watcher, and the binary's is then left nothing to do. A directory that
/// still holds a process (a v2 leaf holds this one) stays; where there is a
/// watcher, it removes that after.
fn remove_at_exit() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function that never unwinds.
        unsafe { libc::atexit(remove_made) };
    });
}

/// The exit handler: removes what it can, quietly (logging may be gone).
extern "C" fn remove_made() {
    let _ = std::panic::catch_unwind(|| {
        // Another thread may hold the lock as the process exits: then nothing.
        let Ok(made) = MADE.try_lock() else { return };
        for dir in made.iter().flat_map(HashMap::values) {
            let _ = super::file::remove_tree(dir);
        }
    });
}

/// Every server directory made so far (for the watcher).
pub(crate) fn all() -> Vec<PathBuf> {
    let made = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    made.as_ref().map(|made| made.values().cloned().collect()).unwrap_or_default()
}

fn make(dir: &Path) -> Result<(), String> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(format!("cannot create {}: {error}", dir.display())),
    }
}

/// v2: makes `dir`, moves the server's processes (`me` and its children)
/// out of `home` into `dir/server` unless `home` is the root, and enables
/// `controllers` in `home` and `dir` for their children.
pub(crate) fn delegate(
    home: &Path,
    dir: &Path,
    controllers: &[Controller],
    me: u32,
    first: bool,
) -> Result<(), String> {
    make(dir)?;
    // Only the root cgroup has no `cgroup.type`, and only it may hold
    // processes while its children have controllers.
    if first && home.join("cgroup.type").exists() {
        let leaf = dir.join("server");
        make(&leaf)?;
        // The home's own processes only: the starts' cgroups below are not its.
        let members = super::own_members(home);
        // Checked before anything moves: all of them are ours, or none moves.
        if let Some(pid) = members.iter().find(|&&pid| pid != me && parent_of(pid) != Some(me)) {
            return Err(format!(
                "the server's cgroup {} holds a process that is not the server's (pid {pid}); start the server in a delegated cgroup of its own, e.g. `systemd-run --user --scope -p Delegate=yes exec-server`",
                home.display()
            ));
        }
        // The server itself (which `members` leaves out) first.
        for pid in std::iter::once(me).chain(members) {
            write(&leaf.join("cgroup.procs"), &pid.to_string())
                .map_err(|error| format!("cannot move pid {pid} to {}: {error}", leaf.display()))?;
        }
    }
    let enable: String = controllers.iter().map(|c| format!("+{} ", c.name())).collect();
    for at in [home, dir] {
        let file = at.join("cgroup.subtree_control");
        write(&file, enable.trim_end()).map_err(|error| {
            format!("cannot enable {} in {}: {error}", enable.trim_end(), file.display())
        })?;
    }
    Ok(())
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Removes a server directory with the cgroups below it (each must be
/// empty of processes). What cannot be removed is left and logged.
pub(crate) fn remove_all(dir: &Path) {
    if let Err(error) = super::file::remove_tree(dir) {
        tracing::warn!(%error, cgroup = %dir.display(), "cannot remove a cgroup");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("exec-server-cgv2-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A delegated v2 scope, as plain files: the server (and its child, the
    /// watcher) move to the leaf and the controllers are enabled on the way.
    #[test]
    fn a_v2_scope_is_delegated_through_its_interface_files() {
        let home = temp("scope");
        fs::write(home.join("cgroup.type"), "domain\n").unwrap();
        fs::write(home.join("cgroup.procs"), format!("{}\n", std::process::id())).unwrap();
        let dir = home.join("exec-server-7");
        // What the kernel makes with each directory, made by hand here.
        fs::create_dir_all(dir.join("server")).unwrap();
        for file in [
            "cgroup.subtree_control",
            "exec-server-7/cgroup.subtree_control",
            "exec-server-7/server/cgroup.procs",
        ] {
            fs::write(home.join(file), "").unwrap();
        }
        delegate(&home, &dir, &[Controller::Memory, Controller::Pids], std::process::id(), true)
            .unwrap();
        for file in ["cgroup.subtree_control", "exec-server-7/cgroup.subtree_control"] {
            assert_eq!(fs::read_to_string(home.join(file)).unwrap(), "+memory +pids");
        }
        assert_eq!(
            fs::read_to_string(dir.join("server/cgroup.procs")).unwrap(),
            std::process::id().to_string()
        );
        // A later start: a tree's process below is neither moved nor refused;
        // only the controllers it needs are enabled.
        fs::create_dir_all(dir.join("1")).unwrap();
        fs::write(dir.join("1/cgroup.procs"), "1\n").unwrap();
        // (A plain file keeps what was written before: emptied as the kernel's would read.)
        for file in ["server/cgroup.procs", "cgroup.subtree_control"] {
            fs::write(dir.join(file), "").unwrap();
        }
        delegate(&home, &dir, &[Controller::Cpu], std::process::id(), false).unwrap();
        assert_eq!(fs::read_to_string(dir.join("server/cgroup.procs")).unwrap(), "");
        assert_eq!(fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap(), "+cpu");
        fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn a_v2_scope_shared_with_others_is_refused_by_name() {
        let home = temp("shared");
        fs::write(home.join("cgroup.type"), "domain\n").unwrap();
        fs::write(home.join("cgroup.procs"), "1\n").unwrap();
        let error = delegate(
            &home,
            &home.join("exec-server-7"),
            &[Controller::Cpu],
            std::process::id(),
            true,
        )
        .unwrap_err();
        assert!(error.contains("holds a process that is not the server's (pid 1)"), "{error}");
        assert!(!home.join("cgroup.subtree_control").exists());
        fs::remove_dir_all(&home).unwrap();
    }
}
