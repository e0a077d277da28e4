//! `environment/info` through the real binary (DIALECT-GAPS §5): the login
//! shell as a native path, `$TMPDIR` alone as the temporary directories, and
//! capabilities that claim only what is served.

use std::ffi::CStr;

use serde_json::{json, Value};

use crate::binary::{Binary, BIN};

/// The login shell of this uid in the passwd database.
fn passwd_shell() -> String {
    // SAFETY: getpwuid returns null or a pointer valid until the next call in
    // this thread; the string is copied at once.
    unsafe {
        let entry = libc::getpwuid(libc::getuid());
        assert!(!entry.is_null(), "this uid has a passwd entry");
        CStr::from_ptr((*entry).pw_shell).to_string_lossy().into_owned()
    }
}

/// `environment/info` of a server whose TMPDIR is `tmpdir` (None: unset), run in `cwd`.
async fn info(tmpdir: Option<&str>, cwd: &std::path::Path) -> Value {
    let mut command = tokio::process::Command::new(BIN);
    command.current_dir(cwd).env_remove("TMPDIR");
    if let Some(tmpdir) = tmpdir {
        command.env("TMPDIR", tmpdir);
    }
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "codex"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    server.result("environment/info", json!({})).await
}

#[tokio::test]
async fn the_shell_is_the_login_shell_as_a_native_path() {
    let info = info(None, std::path::Path::new("/")).await;
    let shell = passwd_shell();
    assert!(shell.starts_with('/') && std::path::Path::new(&shell).is_file(), "{shell}");
    let name = shell.rsplit('/').next().unwrap();
    assert_eq!(info["shell"], json!({"name": name, "path": shell}));
}

#[tokio::test]
async fn temporary_directories_hold_only_a_set_tmpdir() {
    let root = std::path::Path::new("/");
    let unset = info(None, root).await;
    assert_eq!(unset["temporaryDirectories"], json!([]));
    assert_eq!(unset["tempDir"], "file:///tmp");
    let empty = info(Some(""), root).await;
    assert_eq!(empty["temporaryDirectories"], json!([]));
    assert_eq!(empty["tempDir"], "file:///tmp");
    let set = info(Some("/var/tmp/a b"), root).await;
    assert_eq!(set["temporaryDirectories"], json!(["file:///var/tmp/a%20b"]));
    assert_eq!(set["tempDir"], "file:///var/tmp/a%20b");
    let relative = info(Some("scratch"), std::path::Path::new("/usr")).await;
    assert_eq!(relative["temporaryDirectories"], json!(["file:///usr/scratch"]));
}

#[tokio::test]
async fn capabilities_claim_only_what_is_served() {
    let info = info(None, std::path::Path::new("/")).await;
    assert_eq!(
        info["capabilities"],
        json!({
            "networkProxyLaunch": false,
            "capabilityDiscoverySandbox": false,
            "capabilityDiscoveryV2": false,
            "environmentConfigRead": false,
            "httpHeaderEnvVars": true,
            "sandboxedFileStreaming": true,
            "shellSnapshotV2": false,
            "fileWriteStreaming": true,
            "windowsMxc": false,
        })
    );
}
