//! `environment/info` (today's dialect): the shell, directories and
//! capabilities of the machine the server runs on. Directories are file URIs;
//! the shell is a native path (`shell.rs`). `temporaryDirectories` holds only
//! `$TMPDIR`, when it is set and not empty; the capabilities claim only what
//! this server serves.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::{shell, uri};

/// The `environment/info` result (also `environmentInfo` in `initialize`);
/// `prepend_path`: the directories put first on every process's `PATH`.
pub(crate) fn environment_info(prepend_path: &[PathBuf]) -> Value {
    let shell = shell::user_shell();
    let name = shell::name(&shell);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let tmpdir = tmpdir(&cwd);
    let temp = tmpdir.clone().unwrap_or_else(|| PathBuf::from("/tmp"));
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let mut info = json!({
        // A native path, not a URI: today's client runs it as a program.
        "shell": {"name": name, "path": shell.to_string_lossy()},
        "cwd": uri::from_path(&cwd),
        "temporaryDirectories": tmpdir.iter().map(|t| uri::from_path(t)).collect::<Vec<_>>(),
        "tempDir": uri::from_path(&temp),
        "executorVersion": env!("CARGO_PKG_VERSION"),
        "providerId": concat!("exec-server/", env!("CARGO_PKG_VERSION")),
        "platformOs": std::env::consts::OS,
        "prependPathDirs": prepend_path.iter().map(|dir| uri::from_path(dir)).collect::<Vec<_>>(),
        "capabilities": {
            "networkProxyLaunch": true,
            "capabilityDiscoverySandbox": false,
            "capabilityDiscoveryV2": false,
            "environmentConfigRead": true,
            "httpHeaderEnvVars": true,
            "sandboxedFileStreaming": true,
            "shellSnapshotV2": false,
            "fileWriteStreaming": true,
            "windowsMxc": false,
            "fsWatchMissing": true,
            "networkProxyReviewDomains": false,
            "credentialMasking": false,
            "credentialMaskingCustomProviders": false,
        },
    });
    if let Some(home) = home {
        info["userHomeDir"] = json!(uri::from_path(&home));
    }
    info
}

/// `$TMPDIR` when it is set and not empty, a relative one resolved against `cwd`.
fn tmpdir(cwd: &std::path::Path) -> Option<PathBuf> {
    let value = std::env::var_os("TMPDIR").filter(|value| !value.is_empty())?;
    Some(cwd.join(value))
}
