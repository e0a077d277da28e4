//! The sandbox's policy through the real binary: sandboxType, the errors that
//! name a root, `--sandbox`, refusal when a mechanism is missing, the client
//! half; and the support the escape tests share (users, trees, snapshots).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use exec_server::server::Config;
use exec_server::StartParams;
use exec_server::{Executor, LaunchCommand, Launcher, LocalExecutor, RemoteExecutor, Sandbox};
use serde_json::{json, Value};

use crate::binary::{Binary, BIN};
use crate::support::{scratch, unb64, Harness};

/// The uid and gid the unprivileged runs use.
pub const NOBODY: u32 = 65534;

/// Who the server runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// Whoever runs the tests (root on this machine and in CI).
    Current,
    /// `nobody`, through `setpriv`, when the tests run as root.
    Nobody,
}

impl User {
    /// The users to test as: the current one, and nobody when we are root.
    /// Under `CI=true` the unprivileged run must happen, so a non-root CI fails.
    pub fn all() -> Vec<User> {
        // SAFETY: a plain getter.
        if unsafe { libc::geteuid() } == 0 {
            return vec![User::Current, User::Nobody];
        }
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must run the tests as root, so that the sandbox is also tested as an unprivileged user"
        );
        eprintln!("not root: the sandbox tests run only as the current user");
        vec![User::Current]
    }

    /// The real binary as this user, with `args` and extra environment.
    pub fn server(self, args: &[&str], env: &[(&str, &str)]) -> Binary {
        let mut command = match self {
            User::Current => tokio::process::Command::new(*BIN),
            User::Nobody => crate::support::as_nobody(*BIN),
        };
        command.args(args).envs(env.iter().copied()).stderr(std::process::Stdio::inherit());
        Binary::from_command(command)
    }

    /// The binary as this user, after the handshake.
    pub async fn ready(self, args: &[&str], env: &[(&str, &str)]) -> Binary {
        let mut server = self.server(args, env);
        let result = server.result("initialize", json!({"clientName": "sandbox-test"})).await;
        assert_eq!(result["protocolVersion"], "exec-server.v0");
        server.send_line(r#"{"method":"initialized"}"#).await;
        server
    }

    /// Makes everything under `path` this user's, so that without a sandbox it could change it.
    pub fn own(self, path: &Path) {
        if self == User::Nobody {
            let status = std::process::Command::new("chown")
                .args(["-R", &format!("{NOBODY}:{NOBODY}")])
                .arg(path)
                .status()
                .unwrap();
            assert!(status.success(), "chown -R nobody {}", path.display());
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            User::Current => "current",
            User::Nobody => "nobody",
        }
    }
}

/// A test's directories: `w` is the writable root, `out` is outside it.
pub struct Tree {
    pub base: PathBuf,
    pub w: PathBuf,
    pub out: PathBuf,
}

impl Tree {
    pub fn new(name: &str, user: User) -> Tree {
        let base = scratch(&format!("sandbox-{name}-{}", user.name()));
        let (w, out) = (base.join("w"), base.join("out"));
        std::fs::create_dir_all(&w).unwrap();
        std::fs::create_dir_all(out.join("sub")).unwrap();
        std::fs::write(out.join("file"), "outside").unwrap();
        std::fs::write(out.join("sub/deep"), "deep").unwrap();
        set_xattr(&out.join("file"), "user.k", b"v");
        std::os::unix::fs::symlink("file", out.join("link")).unwrap();
        user.own(&base);
        Tree { base, w, out }
    }

    pub fn w(&self) -> &str {
        self.w.to_str().unwrap()
    }

    pub fn out(&self) -> &str {
        self.out.to_str().unwrap()
    }
}

pub fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let c_name = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and a valid buffer.
    let rc = unsafe {
        libc::lsetxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_ptr().cast(), value.len(), 0)
    };
    assert_eq!(rc, 0, "setxattr {}: {}", path.display(), std::io::Error::last_os_error());
}

/// Everything about every entry under `dir`, links not followed: type, mode,
/// owner, size, times, link count, inode, content or target, and xattrs.
pub fn full_snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let what = if meta.file_type().is_symlink() {
            format!("link -> {:?}", std::fs::read_link(&path).unwrap())
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
            "dir".to_owned()
        } else if meta.file_type().is_file() {
            format!("file {:?}", String::from_utf8_lossy(&std::fs::read(&path).unwrap()))
        } else {
            "special".to_owned()
        };
        let line = format!(
            "{what} mode {:o} owner {}:{} size {} mtime {}.{} ctime {}.{} nlink {} ino {} xattrs {:?}",
            meta.mode(),
            meta.uid(),
            meta.gid(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
            meta.nlink(),
            meta.ino(),
            xattrs(&path)
        );
        entries.insert(path, line);
    }
    entries
}

fn xattrs(path: &Path) -> Vec<(String, Vec<u8>)> {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: a NUL-terminated path and a buffer of the given size.
    let n = unsafe { libc::llistxattr(c_path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {}", path.display());
    names.truncate(n as usize);
    let mut found = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let c_name = std::ffi::CString::new(name).unwrap();
        let mut value = vec![0u8; 4096];
        // SAFETY: NUL-terminated strings and a buffer of the given size.
        let len = unsafe {
            libc::lgetxattr(
                c_path.as_ptr(),
                c_name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        value.truncate(len.max(0) as usize);
        found.push((String::from_utf8_lossy(name).into_owned(), value));
    }
    found
}

/// Start params of a sandboxed process: `restricted` with `w` writable, plus `extra`.
pub fn sandboxed(id: &str, argv: &[&str], cwd: &str, env: Value, sandbox: Value) -> Value {
    let mut env = env;
    env["PATH"] = json!("/usr/bin:/bin");
    json!({"processId": id, "argv": argv, "cwd": cwd, "env": env, "tty": false, "sandbox": sandbox})
}

/// Starts a process and collects its output until it exits: (output, exit code).
pub async fn run(server: &mut Binary, params: Value) -> (String, i64) {
    let id = params["processId"].as_str().unwrap().to_owned();
    let started = server.call("process/start", params).await;
    assert!(started.get("error").is_none(), "start failed: {started}");
    run_started(server, &id).await
}

/// The output of a process already started, until it exits: (output, exit code).
pub async fn run_started(server: &mut Binary, id: &str) -> (String, i64) {
    let mut output = Vec::new();
    loop {
        let message = server.next().await.expect("the server closed stdout");
        if message["params"]["processId"] != id {
            continue;
        }
        match message["method"].as_str() {
            Some("process/output") => output.extend(unb64(&message["params"]["chunk"])),
            Some("process/exited") => {
                let code = message["params"]["exitCode"].as_i64().unwrap();
                return (String::from_utf8_lossy(&output).into_owned(), code);
            }
            _ => {}
        }
    }
}

fn restricted(w: &str) -> Value {
    json!({"mode": "restricted", "writableRoots": [w]})
}

#[tokio::test]
async fn start_results_and_the_list_carry_the_sandbox_type() {
    let tree = Tree::new("type", User::Current);
    let mut server = User::Current.ready(&[], &[]).await;
    let params = sandboxed("s", &["true"], tree.w(), json!({}), restricted(tree.w()));
    assert_eq!(
        server.result("process/start", params).await,
        json!({"processId": "s", "sandboxType": "linuxLandlock"})
    );
    let plain = json!({"processId": "p", "argv": ["true"], "cwd": "/tmp", "env": {}, "tty": false});
    assert_eq!(server.result("process/start", plain).await, json!({"processId": "p"}));
    let list = server.result("process/list", json!({})).await;
    let mut types: Vec<(Value, Value)> = list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["processId"].clone(), p["sandboxType"].clone()))
        .collect();
    types.sort_by_key(|(id, _)| id.to_string());
    assert_eq!(types, [(json!("p"), json!("none")), (json!("s"), json!("linuxLandlock"))]);
}

#[tokio::test]
async fn policy_errors_name_the_root() {
    let tree = Tree::new("errors", User::Current);
    let file = tree.out.join("file");
    let missing = tree.base.join("missing");
    let outside_root = tree.out.to_str().unwrap().to_owned();
    let root_arg = format!("--root={}", tree.w());
    let mut confined = User::Current.ready(&[&root_arg], &[]).await;
    let mut free = User::Current.ready(&[], &[]).await;
    let cases = [
        (
            json!({"mode": "restricted", "writableRoots": [missing]}),
            -32600,
            format!("sandbox writable root {} does not exist", missing.display()),
        ),
        (
            json!({"mode": "restricted", "writableRoots": [file]}),
            -32600,
            format!("sandbox writable root {} is not a directory", file.display()),
        ),
        (
            json!({"mode": "restricted", "writableRoots": [tree.w()], "readableRoots": [missing]}),
            -32600,
            format!("sandbox readable root {} does not exist", missing.display()),
        ),
        (
            json!({"mode": "restricted", "writableRoots": ["relative/dir"]}),
            -32602,
            "sandbox writable root relative/dir must be an absolute path".to_owned(),
        ),
        (
            json!({"mode": "restricted"}),
            -32602,
            "sandbox mode `restricted` requires writableRoots (an empty list: nothing is writable)"
                .to_owned(),
        ),
        (
            json!({"mode": "none", "network": true}),
            -32602,
            "sandbox network is only valid with mode `restricted`".to_owned(),
        ),
        (
            json!({"mode": "hostDefault"}),
            -32600,
            "sandbox mode `hostDefault` is not supported by exec-server yet".to_owned(),
        ),
    ];
    for (sandbox, code, message) in cases {
        let params = sandboxed("e", &["true"], tree.w(), json!({}), sandbox.clone());
        let reply = free.call("process/start", params).await;
        assert_eq!(reply["error"], json!({"code": code, "message": message}), "{sandbox}");
    }
    // A root reached through a symlink is resolved once, at the start: the
    // directory it named then is confined, whatever the link becomes.
    let target = tree.w.join("target");
    std::fs::create_dir(&target).unwrap();
    let link = tree.w.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let script = "echo in > link/made; echo out > /etc/escaped-through-link";
    let params = sandboxed(
        "l",
        &["sh", "-c", script],
        tree.w(),
        json!({}),
        restricted(link.to_str().unwrap()),
    );
    let (output, code) = run(&mut free, params).await;
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("Read-only file system"), "{output}");
    assert_eq!(std::fs::read_to_string(target.join("made")).unwrap(), "in\n");
    assert!(!std::path::Path::new("/etc/escaped-through-link").exists());
    free.notification("process/closed", "l").await;
    // Two `sandbox` keys in one request: the message is refused, not read as the last.
    let mut line =
        sandboxed("dup", &["true"], tree.w(), json!({}), restricted(tree.w())).to_string();
    line.insert_str(line.len() - 1, r#","sandbox":{"mode":"none"}"#);
    free.send_line(&format!(r#"{{"id":99,"method":"process/start","params":{line}}}"#)).await;
    let refused = free.next().await.unwrap();
    assert_eq!(refused["id"], -1);
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("failed to parse JSON-RPC message: duplicate key `sandbox` in an object"),
        "{message}"
    );
    let unknown = sandboxed("e", &["true"], tree.w(), json!({}), json!({"mode": "strict"}));
    let reply = free.call("process/start", unknown).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("unknown variant `strict`"));
    // Under --root, a writable root outside it is refused.
    let params = sandboxed("e", &["true"], tree.w(), json!({}), restricted(&outside_root));
    let reply = confined.call("process/start", params).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("sandbox writable root {outside_root} is outside the allowed roots")})
    );
}

#[tokio::test]
async fn the_sandbox_flag_confines_every_process_to_the_default_policy() {
    let tree = Tree::new("flag", User::Current);
    let root_arg = format!("--root={}", tree.w());
    let mut server = User::Current.ready(&["--sandbox", &root_arg], &[]).await;
    let write_out =
        format!("(echo x > {}/file) 2>/dev/null || echo held; echo in > inside-$0", tree.out());
    for (id, sandbox) in [
        ("absent", Value::Null),
        ("none", json!({"mode": "none"})),
        ("host", json!({"mode": "hostDefault"})),
    ] {
        let mut params = sandboxed(id, &["sh", "-c", &write_out, id], tree.w(), json!({}), sandbox);
        if params["sandbox"].is_null() {
            params.as_object_mut().unwrap().remove("sandbox");
        }
        let (output, code) = run(&mut server, params).await;
        assert!(output.ends_with("held\n"), "{id}: {output}");
        assert_eq!(code, 0);
        assert_eq!(std::fs::read_to_string(tree.w.join(format!("inside-{id}"))).unwrap(), "in\n");
    }
    // A restricted policy may narrow the default one, not widen it.
    let sub = tree.w.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let params = sandboxed(
        "narrow",
        &["sh", "-c", "(echo x > ../up) 2>/dev/null || echo held"],
        sub.to_str().unwrap(),
        json!({}),
        restricted(sub.to_str().unwrap()),
    );
    assert_eq!(run(&mut server, params).await.0.lines().last(), Some("held"));
    let wide =
        sandboxed("wide", &["true"], tree.w(), json!({}), restricted(tree.base.to_str().unwrap()));
    let reply = server.call("process/start", wide).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("sandbox writable root {} is outside the allowed roots", tree.base.display())})
    );
    let networked = sandboxed(
        "net",
        &["true"],
        tree.w(),
        json!({}),
        json!({"mode": "restricted", "writableRoots": [tree.w()], "network": true}),
    );
    let reply = server.call("process/start", networked).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": "sandbox network is not allowed: the server runs with --sandbox and without --sandbox-network"})
    );
    assert!(std::fs::read_to_string(tree.out.join("file")).unwrap() == "outside");
}

/// A root of the server's own (`--root`) that a sandboxed process swapped for a
/// symlink is refused at the next start, not followed.
#[tokio::test]
async fn a_root_swapped_for_a_symlink_is_refused_not_followed() {
    let tree = Tree::new("swap", User::Current);
    let sub = tree.w.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let (root, inner) = (format!("--root={}", tree.w()), format!("--root={}", sub.display()));
    let mut server = User::Current.ready(&["--sandbox", &root, &inner], &[]).await;
    let swap = format!("rmdir sub && ln -s {} sub", tree.out());
    let (_, code) =
        run(&mut server, sandboxed("swap", &["sh", "-c", &swap], tree.w(), json!({}), Value::Null))
            .await;
    assert_eq!(code, 0);
    let write = format!("echo x > {}/sub/file", tree.w());
    let params = sandboxed("after", &["sh", "-c", &write], tree.w(), json!({}), Value::Null);
    let reply = server.call("process/start", params).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("cannot sandbox `sh`: cannot open {}: {} (os error 40)", sub.display(), crate::support::os_text(libc::ELOOP))})
    );
    assert_eq!(std::fs::read_to_string(tree.out.join("file")).unwrap(), "outside");
}

#[tokio::test]
async fn without_a_root_the_sandbox_flag_makes_the_cwd_writable() {
    let tree = Tree::new("flag-cwd", User::Current);
    let mut server = User::Current.ready(&["--sandbox"], &[]).await;
    let script = format!(
        "echo in > mine && cat mine; (echo x > {}/file) 2>/dev/null || echo held",
        tree.out()
    );
    let params = json!({"processId": "c", "argv": ["sh", "-c", script], "cwd": tree.w(), "env": {"PATH": "/usr/bin:/bin"}, "tty": false});
    let (output, code) = run(&mut server, params).await;
    assert_eq!((output.lines().next(), output.lines().last(), code), (Some("in"), Some("held"), 0));
    // A restricted policy may only narrow the default one: the cwd.
    let wide =
        sandboxed("wide", &["true"], tree.w(), json!({}), restricted(tree.base.to_str().unwrap()));
    let reply = server.call("process/start", wide).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("sandbox writable root {} is outside the server's sandbox (writable: {})", tree.base.display(), tree.w())})
    );
}

/// A start that cannot be confined in full is refused, and the program never runs.
#[tokio::test]
async fn a_missing_mechanism_refuses_the_start() {
    for user in User::all() {
        let tree = Tree::new("missing", user);
        let marker = tree.w.join("ran");
        let cases = [
            ("landlock", "Landlock is not available on this kernel (Linux 5.13 or later with `landlock` in the lsm= list); it confines reads and device writes"),
            ("seccomp", "seccomp filters are not available on this kernel; they block Unix-domain sockets"),
            ("userns", "cannot create the sandbox's user, mount, PID and IPC namespaces: unavailable (simulated); unprivileged user namespaces may be disabled on this host (kernel.unprivileged_userns_clone, user.max_user_namespaces, or an AppArmor restriction)"),
        ];
        for (mechanism, why) in cases {
            let env = [("EXEC_SERVER_SANDBOX_UNAVAILABLE", mechanism)];
            let mut server = user.ready(&[], &env).await;
            let params = sandboxed(
                "m",
                &["touch", marker.to_str().unwrap()],
                tree.w(),
                json!({}),
                restricted(tree.w()),
            );
            let reply = server.call("process/start", params).await;
            assert_eq!(
                reply["error"],
                json!({"code": -32600, "message": format!("cannot sandbox `touch`: {why}")}),
                "{user:?} {mechanism}"
            );
            assert!(!marker.exists(), "{user:?} {mechanism}: the program ran");
            let list = server.result("process/list", json!({})).await;
            assert_eq!(list, json!({"processes": []}));
        }
    }
}

/// A helper that is not the exec-server binary cannot confirm the sandbox: refused.
#[tokio::test]
async fn a_helper_that_is_not_ours_is_refused() {
    let tree = Tree::new("helper", User::Current);
    let marker = tree.w.join("ran");
    let config = Config { sandbox_helper: Some("/bin/true".into()), ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    let params = sandboxed(
        "x",
        &["touch", marker.to_str().unwrap()],
        tree.w(),
        json!({}),
        restricted(tree.w()),
    );
    assert_eq!(
        h.error("process/start", params).await,
        json!({"code": -32600, "message": "cannot sandbox `touch`: the sandbox helper ended without a report (is it the exec-server binary?)"})
    );
    assert!(!marker.exists());
}

/// A helper that says nothing and stays alive is refused after 10 s, and killed.
#[tokio::test]
async fn a_silent_helper_is_refused_after_the_report_timeout() {
    let tree = Tree::new("silent", User::Current);
    let helper = tree.base.join("silent-helper");
    std::fs::write(&helper, "#!/bin/sh\nexec sleep 60\n").unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = Config { sandbox_helper: Some(helper), ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    let params = sandboxed("x", &["true"], tree.w(), json!({}), restricted(tree.w()));
    assert_eq!(
        h.error("process/start", params).await,
        json!({"code": -32600, "message": "cannot sandbox `true`: the sandbox helper did not report within 10 s"})
    );
}

/// The client half: one `StartParams::sandbox` for the local and the remote executor.
#[tokio::test]
async fn both_executors_take_the_same_sandbox() {
    let tree = Tree::new("executors", User::Current);
    let config = Config { sandbox_helper: Some((*BIN).into()), ..Config::default() };
    let local = LocalExecutor::with_config(config).await.unwrap();
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    let remote = RemoteExecutor::new(launcher.client().clone());
    let script = format!(
        "echo in > {0}/$0; (echo x > {1}/file) 2>/dev/null || echo held",
        tree.w(),
        tree.out()
    );
    let params = |id: &str| {
        StartParams::new(id, ["sh", "-c", &script, id], tree.w.clone())
            .sandbox(Sandbox::restricted([tree.w.clone()]).network(false))
    };
    let (output, status) =
        local.start(params("local")).await.unwrap().output_to_end().await.unwrap();
    assert_eq!((String::from_utf8_lossy(&output).lines().last(), status.code), (Some("held"), 0));
    let (output, status) =
        remote.start(params("remote")).await.unwrap().output_to_end().await.unwrap();
    assert_eq!((String::from_utf8_lossy(&output).lines().last(), status.code), (Some("held"), 0));
    assert_eq!(std::fs::read_to_string(tree.w.join("local")).unwrap(), "in\n");
    assert_eq!(std::fs::read_to_string(tree.w.join("remote")).unwrap(), "in\n");
    assert_eq!(std::fs::read_to_string(tree.out.join("file")).unwrap(), "outside");
}

#[tokio::test]
async fn a_v0_start_names_its_sandbox_only_when_it_asked_for_one() {
    let tree = Tree::new("v0-type", User::Current);
    let mut server = User::Current.ready(&[], &[]).await;
    let none = json!({"processId": "n", "argv": ["true"], "cwd": "/tmp", "env": {}, "tty": false, "sandbox": {"mode": "none"}});
    assert_eq!(server.result("process/start", none).await, json!({"processId": "n"}));
    let params = sandboxed("s", &["true"], tree.w(), json!({}), restricted(tree.w()));
    assert_eq!(
        server.result("process/start", params).await,
        json!({"processId": "s", "sandboxType": "linuxLandlock"})
    );
}

#[tokio::test]
async fn readable_roots_reached_through_symlinks_work_on_a_merged_usr_system() {
    // On Debian /bin, /lib and /lib64 are links into /usr: each is resolved
    // once, and the directory it names is what the process may read.
    let tree = Tree::new("merged-usr", User::Current);
    let mut server = User::Current.ready(&[], &[]).await;
    let secret = tree.out.join("file");
    let secret = secret.display();
    let readable = json!(["/usr", "/bin", "/lib", "/lib64", "/etc"]);
    let sandbox =
        json!({"mode": "restricted", "writableRoots": [tree.w()], "readableRoots": readable});
    let script =
        format!("/bin/cat /etc/hostname >/dev/null && echo read-etc; cat {secret} || echo denied");
    let params = sandboxed("m", &["/bin/sh", "-c", &script], tree.w(), json!({}), sandbox);
    let (output, code) = run(&mut server, params).await;
    assert!(output.starts_with("read-etc\n"), "{output}");
    assert!(output.ends_with("denied\n"), "{output}");
    assert_eq!(code, 0);
}
