//! The command line of upstream's `codex exec-server` 0.169, passed to this
//! binary: every flag is accepted, and `--exit-on-stdin-close` (or its
//! environment variable) ends a listener, with its processes, when its
//! parent's pipe closes.

use std::process::Stdio;

use serde_json::json;

use crate::binary::{Binary, BIN};
use crate::support::{wait_dead, within};
use crate::websocket::{WsPeer, WsServer};

/// A listener with `args` and `env`, its stdin a pipe the test holds.
async fn listener(args: &[&str], env: &[(&str, &str)]) -> WsServer {
    let mut all = vec!["--listen", "ws://127.0.0.1:0"];
    all.extend_from_slice(args);
    WsServer::start_with(&all, env, Stdio::piped()).await
}

#[tokio::test]
async fn a_listener_exits_when_its_stdin_closes_and_takes_its_processes() {
    let with_flag: (&[&str], &[(&str, &str)]) = (&["--exit-on-stdin-close"], &[]);
    let with_env: (&[&str], &[(&str, &str)]) =
        (&[], &[("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE", "1")]);
    for (args, env) in [with_flag, with_env] {
        let WsServer { mut child, url, .. } = listener(args, env).await;
        let mut peer = WsPeer::connect(&url).await;
        peer.handshake().await;
        let start = json!({"id": 1, "method": "process/start", "params": {"processId": "s", "argv": ["sleep", "1000"], "cwd": "/tmp", "env": {}, "tty": false}});
        peer.send_text(&start.to_string()).await;
        assert_eq!(peer.next().await.unwrap()["result"], json!({"processId": "s"}));
        peer.send_text(r#"{"id":2,"method":"process/list","params":{}}"#).await;
        let sleep = peer.next().await.unwrap()["result"]["processes"][0]["pid"].as_u64().unwrap();
        drop(child.stdin.take());
        let status = within("the listener to exit", child.wait()).await.unwrap();
        assert_eq!(status.code(), Some(0), "{args:?} {env:?}");
        wait_dead(sleep as u32).await;
    }
    // Without it, a closed stdin means nothing to a listener.
    let WsServer { mut child, url, .. } = listener(&[], &[]).await;
    drop(child.stdin.take());
    let mut peer = WsPeer::connect(&url).await;
    peer.handshake().await;
    assert_eq!(child.try_wait().unwrap(), None);
}

#[tokio::test]
async fn upstreams_other_flags_are_accepted_and_a_bad_override_is_named() {
    let flags = [
        "--linux-sandbox-pid-namespace",
        "inherit",
        "--proxy-private-ips-via-upstream",
        "--strict-config",
        "-c",
        "model=\"o3\"",
        "-c",
        "sandbox_mode=workspace-write",
    ];
    let mut server = Binary::ready(&flags).await;
    let reply =
        server.call("process/start", crate::support::start_params("t", &["true"], json!({}))).await;
    assert_eq!(reply["result"], json!({"processId": "t"}));
    let output = tokio::process::Command::new(*BIN).args(["-c", "model"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("-c takes KEY=VALUE, not \"model\""), "{stderr}");
}
