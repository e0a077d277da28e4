//! One marker type per method and notification, with its params and result types.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use super::fs_types::*;
pub use super::http_types::*;
pub use super::network_types::*;
pub use super::process_types::*;
pub use super::sandbox_types::*;
pub use super::today_types::*;
pub use super::tunnel_types::*;

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
    /// `fs/watchMissing`: one notification when a missing path appears or a present one changes (today's dialect).
    WatchMissing = "fs/watchMissing" (WatchMissingParams) -> WatchMissingResult;
    /// `environment/info`: the machine's shell, directories and capabilities (today's dialect).
    EnvironmentInfo = "environment/info" (Empty) -> serde_json::Value;
    /// `environmentConfig/read`: the executor's Codex config layers (today's dialect).
    EnvironmentConfigRead = "environmentConfig/read" (EnvironmentConfigReadParams) -> EnvironmentConfigReadResult;
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
    /// `fs/missingChanged`: an `fs/watchMissing` fired (today's dialect).
    MissingChanged = "fs/missingChanged" (MissingChangedParams);
    /// `network/connection`: a sandbox's proxy decided a connection (Part B).
    NetworkConnection = "network/connection" (NetworkConnectionParams);
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
    /// This client answers `network/decide` for sandboxes whose network
    /// policy asks (Part B); without it such a start is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network_decisions: bool,
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
    "process/sandboxNetworkPolicy",
];
