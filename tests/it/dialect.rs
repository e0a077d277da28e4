//! Today's dialect through the real binary: walks that meet loops and links
//! out of the root, a handle across a rename-over, envPolicy, sandbox
//! contexts, upstream's command-line forms, and our client speaking it.

use std::os::unix::fs::{symlink, PermissionsExt};

use exec_server::{ClientOptions, Dialect, StartParams};
use serde_json::{json, Value};

use crate::binary::Binary;
use crate::support::{b64, scratch, snapshot, unb64};

fn uri(path: &std::path::Path) -> String {
    format!("file://{}", path.display())
}

/// Output and exit code of a process started with `params`, read to its close.
async fn run(server: &mut Binary, params: Value) -> (Vec<u8>, Value) {
    let id = params["processId"].as_str().unwrap().to_owned();
    let reply = server.call("process/start", params).await;
    assert!(reply["result"].is_object(), "start failed: {reply}");
    let mut output = Vec::new();
    loop {
        let message = server.next().await.expect("the server answered");
        if message["params"]["processId"] != id.as_str() {
            continue;
        }
        match message["method"].as_str() {
            Some("process/output") => output.extend(unb64(&message["params"]["chunk"])),
            Some("process/exited") => return (output, message["params"].clone()),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_walk_meets_a_loop_and_a_link_out_of_the_root_and_stays_inside() {
    let root = scratch("walk-root");
    let outside = scratch("walk-outside");
    std::fs::write(outside.join("secret"), "x").unwrap();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/f"), "y").unwrap();
    std::fs::create_dir(root.join(".hidden")).unwrap();
    std::fs::write(root.join(".hidden/h"), "z").unwrap();
    // A relative link back up (an absolute one may not be resolved beneath a root).
    symlink("..", root.join("a/b/loop")).unwrap();
    symlink(&outside, root.join("out")).unwrap();
    symlink("../../nowhere", root.join("dangling")).unwrap();
    let mut server = Binary::ready(&["--root", root.to_str().unwrap()]).await;
    let options = json!({"followDirectorySymlinks": true, "pruneHiddenDirectories": true});
    let walked = server.result("fs/walk", json!({"path": uri(&root), "options": options})).await;
    let entries: Vec<(String, String)> = walked["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["path"].as_str().unwrap().to_owned(), e["kind"].as_str().unwrap().to_owned()))
        .collect();
    let at = |rel: &str, kind: &str| (format!("{}/{rel}", uri(&root)), kind.to_owned());
    assert_eq!(
        entries,
        vec![
            at(".hidden", "directory"),
            at("a", "directory"),
            // A dangling link, and one out of the root (not followed), are
            // left out: in today's dialect a link is only ever a followed
            // directory (DIALECT-GAPS §4).
            at("a/b", "directory"),
            at("a/b/f", "file"),
            // Followed (it stays inside), but a/ was seen already: not entered again.
            at("a/b/loop", "directory"),
        ]
    );
    assert_eq!((walked["errors"].clone(), walked["truncated"].clone()), (json!([]), json!(false)));
    // Plain paths get plain answers; a walk cannot start outside the root.
    let plain = server.result("fs/walk", json!({"path": root.join("a/b"), "options": {}})).await;
    assert_eq!(plain["entries"][0]["path"], json!(root.join("a/b/f")));
    let error = server.call("fs/walk", json!({"path": uri(&outside)})).await;
    assert_eq!(
        error["error"]["message"],
        json!(format!("path {} is outside the allowed roots", outside.display()))
    );
}

#[tokio::test]
async fn a_handle_keeps_reading_the_file_it_opened_across_a_rename_over() {
    let dir = scratch("handle-rename");
    let path = dir.join("f");
    std::fs::write(&path, "the original").unwrap();
    let mut server = Binary::ready(&[]).await;
    server.result("fs/open", json!({"handleId": "h", "path": uri(&path)})).await;
    std::fs::write(dir.join("new"), "the replacement").unwrap();
    std::fs::rename(dir.join("new"), &path).unwrap();
    let read =
        server.result("fs/readBlock", json!({"handleId": "h", "offset": 4, "len": 100})).await;
    assert_eq!((unb64(&read["chunk"]), read["eof"].clone()), (b"original".to_vec(), json!(true)));
    // A new handle sees the new file; replace writes through its own.
    server.result("fs/open", json!({"handleId": "h2", "path": uri(&path)})).await;
    let read =
        server.result("fs/readBlock", json!({"handleId": "h2", "offset": 0, "len": 3})).await;
    assert_eq!(unb64(&read["chunk"]), b"the");
    server.result("fs/open", json!({"handleId": "w", "path": uri(&path), "mode": "replace"})).await;
    let block = json!({"handleId": "w", "offset": 2, "chunk": b64(b"ok")});
    server.result("fs/writeBlock", block).await;
    assert_eq!(std::fs::read(&path).unwrap(), b"\0\0ok");
    // A symlink is not written through, and a FIFO is refused without blocking.
    symlink("/etc/hostname", dir.join("link")).unwrap();
    let refused = server
        .call(
            "fs/open",
            json!({"handleId": "l", "path": uri(&dir.join("link")), "mode": "replace"}),
        )
        .await;
    assert_eq!(
        refused["error"]["message"],
        json!(format!(
            "cannot open {}: it is a symlink, and replace never writes through one",
            dir.join("link").display()
        ))
    );
    // Replace makes a new file: a hard link to the old one (perhaps outside a root) keeps its bytes.
    std::fs::write(dir.join("precious"), "precious").unwrap();
    std::fs::set_permissions(dir.join("precious"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(dir.join("precious"), dir.join("hard")).unwrap();
    server
        .result(
            "fs/open",
            json!({"handleId": "hl", "path": uri(&dir.join("hard")), "mode": "replace"}),
        )
        .await;
    server
        .result("fs/writeBlock", json!({"handleId": "hl", "offset": 0, "chunk": b64(b"over")}))
        .await;
    assert_eq!(std::fs::read(dir.join("precious")).unwrap(), b"precious");
    assert_eq!(std::fs::read(dir.join("hard")).unwrap(), b"over");
    // The new file keeps the old one's mode: a private file stays private.
    let mode = std::fs::metadata(dir.join("hard")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A process's memory (and any /proc or /sys pseudo-file) is no file for blocks.
    for mode in ["read", "replace"] {
        let reply = server
            .call(
                "fs/open",
                json!({"handleId": "m", "path": "file:///proc/self/mem", "mode": mode}),
            )
            .await;
        assert_eq!(
            reply["error"]["message"],
            json!("cannot open /proc/self/mem: it is a /proc or /sys pseudo-file; read it with fs/readFile"),
            "{mode}"
        );
    }
    let fifo = dir.join("fifo");
    let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo of a NUL-terminated path in the test's scratch directory.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    // Reading: upstream's words (DIALECT-GAPS §3); replacing: this server's own.
    let reply = server
        .call("fs/open", json!({"handleId": "read", "path": uri(&fifo), "mode": "read"}))
        .await;
    let not_a_file = format!("path `{}` is not a file", fifo.display());
    assert_eq!(reply["error"], json!({"code": -32600, "message": not_a_file}));
    let reply = server
        .call("fs/open", json!({"handleId": "replace", "path": uri(&fifo), "mode": "replace"}))
        .await;
    assert_eq!(reply["error"]["data"]["kind"], "invalidInput", "{reply}");
}

#[tokio::test]
async fn env_policies_build_the_environment_from_the_servers() {
    let mut command = tokio::process::Command::new(*crate::binary::BIN);
    command.env_clear().envs([
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/x"),
        ("MY_TOKEN", "t"),
        ("LANG", "C.UTF-8"),
    ]);
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "env"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let cases = [
        (json!({}), json!({}), "HOME=/home/x LANG=C.UTF-8 PATH=/usr/bin:/bin"),
        (
            json!({"inherit": "core"}),
            json!({"EXTRA": "1"}),
            "EXTRA=1 HOME=/home/x PATH=/usr/bin:/bin",
        ),
        (
            json!({"inherit": "all", "ignoreDefaultExcludes": true}),
            json!({}),
            "HOME=/home/x LANG=C.UTF-8 MY_TOKEN=t PATH=/usr/bin:/bin",
        ),
        (
            json!({"inherit": "all", "exclude": ["lang"], "set": {"A": "b"}}),
            json!({"A": "env wins"}),
            "A=env wins HOME=/home/x PATH=/usr/bin:/bin",
        ),
        (
            json!({"inherit": "none", "set": {"PATH": "/bin"}, "includeOnly": ["P*"]}),
            json!({}),
            "PATH=/bin",
        ),
    ];
    for (n, (policy, env, expected)) in cases.into_iter().enumerate() {
        let script = "env | grep -v '^PWD=\\|^SHLVL=\\|^_=' | sort | tr '\\n' ' '";
        let params = json!({"processId": format!("e{n}"), "argv": ["/bin/sh", "-c", script], "cwd": "file:///", "env": env, "envPolicy": policy, "tty": false});
        let (output, exit) = run(&mut server, params).await;
        assert_eq!(String::from_utf8(output).unwrap().trim_end(), expected, "policy {n}");
        assert_eq!(exit["exitCode"], 0);
    }
}

#[tokio::test]
async fn a_managed_sandbox_context_runs_confined_and_disabled_runs_free() {
    let work = scratch("context-work");
    let outside = scratch("context-outside");
    let before = snapshot(&outside);
    let mut server = Binary::ready(&[]).await;
    let context = json!({
        "permissions": {"type": "managed", "file_system": "workspaceWrite", "network": "restricted"},
        "policyContext": {"cwd": uri(&work), "workspaceRoots": [uri(&work)]},
    });
    let script = format!(
        "echo in > in.txt && (echo out > {}/out.txt) 2>&1 || echo refused",
        outside.display()
    );
    let start = json!({"processId": "s", "argv": ["sh", "-c", script], "cwd": uri(&work), "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": context});
    let reply = server.call("process/start", start.clone()).await;
    assert_eq!(reply["result"]["sandboxType"], "linuxSeccomp");
    let mut output = Vec::new();
    loop {
        let message = server.next().await.unwrap();
        match message["method"].as_str() {
            Some("process/output") => output.extend(unb64(&message["params"]["chunk"])),
            Some("process/exited") => break,
            _ => {}
        }
    }
    let list = server.result("process/list", json!({})).await;
    let named = &list["processes"][0]["sandboxType"];
    assert_eq!(named, "linuxSeccomp", "the list names it as the start did");
    let text = String::from_utf8_lossy(&output).into_owned();
    assert!(
        text.ends_with("Read-only file system\nrefused\n"),
        "the write outside was not refused: {text}"
    );
    assert_eq!(std::fs::read_to_string(work.join("in.txt")).unwrap(), "in\n");
    assert_eq!(snapshot(&outside), before, "something outside the workspace changed");
    let mut free = start;
    free["processId"] = json!("free");
    free["sandbox"] = json!({"permissions": {"type": "disabled"}});
    let (_, exit) = run(&mut server, free).await;
    assert_eq!(exit["exitCode"], 0);
    assert_eq!(std::fs::read_to_string(outside.join("out.txt")).unwrap(), "out\n");
}

#[tokio::test]
async fn a_context_root_that_is_not_utf8_is_refused_and_the_server_stays() {
    let mut server = Binary::ready(&[]).await;
    let context = json!({"permissions": {"type": "managed", "file_system": "workspaceWrite"}, "cwd": "file:///tmp/%FF"});
    let start = json!({"processId": "x", "argv": ["true"], "cwd": "file:///tmp", "env": {}, "sandbox": context});
    let reply = server.call("process/start", start).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32602, "message": "invalid params for process/start: sandbox root /tmp/\u{FFFD} is not UTF-8"})
    );
    assert_eq!(server.result("environment/status", json!({})).await, json!({"status": "ready"}));
}

#[tokio::test]
async fn a_wide_walk_holds_one_directory_open_at_a_time() {
    let dir = scratch("walk-wide");
    for n in 0..600 {
        std::fs::create_dir(dir.join(format!("d{n:04}"))).unwrap();
    }
    // With 64 descriptors in all, a walk that held every queued directory open would fail.
    let mut command = tokio::process::Command::new("prlimit");
    command.args(["--nofile=64:64", *crate::binary::BIN]);
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "wide"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let walked = server.result("fs/walk", json!({"path": uri(&dir)})).await;
    assert_eq!(walked["errors"], json!([]));
    assert_eq!(
        (walked["entries"].as_array().unwrap().len(), walked["truncated"].clone()),
        (600, json!(false))
    );
    let bounded = server
        .result("fs/walk", json!({"path": uri(&dir), "options": {"maxDirectories": 10}}))
        .await;
    assert_eq!(
        (bounded["entries"].as_array().unwrap().len(), bounded["truncated"].clone()),
        (600, json!(true))
    );
    let shallow = server
        .result("fs/walk", json!({"path": uri(&dir), "options": {"maxDepth": 1, "maxEntries": 3}}))
        .await;
    let names: Vec<&str> = shallow["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            format!("{}/d0000", uri(&dir)),
            format!("{}/d0001", uri(&dir)),
            format!("{}/d0002", uri(&dir))
        ]
    );
}

#[tokio::test]
async fn upstreams_command_line_forms_are_accepted() {
    for args in
        [&["--listen", "stdio"][..], &["--listen", "stdio://", "--concurrent-requests", "32"]]
    {
        let mut server = Binary::ready(args).await;
        let status = server.result("environment/status", json!({})).await;
        assert_eq!(status, json!({"status": "ready"}), "{args:?}");
    }
    let refused = std::process::Command::new(*crate::binary::BIN)
        .args(["--concurrent-requests", "0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
}

#[tokio::test]
async fn our_client_speaks_both_dialects_to_our_server() {
    let dir = scratch("client-dialects");
    for dialect in [Dialect::V0, Dialect::Today] {
        let options = ClientOptions { dialect, ..ClientOptions::default() };
        let launcher =
            exec_server::Launcher::spawn_with(exec_server::LaunchCommand::exec_server(), options)
                .await
                .unwrap();
        let client = launcher.client();
        let path = dir.join(format!("{dialect:?} file"));
        let fs = exec_server::RemoteFileSystem::new(client.clone());
        exec_server::FileSystem::write_file(&fs, &path, b"both").await.unwrap();
        assert_eq!(exec_server::FileSystem::read_file(&fs, &path).await.unwrap(), b"both");
        let missing =
            exec_server::FileSystem::read_file(&fs, &dir.join("missing")).await.unwrap_err();
        assert!(missing.is_not_found(), "{dialect:?}: {missing}");
        let params = StartParams::new("p", ["sh", "-c", "printf a; printf b >&2; exit 4"], &dir);
        let mut process = client.start(params).await.unwrap();
        let (output, status) = process.output_to_end().await.unwrap();
        assert_eq!((output.len(), status.code), (2, 4), "{dialect:?}");
        let read = process.read(0).await.unwrap();
        // Today's numbering counts the exit and the close.
        let next = if dialect == Dialect::Today { 5 } else { 3 };
        assert_eq!((read.next_seq, read.closed), (next, true), "{dialect:?}");
        client.close();
    }
}

/// The core knows no dialect (#26): nothing under `src/process`, `src/sandbox`
/// or `src/fs` names one; dialects are translated at the edge.
#[test]
fn the_core_names_no_dialect() {
    fn walk(path: &std::path::Path, found: &mut Vec<String>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                walk(&entry.unwrap().path(), found);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(path).unwrap().to_lowercase();
            if text.contains("dialect") || text.contains("today") {
                found.push(path.display().to_string());
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for core in ["process", "process.rs", "sandbox", "sandbox.rs", "fs", "fs.rs"] {
        walk(&root.join(core), &mut found);
    }
    assert_eq!(found, Vec::<String>::new());
}

#[tokio::test]
async fn a_sandboxed_program_that_cannot_run_starts_and_exits_in_todays_dialect_only() {
    // Nothing but the workspace is readable: /bin/cat cannot be executed in there.
    let work = scratch("cannot-run");
    let mut server = Binary::ready(&[]).await;
    let sandbox = json!({"mode": "restricted", "writableRoots": [work.to_str().unwrap()], "readableRoots": []});
    let start = |id: &str, cwd: Value| json!({"processId": id, "argv": ["/bin/cat", "/etc/hostname"], "cwd": cwd, "env": {}, "tty": false, "sandbox": sandbox});
    // Today's dialect (a file-URI cwd): the start stands, the process says why and exits 127.
    let reply = server.call("process/start", start("today", json!(uri(&work)))).await;
    assert_eq!(reply["result"], json!({"processId": "today", "sandboxType": "linuxSeccomp"}));
    let mut stderr = Vec::new();
    let exit = loop {
        let message = server.next().await.unwrap();
        match message["method"].as_str() {
            Some("process/output") => stderr.extend(unb64(&message["params"]["chunk"])),
            Some("process/exited") => break message["params"].clone(),
            _ => {}
        }
    };
    assert_eq!((&exit["exitCode"], &exit["sandboxDenied"]), (&json!(127), &json!(true)));
    assert_eq!(
        String::from_utf8(stderr).unwrap(),
        "exec-server: cannot run /bin/cat: Permission denied (os error 13)\n"
    );
    // exec-server.v0: the start fails, as without a sandbox.
    let reply = server.call("process/start", start("v0", json!(work.to_str().unwrap()))).await;
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert!(
        reply["error"]["message"].as_str().unwrap().starts_with("failed to start `/bin/cat`"),
        "{reply}"
    );
}

/// `sandboxDenied` in today's dialect, decided as upstream decides it: a
/// sandboxed process that fails with a refusal in its output is denied; one
/// that fails otherwise, or succeeds, or runs unsandboxed, is not; a read
/// after the exit says the same, with `failure: null`. exec-server.v0 exits
/// carry no such field.
#[tokio::test]
async fn exits_say_whether_the_sandbox_denied_them_in_todays_dialect() {
    let work = scratch("denied");
    let outside = scratch("denied-outside");
    let mut server = Binary::ready(&[]).await;
    let sandbox = json!({"mode": "restricted", "writableRoots": [work.to_str().unwrap()]});
    let write_out = format!("echo x > {}/file", outside.display());
    let cases = [
        ("refused", write_out.as_str(), Some(&sandbox), 2, true),
        ("failed", "exit 3", Some(&sandbox), 3, false),
        ("fine", "true", Some(&sandbox), 0, false),
        ("bare", "echo permission denied; exit 1", None, 1, false),
    ];
    for (id, script, sandbox, code, denied) in cases {
        let mut start = json!({"processId": id, "argv": ["sh", "-c", script], "cwd": uri(&work), "env": {"PATH": "/usr/bin:/bin"}, "tty": false});
        if let Some(sandbox) = sandbox {
            start["sandbox"] = sandbox.clone();
        }
        assert!(server.call("process/start", start).await["result"].is_object());
        let exit = loop {
            let message = server.next().await.unwrap();
            if message["method"] == "process/exited" {
                break message["params"].clone();
            }
        };
        let seq = exit["seq"].clone();
        assert_eq!(
            exit,
            json!({"processId": id, "seq": seq, "exitCode": code, "sandboxDenied": denied}),
            "{id}"
        );
        let read = server.result("process/read", json!({"processId": id, "afterSeq": seq})).await;
        assert_eq!((&read["failure"], &read["sandboxDenied"]), (&json!(null), &json!(denied)));
    }
    // exec-server.v0 (a plain cwd): Part A's exit, exactly.
    let start = json!({"processId": "v0", "argv": ["sh", "-c", write_out], "cwd": work, "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": sandbox});
    assert!(server.call("process/start", start).await["result"].is_object());
    let exit = loop {
        let message = server.next().await.unwrap();
        if message["method"] == "process/exited" {
            break message["params"].clone();
        }
    };
    assert_eq!(exit, json!({"processId": "v0", "seq": exit["seq"], "exitCode": 2}));
}

/// The error texts the model reads, as upstream words them in today's
/// dialect (the OS error alone; the kind and path stay in `data`), and ours,
/// fuller, in exec-server.v0.
#[tokio::test]
async fn todays_errors_say_what_upstream_says() {
    let dir = scratch("upstream-texts");
    let missing = dir.join("missing");
    let mut server = Binary::ready(&[]).await;
    let data = json!({"kind": "notFound", "path": missing.to_str().unwrap()});
    let today = server.call("fs/readFile", json!({"path": uri(&missing)})).await;
    assert_eq!(
        today["error"],
        json!({"code": -32004, "message": "No such file or directory (os error 2)", "data": data})
    );
    let v0 = server.call("fs/readFile", json!({"path": missing})).await;
    assert_eq!(
        v0["error"],
        json!({"code": -32603, "message": format!("cannot read {}: No such file or directory (os error 2)", missing.display()), "data": data})
    );
    let start = |id: &str, cwd: Value| json!({"processId": id, "argv": [missing], "cwd": cwd, "env": {}, "tty": false});
    let today = server.call("process/start", start("t", json!(uri(&dir)))).await;
    assert_eq!(
        today["error"],
        json!({"code": -32603, "message": "No such file or directory (os error 2)"})
    );
    let v0 = server.call("process/start", start("v", json!(dir))).await;
    assert_eq!(
        v0["error"],
        json!({"code": -32603, "message": format!("failed to start `{}`: No such file or directory (os error 2)", missing.display())})
    );
}

#[tokio::test]
async fn a_refused_socket_is_eperm_in_todays_dialect_and_eacces_in_v0() {
    let work = scratch("socket-errno");
    let mut server = Binary::ready(&[]).await;
    let probe = "import socket\nfor family in (socket.AF_UNIX, socket.AF_INET):\n    try:\n        socket.socket(family)\n        print('opened')\n    except OSError as e:\n        print(e.errno)";
    let env = json!({"PATH": "/usr/bin:/bin"});
    let today = json!({"processId": "t", "argv": ["python3", "-c", probe], "cwd": uri(&work), "env": env, "tty": false,
        "sandbox": {"permissions": {"type": "managed", "file_system": "workspaceWrite", "network": "restricted"}, "policyContext": {"cwd": uri(&work), "workspaceRoots": [uri(&work)]}}});
    let v0 = json!({"processId": "v", "argv": ["python3", "-c", probe], "cwd": work, "env": env, "tty": false,
        "sandbox": {"mode": "restricted", "writableRoots": [work]}});
    for (start, expected) in [(today, "1\n1\n"), (v0, "13\n13\n")] {
        let id = start["processId"].as_str().unwrap().to_owned();
        let reply = server.call("process/start", start).await;
        assert!(reply.get("error").is_none(), "{reply}");
        let mut output = Vec::new();
        loop {
            let message = server.next().await.unwrap();
            if message["params"]["processId"] != id.as_str() {
                continue;
            }
            match message["method"].as_str() {
                Some("process/output") => output.extend(unb64(&message["params"]["chunk"])),
                Some("process/exited") => break,
                _ => {}
            }
        }
        assert_eq!(String::from_utf8(output).unwrap(), expected, "{id}");
    }
}
