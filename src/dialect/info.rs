//! `environment/info` (today's dialect): the shell, directories and
//! capabilities of the machine the server runs on. Paths are file URIs.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::uri;

/// The `environment/info` result (also `environmentInfo` in `initialize`).
pub(crate) fn environment_info() -> Value {
    let shell = std::env::var_os("SHELL").map(PathBuf::from).filter(|s| s.is_absolute());
    let shell = shell.unwrap_or_else(|| PathBuf::from("/bin/sh"));
    let name = shell.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let temp = std::env::temp_dir();
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let mut temporary = vec![temp.clone()];
    if temp != Path::new("/tmp") {
        temporary.push(PathBuf::from("/tmp"));
    }
    let mut info = json!({
        "shell": {"name": name, "path": uri::from_path(&shell)},
        "cwd": uri::from_path(&cwd),
        "temporaryDirectories": temporary.iter().map(|t| uri::from_path(t)).collect::<Vec<_>>(),
        "tempDir": uri::from_path(&temp),
        "executorVersion": env!("CARGO_PKG_VERSION"),
        "providerId": concat!("exec-server/", env!("CARGO_PKG_VERSION")),
        "platformOs": std::env::consts::OS,
        "capabilities": {
            "networkProxyLaunch": false,
            "capabilityDiscoverySandbox": false,
            "capabilityDiscoveryV2": false,
            "environmentConfigRead": false,
            "httpHeaderEnvVars": false,
            "sandboxedFileStreaming": true,
            "shellSnapshotV2": false,
            "fileWriteStreaming": true,
            "windowsMxc": false,
        },
    });
    if let Some(home) = home {
        info["userHomeDir"] = json!(uri::from_path(&home));
    }
    info
}
