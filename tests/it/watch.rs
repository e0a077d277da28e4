//! `fs/watch` through the real binary: changes in a tree, directories made or
//! moved in later, a large tree, a burst that overflows, kernel watches freed,
//! confinement, names that are not UTF-8, limits.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use exec_server::protocol::{Change, ChangeKind};
use exec_server::{LaunchCommand, Launcher, Watch};
use serde_json::json;

use crate::binary::{Binary, BIN};
use crate::support::{scratch, unb64, within};

/// Collects changes until `until` is reported created; per path, in order,
/// with a write right after a create and repeats folded (as the server's
/// coalescing may or may not have done, depending on timing).
async fn collect_until(watch: &mut Watch, until: &Path) -> BTreeMap<PathBuf, Vec<ChangeKind>> {
    let mut seen: BTreeMap<PathBuf, Vec<ChangeKind>> = BTreeMap::new();
    loop {
        let batch = within("fs/changed", watch.next()).await.expect("the watch ended");
        let mut done = false;
        for Change { path, kind, .. } in batch {
            let kinds = seen.entry(PathBuf::from(&path)).or_default();
            let last = kinds.last().copied();
            if last != Some(kind)
                && !(last == Some(ChangeKind::Created) && kind == ChangeKind::Modified)
            {
                kinds.push(kind);
            }
            done |= Path::new(&path) == until && kind == ChangeKind::Created;
        }
        if done {
            return seen;
        }
    }
}

async fn launch() -> Launcher {
    Launcher::spawn(LaunchCommand::new(*BIN)).await.unwrap()
}

#[tokio::test]
async fn changes_in_a_tree_arrive_in_order() {
    use ChangeKind::*;
    let dir = scratch("watch-tree");
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("old"), "x").unwrap();
    let launcher = launch().await;
    let mut watch = launcher.client().watch(&dir, true).await.unwrap();
    std::fs::write(dir.join("a.txt"), "1").unwrap();
    std::fs::write(dir.join("a.txt"), "22").unwrap();
    std::fs::rename(dir.join("a.txt"), dir.join("sub/b.txt")).unwrap();
    std::fs::rename(dir.join("old"), dir.join("new")).unwrap();
    std::fs::remove_file(dir.join("sub/b.txt")).unwrap();
    // mkdir -p of a deep path, and files in it at once.
    std::fs::create_dir_all(dir.join("m/n/o")).unwrap();
    std::fs::write(dir.join("m/n/o/f"), "y").unwrap();
    std::fs::set_permissions(dir.join("new"), std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    std::fs::write(dir.join("done"), "").unwrap();
    let seen = collect_until(&mut watch, &dir.join("done")).await;
    let expected: BTreeMap<PathBuf, Vec<ChangeKind>> = [
        ("a.txt", vec![Created, RenamedFrom]),
        ("sub/b.txt", vec![RenamedTo, Removed]),
        ("old", vec![RenamedFrom]),
        ("new", vec![RenamedTo, Metadata]),
        ("m", vec![Created]),
        ("m/n", vec![Created]),
        ("m/n/o", vec![Created]),
        ("m/n/o/f", vec![Created]),
        ("done", vec![Created]),
    ]
    .into_iter()
    .map(|(path, kinds)| (dir.join(path), kinds))
    .collect();
    assert_eq!(seen, expected);
    // The new deep directory is watched too.
    std::fs::write(dir.join("m/n/o/later"), "z").unwrap();
    let seen = collect_until(&mut watch, &dir.join("m/n/o/later")).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), [&dir.join("m/n/o/later")]);
    watch.unwatch().await.unwrap();
}

#[tokio::test]
async fn a_tree_moved_in_is_watched_and_what_it_held_is_reported() {
    use ChangeKind::*;
    let dir = scratch("watch-move-in");
    let outside = scratch("watch-move-in-source");
    std::fs::create_dir_all(outside.join("t/d")).unwrap();
    std::fs::write(outside.join("t/f1"), "1").unwrap();
    std::fs::write(outside.join("t/d/f2"), "2").unwrap();
    let launcher = launch().await;
    let mut watch = launcher.client().watch(&dir, true).await.unwrap();
    std::fs::rename(outside.join("t"), dir.join("t")).unwrap();
    std::fs::write(dir.join("t/d/f3"), "3").unwrap();
    let seen = collect_until(&mut watch, &dir.join("t/d/f3")).await;
    assert_eq!(seen.get(&dir.join("t")), Some(&vec![RenamedTo]));
    for found in ["t/f1", "t/d", "t/d/f2"] {
        assert_eq!(seen.get(&dir.join(found)), Some(&vec![Created]), "{found}: {seen:?}");
    }
}

/// A watch of 20,000 files in 200 directories, then a change deep inside.
#[tokio::test]
async fn a_tree_of_twenty_thousand_files() {
    let dir = scratch("watch-20k");
    for d in 0..200 {
        let sub = dir.join(format!("d{d}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("f{f}")), "").unwrap();
        }
    }
    let launcher = launch().await;
    let started = std::time::Instant::now();
    let mut watch = launcher.client().watch(&dir, true).await.unwrap();
    eprintln!("watch of 20,000 files in 200 directories: {:?}", started.elapsed());
    std::fs::write(dir.join("d199/f99"), "changed").unwrap();
    std::fs::write(dir.join("d7/new"), "").unwrap();
    let seen = collect_until(&mut watch, &dir.join("d7/new")).await;
    assert_eq!(seen.get(&dir.join("d199/f99")), Some(&vec![ChangeKind::Modified]));
}

/// The inotify watches the server holds, counted from /proc (one line per watch).
fn kernel_watches(pid: u32) -> usize {
    let mut count = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap().flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        count += info.lines().filter(|l| l.starts_with("inotify wd:")).count();
    }
    count
}

#[tokio::test]
async fn unwatch_and_disconnect_free_every_kernel_watch() {
    let dir = scratch("watch-free");
    for d in 0..50 {
        std::fs::create_dir(dir.join(format!("d{d}"))).unwrap();
    }
    let mut server = Binary::ready(&[]).await;
    let pid = server.child.id().unwrap();
    let result = server.result("fs/watch", json!({"path": dir, "recursive": true})).await;
    assert_eq!(result, json!({"watchId": "w1"}));
    assert_eq!(kernel_watches(pid), 51);
    assert_eq!(
        server.result("fs/watch", json!({"path": dir.join("d3")})).await,
        json!({"watchId": "w2"})
    );
    // The same directory twice is one kernel watch.
    assert_eq!(kernel_watches(pid), 51);
    assert_eq!(server.result("fs/unwatch", json!({"watchId": "w1"})).await, json!({}));
    assert_eq!(kernel_watches(pid), 1);
    assert_eq!(server.result("fs/unwatch", json!({"watchId": "w2"})).await, json!({}));
    assert_eq!(kernel_watches(pid), 0);
    let reply = server.call("fs/unwatch", json!({"watchId": "w2"})).await;
    assert_eq!(reply["error"], json!({"code": -32600, "message": "unknown watch id w2"}));
    // A connection that ends takes its watches along.
    let listening = crate::websocket::WsServer::start(&["--listen", "ws://127.0.0.1:0"]).await;
    let ws_pid = listening.child.id().unwrap();
    let mut peer = crate::websocket::WsPeer::connect(&listening.url).await;
    peer.handshake().await;
    peer.send_text(
        &json!({"id": 1, "method": "fs/watch", "params": {"path": dir, "recursive": true}})
            .to_string(),
    )
    .await;
    assert_eq!(peer.next().await.unwrap()["result"], json!({"watchId": "w1"}));
    assert_eq!(kernel_watches(ws_pid), 51);
    peer.close().await;
    drop(peer);
    within("the watches to be freed", async {
        while kernel_watches(ws_pid) != 0 {
            // Polls /proc: the thread's exit has no event of its own to wait for.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// 100,000 changes at once: the detail is dropped for an overflow of the
/// root, memory stays bounded, and a request sent meanwhile is answered.
#[tokio::test]
async fn a_burst_overflows_and_the_connection_keeps_answering() {
    let dir = scratch("watch-burst");
    let mut server = Binary::ready(&[]).await;
    let pid = server.child.id().unwrap();
    server.result("fs/watch", json!({"path": dir, "recursive": true})).await;
    let script = "import os, sys\nd = sys.argv[1]\nfor i in range(25000):\n    p = os.path.join(d, 'f%d' % i)\n    open(p, 'w').write('x')\n    os.chmod(p, 0o600)\n    os.remove(p)\nopen(os.path.join(d, 'done'), 'w').close()\n";
    let status =
        std::process::Command::new("python3").args(["-c", script]).arg(&dir).status().unwrap();
    assert!(status.success());
    // Sent after the burst, before reading any of it: answered all the same.
    server.send_line(r#"{"id":777,"method":"process/list","params":{}}"#).await;
    let (mut overflow, mut listed, mut changes) = (false, false, 0usize);
    while !(overflow && listed) {
        let message = server.next().await.unwrap();
        if message["id"] == 777 {
            listed = true;
        }
        if message["method"] == "fs/changed" {
            for change in message["params"]["changes"].as_array().unwrap() {
                changes += 1;
                overflow |= change["kind"] == "overflow" && change["path"] == dir.to_str().unwrap();
            }
        }
    }
    assert!(changes < 100_000, "{changes} changes were sent one by one");
    let rss = crate::support::peak_rss_kib(pid);
    assert!(rss < 64 * 1024, "peak RSS {rss} KiB");
}

#[tokio::test]
async fn roots_and_symlinks_confine_a_watch() {
    let root = scratch("watch-root");
    let outside = scratch("watch-root-outside");
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let root_arg = format!("--root={}", root.display());
    let mut server = Binary::ready(&[&root_arg]).await;
    let reply = server.call("fs/watch", json!({"path": outside})).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("path {} is outside the allowed roots", outside.display())})
    );
    let reply = server.call("fs/watch", json!({"path": root.join("link")})).await;
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    server.result("fs/watch", json!({"path": root, "recursive": true})).await;
    // A change through the link, outside the tree, is not reported; one inside is.
    std::fs::write(outside.join("secret"), "x").unwrap();
    std::fs::write(root.join("inside"), "x").unwrap();
    let message = loop {
        let message = server.next().await.unwrap();
        if message["method"] == "fs/changed" {
            break message;
        }
    };
    let paths: Vec<&str> = message["params"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [root.join("inside").to_str().unwrap()]);
    // A sandboxed client may watch only what its sandbox reads.
    let free = scratch("watch-sandboxed");
    let mut unconfined = Binary::ready(&[]).await;
    let sandbox = json!({"mode": "restricted", "writableRoots": [], "readableRoots": [root]});
    let reply = unconfined.call("fs/watch", json!({"path": free, "sandbox": sandbox})).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("cannot watch {}: it is outside the sandbox's readable roots", free.display())})
    );
}

#[tokio::test]
async fn names_that_are_not_utf8_carry_their_bytes() {
    let dir = scratch("watch-bytes");
    let mut server = Binary::ready(&[]).await;
    server.result("fs/watch", json!({"path": dir})).await;
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(dir.join(name), "x").unwrap();
    let message = loop {
        let message = server.next().await.unwrap();
        if message["method"] == "fs/changed" {
            break message;
        }
    };
    let change = &message["params"]["changes"][0];
    assert_eq!(change["kind"], "created");
    assert_eq!(unb64(&change["pathBase64"]), dir.join(name).as_os_str().as_bytes());
    assert_eq!(change["path"], format!("{}/caf\u{fffd}.txt", dir.display()));
}

#[tokio::test]
async fn limits_are_named() {
    let dir = scratch("watch-limits");
    std::fs::write(dir.join("file"), "x").unwrap();
    let mut server = Binary::ready(&[]).await;
    let reply = server.call("fs/watch", json!({"path": dir.join("file"), "recursive": true})).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("cannot watch {} recursively: it is not a directory", dir.join("file").display())})
    );
    // The server's own stdout (a pipe), a device: not watched (a watch of its
    // own output would report every notification it sends).
    for path in ["/proc/self/fd/1", "/dev/null"] {
        let reply = server.call("fs/watch", json!({"path": path})).await;
        assert_eq!(
            reply["error"],
            json!({"code": -32600, "message": format!("cannot watch {path}: it is not a directory or a regular file")})
        );
    }
    for n in 0..256 {
        let reply = server.call("fs/watch", json!({"path": dir})).await;
        assert_eq!(reply["result"]["watchId"], format!("w{}", n + 1));
    }
    let reply = server.call("fs/watch", json!({"path": dir})).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32600, "message": format!("cannot watch {}: too many watches, the limit is 256 per connection", dir.display())})
    );
}

/// Directories moved between watches, out of a plain watch into a recursive
/// one, and exchanged in place are watched under the path they have now.
#[tokio::test]
async fn moved_and_exchanged_directories_are_watched_where_they_are() {
    let base = scratch("watch-moves");
    for dir in ["a", "b", "c", "w"] {
        std::fs::create_dir(base.join(dir)).unwrap();
    }
    let launcher = launch().await;
    let client = launcher.client();
    let (mut a, mut b) = (
        client.watch(base.join("a"), true).await.unwrap(),
        client.watch(base.join("b"), true).await.unwrap(),
    );
    let mut c = client.watch(base.join("c"), false).await.unwrap();
    let mut w = client.watch(base.join("w"), true).await.unwrap();
    std::fs::create_dir(base.join("a/d")).unwrap();
    collect_until(&mut a, &base.join("a/d")).await;
    std::fs::rename(base.join("a/d"), base.join("b/d")).unwrap();
    std::fs::write(base.join("b/d/x"), "").unwrap();
    let seen = collect_until(&mut b, &base.join("b/d/x")).await;
    assert_eq!(seen.get(&base.join("b/d")), Some(&vec![ChangeKind::RenamedTo]));
    std::fs::create_dir(base.join("c/e")).unwrap();
    collect_until(&mut c, &base.join("c/e")).await;
    std::fs::rename(base.join("c/e"), base.join("a/e")).unwrap();
    std::fs::write(base.join("a/e/y"), "").unwrap();
    collect_until(&mut a, &base.join("a/e/y")).await;
    std::fs::create_dir(base.join("w/p")).unwrap();
    std::fs::create_dir(base.join("w/q")).unwrap();
    std::fs::write(base.join("w/q/inq"), "").unwrap();
    collect_until(&mut w, &base.join("w/q/inq")).await;
    let (p, q) = (
        std::ffi::CString::new(base.join("w/p").to_str().unwrap()).unwrap(),
        std::ffi::CString::new(base.join("w/q").to_str().unwrap()).unwrap(),
    );
    // SAFETY: two NUL-terminated paths; RENAME_EXCHANGE swaps them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::AT_FDCWD,
            q.as_ptr(),
            2,
        )
    };
    assert_eq!(rc, 0);
    std::fs::write(base.join("w/p/now-in-p"), "").unwrap();
    let seen = collect_until(&mut w, &base.join("w/p/now-in-p")).await;
    assert!(!seen.keys().any(|path| path.starts_with(base.join("w/q/now-in-p"))), "{seen:?}");
}
