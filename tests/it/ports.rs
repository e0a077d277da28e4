//! Listening ports of a session (PROTOCOL.md, Listening ports), through the real binary.

use exec_server::protocol::{ListeningPort, PortsChangedParams};
use exec_server::{LaunchCommand, Launcher, StartParams};
use serde_json::json;

use crate::binary::{Binary, BIN};
use crate::support::{start_params, unb64, within};

/// A shell whose child listens on a random loopback port, prints it, and
/// holds it until its stdin closes.
const LISTENER: &str = "import socket,sys\n\
s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()\n\
print(s.getsockname()[1], flush=True); sys.stdin.read()";

#[tokio::test]
async fn a_listening_descendant_appears_with_its_process_id_and_goes_when_it_exits() {
    let launcher = Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap();
    let client = launcher.client();
    assert_eq!(client.listening_ports().await.unwrap(), vec![]);
    let mut watch = client.watch_ports().await.unwrap();
    // Through a shell: the listener is a descendant of the started process.
    let argv = ["sh", "-c", "python3 -c \"$0\"", LISTENER];
    let mut process = client.start(StartParams::new("dev", argv, "/").with_stdin()).await.unwrap();
    let chunk = within("the port", process.next_output()).await.unwrap().unwrap();
    let port: u16 = String::from_utf8(chunk.bytes).unwrap().trim().parse().unwrap();
    let opened = within("ports/changed", watch.next()).await.unwrap();
    assert_eq!(opened.closed, vec![]);
    assert_eq!(opened.opened.len(), 1, "{opened:?}");
    let entry = opened.opened[0].clone();
    assert_eq!(
        (entry.address.as_str(), entry.port, entry.process_id.as_str()),
        ("127.0.0.1", port, "dev")
    );
    assert!(entry.command.ends_with("python3"), "{entry:?}");
    let shell = client.list(exec_server::protocol::Empty {}).await.unwrap().processes[0].pid;
    assert_ne!(entry.pid, shell, "the listener is the shell's child");
    assert_eq!(client.listening_ports().await.unwrap(), vec![entry.clone()]);
    // It exits: the port goes.
    process.close_stdin().await.unwrap();
    let closed = within("ports/changed", watch.next()).await.unwrap();
    assert_eq!(closed, changed(vec![], vec![entry]));
    assert_eq!(client.listening_ports().await.unwrap(), vec![]);
}

fn changed(opened: Vec<ListeningPort>, closed: Vec<ListeningPort>) -> PortsChangedParams {
    let mut params = PortsChangedParams::default();
    params.opened = opened;
    params.closed = closed;
    params
}

#[tokio::test]
async fn ports_of_other_processes_are_not_listed_and_unwatch_stops_the_notifications() {
    // A listener outside the session.
    let outside = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut server = Binary::ready(&[]).await;
    assert_eq!(server.result("ports/list", json!({})).await, json!({"ports": []}));
    assert_eq!(server.result("ports/watch", json!({})).await, json!({}));
    let argv = ["python3", "-c", LISTENER];
    server.result("process/start", start_params("l", &argv, json!({"pipeStdin": true}))).await;
    let output = server.notification("process/output", "l").await;
    let port: u64 = String::from_utf8(unb64(&output["chunk"])).unwrap().trim().parse().unwrap();
    let changed = loop {
        let message = server.next().await.unwrap();
        if message["method"] == "ports/changed" {
            break message["params"].clone();
        }
    };
    assert_eq!(changed["closed"], json!([]));
    assert_eq!(changed["opened"].as_array().unwrap().len(), 1, "{changed}");
    assert_eq!(changed["opened"][0]["port"], port);
    assert_eq!(changed["opened"][0]["processId"], "l");
    assert_ne!(changed["opened"][0]["port"], outside.local_addr().unwrap().port());
    assert_eq!(server.result("ports/unwatch", json!({})).await, json!({}));
    // After the unwatch, the exit brings no ports/changed: the next lines are
    // the process's end and the reply to a later request.
    server
        .result("process/write", json!({"processId": "l", "chunk": "", "closeStdin": true}))
        .await;
    server.notification("process/closed", "l").await;
    let id = 900;
    server.send_line(&json!({"id": id, "method": "ports/list", "params": {}}).to_string()).await;
    loop {
        let message = server.next().await.unwrap();
        assert_ne!(message["method"], "ports/changed", "{message}");
        if message["id"] == id {
            assert_eq!(message["result"], json!({"ports": []}));
            break;
        }
    }
}
