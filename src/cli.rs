//! The `exec-server` binary: flags, logging to stderr, signals, the watcher, and the stdio or WebSocket server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

mod codex_flags;
mod ws_auth;

use crate::host;
use crate::server::{self, AbortOnDrop, Config, ListenOptions, OnEof};
use crate::server::{DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PROCESSES, DEFAULT_MAX_RETAINED_BYTES};
use crate::stdio::Stdio;
use clap::{Parser, ValueEnum};
use tracing_subscriber::EnvFilter;

/// A subprocess and filesystem sidecar speaking exec-server.v0 (newline-delimited JSON-RPC) on stdin/stdout.
#[derive(Debug, Parser)]
#[command(name = "exec-server", version)]
struct Cli {
    /// Longest accepted input line in bytes; longer lines get an error (id -1) and are discarded.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    max_message_bytes: usize,
    /// Live processes allowed per connection.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_PROCESSES)]
    max_processes: usize,
    /// Retained output of the whole server, in bytes (each chunk also costs 128 bytes).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_RETAINED_BYTES)]
    max_retained_bytes: usize,
    /// Confine fs paths and process cwds to this directory (repeatable). Not a sandbox.
    #[arg(long = "root", value_name = "DIR")]
    roots: Vec<PathBuf>,
    /// On stdin EOF: kill every process (kill), or let them finish and deliver their output (wait).
    #[arg(long, value_enum, default_value_t = EofMode::Kill)]
    on_eof: EofMode,
    /// Log filter for stderr (for example debug, or exec_server=trace); overrides RUST_LOG.
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// Serve ws://IP:PORT (WebSocket; port 0: any free port), unix:PATH (a daemon on a Unix socket), or stdio (the default).
    #[arg(long, value_name = "URL")]
    listen: Option<String>,
    /// Bridge stdio to the daemon at unix:PATH (for `ssh host exec-server --connect unix:PATH`).
    #[arg(long, value_name = "URL", conflicts_with = "listen")]
    connect: Option<String>,
    /// With --connect: start the daemon (with these flags) when nothing answers at PATH.
    #[arg(long, requires = "connect")]
    spawn_daemon: bool,
    /// With --listen ws:// or unix: how long a detached session waits to be resumed (e.g. 30s, 500ms, 2m).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    session_ttl: Duration,
    /// With --listen ws:// or unix: detached sessions kept at once; beyond, the oldest is ended.
    #[arg(long, value_name = "N", default_value_t = crate::server::DEFAULT_MAX_DETACHED_SESSIONS)]
    max_detached_sessions: usize,
    /// With --listen unix: exit after this long without connections or sessions (0: never).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    idle_exit: Duration,
    /// Accepted for upstream's command line; requests are always served concurrently.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    concurrent_requests: Option<u32>,
    #[command(flatten)]
    ws_auth: ws_auth::WsAuthFlags,
    #[command(flatten)]
    codex: codex_flags::CodexFlags,
    /// With --listen: connections served at once (upgraded ones; handshakes have a budget of their own); beyond, HTTP 503.
    #[arg(long, value_name = "N", default_value_t = crate::server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Memory limit of every process tree that names none (bytes, or with K, M, G: e.g. 512M).
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::parse_size)]
    limit_memory: Option<u64>,
    /// Processes and threads every process tree may hold at once, unless it names fewer.
    #[arg(long, value_name = "N", value_parser = |s: &str| crate::limits::parse_count(crate::protocol::PROCESSES_LIMIT, s))]
    limit_processes: Option<u64>,
    /// CPU of every process tree in percent of one CPU (100: one core), unless it names less.
    #[arg(long, value_name = "PERCENT", value_parser = |s: &str| crate::limits::parse_count(crate::protocol::CPU_LIMIT, s))]
    limit_cpu: Option<u64>,
    /// Confine every process: writes only beneath the --root directories (or its cwd), no network.
    #[arg(long)]
    sandbox: bool,
    /// Put DIR first on every process's PATH (repeatable; reported as prependPathDirs): tools an agent expects, such as rg.
    #[arg(long, value_name = "DIR", value_parser = prepend_dir)]
    prepend_path: Vec<PathBuf>,
    /// With --sandbox: processes keep the host's network.
    #[arg(long, requires = "sandbox")]
    sandbox_network: bool,
    /// With --sandbox: processes reach only hosts matching PATTERN (repeatable), through the server's proxy (host, *.domain, IP literal, optional :PORT).
    #[arg(long, value_name = "PATTERN", requires = "sandbox", conflicts_with = "sandbox_network", value_parser = host_pattern)]
    sandbox_allow_host: Vec<String>,
    /// Which addresses tunnel/open may reach: none, loopback (127.0.0.0/8, ::1, localhost) or any.
    #[arg(long, value_enum, default_value_t = TunnelsMode::Loopback)]
    tunnels: TunnelsMode,
    /// Whether http/request is served: none (refused) or any (http and https URLs on any host).
    #[arg(long, value_enum, default_value_t = HttpMode::Any)]
    http_requests: HttpMode,
    /// Serve MCP on stdio whatever the first message (without it, an MCP client's first message selects MCP).
    #[arg(long, conflicts_with_all = ["listen", "connect"])]
    mcp: bool,
    /// MCP: commands keep the host's network inside their sandbox.
    #[arg(long)]
    mcp_network: bool,
    /// MCP: commands reach only hosts matching PATTERN (repeatable), through the server's proxy.
    #[arg(long, value_name = "PATTERN", conflicts_with_all = ["mcp_network", "mcp_unsandboxed"], value_parser = host_pattern)]
    mcp_allow_host: Vec<String>,
    /// MCP: run commands without a sandbox (they can then write anywhere the user can).
    #[arg(long)]
    mcp_unsandboxed: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TunnelsMode {
    None,
    Loopback,
    Any,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HttpMode {
    None,
    Any,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum EofMode {
    Kill,
    Wait,
}

/// Runs the `exec-server` command line (the binary's `main`).
pub(crate) fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Serves as the binary with `args` (the first is the program's name).
pub(crate) fn main_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    // A sandboxed or limited start re-executes this binary as its helper: it never returns.
    crate::run_sandbox_helper_if_requested();
    crate::process::run_if_watcher();
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let cli = Cli::parse_from(&args);
    // The bridge needs none of the server's machinery: it starts before any of it.
    if let Some(url) = &cli.connect {
        return match unix_path(url, "--connect") {
            Ok(path) => {
                let args = crate::bridge::daemon_args(args.iter().cloned(), &path);
                crate::bridge::run(&path, cli.spawn_daemon, args)
            }
            Err(message) => {
                eprintln!("exec-server: {message}");
                ExitCode::from(2)
            }
        };
    }
    tune_allocator();
    // A server started with signals blocked would never see SIGTERM.
    host::unblock_signals();
    // Started (this binary again) when the first child is.
    host::want_watcher();
    let filter = match &cli.log_level {
        Some(level) => EnvFilter::try_new(level),
        None => EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new("warn")),
    };
    let filter = match filter {
        Ok(filter) => filter,
        Err(error) => {
            eprintln!("exec-server: invalid log filter: {error}");
            return ExitCode::from(2);
        }
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    cli.codex.log_effects();
    if let Err(error) = host::become_subreaper() {
        tracing::warn!(%error, "cannot become a child subreaper");
    }
    match host::raise_descriptor_limit() {
        Ok(limit) if limit < host::MIN_DESCRIPTORS => {
            eprintln!(
                "exec-server: the descriptor limit (RLIMIT_NOFILE) is {limit}; at least {} are needed",
                host::MIN_DESCRIPTORS
            );
            return ExitCode::FAILURE;
        }
        Ok(limit) => {
            let fit = crate::process::processes_fitting(limit);
            if fit < cli.max_processes as u64 {
                tracing::warn!(
                    limit,
                    fit,
                    max_processes = cli.max_processes,
                    "the descriptor limit (RLIMIT_NOFILE) lets only about this many processes run at once"
                );
            }
        }
        Err(error) => tracing::warn!(%error, "cannot raise the descriptor limit"),
    }
    let config = Config {
        max_message_bytes: cli.max_message_bytes,
        max_processes: cli.max_processes,
        max_retained_bytes: cli.max_retained_bytes,
        roots: cli.roots,
        sandbox: cli.sandbox,
        sandbox_network: cli.sandbox_network,
        sandbox_allow_hosts: cli.sandbox_allow_host,
        on_eof: match cli.on_eof {
            EofMode::Kill => OnEof::Kill,
            EofMode::Wait => OnEof::Wait,
        },
        tunnels: match cli.tunnels {
            TunnelsMode::None => crate::server::TunnelPolicy::None,
            TunnelsMode::Loopback => crate::server::TunnelPolicy::Loopback,
            TunnelsMode::Any => crate::server::TunnelPolicy::Any,
        },
        prepend_path: cli.prepend_path,
        limits: crate::protocol::ProcessLimits::new(
            cli.limit_memory,
            cli.limit_processes,
            cli.limit_cpu,
        ),
        http_requests: match cli.http_requests {
            HttpMode::None => crate::server::HttpPolicy::None,
            HttpMode::Any => crate::server::HttpPolicy::Any,
        },
        ..Config::default()
    };
    let listen = match listen_on(cli.listen.as_deref(), &cli.ws_auth) {
        Ok(listen) => listen,
        Err(message) => {
            eprintln!("exec-server: {message}");
            return ExitCode::from(2);
        }
    };
    let listen_options = ListenOptions {
        config: config.clone(),
        max_connections: cli.max_connections,
        session_ttl: cli.session_ttl,
        max_detached_sessions: cli.max_detached_sessions,
        ..ListenOptions::default()
    };
    let idle_exit = (!cli.idle_exit.is_zero()).then_some(cli.idle_exit);
    // One thread runs the reader, the loop, the pumps and the writer: every hop
    // between them is a local wake instead of a cross-thread one (measured:
    // round trips 56 -> 47 us, spawn 1126 -> 904 us, 200 at once 279 -> 173 ms).
    // Blocking threads serve fs calls (at most FS_IN_FLIGHT at once), /proc
    // sweeps and stdio that is not a pipe: the thread count stays small and fixed.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(8)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("exec-server: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let exit_on_stdin_close = cli.codex.exit_on_stdin_close();
    let result = runtime.block_on(async {
        let signalled = shutdown_signal()?;
        // A listener told to, ends when its parent's pipe (its stdin) closes.
        let listening = !matches!(listen, ListenOn::Stdio);
        let shutdown = async move {
            if exit_on_stdin_close && listening {
                tokio::select! {
                    () = signalled => {}
                    () = codex_flags::stdin_closed() => tracing::info!("stdin was closed; shutting down"),
                }
            } else {
                signalled.await;
            }
        };
        let reaper = tokio::spawn(host::reap_orphans());
        let result = match listen {
            ListenOn::WebSocket(address, auth) => {
                let options = ListenOptions { auth, ..listen_options };
                serve_websocket(address, options, shutdown).await
            }
            ListenOn::Unix(path) => serve_unix(&path, listen_options, idle_exit, shutdown).await,
            ListenOn::Stdio => {
                let Stdio { reader, writer, guard } = Stdio::open();
                let hangup = crate::stdio::output_hangup();
                let (shutdown, _watcher) = watched(async move {
                    tokio::select! {
                        () = shutdown => {}
                        () = hangup => tracing::info!("stdout was closed; shutting down"),
                    }
                });
                let face = crate::stdio::Face {
                    forced: cli.mcp,
                    confinement: crate::mcp::Confinement {
                        sandbox: !cli.mcp_unsandboxed,
                        network: cli.mcp_network,
                        allow_hosts: cli.mcp_allow_host,
                    },
                };
                // A task of its own, not the runtime's `block_on` future: a
                // wake between the reader, the loop and the writer is then a
                // push on the run queue, without a look at the reactor
                // between them (one `epoll_wait` less per request).
                // A panic in it comes back as an error: the cleanup below
                // still runs, and the process exits 1 with tokio's message.
                let served = tokio::spawn(crate::stdio::serve_stdio(
                    reader, writer, config, face, shutdown,
                ));
                let result = served.await.unwrap_or_else(|error| Err(std::io::Error::other(error)));
                drop(guard);
                result
            }
        };
        let abandoned = host::remove_abandoned_temps();
        if abandoned > 0 {
            tracing::info!(abandoned, "removed temporary files of fs calls cut short");
        }
        // Whatever escaped its session (setsid) but is still below us goes too.
        let leftovers = host::kill_descendants();
        if leftovers > 0 {
            tracing::debug!(leftovers, "killed descendants that had left their sessions");
        }
        reaper.abort();
        result
    });
    // stdin's reader thread may still be blocked in read(2); do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("exec-server: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `shutdown` awaited by a task of its own; the returned future completes
/// when it does. The loop polls its shutdown on every turn: a oneshot costs
/// an atomic load there, where the twelve signal streams cost twelve boxed
/// futures made, registered and dropped per turn (the two top symbols of
/// the server's own profile per round trip). The task is aborted when the
/// handle drops.
fn watched<F>(shutdown: F) -> (impl std::future::Future<Output = ()>, AbortOnDrop<()>)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (done, fired) = tokio::sync::oneshot::channel();
    let watcher = tokio::spawn(async move {
        shutdown.await;
        let _ = done.send(());
    });
    let fired = async move {
        // A watcher gone without firing (aborted at the end) is no shutdown.
        if fired.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    (fired, AbortOnDrop(watcher))
}

/// A host pattern of a network policy, checked.
fn host_pattern(text: &str) -> Result<String, String> {
    let policy = crate::protocol::NetworkPolicy::allow([text]);
    crate::dial::Rules::parse(&policy).map(|_| text.to_owned()).map_err(|e| e.to_string())
}

/// A `--prepend-path` directory: absolute, an existing directory, UTF-8 and
/// without `:` (the separator of `PATH`).
fn prepend_dir(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if !path.is_absolute() {
        return Err(format!("{text} is not an absolute path"));
    }
    if text.contains(':') {
        return Err(format!("{text} holds ':', which separates PATH's directories"));
    }
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => Ok(path),
        Ok(_) => Err(format!("{text} is not a directory")),
        Err(error) => Err(format!("cannot use {text}: {error}")),
    }
}

/// Where the server listens.
enum ListenOn {
    Stdio,
    WebSocket(SocketAddr, crate::listen::Auth),
    Unix(PathBuf),
}

/// Parses `--listen` (`ws://IP:PORT`, `unix:PATH`, `stdio`, `stdio://`, or
/// absent) and the auth flags; a non-loopback address needs a token, and the
/// auth flags need a WebSocket listener.
fn listen_on(url: Option<&str>, flags: &ws_auth::WsAuthFlags) -> Result<ListenOn, String> {
    let not_ws = |what: &str| {
        format!("the --ws-auth and token flags configure a WebSocket listener; --listen {what} has none")
    };
    let url = match url {
        None | Some("stdio" | "stdio://") if flags.any() => return Err(not_ws("stdio")),
        None | Some("stdio" | "stdio://") => return Ok(ListenOn::Stdio),
        Some(url) if url.starts_with("unix:") && flags.any() => return Err(not_ws(url)),
        Some(url) if url.starts_with("unix:") => {
            return unix_path(url, "--listen").map(ListenOn::Unix)
        }
        Some(url) => url,
    };
    let address = url
        .strip_prefix("ws://")
        .map(|rest| rest.trim_end_matches('/'))
        .and_then(|rest| rest.parse::<SocketAddr>().ok())
        .ok_or_else(|| {
            format!("--listen {url}: expected ws://IP:PORT (such as ws://127.0.0.1:0), unix:PATH or stdio")
        })?;
    let auth = flags.auth()?;
    if !address.ip().is_loopback() && !auth.needs_token() {
        return Err(format!(
            "--listen {url}: a non-loopback address needs --ws-auth (or --token-file; clients then send Authorization: Bearer TOKEN)"
        ));
    }
    Ok(ListenOn::WebSocket(address, auth))
}

/// The absolute path of `unix:PATH` (also `unix://PATH`); `unix:` alone is
/// the default socket, `$XDG_RUNTIME_DIR/exec-server/daemon.sock`, else
/// `/tmp/exec-server-UID/daemon.sock`.
fn unix_path(url: &str, flag: &str) -> Result<PathBuf, String> {
    let path = url.strip_prefix("unix://").or_else(|| url.strip_prefix("unix:"));
    if path == Some("") {
        return Ok(default_socket());
    }
    let Some(path) = path.filter(|path| path.starts_with('/')) else {
        return Err(format!("{flag} {url}: expected unix:PATH with an absolute PATH, such as unix:/run/user/1000/exec-server.sock, or unix: for the default socket"));
    };
    Ok(PathBuf::from(path))
}

fn default_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("exec-server/daemon.sock"),
        None => PathBuf::from(format!("/tmp/exec-server-{}/daemon.sock", crate::listen::euid())),
    }
}

/// Parses a duration: a number of seconds, or a number with `ms`, `s`, `m` or `h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("expected a duration such as 30s or 500ms, got {text:?}"))?;
    let millis = match unit {
        "ms" => Some(number),
        "" | "s" => number.checked_mul(1000),
        "m" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        _ => return Err(format!("unknown unit {unit:?} in {text:?}: use ms, s, m or h")),
    };
    millis.map(Duration::from_millis).ok_or_else(|| format!("duration {text:?} is too long"))
}

/// Binds, announces the URL (stdout, and the first line on stderr), and serves until `shutdown`.
async fn serve_websocket(
    address: SocketAddr,
    options: ListenOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    use std::io::Write;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e}")))?;
    let url = format!("ws://{}", listener.local_addr()?);
    eprintln!("exec-server listening on {url}");
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{url}")?;
    stdout.flush()?;
    drop(stdout);
    server::listen(listener, options, shutdown).await
}

/// Binds the daemon's socket, announces it as `serve_websocket` does, and
/// serves until `shutdown` or `idle_exit` without connections and sessions.
async fn serve_unix(
    path: &std::path::Path,
    options: ListenOptions,
    idle_exit: Option<Duration>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    use std::io::Write;
    let socket = server::bind_unix(path)?;
    let url = format!("unix:{}", path.display());
    eprintln!("exec-server listening on {url}");
    let mut stdout = std::io::stdout().lock();
    // A daemon's stdout may be /dev/null or closed: not an error.
    let _ = writeln!(stdout, "{url}").and_then(|()| stdout.flush());
    drop(stdout);
    server::listen_unix(socket, options, idle_exit, shutdown).await
}

/// Allocator tuning for messages of megabytes. Every fresh 11 MB buffer (an
/// 8 MiB file as base64) costs ~2700 page faults, about 4 ms on this kind of
/// VM, so large buffers come from one heap and are reused: allocations up to
/// 32 MiB stay on the heap, up to 32 MiB of free space is kept at its top
/// before it is returned to the system, and one arena serves every thread (a
/// buffer freed by a blocking thread serves the loop's next line). Measured:
/// fs write+read 285 -> 400 MiB/s; peak RSS of the 200 MiB round trip test
/// 28 -> 39 MiB (two arenas: 60 MiB). Streams (64 KiB chunks) are unaffected.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Completes on the first SIGTERM, SIGINT, SIGHUP (the hangup of `ssh -tt`),
/// SIGQUIT, SIGXCPU or SIGPWR. SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
/// SIGPROF and SIGIO are logged and otherwise ignored; Rust already ignores SIGPIPE.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    // (signal, name, whether it ends the server); handlers, not SIG_IGN, so
    // children start with every signal at its default.
    // SIGXFSZ keeps its default: it marks a write past RLIMIT_FSIZE, a crash
    // the watcher cleans up after (and the atomic-write test relies on).
    let handled: [(libc::c_int, &str, bool); 12] = [
        (libc::SIGTERM, "SIGTERM", true),
        (libc::SIGINT, "SIGINT", true),
        (libc::SIGHUP, "SIGHUP", true),
        (libc::SIGQUIT, "SIGQUIT", true),
        (libc::SIGXCPU, "SIGXCPU", true),
        (libc::SIGPWR, "SIGPWR", true),
        (libc::SIGUSR1, "SIGUSR1", false),
        (libc::SIGUSR2, "SIGUSR2", false),
        (libc::SIGALRM, "SIGALRM", false),
        (libc::SIGVTALRM, "SIGVTALRM", false),
        (libc::SIGPROF, "SIGPROF", false),
        (libc::SIGIO, "SIGIO", false),
    ];
    let mut streams = Vec::with_capacity(handled.len());
    for (number, name, ends) in handled {
        streams.push((signal(SignalKind::from_raw(number))?, name, ends));
    }
    Ok(async move {
        loop {
            let received = streams.iter_mut().map(|(stream, ..)| Box::pin(stream.recv()));
            let (_, index, _) = futures_util::future::select_all(received).await;
            let (_, name, ends) = streams[index];
            if ends {
                tracing::info!(signal = name, "shutting down");
                return;
            }
            tracing::info!(signal = name, "ignoring the signal");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }

    #[test]
    fn listen_urls_parse() {
        let none = ws_auth::WsAuthFlags::default();
        assert!(matches!(listen_on(Some("stdio"), &none), Ok(ListenOn::Stdio)));
        assert!(
            matches!(listen_on(Some("unix:/r/s"), &none), Ok(ListenOn::Unix(p)) if p == std::path::Path::new("/r/s"))
        );
        assert!(listen_on(Some("unix:rel"), &none).is_err());
        assert!(listen_on(Some("ws://0.0.0.0:1"), &none).is_err());
    }
}
