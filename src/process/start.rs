//! `process/start`: the checks, the charge for what a start stores, the
//! spawner thread's work, and the entry and answer once it is done.

use std::sync::Arc;

use super::entry::Entry;
use super::registry;
use super::shape::Shape;
use super::signal::Signal;
use super::spawn::SpawnError;
use super::spawner;
use super::{descriptor_limit, too_long_id, ProcessTable, FDS_PER_PROCESS, MAX_PROCESS_ID_BYTES};
use crate::account::{Charge, STRING_OVERHEAD};
use crate::fs::Roots;
use crate::protocol::{encode_response, ErrorObject, RequestId, StartParams, StartResult};
use crate::sandbox;

/// A `process/start` whose spawn runs on the spawner thread.
pub(super) struct Starting {
    request: RequestId,
    serial: u64,
    params: StartParams,
    shape: Shape,
    /// What its argv, env and cwd cost while held (the entry keeps argv's).
    charge: Charge,
    outcome: tokio::sync::oneshot::Receiver<spawner::Outcome>,
}

/// What [`ProcessTable::begin_start`] did with a valid start.
pub(crate) enum Begun {
    /// Handed to the spawner; the reply comes from [`ProcessTable::next_done`].
    Spawning,
    /// It depends on the starts under way: ask again when they are done.
    MustWait,
}

/// Bytes of stored commands (argv, env, cwd of live, starting and exited
/// processes) one connection or detached session may hold.
pub(crate) const CONNECTION_COMMANDS: usize = 32 * 1024 * 1024;

/// Bytes of stored commands the whole server may hold.
pub(crate) const SERVER_COMMANDS: usize = 128 * 1024 * 1024;

/// What storing `strings` costs: their bytes and a record each.
pub(super) fn stored_cost<'a>(strings: impl Iterator<Item = &'a String>) -> usize {
    strings.map(|s| s.len() + STRING_OVERHEAD).sum()
}

/// The most bytes a `metadata` value may hold.
pub(crate) const MAX_METADATA_BYTES: usize = 256;

/// A start's `metadata`, checked, into the process's environment.
pub(super) fn export_metadata(params: &mut StartParams) -> Result<(), ErrorObject> {
    let Some(metadata) = params.metadata.take() else { return Ok(()) };
    let fields = [
        ("threadId", "CODEX_THREAD_ID", metadata.thread_id),
        ("toolCallId", "CODEX_TOOL_CALL_ID", metadata.tool_call_id),
    ];
    for (field, variable, value) in fields {
        let Some(value) = value else { continue };
        if value.len() > MAX_METADATA_BYTES || value.contains(['\0', '\n', '\r']) {
            return Err(ErrorObject::invalid_params(format!(
                "metadata.{field} must be a string of at most {MAX_METADATA_BYTES} bytes without NUL or newline"
            )));
        }
        params.env.insert(variable.to_owned(), value);
    }
    Ok(())
}

/// Puts `dirs` first on the `PATH` of `env`, before its own, or the
/// server's when it names none.
fn prepend_path(env: &mut std::collections::BTreeMap<String, String>, dirs: &[std::path::PathBuf]) {
    if dirs.is_empty() {
        return;
    }
    let mut path: Vec<String> = dirs.iter().map(|dir| dir.to_string_lossy().into_owned()).collect();
    let rest = env.get("PATH").cloned().or_else(|| std::env::var("PATH").ok());
    path.extend(rest.filter(|rest| !rest.is_empty()));
    env.insert("PATH".to_owned(), path.join(":"));
}

impl ProcessTable {
    /// `process/start`, first half: checks the params, then hands the cwd check
    /// and the fork to the spawner thread. The reply comes from
    /// [`ProcessTable::next_done`]; until then [`ProcessTable::is_starting`].
    pub(crate) fn begin_start(
        &mut self,
        request: RequestId,
        mut params: StartParams,
        shape: Shape,
        roots: Arc<Roots>,
    ) -> Result<Begun, ErrorObject> {
        export_metadata(&mut params)?;
        if params.argv.is_empty() {
            return Err(ErrorObject::invalid_params("argv must not be empty"));
        }
        if params.process_id.len() > MAX_PROCESS_ID_BYTES {
            return Err(too_long_id(&params.process_id));
        }
        if let Some(at) = params.argv.iter().position(|arg| arg.contains('\0')) {
            return Err(ErrorObject::invalid_params(format!("argv[{at}] holds a NUL byte")));
        }
        if params.arg0.as_deref().is_some_and(|arg0| arg0.contains('\0')) {
            return Err(ErrorObject::invalid_params("arg0 holds a NUL byte"));
        }
        if std::os::unix::ffi::OsStrExt::as_bytes(params.cwd.as_os_str()).contains(&0) {
            return Err(ErrorObject::invalid_params("cwd holds a NUL byte"));
        }
        sandbox::check_request(params.sandbox.as_ref(), &self.limits.sandbox)?;
        let asks = params.sandbox.as_ref().and_then(|s| s.network.as_ref());
        self.check_asking(matches!(asks, Some(crate::protocol::Network::Policy(p)) if p.ask))?;
        if let Some(name) = params.env.keys().find(|n| n.is_empty() || n.contains(['=', '\0'])) {
            return Err(ErrorObject::invalid_params(format!(
                "env name {name:?} is invalid: a name must be non-empty, without '=' or NUL"
            )));
        }
        if let Some((name, _)) = params.env.iter().find(|(_, value)| value.contains('\0')) {
            return Err(ErrorObject::invalid_params(format!(
                "the value of env {name:?} holds a NUL byte"
            )));
        }
        prepend_path(&mut params.env, &self.limits.prepend_path);
        if self.entries.contains_key(&params.process_id) {
            return Err(ErrorObject::invalid_request(format!(
                "process {} already exists",
                params.process_id
            )));
        }
        let live = self.entries.values().filter(|e| e.is_running()).count();
        // Whether this start can go depends on the starts under way (one with
        // the same id, or the limit counting them): it waits for their outcome.
        let same_id = self.starting.iter().any(|s| s.params.process_id == params.process_id);
        let limit = self.limits.max_processes;
        if same_id || (live < limit && live + self.starting.len() >= limit) {
            return Ok(Begun::MustWait);
        }
        if live >= limit {
            return Err(ErrorObject::invalid_request(format!(
                "too many processes: the limit is {} live processes per connection",
                self.limits.max_processes
            )));
        }
        if !params.tty && params.size.is_some() {
            return Err(ErrorObject::invalid_request(format!(
                "size is only valid for a tty process, and process {} is not one",
                params.process_id
            )));
        }
        let tree_limits = crate::limits::resolve(params.limits.as_ref(), &self.limits.tree)?;
        let charge = self.charge_start(&params)?;
        registry::reap_disowned();
        let serial = self.next_serial;
        self.next_serial += 1;
        let work_params = params.clone();
        let settings = self.limits.sandbox.clone();
        let outcome = self.spawner.submit(Box::new(move || {
            let cwd = roots.check_cwd(&work_params.cwd)?;
            let mut policy =
                sandbox::resolve(work_params.sandbox.as_ref(), &settings, &roots, &cwd.path)?;
            if let Some(policy) = policy.as_mut() {
                policy.exit_on_exec_failure = shape.exit_on_exec_failure;
                policy.eperm_sockets = shape.eperm_sockets;
            }
            if let (Some(policy), Some(_)) = (policy.as_mut(), tree_limits) {
                policy.keep_cgroups_read_only(crate::limits::mount_points()).map_err(|reason| {
                    ErrorObject::invalid_request(format!(
                        "process/start refused: cannot enforce the limits in this sandbox: {reason}"
                    ))
                })?;
            }
            let mut params = StartParams { cwd: cwd.path, ..work_params };
            if policy.as_ref().is_some_and(|policy| policy.proxied) {
                crate::proxy::set_env(&mut params.env);
            }
            let confined = policy.as_ref().map(|policy| (policy, settings.helper.as_deref()));
            // The server's own processes in a sandboxed tree's cgroup: its
            // init and the network helper (the trampoline leaves the cgroup
            // before the program starts, so its exit frees no slot for the tree).
            let helpers = policy
                .as_ref()
                .map_or(0, |policy| 1 + u64::from(policy.network && !policy.proxied));
            let group = match tree_limits {
                Some(limits) => {
                    // The watcher learns of the cgroups as they are made: a
                    // SIGKILLed server leaves none, even mid-start.
                    registry::start_watcher().map_err(|error| {
                        ErrorObject::internal(format!(
                            "failed to start `{}`: {error}",
                            params.argv[0]
                        ))
                    })?;
                    let group = crate::limits::Group::create(limits, helpers);
                    registry::watch_cgroups(&crate::limits::server_dirs());
                    Some(Arc::new(group.map_err(|refusal| crate::limits::refused(&refusal))?))
                }
                None => None,
            };
            let grouped = group.as_ref().map(|group| (group, settings.helper.as_deref()));
            Entry::spawn(&params, cwd.dir.as_ref(), confined, grouped)
                .map_err(|error| spawn_refused(&params.argv[0], error))
        }));
        self.starting.push_back(Starting { request, serial, params, shape, charge, outcome });
        Ok(Begun::Spawning)
    }

    /// Charges what a start stores (argv, env and cwd while it starts; argv
    /// and id while its entry lives) to the stored-command budgets of the
    /// connection and the server; refused when it cannot fit.
    pub(super) fn charge_start(&mut self, params: &StartParams) -> Result<Charge, ErrorObject> {
        let cost = stored_cost(
            params
                .argv
                .iter()
                .chain([&params.process_id])
                .chain(params.env.iter().flat_map(|(name, value)| [name, value]))
                .chain(params.arg0.iter()),
        ) + params.cwd.as_os_str().len();
        let (connection, server) = (self.account.commands(), self.limits.server_account.commands());
        if connection + cost > CONNECTION_COMMANDS || server + cost > SERVER_COMMANDS {
            return Err(ErrorObject::invalid_request(format!(
                "process/start refused: its argv, env and cwd take {cost} bytes, and stored commands may take {} more on this connection (of {CONNECTION_COMMANDS}) and {} more on the server (of {SERVER_COMMANDS}); forgotten processes give theirs back",
                CONNECTION_COMMANDS.saturating_sub(connection),
                SERVER_COMMANDS.saturating_sub(server),
            )));
        }
        Ok(Charge::new(self.account.clone(), cost))
    }

    /// Whether a start waits for the spawner (later process requests wait too).
    pub(crate) fn is_starting(&self) -> bool {
        !self.starting.is_empty()
    }

    /// What the table's own background work finished: a start (its encoded
    /// reply) or a `/proc` sweep (`None`). Pending forever while none runs.
    pub(crate) async fn next_done(&mut self) -> Option<String> {
        let starting = async {
            match self.starting.front_mut() {
                Some(starting) => (&mut starting.outcome).await,
                None => std::future::pending().await,
            }
        };
        let swept = async {
            match self.sweeps.join_next().await {
                Some(Ok(count)) => tracing::trace!(count, "sweep signalled processes"),
                Some(Err(error)) => tracing::warn!(%error, "a process sweep failed"),
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            outcome = starting => outcome,
            () = swept => return None,
        };
        Some(self.finish_start(outcome))
    }

    /// `process/start`, second half: the entry and the encoded reply.
    pub(super) fn finish_start(
        &mut self,
        outcome: Result<spawner::Outcome, tokio::sync::oneshot::error::RecvError>,
    ) -> String {
        let Some(Starting { request, serial, params, shape, mut charge, .. }) =
            self.starting.pop_front()
        else {
            return String::new();
        };
        let outcome = outcome
            .unwrap_or_else(|_| Err(ErrorObject::internal("the spawner thread is gone")))
            .and_then(|mut spawned| {
                let account = self.account.clone();
                let proxy = spawned.proxy.take();
                let pid = spawned.pid;
                let mut entry = Entry::start(
                    serial,
                    &params,
                    shape,
                    spawned,
                    &self.events,
                    self.limits.retained_bytes,
                    account,
                )
                .map_err(|error| {
                    ErrorObject::internal(format!("failed to start `{}`: {error}", params.argv[0]))
                })?;
                // A policy's network: its proxy runs as long as the entry.
                if let Some((listeners, rules)) = proxy {
                    let reporter = super::network::reporter(&self.events, serial);
                    let room = self.account.tunnel_room(self.limits.server_retained);
                    let held = (room, self.account.clone());
                    let started = crate::proxy::Proxy::start(listeners, rules, reporter, held);
                    entry.proxy = Some(started.map_err(|error| {
                        registry::abandon(pid);
                        ErrorObject::invalid_request(format!(
                            "cannot sandbox `{}`: its network proxy cannot listen: {error}",
                            params.argv[0]
                        ))
                    })?);
                }
                Ok(entry)
            });
        let result = outcome.map(|mut entry| {
            tracing::debug!(id = %params.process_id, pid = entry.pid, argv = ?params.argv, "started");
            // The entry keeps its argv (and id), not the env and cwd.
            charge.shrink_to(stored_cost(params.argv.iter().chain([&params.process_id])));
            entry.stored = Some(charge);
            if self.closing {
                // The connection ended while it started: it goes at once.
                let session = entry.signal_tree(&[Signal::KILL]);
                self.sweep(vec![session], &[Signal::KILL]);
                if let Some(group) = entry.group.clone() {
                    self.sweeps.spawn_blocking(move || super::tree::kill_groups(&[group]));
                }
            }
            let sandbox_type = shape.start_sandbox_type(params.sandbox.as_ref(), entry.sandbox_type);
            self.ids.insert(serial, params.process_id.clone());
            self.entries.insert(params.process_id.clone(), entry);
            StartResult { process_id: params.process_id.clone(), sandbox_type }
        });
        let result = result.map_err(|mut error| {
            if shape.bare_start_errors {
                let ours = format!("failed to start `{}`: ", params.argv[0]);
                if let Some(text) = error.message.strip_prefix(&ours) {
                    error.message = text.to_owned();
                }
            }
            error
        });
        encode_response(&request, &result)
    }
}

/// The error of a start the OS or the sandbox refused, naming what ran out.
fn spawn_refused(program: &str, error: SpawnError) -> ErrorObject {
    match error {
        SpawnError::Io(error) if error.raw_os_error() == Some(libc::EMFILE) => {
            ErrorObject::internal(format!(
                "failed to start `{program}`: {error}: the server is out of file descriptors (its limit, RLIMIT_NOFILE, is {}, and each process takes up to {FDS_PER_PROCESS})",
                descriptor_limit()
            ))
        }
        // pipe(2) says ENFILE for the user's pipe pages too.
        SpawnError::Io(error) if error.raw_os_error() == Some(libc::ENFILE) => {
            ErrorObject::internal(format!(
                "failed to start `{program}`: {error}: the system's open-file table is full, or this user's pipes hold more pages than fs.pipe-user-pages-hard allows"
            ))
        }
        SpawnError::Io(error) => ErrorObject::internal(format!("failed to start `{program}`: {error}")),
        SpawnError::Sandbox(reason) => {
            ErrorObject::invalid_request(format!("cannot sandbox `{program}`: {reason}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn a_full_file_table_is_not_blamed_on_the_servers_descriptor_limit() {
        let refused =
            |errno| spawn_refused("cat", SpawnError::Io(io::Error::from_raw_os_error(errno)));
        let table = refused(libc::ENFILE);
        assert_eq!(table.code, -32603);
        assert_eq!(
            table.message,
            format!(
                "failed to start `cat`: {}: the system's open-file table is full, or this user's pipes hold more pages than fs.pipe-user-pages-hard allows",
                io::Error::from_raw_os_error(libc::ENFILE)
            )
        );
        let own = refused(libc::EMFILE);
        assert!(
            own.message
                .contains("the server is out of file descriptors (its limit, RLIMIT_NOFILE, is "),
            "{}",
            own.message
        );
    }
}
