//! The params and results of the fs/* methods.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Base64;

/// Params of fs/getMetadata and fs/readDirectory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PathParams {
    /// Absolute path (or `pathBase64`, its raw bytes, for a name that is not UTF-8).
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// fs/getMetadata: follow a final symlink (Part B; default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
}

/// `fs/readFile` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReadFileParams {
    /// Absolute path (or `pathBase64`, its raw bytes, for a name that is not UTF-8).
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// First byte to read (Part B; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Most bytes to read (Part B; default: to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// Follow a final symlink (Part B; default true; false refuses one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
}

/// `fs/readFile` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReadFileResult {
    /// The bytes read.
    pub data_base64: Base64,
}

/// `fs/writeFile` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WriteFileParams {
    /// Absolute path (or `pathBase64`, its raw bytes, for a name that is not UTF-8).
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// The bytes, base64 (decoded by the handler for its exact error message).
    pub data_base64: String,
    /// Append instead of replacing (Part B).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// Follow a final symlink (Part B; default true; false refuses one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
}

/// `fs/createDirectory` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CreateDirectoryParams {
    /// Absolute path (or `pathBase64`, its raw bytes, for a name that is not UTF-8).
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// Create missing parents (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
}

/// `fs/getMetadata` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Metadata {
    /// A directory (after following symlinks).
    pub is_directory: bool,
    /// A regular file (after following symlinks).
    pub is_file: bool,
    /// Creation time, ms since the epoch, 0 when unknown.
    pub created_at_ms: i64,
    /// Modification time, ms since the epoch, 0 when unknown.
    pub modified_at_ms: i64,
    /// The path itself is a symlink (Part B).
    #[serde(default)]
    pub is_symlink: bool,
    /// Size in bytes (Part B).
    #[serde(default)]
    pub size: u64,
    /// No write permission bits are set (Part B).
    #[serde(default)]
    pub readonly: bool,
}

/// `fs/readDirectory` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReadDirectoryResult {
    /// Entries sorted by name.
    pub entries: Vec<DirectoryEntry>,
}

/// One entry of `fs/readDirectory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DirectoryEntry {
    /// The entry's name.
    pub file_name: String,
    /// A directory (after following symlinks).
    pub is_directory: bool,
    /// A regular file (after following symlinks).
    pub is_file: bool,
    /// The name's raw bytes, when it is not UTF-8 (Part B; `fileName` is then lossy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name_base64: Option<Base64>,
}

/// `fs/remove` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RemoveParams {
    /// Absolute path (or `pathBase64`, its raw bytes, for a name that is not UTF-8).
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// Remove directories with their contents (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// A missing path is not an error (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Remove what a final symlink points to (Part B; default false: the link itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
}

/// `fs/copy` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CopyParams {
    /// What to copy. (Or `sourcePathBase64`, its raw bytes.)
    #[serde(flatten, with = "crate::protocol::names::source_path")]
    pub source_path: PathBuf,
    /// Where to. (Or `destinationPathBase64`, its raw bytes.)
    #[serde(flatten, with = "crate::protocol::names::destination_path")]
    pub destination_path: PathBuf,
    /// Required true for directories.
    #[serde(default)]
    pub recursive: bool,
}

/// `fs/rename` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RenameParams {
    /// What to rename. (Or `sourcePathBase64`, its raw bytes.)
    #[serde(flatten, with = "crate::protocol::names::source_path")]
    pub source_path: PathBuf,
    /// The new path. (Or `destinationPathBase64`, its raw bytes.)
    #[serde(flatten, with = "crate::protocol::names::destination_path")]
    pub destination_path: PathBuf,
}

/// `fs/watch` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WatchParams {
    /// The directory (or file) to watch (or `pathBase64`).
    #[serde(flatten, with = "crate::protocol::names::path")]
    pub path: PathBuf,
    /// Watch every directory beneath it too, those created later included.
    #[serde(default)]
    pub recursive: bool,
    /// A `restricted` sandbox whose `readableRoots` (and `writableRoots`) the
    /// path must lie beneath, for a client that confines itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<super::Sandbox>,
}

/// `fs/watch` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WatchResult {
    /// Names the watch in `fs/changed` and `fs/unwatch`.
    pub watch_id: String,
}

/// `fs/watchMissing` params (today's dialect, Codex 0.169): tell the client
/// once when one of `missing` appears, or `present` changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchMissingParams {
    /// The client's name for the watch (a number or a string), echoed in
    /// `fs/missingChanged`; a new watch with the same id replaces the old.
    pub watch_id: serde_json::Value,
    /// Paths (file URIs, or absolute paths) that do not exist yet.
    #[serde(default)]
    pub missing: Vec<String>,
    /// A path (file URI, or absolute path) that exists, whose change counts too.
    #[serde(default)]
    pub present: Option<String>,
}

/// `fs/watchMissing` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchMissingResult {
    /// The watch is set (it fires at once when a missing path is already there).
    pub watching: bool,
}

/// `fs/missingChanged` params: the watch fired, and is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MissingChangedParams {
    /// The client's id of the watch.
    pub watch_id: serde_json::Value,
}

/// `fs/unwatch` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct UnwatchParams {
    /// The watch to end.
    pub watch_id: String,
}

/// `fs/changed` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ChangedParams {
    /// The watch.
    pub watch_id: String,
    /// Changes in the order they happened (per path).
    pub changes: Vec<Change>,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Change {
    /// Absolute path (lossy when not UTF-8).
    pub path: String,
    /// The path's raw bytes, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_base64: Option<Base64>,
    /// What happened.
    pub kind: ChangeKind,
}

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    /// Created (or found in a directory that appeared).
    Created,
    /// Contents written.
    Modified,
    /// Removed.
    Removed,
    /// Renamed away from this path.
    RenamedFrom,
    /// Renamed to this path.
    RenamedTo,
    /// Mode, owner, times or xattrs changed.
    Metadata,
    /// Changes were lost: rescan this directory.
    Overflow,
}

impl WatchParams {
    /// A watch of `path`, of every directory beneath it with `recursive`.
    pub fn new(path: impl Into<PathBuf>, recursive: bool) -> WatchParams {
        WatchParams { path: path.into(), recursive, sandbox: None }
    }
}

impl Change {
    /// A change of `path` (lossy in `path`, exact in `pathBase64` when not UTF-8).
    pub fn new(path: &std::path::Path, kind: ChangeKind) -> Change {
        let bytes = crate::protocol::names::to_bytes(path);
        Change {
            path: path.to_string_lossy().into_owned(),
            path_base64: crate::protocol::names::base64_if_not_utf8(&bytes),
            kind,
        }
    }

    /// An `overflow` of `root`: changes were lost, rescan it.
    pub fn overflow(root: &std::path::Path) -> Change {
        Change::new(root, ChangeKind::Overflow)
    }
}
