//! Params and results of the `process/*` methods and notifications.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Base64, Sandbox, SandboxType};

/// Which stream an output chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// A pipe process's stdout.
    Stdout,
    /// A pipe process's stderr.
    Stderr,
    /// A tty process's terminal.
    Pty,
}

/// A terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtySize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl Default for TtySize {
    fn default() -> TtySize {
        TtySize { rows: 24, cols: 80 }
    }
}

/// `process/start` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StartParams {
    /// Client-chosen handle, unique on the connection.
    pub process_id: String,
    /// Program and arguments; no shell is involved.
    pub argv: Vec<String>,
    /// Absolute directory the child starts in.
    pub cwd: PathBuf,
    /// The child's complete environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Run under a pseudo-terminal.
    #[serde(default)]
    pub tty: bool,
    /// Override of argv\[0\].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg0: Option<String>,
    /// Requested sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// Give a pipe process a writable stdin (Part B).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pipe_stdin: bool,
    /// Initial terminal size of a tty process (Part B; default 24x80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<TtySize>,
    /// Who asked (Part B and today's dialect): exported to the process as
    /// `CODEX_THREAD_ID` and `CODEX_TOOL_CALL_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<StartMetadata>,
    /// Memory, process and CPU limits on the process and all its
    /// descendants together (Part B; see PROTOCOL.md, Limits).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::limit_types::object"
    )]
    pub limits: Option<super::ProcessLimits>,
}

/// `process/start` metadata (Codex 0.163): each at most 256 bytes, without
/// NUL or newline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StartMetadata {
    /// The agent's thread, exported as `CODEX_THREAD_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The tool call, exported as `CODEX_TOOL_CALL_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// `process/start` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StartResult {
    /// The id the client chose.
    pub process_id: String,
    /// How the process is confined (Part B): always in today's dialect; in
    /// exec-server.v0 only when the start asked for a sandbox, so that a v0
    /// answer is exactly `{"processId"}` as Part A shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_type: Option<SandboxType>,
}

/// `process/read` params.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReadParams {
    /// The process.
    pub process_id: String,
    /// Return chunks with a greater seq (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Byte budget of the returned chunks (the first chunk is always returned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Wait up to this long for output or exit when there is nothing to return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// One retained output chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Chunk {
    /// Per-process sequence number, from 1.
    pub seq: u64,
    /// Stream it came from.
    pub stream: Stream,
    /// The bytes.
    pub chunk: Base64,
}

/// `process/read` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReadResult {
    /// Chunks after `afterSeq`, in order.
    pub chunks: Vec<Chunk>,
    /// Continue with `afterSeq = nextSeq - 1`.
    pub next_seq: u64,
    /// The process has exited and `process/exited` was sent.
    pub exited: bool,
    /// Exit code once exited (128+N for signal N).
    pub exit_code: Option<i32>,
    /// Name of the killing signal, when a signal ended the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Every stream has ended, `process/closed` was sent, and this page holds
    /// the last chunk (Part B; absent from older servers: false).
    #[serde(default)]
    pub closed: bool,
    /// Once exited: the limit that ended it, as in `process/exited` (Part B).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<super::LimitHit>,
    /// Today's dialect: why the process could not be run; always `null`
    /// here (a start that cannot run fails, or its process exits 127 saying why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Option<String>>,
    /// Today's dialect: whether its failure looks like the sandbox's refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_denied: Option<bool>,
}

/// `process/write` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WriteParams {
    /// The process.
    pub process_id: String,
    /// Bytes to write.
    pub chunk: Base64,
    /// Close the pipe stdin after the chunk (Part B; pipe processes only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close_stdin: bool,
    /// A client-chosen id: a retried write with an id already applied to this
    /// process is acknowledged again and not applied twice (Part B, Sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_id: Option<String>,
}

/// `process/write` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WriteResult {
    /// True when the chunk was queued in order (or had been: a repeated writeId).
    #[serde(default)]
    pub accepted: bool,
    /// The same in today's words; a refused write of today's dialect says why here.
    #[serde(default)]
    pub status: WriteStatus,
}

/// What became of a `process/write`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WriteStatus {
    /// Queued for the process's stdin.
    #[default]
    Accepted,
    /// No process has this id.
    UnknownProcess,
    /// The process's stdin is closed (or it has exited).
    StdinClosed,
    /// The process is still starting.
    Starting,
}

/// `process/terminate` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TerminateParams {
    /// The process.
    pub process_id: String,
    /// SIGTERM first, SIGKILL after this many ms (Part B). Absent: SIGKILL at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

/// Result of `process/terminate` and `process/signal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunningResult {
    /// The process was running when the signal was sent.
    pub running: bool,
}

/// `process/signal` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SignalParams {
    /// The process.
    pub process_id: String,
    /// A signal name such as `SIGINT`, or `interrupt`.
    pub signal: String,
}

/// `process/resize` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResizeParams {
    /// The process.
    pub process_id: String,
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// `process/list` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ListResult {
    /// Every process the connection knows, ordered by id.
    pub processes: Vec<ProcessInfo>,
}

/// One entry of `process/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ProcessInfo {
    /// The client's id.
    pub process_id: String,
    /// The argv it was started with.
    pub argv: Vec<String>,
    /// Whether it runs under a terminal.
    pub tty: bool,
    /// OS pid (also its process group id).
    pub pid: u32,
    /// Not yet exited.
    pub running: bool,
    /// Exit code once exited.
    pub exit_code: Option<i32>,
    /// Name of the killing signal, if any.
    pub signal: Option<String>,
    /// How the process is confined.
    #[serde(default)]
    pub sandbox_type: SandboxType,
    /// The limits its tree runs under, defaults included (Part B; only for a
    /// process that has some).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<super::ProcessLimits>,
}

/// `process/output` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OutputParams {
    /// The process.
    pub process_id: String,
    /// The chunk's sequence number.
    #[serde(default)]
    pub seq: u64,
    /// Stream it came from.
    pub stream: Stream,
    /// The bytes.
    pub chunk: Base64,
}

/// `process/exited` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExitedParams {
    /// The process.
    pub process_id: String,
    /// Seq of the last output chunk sent before this notification.
    #[serde(default)]
    pub seq: u64,
    /// Exit code (128+N for signal N).
    pub exit_code: i32,
    /// Name of the killing signal, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The limit that ended it: the memory limit killed a process of its
    /// tree (Part B; only for a start that had limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<super::LimitHit>,
    /// Today's dialect: whether its failure looks like the sandbox's refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_denied: Option<bool>,
}

/// `process/closed` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ClosedParams {
    /// The process.
    pub process_id: String,
    /// Seq of the last output chunk sent before this notification.
    pub seq: u64,
}

/// Convenience constructors for start params.
impl StartParams {
    /// A pipe process `argv` in `cwd`, with this process's PATH (if any) as its only variable.
    pub fn new<I, S>(
        process_id: impl Into<String>,
        argv: I,
        cwd: impl Into<std::path::PathBuf>,
    ) -> StartParams
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut env = std::collections::BTreeMap::new();
        if let Ok(path) = std::env::var("PATH") {
            env.insert("PATH".to_owned(), path);
        }
        StartParams {
            process_id: process_id.into(),
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: cwd.into(),
            env,
            tty: false,
            arg0: None,
            sandbox: None,
            pipe_stdin: false,
            size: None,
            metadata: None,
            limits: None,
        }
    }

    /// Tells the process who asked: `CODEX_THREAD_ID` and `CODEX_TOOL_CALL_ID`
    /// in its environment (each at most 256 bytes, without NUL or newline).
    pub fn metadata(
        mut self,
        thread_id: Option<String>,
        tool_call_id: Option<String>,
    ) -> StartParams {
        self.metadata = Some(StartMetadata { thread_id, tool_call_id });
        self
    }

    /// Runs under a pseudo-terminal of `rows` x `cols`.
    pub fn with_tty(mut self, rows: u16, cols: u16) -> StartParams {
        self.tty = true;
        self.size = Some(TtySize { rows, cols });
        self
    }

    /// Gives a pipe process a writable stdin.
    pub fn with_stdin(mut self) -> StartParams {
        self.pipe_stdin = true;
        self
    }

    /// Runs confined by `sandbox`, for example
    /// `Sandbox::restricted(["/work"]).readable_roots(["/usr", "/work"]).network(false)`.
    pub fn sandbox(mut self, sandbox: Sandbox) -> StartParams {
        self.sandbox = Some(sandbox);
        self
    }

    /// Runs with memory, process and CPU limits on its whole tree, for
    /// example `ProcessLimits::new(Some(512 << 20), Some(64), Some(100))`.
    pub fn limits(mut self, limits: crate::protocol::ProcessLimits) -> StartParams {
        self.limits = Some(limits);
        self
    }
}
