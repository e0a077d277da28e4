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
    /// `restricted`: no network (false, the default), the host's (true), or
    /// only the hosts a policy names, through the server's proxy (Part B).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
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
        self.network = Some(if allowed { Network::Full } else { Network::Off });
        self
    }

    /// Reaches only the hosts `policy` names, through the server's proxy.
    pub fn network_policy(mut self, policy: NetworkPolicy) -> Sandbox {
        self.network = Some(Network::Policy(policy));
        self
    }
}

/// `sandbox.network`: `false`, `true`, or a [`NetworkPolicy`] object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// `false`: no IP socket at all.
    Off,
    /// `true`: the sandbox's own namespace with egress to every other host.
    Full,
    /// Only what the policy allows, through the server's HTTP and SOCKS5 proxy.
    Policy(NetworkPolicy),
}

impl Network {
    /// Whether the process may open IP sockets at all.
    pub fn is_on(&self) -> bool {
        !matches!(self, Network::Off)
    }
}

/// Which hosts a sandbox reaches through the server's proxy: deny wins over
/// allow, and a host neither names is refused, or asked of the client
/// (`network/decide`) with `ask`. See docs/sandbox.md for the patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkPolicy {
    /// Patterns of the hosts allowed: `pypi.org`, `*.pythonhosted.org`,
    /// `github.com:443`, `10.20.0.5:8080`, `[2001:db8::1]`.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Patterns of the hosts refused, even when `allow` names them.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Hosts neither list names are put to the client (who must have said
    /// `networkDecisions: true` in `initialize`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask: bool,
    /// How long an asked decision may take (default 30000); no answer denies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_timeout_ms: Option<u64>,
}

impl NetworkPolicy {
    /// A policy that allows `patterns`.
    pub fn allow<I, S>(patterns: I) -> NetworkPolicy
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        NetworkPolicy {
            allow: patterns.into_iter().map(Into::into).collect(),
            ..NetworkPolicy::default()
        }
    }
}

impl Serialize for Network {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Network::Off => serializer.serialize_bool(false),
            Network::Full => serializer.serialize_bool(true),
            Network::Policy(policy) => policy.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Network, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Network;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("false, true or a policy {allow, deny, ask, askTimeoutMs}")
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<Network, E> {
                Ok(if on { Network::Full } else { Network::Off })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Network, A::Error> {
                let policy =
                    NetworkPolicy::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Network::Policy(policy))
            }
        }
        deserializer.deserialize_any(Visitor)
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
