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
    let dir = scratch("mcp-sdk");
    let (root, outside) = (dir.join("root"), dir.join("outside"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let run = tokio::process::Command::new(python)
        .args([CLIENT, BIN, root.to_str().unwrap(), outside.to_str().unwrap()])
        .kill_on_drop(true)
        .output();
    let output = within("the SDK's session", run).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let expected = format!(
        "version: 2025-11-25
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
bad args: True exec_command needs cmd, the shell command to run
had started: True
cancelled: True
closed: True
",
        outside.display()
    );
    assert_eq!(stdout, expected, "{stderr}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "something was written outside the root"
    );
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
        command.arg("--cli").arg(BIN).args(args).current_dir(&dir).kill_on_drop(true);
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
async fn a_discover_probe_gets_an_mcp_error_and_a_handshake_follows() {
    let mut server = Binary::spawn(&[]);
    server.send_line(r#"{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{}}"#).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 0, "error": {"code": -32601, "message": "method not found: server/discover (this server speaks MCP 2025-06-18 and 2025-11-25: send initialize)"}})
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    server.send_line(&init.to_string()).await;
    let reply = server.next().await.unwrap();
    assert_eq!(reply["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(reply["result"]["capabilities"], json!({"tools": {"listChanged": false}}));
    server.send_line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(server.next().await.unwrap(), json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    server.send_line(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#).await;
    assert_eq!(
        server.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "unknown tool: nope"}})
    );
    // Our own initialize with "jsonrpc" stays exec-server.v0.
    let mut ours = Binary::spawn(&[]);
    ours.send_line(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientName":"v0"}}"#,
    )
    .await;
    assert_eq!(ours.next().await.unwrap()["result"]["protocolVersion"], "exec-server.v0");
}
