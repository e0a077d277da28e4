//! Servers inside containers: `docker exec -i`, `podman exec -i` and
//! `kubectl exec -i POD [-c CONTAINER] --`, never with a tty. The server's
//! stdin is the engine's exec session, so when the launcher goes away the
//! server sees EOF and ends what it started.
//!
//! Self-install is the SSH path's (see `ssh`): the command becomes `sh -c`
//! with the same script, and the static binary travels through the exec
//! session's stdin into a per-user, per-version directory in the container;
//! no `cp` subcommand is needed, so it works the same for every engine (and
//! where a container has no `tar` for `kubectl cp`).
//!
//! What an engine says when it fails is kept (the last lines of its stderr),
//! and read into the launch's error: not installed, not running, refused
//! copy, other architecture.

use std::path::PathBuf;

use super::ssh::{install_script, server_args, SelfInstall};
use super::LaunchCommand;
use crate::error::Error;

/// The engine that reaches the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `docker exec -i CONTAINER ...`.
    Docker,
    /// `podman exec -i CONTAINER ...`.
    Podman,
    /// `kubectl exec -i POD [-c CONTAINER] -- ...`.
    Kubectl,
}

impl Engine {
    /// The engine's program, as found on PATH by default.
    pub fn program(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
            Engine::Kubectl => "kubectl",
        }
    }
}

/// `exec-server` inside a running container; see [`LaunchCommand::container`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerCommand {
    engine: Engine,
    program: PathBuf,
    target: String,
    container: Option<String>,
    options: Vec<String>,
    remote_program: String,
    remote_args: Vec<String>,
    install: Option<PathBuf>,
    install_dir: Option<String>,
    daemon: Option<String>,
}

/// What a container launch's errors name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) engine: Engine,
    pub(crate) target: String,
}

impl ContainerCommand {
    pub(super) fn new(engine: Engine, target: impl Into<String>) -> ContainerCommand {
        ContainerCommand {
            engine,
            program: PathBuf::from(engine.program()),
            target: target.into(),
            container: None,
            options: Vec::new(),
            remote_program: "exec-server".into(),
            remote_args: Vec::new(),
            install: None,
            install_dir: None,
            daemon: None,
        }
    }

    /// `kubectl` only: the container of the pod (`-c`); Docker and Podman
    /// name the container as the target, and ignore this.
    pub fn container(mut self, name: impl Into<String>) -> ContainerCommand {
        self.container = Some(name.into());
        self
    }

    /// The engine's program (default: its name, on PATH).
    pub fn engine_program(mut self, program: impl Into<PathBuf>) -> ContainerCommand {
        self.program = program.into();
        self
    }

    /// An extra argument of `exec`, before the target (`--user`, `1000`,
    /// `-n`, `namespace`, `--context`, ...).
    pub fn option(mut self, option: impl Into<String>) -> ContainerCommand {
        self.options.push(option.into());
        self
    }

    /// The server program in the container (default: `exec-server` on its PATH).
    pub fn remote_program(mut self, program: impl Into<String>) -> ContainerCommand {
        self.remote_program = program.into();
        self
    }

    /// An argument for the server in the container.
    pub fn remote_arg(mut self, arg: impl Into<String>) -> ContainerCommand {
        self.remote_args.push(arg.into());
        self
    }

    /// Opt-in: when the container lacks the server and its `uname -sm`
    /// matches this machine's, `binary` (a static build: the container's libc
    /// is unknown) is streamed in and run from the install directory. A
    /// launch of another version installs that version beside it.
    pub fn install_if_missing(mut self, binary: impl Into<PathBuf>) -> ContainerCommand {
        self.install = Some(binary.into());
        self
    }

    /// Where the container keeps installed binaries (default:
    /// `${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/exec-server/VERSION`).
    pub fn install_dir(mut self, dir: impl Into<String>) -> ContainerCommand {
        self.install_dir = Some(dir.into());
        self
    }

    /// Daemon mode, as [`super::SshCommand::persistent`]: the session lives in
    /// a daemon inside the container and survives a dropped exec session.
    pub fn persistent(mut self) -> ContainerCommand {
        self.daemon = Some(String::new());
        self
    }

    /// The words run in the container.
    fn command_words(&self) -> Vec<String> {
        let args = server_args(self.daemon.as_deref(), &self.remote_args);
        if self.install.is_none() {
            let mut words = vec![self.remote_program.clone()];
            words.extend(args);
            return words;
        }
        let script = install_script(&self.remote_program, self.install_dir.as_deref(), &args);
        vec!["sh".to_owned(), "-c".to_owned(), script]
    }
}

impl From<ContainerCommand> for LaunchCommand {
    fn from(container: ContainerCommand) -> LaunchCommand {
        let mut args = vec!["exec".to_owned(), "-i".to_owned()];
        args.extend(container.options.iter().cloned());
        args.push(container.target.clone());
        if container.engine == Engine::Kubectl {
            if let Some(name) = &container.container {
                args.extend(["-c".to_owned(), name.clone()]);
            }
            args.push("--".to_owned());
        }
        args.extend(container.command_words());
        let mut command = LaunchCommand::new(container.program.clone());
        command.args = args;
        command.self_install = container.install.clone().map(|binary| SelfInstall { binary });
        command.persistent = container.daemon.is_some();
        command.container =
            Some(Facts { engine: container.engine, target: container.target.clone() });
        command
    }
}

/// `error`, read against what the engine wrote on stderr.
pub(crate) fn explain(facts: &Facts, error: Error, stderr: String) -> Error {
    let said = stderr.to_ascii_lowercase();
    let engine = facts.engine.program().to_owned();
    match error {
        Error::InstallRefused { path, .. } => Error::InstallRefused { path, stderr },
        Error::ArchitectureMismatch { remote, local, .. } => {
            Error::ArchitectureMismatch { remote, local, stderr }
        }
        // Docker and Podman: "is not running", "no such container", "can
        // only create exec sessions on running containers"; kubectl:
        // "(NotFound)", "container not found", "does not have a host assigned".
        _ if [
            "not running",
            "no such container",
            "running containers",
            "(notfound)",
            "container not found",
            "host assigned",
        ]
        .iter()
        .any(|words| said.contains(words)) =>
        {
            Error::ContainerNotRunning { engine, target: facts.target.clone(), stderr }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(command: ContainerCommand) -> Vec<String> {
        LaunchCommand::from(command).args
    }

    #[test]
    fn each_engine_execs_with_stdin_and_no_tty() {
        assert_eq!(
            args(
                LaunchCommand::container(Engine::Docker, "box")
                    .remote_arg("--root")
                    .remote_arg("/w")
            ),
            ["exec", "-i", "box", "exec-server", "--root", "/w"]
        );
        assert_eq!(
            args(LaunchCommand::container(Engine::Podman, "box").option("--user").option("1000")),
            ["exec", "-i", "--user", "1000", "box", "exec-server"]
        );
        assert_eq!(
            args(
                LaunchCommand::container(Engine::Kubectl, "pod-1")
                    .container("app")
                    .option("-n")
                    .option("ns")
            ),
            ["exec", "-i", "-n", "ns", "pod-1", "-c", "app", "--", "exec-server"]
        );
        let daemon =
            LaunchCommand::from(LaunchCommand::container(Engine::Kubectl, "p").persistent());
        assert_eq!(
            daemon.args,
            ["exec", "-i", "p", "--", "exec-server", "--connect", "unix:", "--spawn-daemon"]
        );
        assert!(daemon.persistent);
        assert_eq!(
            LaunchCommand::from(LaunchCommand::container(Engine::Docker, "b")).program,
            PathBuf::from("docker")
        );
    }

    #[test]
    fn a_self_install_runs_the_script_through_sh() {
        let command: LaunchCommand = LaunchCommand::container(Engine::Podman, "box")
            .install_if_missing("/opt/exec-server-static")
            .install_dir("/var/cache/es")
            .into();
        assert_eq!(&command.args[..5], ["exec", "-i", "box", "sh", "-c"]);
        assert!(
            command.args[5].starts_with("prog='exec-server'; dir='/var/cache/es';"),
            "{}",
            command.args[5]
        );
        assert_eq!(
            command.self_install,
            Some(SelfInstall { binary: "/opt/exec-server-static".into() })
        );
    }

    #[test]
    fn engines_failures_are_named() {
        let facts = Facts { engine: Engine::Docker, target: "box".into() };
        let stopped = "Error response from daemon: Container 3f2 is not running".to_owned();
        assert_eq!(
            explain(&facts, Error::Closed, stopped).to_string(),
            "the container box is not running (docker said: Error response from daemon: Container 3f2 is not running)"
        );
        let other = explain(&facts, Error::Closed, "something else".into());
        assert!(matches!(other, Error::Closed));
        let refused = Error::InstallRefused { path: "/x".into(), stderr: String::new() };
        assert_eq!(
            explain(&facts, refused, "mkdir: can't create directory '/x': Read-only file system".into()).to_string(),
            "cannot install exec-server into /x (read-only, or not the launching user's?); give another directory with install_dir(..) (mkdir: can't create directory '/x': Read-only file system)"
        );
    }
}
