//! The flags of upstream's `codex exec-server` 0.169 that a launcher may pass
//! to this binary in its place: each is accepted, and this says what it does
//! here (docs/dialect.md lists them).
//!
//! - `--exit-on-stdin-close` (or `CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=1`):
//!   a listening server exits, ending every session, when its stdin reaches
//!   end of file (the parent that holds the pipe has gone). A stdio server
//!   ends at end of file anyway.
//! - `--linux-sandbox-pid-namespace isolate|inherit`: the sandbox always has
//!   a PID namespace of its own; `inherit` gets that too (more isolation,
//!   never less), with a warning.
//! - `--proxy-private-ips-via-upstream`: no effect; this server runs no
//!   network proxy (a networked sandbox reaches hosts through slirp4netns).
//! - `--strict-config`: no effect; this server reads no Codex config.
//! - `-c KEY=VALUE`: no effect (each is logged as ignored); sandboxes come
//!   with each start, not from a config. A value without `=` is refused.

use clap::{Args, ValueEnum};

/// The environment variable that turns `--exit-on-stdin-close` on.
const EXIT_ON_STDIN_CLOSE_ENV: &str = "CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE";

/// The flags, as clap reads them.
#[derive(Debug, Default, Args)]
pub(super) struct CodexFlags {
    /// With --listen: exit (ending every session) when stdin reaches end of file; also CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=1.
    #[arg(long)]
    exit_on_stdin_close: bool,
    /// Upstream's: the sandbox always has a PID namespace of its own (inherit gets one too).
    #[arg(long, value_enum, value_name = "MODE")]
    linux_sandbox_pid_namespace: Option<PidNamespace>,
    /// Upstream's: no effect here (no network proxy runs).
    #[arg(long)]
    proxy_private_ips_via_upstream: bool,
    /// Upstream's: no effect here (no Codex config is read).
    #[arg(long)]
    strict_config: bool,
    /// Upstream's config override: no effect here (logged as ignored).
    #[arg(short = 'c', value_name = "KEY=VALUE", value_parser = key_value)]
    config: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PidNamespace {
    Isolate,
    Inherit,
}

fn key_value(text: &str) -> Result<String, String> {
    match text.split_once('=') {
        Some((key, _)) if !key.trim().is_empty() => Ok(text.to_owned()),
        _ => Err(format!("-c takes KEY=VALUE, not {text:?}")),
    }
}

impl CodexFlags {
    /// Whether a listening server exits when its stdin closes.
    pub(super) fn exit_on_stdin_close(&self) -> bool {
        self.exit_on_stdin_close
            || std::env::var(EXIT_ON_STDIN_CLOSE_ENV)
                .is_ok_and(|value| matches!(value.trim(), "1" | "true" | "yes" | "on"))
    }

    /// Logs what the accepted flags do here (once tracing is set up).
    pub(super) fn log_effects(&self) {
        if self.linux_sandbox_pid_namespace == Some(PidNamespace::Inherit) {
            tracing::warn!("--linux-sandbox-pid-namespace inherit: the sandbox keeps a PID namespace of its own");
        }
        if self.proxy_private_ips_via_upstream {
            tracing::info!(
                "--proxy-private-ips-via-upstream has no effect: no network proxy runs here"
            );
        }
        if self.strict_config {
            tracing::info!("--strict-config has no effect: no Codex config is read here");
        }
        for setting in &self.config {
            let key = setting.split_once('=').map_or(setting.as_str(), |(key, _)| key);
            tracing::warn!(key, "-c is ignored: no Codex config is read here");
        }
    }
}

/// Completes when stdin reaches end of file (or cannot be read).
pub(super) async fn stdin_closed() {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buffer = [0u8; 4096];
    while let Ok(n) = stdin.read(&mut buffer).await {
        if n == 0 {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::key_value;

    #[test]
    fn overrides_are_key_value() {
        assert_eq!(key_value("model=o3"), Ok("model=o3".to_owned()));
        assert_eq!(key_value("a.b=\"x=y\""), Ok("a.b=\"x=y\"".to_owned()));
        assert_eq!(key_value("model"), Err("-c takes KEY=VALUE, not \"model\"".to_owned()));
        assert_eq!(key_value("=x"), Err("-c takes KEY=VALUE, not \"=x\"".to_owned()));
    }
}
