//! The sandbox a `process/start` asks for, and how a started process is confined.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `sandbox` of `process/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// The requested mode.
    pub mode: SandboxMode,
    /// `restricted`: the directories beneath which the process may write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable_roots: Option<Vec<PathBuf>>,
    /// `restricted`: when given, the process reads only beneath these (and the writable roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readable_roots: Option<Vec<PathBuf>>,
    /// `restricted`: whether the process may use the host's IP network (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// `restricted`, instead of the roots: what may be read, written or not
    /// seen at all, path by path; the most specific entry wins, and what no
    /// entry covers is denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Vec<AccessEntry>>,
    /// With `access`: absolute patterns (`*`, `?`, `[...]` within a
    /// component, `**` across them) whose matches are denied (a process's
    /// found when it starts, an fs call's matched on each path it opens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_globs: Option<Vec<String>>,
    /// With `denyGlobs`: how many directories deep beneath a pattern's fixed
    /// prefix they are looked for (default: no limit but the scan's bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob_scan_max_depth: Option<u32>,
    /// With `access`: names beneath every writable entry kept read-only when
    /// they exist (`.git`, and the directory a `.git` file points to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_read_only: Option<Vec<String>>,
}

/// One entry of a sandbox's `access` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessEntry {
    /// An absolute path: a directory (and all beneath it) or a file.
    pub path: PathBuf,
    /// What the entry grants there.
    pub access: Access,
    /// A deny entry for a path that does not exist inside a writable one is
    /// refused (it could be created) unless this is true; other missing
    /// entries grant nothing and are skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// A read entry that does not exist, directly inside a writable one, is
    /// made (an empty directory) when a process starts, so that it can be
    /// kept read-only instead of being created by the process; fs calls
    /// treat it as there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub make: bool,
}

/// What an access entry grants, weakest first; at one path, the strongest
/// of deny, write and read wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read (and execute).
    Read,
    /// Read and write.
    Write,
    /// Neither: a process sees an empty directory or file there, an fs call
    /// gets "Permission denied".
    Deny,
}

impl Sandbox {
    /// A `restricted` sandbox that may write only beneath `writable_roots`,
    /// reads everything and has no network; narrow it with the other builders.
    pub fn restricted<I, P>(writable_roots: I) -> Sandbox
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        Sandbox {
            mode: SandboxMode::Restricted,
            writable_roots: Some(writable_roots.into_iter().map(Into::into).collect()),
            readable_roots: None,
            network: None,
            access: None,
            deny_globs: None,
            glob_scan_max_depth: None,
            keep_read_only: None,
        }
    }

    /// A `restricted` sandbox given as an access list instead of roots (no
    /// network): see [`AccessEntry`].
    pub fn access<I>(entries: I) -> Sandbox
    where
        I: IntoIterator<Item = AccessEntry>,
    {
        Sandbox {
            writable_roots: None,
            access: Some(entries.into_iter().collect()),
            ..Sandbox::restricted(Vec::<PathBuf>::new())
        }
    }

    /// Reads only beneath these directories (and the writable roots).
    pub fn readable_roots<I, P>(mut self, readable_roots: I) -> Sandbox
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.readable_roots = Some(readable_roots.into_iter().map(Into::into).collect());
        self
    }

    /// Allows (true) or forbids (false, the default) the host's IP network.
    pub fn network(mut self, allowed: bool) -> Sandbox {
        self.network = Some(allowed);
        self
    }
}

/// Sandbox modes a client may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SandboxMode {
    /// No sandbox (or the server's default policy under `--sandbox`).
    None,
    /// The host's default sandbox: the server's policy under `--sandbox`, refused without it.
    HostDefault,
    /// Confined to `writableRoots` (and `readableRoots`, `network`), enforced by the kernel.
    Restricted,
}

/// How a process is confined, as reported in start results and `process/list`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SandboxType {
    /// Not confined.
    #[default]
    None,
    /// Namespaces (user, mount, PID, IPC), a read-only mount view, Landlock and seccomp (see docs/sandbox.md).
    LinuxLandlock,
    /// The same sandbox, as today's dialect names a Linux sandbox.
    LinuxSeccomp,
}
