//! The params and results of the methods today's dialect added (DIALECT.md):
//! environment/*, fs/canonicalize, fs/walk and the fs/open handles.
//! They also take plain paths; a request that wrote its path as a file URI
//! is answered with file URIs.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Base64;

/// `environment/status` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StatusResult {
    /// Always `ready`.
    pub status: String,
}

/// A path in a result: `path` (a file URI when asked with one), and its raw
/// bytes as `pathBase64` when a plain path is not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PathResult {
    /// The path.
    pub path: String,
    /// Its bytes, when it is a plain path that is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_base64: Option<Base64>,
}

/// `fs/walk` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WalkParams {
    /// The directory to walk.
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// Bounds and choices of the walk.
    #[serde(default)]
    pub options: WalkOptions,
}

/// `fs/walk` options; each bound has a default and a ceiling.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WalkOptions {
    /// Levels below the start (default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u32>,
    /// Directories opened (default and ceiling 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_directories: Option<u32>,
    /// Entries returned (default and ceiling 100,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u32>,
    /// Descend into symlinks to directories (never out of `--root`, never twice into one).
    #[serde(default)]
    pub follow_directory_symlinks: bool,
    /// Do not descend into directories whose names start with `.`.
    #[serde(default)]
    pub prune_hidden_directories: bool,
}

/// One `fs/walk` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WalkEntry {
    /// Its path.
    #[serde(flatten)]
    pub path: PathResult,
    /// `directory` or `file` (anything that is not a directory).
    pub kind: String,
}

/// A part of the tree `fs/walk` could not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WalkError {
    /// Where.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

/// `fs/walk` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WalkResult {
    /// Entries below the start, parents before children.
    pub entries: Vec<WalkEntry>,
    /// What could not be read.
    pub errors: Vec<WalkError>,
    /// A bound stopped the walk before the whole tree was seen.
    pub truncated: bool,
}

/// How `fs/open` opens a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OpenMode {
    /// Read an existing regular file.
    #[default]
    Read,
    /// Create or truncate a regular file, for writing.
    Replace,
}

/// `fs/open` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OpenParams {
    /// Client-chosen, at most 32 bytes, unique among the connection's open handles.
    pub handle_id: String,
    /// The file.
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// `read` (default) or `replace`.
    #[serde(default)]
    pub mode: OpenMode,
}

/// `fs/open` result, and `fs/close` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HandleParams {
    /// The handle.
    pub handle_id: String,
}

/// `fs/readBlock` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReadBlockParams {
    /// The handle.
    pub handle_id: String,
    /// Where to read.
    pub offset: u64,
    /// How much, 1 to 1 MiB.
    pub len: u64,
}

/// `fs/readBlock` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReadBlockResult {
    /// The bytes read (fewer than asked only at the end of the file).
    pub chunk: Base64,
    /// The read reached the end of the file.
    pub eof: bool,
}

/// `fs/writeBlock` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WriteBlockParams {
    /// A handle opened with mode `replace`.
    pub handle_id: String,
    /// Where to write.
    pub offset: u64,
    /// The bytes, 1 byte to 1 MiB.
    pub chunk: Base64,
}

/// `environmentConfig/read` params: the executor's Codex config layers for
/// `cwd`, limited to the TOML key paths asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigReadParams {
    /// The project directory (a file URI, or a path).
    pub cwd: PathBuf,
    /// Key paths of config.toml to keep (`[["mcp_servers"]]`).
    #[serde(default)]
    pub config_paths: Vec<Vec<String>>,
    /// Key paths of requirements.toml to keep.
    #[serde(default)]
    pub requirements_paths: Vec<Vec<String>>,
}

/// `environmentConfig/read` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigReadResult {
    /// The server user's home (a file URI), which `~` in values means.
    pub user_home_dir: Option<String>,
    /// The Codex home (a file URI): `$CODEX_HOME`, else `~/.codex`.
    pub codex_home_dir: String,
    /// This machine's host name.
    pub hostname: Option<String>,
    /// The config layers, lowest precedence first.
    pub config: ConfigLayerStack,
    /// The requirements layers, lowest precedence first.
    pub requirements: ConfigLayerStack,
}

/// An ordered set of TOML layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigLayerStack {
    /// Lowest precedence first.
    pub layers: Vec<ConfigLayer>,
    /// Where the client inserts its cloud-provided layers.
    pub cloud_insertion_index: usize,
}

/// One TOML layer: where it came from, the directory its relative paths
/// are read against (a file URI), and its text, limited to the asked keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigLayer {
    /// For diagnostics only (`user (/root/.codex/config.toml)`).
    pub source: String,
    /// The layer's directory.
    pub base_dir: String,
    /// The selected TOML.
    pub toml: String,
}
