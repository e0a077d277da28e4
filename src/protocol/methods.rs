//! One marker type per method and notification, with its params and result types.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use super::fs_types::*;
pub use super::http_types::*;
pub use super::today_types::*;
pub use super::tunnel_types::*;
use super::Base64;

/// A request method: its wire name and the types of its params and result.
pub trait Method {
    /// The wire name, such as `process/start`.
    const NAME: &'static str;
    /// The `params` member.
    type Params: Serialize + DeserializeOwned + Send + 'static;
    /// The `result` member.
    type Result: Serialize + DeserializeOwned + Send + 'static;
}

/// A notification: its wire name and the type of its params.
pub trait NotificationMethod {
    /// The wire name, such as `process/output`.
    const NAME: &'static str;
    /// The `params` member.
    type Params: Serialize + DeserializeOwned + Send + 'static;
}

macro_rules! methods {
    ($($(#[$doc:meta])* $marker:ident = $name:literal ($params:ty) -> $result:ty;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug)]
            pub enum $marker {}
            impl Method for $marker {
                const NAME: &'static str = $name;
                type Params = $params;
                type Result = $result;
            }
        )*
        /// Every request method, in the order `initialize` lists them.
        pub const METHODS: &[&str] = &[$($name),*];
    };
}

macro_rules! notifications {
    ($(#[$list_doc:meta])* $list:ident; $($(#[$doc:meta])* $marker:ident = $name:literal ($params:ty);)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug)]
            pub enum $marker {}
            impl NotificationMethod for $marker {
                const NAME: &'static str = $name;
                type Params = $params;
            }
        )*
        $(#[$list_doc])*
        pub const $list: &[&str] = &[$($name),*];
    };
}

methods! {
    /// `initialize`: the first request of a connection.
    Initialize = "initialize" (InitializeParams) -> InitializeResult;
    /// `process/start`: spawn a process.
    ProcessStart = "process/start" (StartParams) -> StartResult;
    /// `process/read`: read retained output by sequence number.
    ProcessRead = "process/read" (ReadParams) -> ReadResult;
    /// `process/write`: write to a process's stdin or terminal.
    ProcessWrite = "process/write" (WriteParams) -> WriteResult;
    /// `process/terminate`: kill a process group.
    ProcessTerminate = "process/terminate" (TerminateParams) -> RunningResult;
    /// `process/signal`: send a signal to a process group.
    ProcessSignal = "process/signal" (SignalParams) -> RunningResult;
    /// `process/resize`: change a terminal's size.
    ProcessResize = "process/resize" (ResizeParams) -> Empty;
    /// `process/list`: every process the connection knows.
    ProcessList = "process/list" (Empty) -> ListResult;
    /// `fs/readFile`: read a file, whole or a byte range.
    ReadFile = "fs/readFile" (ReadFileParams) -> ReadFileResult;
    /// `fs/writeFile`: write or append to a file.
    WriteFile = "fs/writeFile" (WriteFileParams) -> Empty;
    /// `fs/createDirectory`: create a directory.
    CreateDirectory = "fs/createDirectory" (CreateDirectoryParams) -> Empty;
    /// `fs/getMetadata`: stat a path.
    GetMetadata = "fs/getMetadata" (PathParams) -> Metadata;
    /// `fs/readDirectory`: list a directory.
    ReadDirectory = "fs/readDirectory" (PathParams) -> ReadDirectoryResult;
    /// `fs/remove`: remove a file or directory.
    Remove = "fs/remove" (RemoveParams) -> Empty;
    /// `fs/copy`: copy a file, symlink or directory tree.
    Copy = "fs/copy" (CopyParams) -> Empty;
    /// `fs/rename`: rename a path.
    Rename = "fs/rename" (RenameParams) -> Empty;
    /// `fs/watch`: report changes under a path (Part B).
    Watch = "fs/watch" (WatchParams) -> WatchResult;
    /// `fs/unwatch`: end a watch (Part B).
    Unwatch = "fs/unwatch" (UnwatchParams) -> Empty;
    /// `environment/info`: the machine's shell, directories and capabilities (today's dialect).
    EnvironmentInfo = "environment/info" (Empty) -> serde_json::Value;
    /// `environment/status`: whether the server is ready (today's dialect).
    EnvironmentStatus = "environment/status" (Empty) -> StatusResult;
    /// `fs/canonicalize`: a path with every link resolved (today's dialect).
    Canonicalize = "fs/canonicalize" (PathParams) -> PathResult;
    /// `fs/walk`: a bounded listing of a tree (today's dialect).
    Walk = "fs/walk" (WalkParams) -> WalkResult;
    /// `fs/open`: open a file for reading or writing in blocks (today's dialect).
    Open = "fs/open" (OpenParams) -> HandleParams;
    /// `fs/readBlock`: read from an open handle (today's dialect).
    ReadBlock = "fs/readBlock" (ReadBlockParams) -> ReadBlockResult;
    /// `fs/writeBlock`: write to a handle opened with `replace` (today's dialect).
    WriteBlock = "fs/writeBlock" (WriteBlockParams) -> Empty;
    /// `fs/close`: close a handle (today's dialect).
    Close = "fs/close" (HandleParams) -> Empty;
    /// `session/end`: end this session now, its processes killed (Part B).
    SessionEnd = "session/end" (Empty) -> Empty;
    /// `tunnel/open`: connect from the server's side (Part B, Tunnels).
    TunnelOpen = "tunnel/open" (TunnelOpenParams) -> Empty;
    /// `tunnel/write`: send bytes through a tunnel, or half-close it (Part B).
    TunnelWrite = "tunnel/write" (TunnelWriteParams) -> Empty;
    /// `tunnel/close`: end a tunnel from the client's side (Part B).
    TunnelClose = "tunnel/close" (TunnelIdParams) -> Empty;
    /// `ports/list`: TCP sockets listening in the session's processes (Part B).
    PortsList = "ports/list" (Empty) -> PortsResult;
    /// `ports/watch`: report listening ports as they open and close (Part B).
    PortsWatch = "ports/watch" (Empty) -> Empty;
    /// `ports/unwatch`: stop reporting them (Part B).
    PortsUnwatch = "ports/unwatch" (Empty) -> Empty;
    /// `http/request`: an HTTP exchange made from the server's side (today's dialect).
    HttpRequest = "http/request" (HttpRequestParams) -> HttpResponse;
}

notifications! {
    /// Every notification a client sends.
    CLIENT_NOTIFICATIONS;
    /// `initialized`: the client's second handshake step.
    Initialized = "initialized" (Empty);
    /// `tunnel/ack`: tunnel bytes consumed, which the server may send again (Part B).
    TunnelAck = "tunnel/ack" (TunnelAckParams);
}

notifications! {
    /// Every notification the server sends, in the order `initialize` lists them.
    NOTIFICATIONS;
    /// `process/output`: one chunk of output.
    ProcessOutput = "process/output" (OutputParams);
    /// `process/exited`: the process exited.
    ProcessExited = "process/exited" (ExitedParams);
    /// `process/closed`: every output stream reached end-of-file.
    ProcessClosed = "process/closed" (ClosedParams);
    /// `fs/changed`: changes under a watched path (Part B).
    FsChanged = "fs/changed" (ChangedParams);
    /// `tunnel/data`: bytes from a tunnel's remote side (Part B).
    TunnelData = "tunnel/data" (TunnelDataParams);
    /// `tunnel/closed`: a tunnel ended on the remote side (Part B).
    TunnelClosed = "tunnel/closed" (TunnelClosedParams);
    /// `ports/changed`: listening ports opened or closed (Part B).
    PortsChanged = "ports/changed" (PortsChangedParams);
    /// `http/request/bodyDelta`: part of a streamed response body (today's dialect).
    HttpBodyDelta = "http/request/bodyDelta" (BodyDeltaParams);
}

/// An empty object, `{}`; also accepted as `null` or absent params.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `initialize` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InitializeParams {
    /// Free-form client name, logged by the server.
    pub client_name: String,
    /// Reattach this detached session instead of starting a new one (Part B, Sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_session_id: Option<String>,
    /// With `resumeSessionId`: when the session is still attached to another
    /// connection (one this client knows is dead), close that connection; the
    /// answer is still -32010, and a retry a moment later resumes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub takeover: bool,
    /// This client resumes a session whose connection dropped (Part B,
    /// Sessions): over WebSocket its session detaches on close instead of
    /// being killed, as Part A has it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumable: bool,
}

/// `initialize` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InitializeResult {
    /// `exec-server.v0` (absent from today's upstream servers).
    #[serde(default)]
    pub protocol_version: String,
    /// Name and version of the server (absent on Part A-only servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<ServerInfo>,
    /// What the server supports beyond Part A (absent on Part A-only servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// The session this connection is attached to (Part B, Sessions; absent on older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What `environment/info` answers (today's dialect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_info: Option<serde_json::Value>,
}

/// `serverInfo` of the `initialize` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServerInfo {
    /// `exec-server`.
    pub name: String,
    /// The crate version.
    pub version: String,
}

/// `capabilities` of the `initialize` result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Request methods the server answers.
    pub methods: Vec<String>,
    /// Notifications the server sends.
    pub notifications: Vec<String>,
    /// Behaviours beyond Part A a client may rely on (see [`FEATURES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

/// What `capabilities.features` lists: base64 twins of paths and names,
/// `followSymlinks`, atomic `fs/writeFile`, fs on regular files only, and
/// confinement of every path an fs method touches, and `restricted` sandboxes
/// of processes.
pub const FEATURES: &[&str] = &[
    "fs/pathBase64",
    "fs/followSymlinks",
    "fs/atomicWrite",
    "fs/regularFilesOnly",
    "fs/confinedTrees",
    "process/sandbox",
];

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
