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
    let mut command = tokio::process::Command::new(*BIN);
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
        })
    );
}

/// `--prepend-path DIR`: `environmentInfo.prependPathDirs` names it, and every
/// process finds DIR's tools first on its `PATH`, whether its start names a
/// `PATH` (before it), names none (before the server's) or takes the
/// server's environment (today's `envPolicy`).
#[tokio::test]
async fn prepended_directories_come_first_on_every_path() {
    let tools = crate::support::scratch("prepend-tools");
    let rg = tools.join("rg");
    std::fs::write(&rg, "#!/bin/sh\necho \"rg from $0\"\n").unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&rg).unwrap().permissions(),
        0o755,
    );
    std::fs::set_permissions(&rg, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dir = tools.to_str().unwrap();
    let mut server = crate::binary::Binary::spawn(&["--prepend-path", dir]);
    let init = server.result("initialize", json!({"clientName": "it"})).await;
    let uri = format!("file://{dir}");
    assert_eq!(init["environmentInfo"]["prependPathDirs"], json!([uri]));
    server.send_line(r#"{"method":"initialized"}"#).await;
    let info = server.result("environment/info", json!({})).await;
    assert_eq!(info["prependPathDirs"], json!([uri]));
    let script = "command -v rg; rg; echo \"$PATH\"";
    let server_path = std::env::var("PATH").unwrap();
    let cases = [
        (json!({"PATH": "/usr/bin:/bin"}), format!("{dir}:/usr/bin:/bin")),
        (json!({}), format!("{dir}:{server_path}")),
    ];
    for (n, (env, path)) in cases.into_iter().enumerate() {
        let id = format!("p{n}");
        let start = json!({"processId": id, "argv": ["/bin/sh", "-c", script], "cwd": "/tmp", "env": env, "tty": false});
        assert!(server.call("process/start", start).await["result"].is_object());
        let (output, code) = crate::sandbox::run_started(&mut server, &id).await;
        assert_eq!(
            (output, code),
            (format!("{}\nrg from {}\n{path}\n", rg.display(), rg.display()), 0)
        );
    }
    // Today's dialect, the server's environment inherited.
    let start = json!({"processId": "today", "argv": ["/bin/sh", "-c", "command -v rg"], "cwd": "file:///tmp", "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [], "set": {}, "includeOnly": []}, "env": {}, "tty": false});
    let reply = server.call("process/start", start).await;
    assert!(reply["result"].is_object(), "{reply}");
    let (output, _) = crate::sandbox::run_started(&mut server, "today").await;
    assert_eq!(output, format!("{}\n", rg.display()));
    // A directory that is not one, or is relative, is refused by name.
    for (bad, why) in [
        ("relative", "relative is not an absolute path"),
        ("/nonexistent-dir", "cannot use /nonexistent-dir: No such file or directory (os error 2)"),
    ] {
        let output = tokio::process::Command::new(*crate::binary::BIN)
            .args(["--prepend-path", bad])
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.contains(why), "{stderr}");
    }
}
