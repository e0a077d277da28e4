//! A program on a mount that never answers (a FUSE daemon of the test's
//! own whose file never opens) hangs its exec: that start holds up no other
//! connection's starts nor the reaping of orphans, and the session's end
//! kills the stuck child.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fuse::Mount;
use crate::support::{children_of, poll_proc, scratch, start_params, wait_dead};
use crate::websocket::{WsPeer, WsServer};

/// The server's children still bearing its spawner thread's name: started,
/// and stuck in their exec.
fn stuck_children(server: u32) -> Vec<u32> {
    let named = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim_end() == "exec-server-spa")
    };
    children_of(server).into_iter().filter(named).collect()
}

/// The next message with `id`.
async fn reply(peer: &mut WsPeer, id: u64) -> Value {
    loop {
        let message = peer.next().await.expect("the connection closed before the reply");
        if message["id"] == id {
            return message;
        }
    }
}

#[tokio::test]
async fn a_hung_exec_holds_up_no_other_connection_nor_the_reaper_and_ends_with_its_session() {
    let dir = scratch("hung-exec");
    let Some(mount) = Mount::start_fixture(&dir, "fuse_hang.py").await else { return };
    let server = WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let server_pid = server.child.id().unwrap();
    let mut hung = WsPeer::connect(&server.url).await;
    hung.handshake().await;
    let program = mount.point.join("prog");
    let params = start_params("hung", &[program.to_str().unwrap()], json!({}));
    hung.send_text(&json!({"id": 1, "method": "process/start", "params": params}).to_string())
        .await;
    let stuck = poll_proc("the hung exec's child", || match stuck_children(server_pid)[..] {
        [pid] => Some(pid),
        _ => None,
    })
    .await;
    // Another connection's start is answered at once.
    let mut other = WsPeer::connect(&server.url).await;
    other.handshake().await;
    for n in 1..=3u64 {
        let params = start_params(&format!("quick-{n}"), &["true"], json!({}));
        other
            .send_text(&json!({"id": n, "method": "process/start", "params": params}).to_string())
            .await;
        let answer = tokio::time::timeout(Duration::from_secs(5), reply(&mut other, n))
            .await
            .expect("another connection's start waited for the hung exec");
        assert_eq!(answer, json!({"id": n, "result": {"processId": format!("quick-{n}")}}));
    }
    // Orphans the server adopts meanwhile are reaped: no zombie stays.
    let script = "(true &); (true &); (true &); echo started";
    let params = start_params("orphans", &["sh", "-c", script], json!({}));
    other
        .send_text(&json!({"id": 9, "method": "process/start", "params": params}).to_string())
        .await;
    assert_eq!(reply(&mut other, 9).await["result"], json!({"processId": "orphans"}));
    poll_proc("the orphans to be reaped while the exec hangs", || {
        let zombies = children_of(server_pid).into_iter().filter(|pid| is_zombie(*pid)).count();
        (zombies == 0).then_some(())
    })
    .await;
    // The hung session's end kills its stuck child: the kernel holds the
    // kill until the filesystem answers (here: until its daemon dies).
    hung.send_text(r#"{"id":2,"method":"session/end","params":{}}"#).await;
    poll_proc("SIGKILL sent to the stuck child", || kill_pending(stuck).then_some(())).await;
    drop(mount);
    wait_dead(stuck).await;
    assert_eq!(reply(&mut hung, 2).await, json!({"id": 2, "result": {}}));
}

/// Whether `pid` is a zombie (exited, not reaped).
fn is_zombie(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z'))
}

/// Whether `pid` has a SIGKILL pending (for the thread or the process).
fn kill_pending(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().any(|line| {
        let mask = line
            .strip_prefix("SigPnd:\t")
            .or_else(|| line.strip_prefix("ShdPnd:\t"))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        mask.is_some_and(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
    })
}
