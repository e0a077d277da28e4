//! What the server tells the trampoline: the policy, the program and where it starts.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::policy::Policy;

/// What the trampoline is told, as its second argument (JSON); the program's
/// argv follows.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub(crate) policy: Policy,
    /// The program, resolved by the server.
    pub(crate) program: PathBuf,
    /// The directory the program starts in (the trampoline was started there).
    pub(crate) cwd: PathBuf,
    /// The process's own terminal, which it may open by name.
    pub(crate) tty: Option<PathBuf>,
    /// Mechanisms to treat as missing: how the tests prove the refusal.
    #[serde(default)]
    pub(crate) unavailable: Vec<String>,
    /// slirp4netns, resolved by the server, for a policy with network.
    #[serde(default)]
    pub(crate) network_helper: Option<PathBuf>,
    /// For a limited start: the `cgroup.procs` files of the server's own
    /// cgroups, which the trampoline joins once it has started the init, so
    /// that only the tree and its init count against `processes`.
    #[serde(default)]
    pub(crate) leave: Vec<PathBuf>,
}
