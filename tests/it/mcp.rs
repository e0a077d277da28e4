//! The MCP face through the real binary: the official Python MCP SDK's stdio
//! client (PyPI `mcp`, in `target/mcp-venv`, which `.ci/run` makes), the MCP
//! Inspector's CLI (npm `@modelcontextprotocol/inspector`, in
//! `target/mcp-inspector`), and hand-written lines for the choice of face.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::binary::{Binary, BIN};
use crate::support::{scratch, within};

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mcp_client.py");

/// A component the test needs, or `None` after saying why it is skipped
/// (under `CI` a missing component fails the test).
fn component(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    let message = format!("{what} is not installed at {} (.ci/run installs it)", path.display());
    assert!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("SKIPPED: {message}");
    None
}

fn target() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/target"))
}

#[tokio::test]
async fn the_python_sdk_runs_sandboxed_commands_and_files_within_its_roots() {
    let Some(python) = component(target().join("mcp-venv/bin/python"), "the Python MCP SDK") else {
        return;
    };
    // `auto` probes server/discover and speaks 2026-07-28; `legacy` shakes hands.
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let dir = scratch(&format!("mcp-sdk-{mode}"));
        let (root, outside) = (dir.join("root"), dir.join("outside"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let run = tokio::process::Command::new(&python)
            .args([CLIENT, *BIN, root.to_str().unwrap(), outside.to_str().unwrap(), mode])
            .kill_on_drop(true)
            .output();
        let output = within("the SDK's session", run).await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let expected = format!(
            "version: {version}
tools: exec_command,kill_session,list_dir,read_file,write_file,write_stdin
exited: 3 'hi\\n' False
text: Process exited with code 3
running: True None
echoed: 'ping\\n'
killed: 137
after kill: True unknown session ID 2: it exited and was reported, or never existed
inside: 'in\\n' 0
outside: True True
write_file: 14
read_file: L2: two
list_dir: ['made', 'notes.txt']
write outside: True exec-server error -32600: path {}/evil.txt is outside the allowed roots
bad args: True cmd is required: the shell command to run
progress: 'slept\\n' True ['running for 0 s']
had started: True
cancelled: True
closed: True
",
            outside.display()
        );
        assert_eq!(stdout, expected, "{mode}: {stderr}");
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "something was written outside the root"
        );
    }
}

#[tokio::test]
async fn the_inspector_cli_lists_the_tools_and_runs_a_command() {
    let Some(inspector) = component(
        target().join("mcp-inspector/node_modules/.bin/mcp-inspector"),
        "the MCP Inspector",
    ) else {
        return;
    };
    let dir = scratch("mcp-inspector");
    let run = |args: Vec<&str>| {
        let mut command = tokio::process::Command::new(&inspector);
        command.arg("--cli").arg(*BIN).args(args).current_dir(&dir).kill_on_drop(true);
        async move {
            let output = within("the inspector", command.output()).await.unwrap();
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            serde_json::from_slice::<Value>(&output.stdout).unwrap()
        }
    };
    let listed = run(vec!["--method", "tools/list"]).await;
    let names: Vec<&str> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["exec_command", "write_stdin", "kill_session", "read_file", "write_file", "list_dir"]
    );
    let called = run(vec![
        "--method",
        "tools/call",
        "--tool-name",
        "exec_command",
        "--tool-arg",
        "cmd=echo inspected",
        "--tool-arg",
        "login=false",
    ])
    .await;
    assert_eq!(called["isError"], false);
    assert_eq!(called["structuredContent"]["output"], "inspected\n");
    assert_eq!(called["structuredContent"]["exit_code"], 0);
}

/// The face follows the first message; exec-server.v0 is untouched.
#[tokio::test]
async fn a_failed_discover_probe_leaves_the_handshake_open() {
    let mut server = Binary::spawn(&[]);
    server.send_line(r#"{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{}}"#).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 0, "error": {"code": -32602, "message": "invalid params: _meta must carry io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities (MCP 2026-07-28)"}})
    );
    let probe = json!({"jsonrpc": "2.0", "id": "p", "method": "server/discover", "params": {"_meta": meta("2027-01-01", json!({}))}});
    server.send_line(&probe.to_string()).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": "p", "error": {"code": -32022, "message": "unsupported protocol version \"2027-01-01\": this server speaks 2025-06-18, 2025-11-25, 2026-07-28", "data": {"supported": ["2025-06-18", "2025-11-25", "2026-07-28"], "requested": "2027-01-01"}}})
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    server.send_line(&init.to_string()).await;
    let reply = server.next().await.unwrap();
    assert_eq!(reply["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(reply["result"]["capabilities"], json!({"tools": {"listChanged": false}}));
    server.send_line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(server.next().await.unwrap(), json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    // A member named twice is refused, not read as its last value.
    server.send_line(r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":{},"params":{}}"#).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error: duplicate key `params` in an object at line 1 column 60"}})
    );
    server.send_line(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "unknown tool: nope"}})
    );
    // After the handshake the connection keeps its era.
    let probe = json!({"jsonrpc": "2.0", "id": 4, "method": "server/discover", "params": {"_meta": meta("2026-07-28", json!({}))}});
    server.send_line(&probe.to_string()).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "method not found: server/discover (this connection speaks MCP 2025-06-18 and 2025-11-25 since its initialize)"}})
    );
    // Our own initialize with "jsonrpc" stays exec-server.v0.
    let mut ours = Binary::spawn(&[]);
    ours.send_line(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientName":"v0"}}"#,
    )
    .await;
    assert_eq!(ours.next().await.unwrap()["result"]["protocolVersion"], "exec-server.v0");
}

/// The `_meta` envelope of an MCP 2026-07-28 request.
fn meta(version: &str, capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "hand", "version": "1"},
    })
}

#[tokio::test]
async fn mcp_2026_07_28_is_served_from_each_request_alone() {
    let dir = scratch("mcp-modern");
    let (cwd, root) = (dir.join("cwd"), dir.join("root"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let mut command = tokio::process::Command::new(*BIN);
    command.current_dir(&cwd).stderr(std::process::Stdio::null());
    let mut server = Binary::from_command(command);
    let ask = |id: i64, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let plain = meta("2026-07-28", json!({}));
    server.send_line(&ask(1, "server/discover", json!({"_meta": plain}))).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 1, "result": {
            "resultType": "complete",
            "supportedVersions": ["2025-06-18", "2025-11-25", "2026-07-28"],
            "capabilities": {"tools": {"listChanged": false}},
            "instructions": "Runs shell commands and works on files, sandboxed: commands may write only beneath the roots. Long-running commands answer with a session ID; continue them with write_stdin.",
            "ttlMs": 3_600_000,
            "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "exec-server", "version": env!("CARGO_PKG_VERSION")}},
        }})
    );
    server.send_line(&ask(2, "tools/list", json!({"_meta": plain}))).await;
    let listed = server.next().await.unwrap()["result"].clone();
    assert_eq!(
        (&listed["resultType"], &listed["ttlMs"], &listed["cacheScope"]),
        (&json!("complete"), &json!(3_600_000), &json!("public"))
    );
    let names: Vec<&str> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["exec_command", "write_stdin", "kill_session", "read_file", "write_file", "list_dir"]
    );
    server.send_line(&ask(3, "ping", json!({"_meta": plain}))).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 3, "result": {"resultType": "complete"}})
    );
    // Without roots declared, a command's root is the server's directory.
    let call =
        |cmd: &str| json!({"name": "exec_command", "arguments": {"cmd": cmd, "login": false}});
    let mut params = call("pwd");
    params["_meta"] = plain.clone();
    server.send_line(&ask(4, "tools/call", params)).await;
    let answer = server.next().await.unwrap();
    assert_eq!(answer["result"]["resultType"], "complete");
    assert_eq!(answer["result"]["structuredContent"]["output"], format!("{}\n", cwd.display()));
    // With roots declared, the call asks for them, and runs only when retried with them.
    let script = format!(
        "touch {}/x 2>/dev/null || echo cwd-held; touch {}/y && echo root-written",
        cwd.display(),
        root.display()
    );
    let mut params = call(&script);
    params["_meta"] = meta("2026-07-28", json!({"roots": {}}));
    server.send_line(&ask(5, "tools/call", params.clone())).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 5, "result": {"resultType": "input_required", "inputRequests": {"roots": {"method": "roots/list", "params": {}}}}})
    );
    assert!(!root.join("y").exists(), "the command ran before the roots were given");
    params["inputResponses"] =
        json!({"roots": {"roots": [{"uri": format!("file://{}", root.display())}]}});
    server.send_line(&ask(6, "tools/call", params)).await;
    let answer = server.next().await.unwrap();
    assert_eq!(answer["result"]["structuredContent"]["output"], "cwd-held\nroot-written\n");
    assert!(!cwd.join("x").exists() && root.join("y").exists());
    // A request without the envelope, or of another version; no initialize in this era.
    server.send_line(&ask(7, "tools/list", json!({}))).await;
    assert_eq!(
        server.next().await.unwrap()["error"],
        json!({"code": -32602, "message": "invalid params: _meta must carry io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities (MCP 2026-07-28)"})
    );
    server.send_line(&ask(8, "tools/list", json!({"_meta": meta("2025-11-25", json!({}))}))).await;
    assert_eq!(
        server.next().await.unwrap()["error"]["data"],
        json!({"supported": ["2025-06-18", "2025-11-25", "2026-07-28"], "requested": "2025-11-25"})
    );
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    server.send_line(&ask(9, "initialize", init)).await;
    assert_eq!(
        server.next().await.unwrap()["error"],
        json!({"code": -32022, "message": "this connection speaks MCP 2026-07-28 since its first request, which has no initialize", "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"}})
    );
}

/// An MCP session by hand: lines in, the answers by id (notifications skipped).
struct Mcp {
    server: Binary,
}

impl Mcp {
    async fn start(cwd: &Path, roots: bool) -> Mcp {
        Mcp::start_with(cwd, roots, &[]).await
    }

    /// The binary with `args`, in `cwd`, after the MCP handshake.
    async fn start_with(cwd: &Path, roots: bool, args: &[&str]) -> Mcp {
        let mut command = tokio::process::Command::new(*BIN);
        command.args(args).current_dir(cwd).stderr(std::process::Stdio::null());
        let mut server = Binary::from_command(command);
        let capabilities = if roots { json!({"roots": {"listChanged": true}}) } else { json!({}) };
        let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "hand", "version": "1"}}});
        server.send_line(&init.to_string()).await;
        assert_eq!(server.next().await.unwrap()["result"]["protocolVersion"], "2025-11-25");
        server.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
        Mcp { server }
    }

    async fn send(&mut self, message: Value) {
        self.server.send_line(&message.to_string()).await;
    }

    async fn call(&mut self, id: u64, tool: &str, arguments: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})).await;
    }

    /// The next message that is not a notification.
    async fn next(&mut self) -> Value {
        loop {
            let message = self.server.next().await.expect("the server answered");
            if message.get("id").is_some() {
                return message;
            }
        }
    }
}

#[tokio::test]
async fn bad_arguments_duplicate_ids_and_the_session_limit_are_refused() {
    let dir = scratch("mcp-hostile");
    let mut mcp = Mcp::start(&dir, false).await;
    for (id, arguments, problem) in [
        (1, json!({"cmd": "true", "login": "no"}), "login must be true or false"),
        (
            2,
            json!({"cmd": "true", "yield_time_ms": -1}),
            "yield_time_ms must be an integer from 0 to 3600000",
        ),
        (3, json!({"cmd": 5}), "cmd must be a string"),
        (
            4,
            json!({"cmd": "true", "max_output_tokens": 0}),
            "max_output_tokens must be an integer from 1 to 4294967295",
        ),
    ] {
        mcp.call(id, "exec_command", arguments).await;
        let answer = mcp.next().await;
        assert_eq!(
            answer["result"],
            json!({"content": [{"type": "text", "text": problem}], "isError": true})
        );
    }
    mcp.call(5, "write_stdin", json!({"session_id": 1u64 << 40})).await;
    let answer = mcp.next().await;
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "session_id must be an integer from 0 to 4294967295"
    );
    mcp.send(json!({"jsonrpc": "2.0", "id": 6, "method": 123})).await;
    assert_eq!(
        mcp.next().await["error"],
        json!({"code": -32600, "message": "invalid request: method must be a string"})
    );
    mcp.send(json!({"jsonrpc": "1.0", "id": 7, "method": "ping"})).await;
    assert_eq!(mcp.next().await["error"]["message"], "invalid request: jsonrpc must be \"2.0\"");
    // A call under way keeps its id: the same id again is refused.
    mcp.call(99, "exec_command", json!({"cmd": "sleep 2", "login": false, "yield_time_ms": 5000}))
        .await;
    mcp.call(99, "exec_command", json!({"cmd": "true", "login": false})).await;
    let refused = mcp.next().await;
    assert_eq!(refused["error"]["message"], "request id 99 is already in use by a call under way");
    assert_eq!(mcp.next().await["result"]["structuredContent"]["exit_code"], 0);
    // 70 starts at once: 64 sessions, the rest refused.
    for id in 100..170u64 {
        mcp.call(
            id,
            "exec_command",
            json!({"cmd": "exec sleep 60", "login": false, "yield_time_ms": 0}),
        )
        .await;
    }
    let mut outcomes = std::collections::BTreeMap::new();
    for _ in 0..70 {
        let answer = mcp.next().await;
        let outcome = match answer["result"]["structuredContent"]["session_id"].as_u64() {
            Some(_) => "running",
            None if answer["result"]["content"][0]["text"]
                == "too many running sessions (at most 64): end one with kill_session, or let it finish" =>
            {
                "refused"
            }
            // The limit of calls under way may meet some first.
            None if answer["error"]["message"] == "too many tool calls under way (at most 64)" => {
                "refused"
            }
            None => panic!("{answer}"),
        };
        *outcomes.entry(outcome).or_insert(0) += 1;
    }
    assert_eq!(outcomes, [("refused", 6), ("running", 64)].into());
}

#[tokio::test]
async fn commands_wait_for_the_clients_roots_and_write_only_there() {
    let dir = scratch("mcp-roots");
    let (cwd, root) = (dir.join("cwd"), dir.join("root"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let mut mcp = Mcp::start(&cwd, true).await;
    // The server asks for the roots; the call made before the answer waits for it.
    let ask = within("roots/list", mcp.server.next()).await.unwrap();
    assert_eq!(ask["method"], "roots/list");
    let script = format!(
        "touch {0}/x 2>/dev/null || echo cwd-held; touch {1}/y && echo root-written",
        cwd.display(),
        root.display()
    );
    mcp.call(1, "exec_command", json!({"cmd": script, "login": false})).await;
    let roots = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": format!("file://{}", root.display())}, {"uri": "file://elsewhere/x"}]}});
    mcp.send(roots).await;
    let answer = mcp.next().await;
    assert_eq!(answer["result"]["structuredContent"]["output"], "cwd-held\nroot-written\n");
    assert!(!cwd.join("x").exists() && root.join("y").exists());
}

/// The structured output of an exec answer, and its text's output part.
fn outputs(answer: &Value) -> (String, String) {
    let result = &answer["result"];
    let structured = result["structuredContent"]["output"].as_str().unwrap().to_owned();
    let text = result["content"][0]["text"].as_str().unwrap();
    let (_, output) = text.split_once("\nOutput:\n").unwrap();
    (structured, output.to_owned())
}

#[tokio::test]
async fn long_output_keeps_its_whole_head_and_its_tail() {
    let dir = scratch("mcp-head");
    let mut mcp = Mcp::start(&dir, false).await;
    for (id, last) in [(1, 200_000), (2, 2_000_000)] {
        let cmd = format!("seq 1 {last}");
        let arguments =
            json!({"cmd": cmd, "login": false, "max_output_tokens": 200, "yield_time_ms": 30000});
        mcp.call(id, "exec_command", arguments).await;
        let answer = mcp.next().await;
        let (structured, text) = outputs(&answer);
        assert_eq!(structured, text);
        assert!(structured.starts_with("1\n2\n3\n"), "{structured}");
        assert!(structured.ends_with(&format!("\n{last}\n")), "{structured}");
        // Every byte produced is counted.
        let produced: usize = (1..=last).map(|n: usize| n.to_string().len() + 1).sum();
        assert_eq!(
            answer["result"]["structuredContent"]["original_token_count"],
            produced.div_ceil(4)
        );
        assert_eq!(answer["result"]["structuredContent"]["truncated"], true);
    }
    // A poll covers what came since the previous answer: its head is the
    // first line after it.
    let cmd = "seq 1 100000; read go; seq 100001 1500000";
    let arguments =
        json!({"cmd": cmd, "login": false, "max_output_tokens": 100, "yield_time_ms": 1000});
    mcp.call(3, "exec_command", arguments).await;
    let first = mcp.next().await;
    let (structured, _) = outputs(&first);
    assert!(structured.starts_with("1\n2\n") && structured.ends_with("\n100000\n"), "{structured}");
    let session = first["result"]["structuredContent"]["session_id"].clone();
    let arguments = json!({"session_id": session, "chars": "go\n", "max_output_tokens": 100, "yield_time_ms": 30000});
    mcp.call(4, "write_stdin", arguments).await;
    let polled = mcp.next().await;
    let (structured, text) = outputs(&polled);
    assert_eq!(structured, text);
    assert!(structured.starts_with("100001\n100002\n"), "{structured}");
    assert!(structured.ends_with("\n1500000\n"), "{structured}");
    assert_eq!(polled["result"]["structuredContent"]["exit_code"], 0);
}

#[tokio::test]
async fn a_command_over_the_servers_memory_limit_is_killed_and_says_so() {
    if !crate::support::root_or_skip("cgroup limits") {
        return;
    }
    let dir = scratch("mcp-limits");
    let mut mcp = Mcp::start_with(&dir, false, &["--limit-memory", "64M"]).await;
    let cmd = "python3 -c 'x = bytearray(256 << 20)'; echo not-reached";
    mcp.call(1, "exec_command", json!({"cmd": "python3 -c 'x = bytearray(256 << 20)'", "login": false, "yield_time_ms": 30000})).await;
    let answer = mcp.next().await;
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    let status = text.lines().nth(2).unwrap();
    assert_eq!(status, "Process killed: memory limit 64 MiB", "{text}");
    // A command within the limit answers as always.
    mcp.call(
        2,
        "exec_command",
        json!({"cmd": cmd.replace("256", "8"), "login": false, "yield_time_ms": 30000}),
    )
    .await;
    let answer = mcp.next().await;
    assert_eq!(answer["result"]["structuredContent"]["output"], "not-reached\n");
    assert_eq!(
        answer["result"]["content"][0]["text"].as_str().unwrap().lines().nth(2),
        Some("Process exited with code 0")
    );
}

/// What the sessions keep for their next answer is charged to the server's
/// room like every held byte: 96 commands of 3 MB each, never polled, keep
/// the server within `--max-retained-bytes` and a slack (before: 1 MiB per
/// session on top of the room).
#[tokio::test]
async fn unpolled_sessions_keep_the_server_within_its_room() {
    const ROOM_MIB: u64 = 24;
    /// The server's code, runtime and heap, and freed heap not yet trimmed.
    const SLACK_MIB: u64 = 40;
    let dir = scratch("mcp-room");
    let room = (ROOM_MIB << 20).to_string();
    let mut mcp = Mcp::start_with(&dir, false, &["--max-retained-bytes", &room]).await;
    for id in 1..=96u64 {
        let arguments = json!({"cmd": "head -c 3000000 /dev/zero | tr '\\0' x", "login": false, "yield_time_ms": 0});
        mcp.call(id, "exec_command", arguments).await;
        let answer = mcp.next().await;
        assert_eq!(answer["id"], id, "{answer}");
        assert!(answer["result"]["structuredContent"].is_object(), "{answer}");
    }
    // Every command has ended: a last one that waits for nothing but its own exit.
    let arguments = json!({"cmd": "true", "login": false, "yield_time_ms": 30000});
    mcp.call(97, "exec_command", arguments).await;
    assert_eq!(mcp.next().await["result"]["structuredContent"]["exit_code"], 0);
    let peak = crate::support::peak_rss_kib(mcp.server.child.id().unwrap());
    assert!(
        peak <= (ROOM_MIB + SLACK_MIB) << 10,
        "peak RSS {peak} KiB is over the room ({ROOM_MIB} MiB) and the slack ({SLACK_MIB} MiB)"
    );
}
