//! What a start asks for and what the server allows: the policy as plain data,
//! checked when the start is decoded ([`check_request`], no syscalls) and
//! resolved against the filesystem off the loop ([`resolve`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dial::Rules;
use crate::fs::{AccessMap, Roots};
use crate::protocol::{Access, ErrorObject, Network, Sandbox, SandboxMode};

/// The most paths an access list may shape the mount view with.
pub(crate) const MAX_VIEW_MOUNTS: usize = 1024;

/// A resolved policy: canonical directories that exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Policy {
    /// Writes of any kind only beneath these.
    #[serde(with = "super::wire_path::list")]
    pub(crate) writable: Vec<PathBuf>,
    /// Reads only beneath these and `writable`; `None`: reads everywhere.
    #[serde(with = "super::wire_path::optional_list")]
    pub(crate) readable: Option<Vec<PathBuf>>,
    /// Inside writable (or masked) ones, shown read-only (a bind).
    #[serde(default, with = "super::wire_path::list")]
    pub(crate) read_only: Vec<PathBuf>,
    /// Inside readable or writable ones, shown empty (an empty directory or
    /// file over them).
    #[serde(default, with = "super::wire_path::list")]
    pub(crate) masked: Vec<PathBuf>,
    /// The directories between a writable path and a read-only or masked
    /// one inside it, each made a mount point of itself (still writable) so
    /// that no rename can carry what lies beneath it elsewhere on the host.
    #[serde(default, with = "super::wire_path::list")]
    pub(crate) pinned: Vec<PathBuf>,
    /// IP sockets (false: none at all).
    pub(crate) network: bool,
    /// With `network`: a network namespace holding only its own loopback,
    /// where the server's proxy listens, instead of the host's egress.
    #[serde(default)]
    pub(crate) proxied: bool,
    /// The proxy's rules: the server keeps them, the trampoline needs none.
    #[serde(skip)]
    pub(crate) rules: Option<Arc<Rules>>,
    /// A program the sandbox keeps from running still starts: the process
    /// says why on stderr and exits 127 (else the start fails).
    #[serde(default)]
    pub(crate) exit_on_exec_failure: bool,
    /// A refused socket fails with EPERM instead of EACCES (as upstream's filter answers).
    #[serde(default)]
    pub(crate) eperm_sockets: bool,
}

impl Policy {
    /// The process policy of `map`: Landlock reads beneath every read or write
    /// entry and writes beneath the write entries; in the mount view, read
    /// entries inside a writable or hidden one are bound read-only, and deny
    /// entries inside a visible one are masked.
    pub(crate) fn from_map(map: &AccessMap, network: bool) -> Policy {
        let mut policy = Policy {
            writable: Vec::new(),
            readable: Some(Vec::new()),
            read_only: Vec::new(),
            masked: Vec::new(),
            pinned: Vec::new(),
            network,
            proxied: false,
            rules: None,
            exit_on_exec_failure: false,
            eperm_sockets: false,
        };
        for (path, access) in map.entries() {
            let above = map.above(path);
            let path = path.clone();
            match access {
                Access::Write => {
                    policy.writable.push(path.clone());
                    policy.readable.get_or_insert_with(Vec::new).push(path);
                }
                Access::Read => {
                    if matches!(above, Some(Access::Write | Access::Deny)) {
                        policy.read_only.push(path.clone());
                    }
                    policy.readable.get_or_insert_with(Vec::new).push(path);
                }
                Access::Deny => {
                    if matches!(above, Some(Access::Read | Access::Write)) {
                        policy.masked.push(path);
                    }
                }
            }
        }
        policy.pinned = pins(map, policy.read_only.iter().chain(&policy.masked));
        policy
    }
}

/// The directories above each of `inner` that are writable and lie in a
/// writable directory (so are not mounts of their own): a process could
/// rename one of them, carrying a carve-out's or mask's contents to a path
/// the list does not name for its next run to find, unless it is a mount
/// point.
fn pins<'a>(map: &AccessMap, inner: impl Iterator<Item = &'a PathBuf>) -> Vec<PathBuf> {
    let writable = |dir: &Path| map.at(dir) == Some(Access::Write);
    let mut pinned: Vec<PathBuf> = inner
        .flat_map(|path| path.ancestors().skip(1))
        .filter(|dir| writable(dir) && dir.parent().is_some_and(writable))
        .map(Path::to_path_buf)
        .collect();
    pinned.sort();
    pinned.dedup();
    pinned
}

impl Policy {
    /// For a start with limits: its view of every cgroup hierarchy (mounted
    /// at `mounts`, as the host's mount table says) stays read-only, even
    /// under a writable root that covers it (`/`, `/sys`), so that the tree
    /// cannot change or leave its cgroup. A writable root inside one cannot
    /// be made so, and is refused.
    pub(crate) fn keep_cgroups_read_only(&mut self, mounts: &[PathBuf]) -> Result<(), String> {
        for mount in mounts.iter().filter(|mount| mount.is_dir()) {
            if let Some(inside) = self.writable.iter().find(|root| root.starts_with(mount)) {
                return Err(format!(
                    "the writable root {} is inside the cgroup hierarchy {}: the process could change its own limits",
                    inside.display(),
                    mount.display()
                ));
            }
            let covered = self.writable.iter().any(|root| mount.starts_with(root));
            if covered && !self.read_only.contains(mount) {
                self.read_only.push(mount.clone());
            }
        }
        Ok(())
    }
}

/// The server's own sandbox settings (`--sandbox`, `--sandbox-network`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Every process is confined.
    pub(crate) always: bool,
    /// Under `always`, the default policy keeps the network.
    pub(crate) network: bool,
    /// Under `always`, the default policy reaches only these hosts, through
    /// the proxy (`--sandbox-allow-host`); a start may narrow them.
    pub(crate) allow_hosts: Option<Arc<Rules>>,
    /// The `exec-server` binary that applies a policy (None: this process's own).
    pub(crate) helper: Option<Arc<Path>>,
}

/// Checks the shape of a start's `sandbox` before anything runs: the exact
/// Part A error for `hostDefault` without `--sandbox`, fields only with
/// `restricted`, absolute roots.
pub(crate) fn check_request(
    sandbox: Option<&Sandbox>,
    settings: &Settings,
) -> Result<(), ErrorObject> {
    let Some(sandbox) = sandbox else { return Ok(()) };
    match sandbox.mode {
        SandboxMode::HostDefault if !settings.always => {
            return Err(ErrorObject::invalid_request(
                "sandbox mode `hostDefault` is not supported by exec-server yet",
            ))
        }
        SandboxMode::Restricted => {}
        SandboxMode::None | SandboxMode::HostDefault => {
            let stray = [
                ("writableRoots", sandbox.writable_roots.is_some()),
                ("readableRoots", sandbox.readable_roots.is_some()),
                ("network", sandbox.network.is_some()),
                ("access", sandbox.access.is_some()),
                ("denyGlobs", sandbox.deny_globs.is_some()),
                ("globScanMaxDepth", sandbox.glob_scan_max_depth.is_some()),
                ("keepReadOnly", sandbox.keep_read_only.is_some()),
            ];
            if let Some((field, _)) = stray.iter().find(|(_, given)| *given) {
                return Err(ErrorObject::invalid_params(format!(
                    "sandbox {field} is only valid with mode `restricted`"
                )));
            }
            return Ok(());
        }
    }
    if let Some(Network::Policy(policy)) = &sandbox.network {
        Rules::parse(policy).map_err(|e| ErrorObject::invalid_params(e.to_string()))?;
    }
    if let Some(entries) = &sandbox.access {
        if sandbox.writable_roots.is_some() || sandbox.readable_roots.is_some() {
            return Err(ErrorObject::invalid_params(
                "sandbox access replaces writableRoots and readableRoots; give one or the other",
            ));
        }
        if let Some(entry) = entries.iter().find(|e| !e.path.is_absolute()) {
            return Err(ErrorObject::invalid_params(format!(
                "sandbox access path {} must be an absolute path",
                entry.path.display()
            )));
        }
        return Ok(());
    }
    let extras = [
        ("denyGlobs", sandbox.deny_globs.is_some()),
        ("globScanMaxDepth", sandbox.glob_scan_max_depth.is_some()),
        ("keepReadOnly", sandbox.keep_read_only.is_some()),
    ];
    if let Some((field, _)) = extras.iter().find(|(_, given)| *given) {
        return Err(ErrorObject::invalid_params(format!(
            "sandbox {field} is only valid with an access list"
        )));
    }
    if sandbox.writable_roots.is_none() {
        return Err(ErrorObject::invalid_params(
            "sandbox mode `restricted` requires writableRoots (an empty list: nothing is writable)",
        ));
    }
    let roots = sandbox.writable_roots.iter().flatten().map(|r| ("writable", r));
    let readable = sandbox.readable_roots.iter().flatten().map(|r| ("readable", r));
    if let Some((kind, root)) = roots.chain(readable).find(|(_, root)| !root.is_absolute()) {
        return Err(ErrorObject::invalid_params(format!(
            "sandbox {kind} root {} must be an absolute path",
            root.display()
        )));
    }
    Ok(())
}

/// The policy a start runs under, or `None` for no sandbox. Touches the
/// filesystem (canonical paths, directory checks): runs on the spawner thread.
pub(crate) fn resolve(
    sandbox: Option<&Sandbox>,
    settings: &Settings,
    roots: &Roots,
    cwd: &Path,
) -> Result<Option<Policy>, ErrorObject> {
    let policy = resolve_policy(sandbox, settings, roots, cwd)?;
    // Fail closed: a sandbox with network never runs on the host's network.
    let full = policy.as_ref().is_some_and(|policy| policy.network && !policy.proxied);
    if full && super::network::helper().is_none() {
        return Err(ErrorObject::invalid_request(format!(
            "process/start refused: {}",
            super::network::missing()
        )));
    }
    Ok(policy)
}

fn resolve_policy(
    sandbox: Option<&Sandbox>,
    settings: &Settings,
    roots: &Roots,
    cwd: &Path,
) -> Result<Option<Policy>, ErrorObject> {
    let restricted = sandbox.filter(|s| s.mode == SandboxMode::Restricted);
    let default = if settings.always {
        let writable =
            if roots.confined() { roots.canonical() } else { vec![canonical(cwd, "cwd")?] };
        Some(Policy {
            writable,
            readable: None,
            read_only: Vec::new(),
            masked: Vec::new(),
            pinned: Vec::new(),
            network: settings.network || settings.allow_hosts.is_some(),
            proxied: settings.allow_hosts.is_some(),
            rules: settings.allow_hosts.clone(),
            exit_on_exec_failure: false,
            eperm_sockets: false,
        })
    } else {
        None
    };
    let Some(asked) = restricted else { return Ok(default) };
    if asked.access.is_some() {
        let map = super::access::resolve_map(asked, roots, super::access::Globs::Scan)?;
        let mut policy = Policy::from_map(&map, false);
        policy.set_network(asked.network.as_ref())?;
        let mounts = policy.writable.len()
            + policy.read_only.len()
            + policy.masked.len()
            + policy.pinned.len();
        if mounts > MAX_VIEW_MOUNTS {
            return Err(ErrorObject::invalid_request(format!(
                "sandbox access list needs {mounts} mounts (writable, read-only and denied paths, deny glob matches and the directories between them included); at most {MAX_VIEW_MOUNTS}"
            )));
        }
        return narrowed(policy, default);
    }
    let writable = asked
        .writable_roots
        .iter()
        .flatten()
        .map(|root| checked_root(root, "writable", roots))
        .collect::<Result<Vec<_>, _>>()?;
    let readable = match &asked.readable_roots {
        None => None,
        Some(list) => Some(
            list.iter()
                .map(|root| checked_root(root, "readable", roots))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    // A root reached through a symlink inside a writable root is refused: a
    // process could repoint the link, and the next start with the same
    // roots would confine (or grant) wherever it leads then.
    let given = [("writable", &asked.writable_roots), ("readable", &asked.readable_roots)];
    for (kind, list) in given {
        for root in list.iter().flatten().filter(|root| root.is_absolute()) {
            let what = format!("sandbox {kind} root {}", root.display());
            super::access::check_links(root, &writable, &what)?;
        }
    }
    let mut policy = Policy {
        writable,
        readable,
        read_only: Vec::new(),
        masked: Vec::new(),
        pinned: Vec::new(),
        network: false,
        proxied: false,
        rules: None,
        exit_on_exec_failure: false,
        eperm_sockets: false,
    };
    policy.set_network(asked.network.as_ref())?;
    narrowed(policy, default)
}

impl Policy {
    /// The network a start asked for; a malformed policy is refused (-32602).
    fn set_network(&mut self, asked: Option<&Network>) -> Result<(), ErrorObject> {
        let policy = match asked {
            None | Some(Network::Off) => return Ok(()),
            Some(Network::Full) => None,
            Some(Network::Policy(policy)) => Some(policy),
        };
        self.network = true;
        self.proxied = policy.is_some();
        if let Some(policy) = policy {
            let rules =
                Rules::parse(policy).map_err(|e| ErrorObject::invalid_params(e.to_string()))?;
            self.rules = Some(Arc::new(rules));
        }
        Ok(())
    }
}

/// `policy`, checked to narrow the server's default one under `--sandbox`.
fn narrowed(mut policy: Policy, default: Option<Policy>) -> Result<Option<Policy>, ErrorObject> {
    if let Some(server) = default.as_ref().and_then(|default| default.rules.as_ref()) {
        // The server's list holds: a start may narrow it, never widen it.
        if policy.network && !policy.proxied {
            return Err(ErrorObject::invalid_request(
                "sandbox network true is not allowed: the server limits the network to the hosts of --sandbox-allow-host; give a policy instead",
            ));
        }
        if let Some(start) = &policy.rules {
            policy.rules = Some(Arc::new(server.narrowed(start)));
        }
    }
    let (writable, network) = (&policy.writable, policy.network);
    if let Some(default) = default {
        // Under --sandbox a restricted policy may only narrow the default one.
        if let Some(root) =
            writable.iter().find(|r| !default.writable.iter().any(|d| r.starts_with(d)))
        {
            return Err(ErrorObject::invalid_request(format!(
                "sandbox writable root {} is outside the server's sandbox (writable: {})",
                root.display(),
                list(&default.writable)
            )));
        }
        if network && !default.network {
            return Err(ErrorObject::invalid_request(
                "sandbox network is not allowed: the server runs with --sandbox and without --sandbox-network",
            ));
        }
    }
    Ok(Some(policy))
}

/// A root of the policy: canonical, an existing directory, and under `--root` inside a root.
fn checked_root(root: &Path, kind: &str, roots: &Roots) -> Result<PathBuf, ErrorObject> {
    let canonical = canonical(root, &format!("{kind} root"))?;
    if roots.confined() {
        roots.check_cwd(&canonical).map_err(|_| {
            ErrorObject::invalid_request(format!(
                "sandbox {kind} root {} is outside the allowed roots",
                root.display()
            ))
        })?;
    }
    Ok(canonical)
}

/// `path` with symlinks resolved once, now (`/bin` is `/usr/bin` on a
/// merged-/usr system): the resolved directory is what the sandbox confines,
/// opened without following links in the child, so a link changed later has
/// no effect. -32600 naming it when it is missing or not a directory.
fn canonical(path: &Path, what: &str) -> Result<PathBuf, ErrorObject> {
    let named = |problem: String| {
        ErrorObject::invalid_request(format!("sandbox {what} {} {problem}", path.display()))
    };
    let canonical = std::fs::canonicalize(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => named("does not exist".to_owned()),
        _ => named(format!("cannot be used: {e}")),
    })?;
    if !canonical.is_dir() {
        return Err(named("is not a directory".to_owned()));
    }
    if canonical.to_str().is_none() {
        return Err(named("is not valid UTF-8".to_owned()));
    }
    Ok(canonical)
}

fn list(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_become_landlock_roots_binds_and_masks() {
        let map = AccessMap::new(vec![
            ("/usr".into(), Access::Read),
            ("/w".into(), Access::Write),
            ("/w/.git".into(), Access::Read),
            ("/w/secret".into(), Access::Deny),
            ("/w/secret/shown".into(), Access::Read),
            ("/elsewhere".into(), Access::Deny),
        ]);
        let policy = Policy::from_map(&map, false);
        let paths = |list: &[&str]| list.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(policy.writable, paths(&["/w"]));
        assert_eq!(policy.readable, Some(paths(&["/usr", "/w", "/w/.git", "/w/secret/shown"])));
        assert_eq!(policy.read_only, paths(&["/w/.git", "/w/secret/shown"]));
        assert_eq!(policy.masked, paths(&["/w/secret"]));
        assert!(policy.pinned.is_empty(), "nothing lies between /w and what is inside it");
        let deep = AccessMap::new(vec![
            ("/w".into(), Access::Write),
            ("/w/n".into(), Access::Write),
            ("/w/n/secret".into(), Access::Deny),
            ("/w/a/b/.git".into(), Access::Read),
            ("/w/a/c/secret".into(), Access::Deny),
            ("/r".into(), Access::Read),
            ("/r/x/y".into(), Access::Deny),
        ]);
        assert_eq!(
            Policy::from_map(&deep, false).pinned,
            paths(&["/w/a", "/w/a/b", "/w/a/c", "/w/n"])
        );
    }
}
