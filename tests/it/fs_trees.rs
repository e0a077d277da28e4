//! fs/copy and fs/remove of a 100,000-entry tree through the real binary, with the server's peak memory bounded.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::binary::BIN;
use crate::support::{peak_rss_kib, scratch};

/// Walking 100,000 entries can take a while on a loaded machine: a longer
/// bound than the harness's 20 s per wait.
const TREE_TIMEOUT: Duration = Duration::from_secs(300);

const DIRS: usize = 100;
const PER_DIR: usize = 1000;

/// Counts entries under `dir` (not following links) and checks a sample.
fn count(dir: &Path) -> usize {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap();
            total += 1;
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            }
        }
    }
    total
}

/// The real binary over blocking pipes; replies arrive through a reader thread.
struct Server {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    replies: mpsc::Receiver<Value>,
    next_id: i64,
}

impl Server {
    fn start() -> Server {
        let mut child =
            Command::new(*BIN).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let _ = tx.send(serde_json::from_str(&line.unwrap()).unwrap());
            }
        });
        let mut server = Server { child, stdin, replies, next_id: 1 };
        server.result("initialize", json!({"clientName": "trees"}));
        writeln!(server.stdin, r#"{{"method":"initialized"}}"#).unwrap();
        server
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        writeln!(self.stdin, "{}", json!({"id": id, "method": method, "params": params})).unwrap();
        let reply = self
            .replies
            .recv_timeout(TREE_TIMEOUT)
            .unwrap_or_else(|e| panic!("no reply to {method} within {TREE_TIMEOUT:?}: {e}"));
        assert_eq!(reply["id"], id);
        assert!(reply.get("error").is_none(), "{method} failed: {reply}");
        reply["result"].clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_tree_of_100_000_entries_is_copied_and_removed_in_bounded_memory() {
    let dir = scratch("fs-trees");
    let tree = dir.join("tree");
    for d in 0..DIRS {
        let sub = tree.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..PER_DIR - 1 {
            std::fs::write(sub.join(format!("f{f:04}")), [d as u8, f as u8]).unwrap();
        }
        symlink("../d000/f0000", sub.join("link")).unwrap();
    }
    std::fs::set_permissions(tree.join("d007/f0007"), std::fs::Permissions::from_mode(0o751))
        .unwrap();
    let entries = DIRS * PER_DIR + DIRS;
    assert_eq!(count(&tree), entries);
    let mut server = Server::start();
    let pid = server.child.id();
    let baseline = peak_rss_kib(pid);
    let (src, dst) = (tree.to_str().unwrap(), dir.join("copy"));
    let params =
        json!({"sourcePath": src, "destinationPath": dst.to_str().unwrap(), "recursive": true});
    assert_eq!(server.result("fs/copy", params), json!({}));
    assert_eq!(count(&dst), entries);
    assert_eq!(std::fs::read(dst.join("d042/f0017")).unwrap(), [42, 17]);
    assert_eq!(std::fs::read_link(dst.join("d042/link")).unwrap(), Path::new("../d000/f0000"));
    let mode = std::fs::metadata(dst.join("d007/f0007")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o751);
    for path in [&tree, &dst] {
        let params = json!({"path": path.to_str().unwrap(), "force": false});
        assert_eq!(server.result("fs/remove", params), json!({}));
        assert!(!path.exists());
    }
    let grown = peak_rss_kib(pid).saturating_sub(baseline);
    assert!(grown < 8 * 1024, "the server grew by {grown} KiB walking 100,000 entries");
}
