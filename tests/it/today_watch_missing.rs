//! `fs/watchMissing` (Codex 0.169): one `fs/missingChanged` when a missing
//! path appears (not when a directory on its way does) or the present path
//! changes; the watch then ends. Through the real binary, in today's dialect.

use serde_json::{json, Value};

use crate::binary::Binary;
use crate::support::scratch;

fn uri(path: &std::path::Path) -> String {
    format!("file://{}", path.display())
}

/// The next `fs/missingChanged`'s watch id.
async fn fired(server: &mut Binary) -> Value {
    loop {
        let message = server.next().await.expect("the server closed stdout");
        if message["method"] == "fs/missingChanged" {
            return message["params"]["watchId"].clone();
        }
    }
}

#[tokio::test]
async fn a_missing_path_fires_once_when_it_appears_and_a_present_one_when_it_changes() {
    let dir = scratch("watch-missing");
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    let skills = dir.join(".agents/skills");
    let mut server = Binary::ready(&[]).await;
    let watch = json!({"watchId": 1, "missing": [uri(&skills)], "present": uri(&dir.join(".git"))});
    assert_eq!(server.result("fs/watchMissing", watch).await, json!({"watching": true}));
    // A directory on the way appears: no notification for 1 (it follows deeper).
    std::fs::create_dir(dir.join(".agents")).unwrap();
    let other = dir.join("other");
    let second = json!({"watchId": "two", "missing": [other.display().to_string()]});
    assert_eq!(server.result("fs/watchMissing", second).await, json!({"watching": true}));
    std::fs::write(&other, "x").unwrap();
    assert_eq!(fired(&mut server).await, json!("two"));
    std::fs::create_dir(&skills).unwrap();
    assert_eq!(fired(&mut server).await, json!(1));
    // The present path removed fires; a path already there fires at once.
    let third = json!({"watchId": 3, "missing": [uri(&dir.join("nothing"))], "present": uri(&dir.join(".git"))});
    server.result("fs/watchMissing", third).await;
    std::fs::remove_dir(dir.join(".git")).unwrap();
    assert_eq!(fired(&mut server).await, json!(3));
    let there = json!({"watchId": 4, "missing": [uri(&skills)]});
    server.result("fs/watchMissing", there).await;
    assert_eq!(fired(&mut server).await, json!(4));
    // A watch given again replaces the first: only one notification.
    let gone = dir.join("later");
    for _ in 0..2 {
        server.result("fs/watchMissing", json!({"watchId": 5, "missing": [uri(&gone)]})).await;
    }
    std::fs::write(&gone, "").unwrap();
    assert_eq!(fired(&mut server).await, json!(5));
    std::fs::write(dir.join("after"), "").unwrap();
    let last = json!({"watchId": 6, "missing": [uri(&dir.join("after"))]});
    server.result("fs/watchMissing", last).await;
    assert_eq!(fired(&mut server).await, json!(6), "watch 5 fired twice");
}

#[tokio::test]
async fn malformed_watches_are_refused_naming_what_is_wrong() {
    let mut server = Binary::ready(&[]).await;
    let cases = [
        (
            json!({"watchId": {}, "missing": []}),
            "invalid params for fs/watchMissing: watchId must be a number or a string",
        ),
        (
            json!({"watchId": 1, "missing": ["relative/x"]}),
            "invalid params for fs/watchMissing: relative/x: not an absolute path or a file URI",
        ),
    ];
    for (params, message) in cases {
        let error = server.error("fs/watchMissing", params).await;
        assert_eq!(error, json!({"code": -32602, "message": message}));
    }
    let many: Vec<String> = (0..65).map(|i| format!("/nope/{i}")).collect();
    let error = server.error("fs/watchMissing", json!({"watchId": 1, "missing": many})).await;
    assert_eq!(
        error["message"],
        "invalid params for fs/watchMissing: at most 64 missing paths, not 65"
    );
}

#[tokio::test]
async fn links_out_of_the_roots_tell_nothing_and_changes_inside_a_present_directory_do_not_fire() {
    let base = scratch("watch-missing-roots");
    let root = base.join("R");
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("l_dir")).unwrap();
    std::os::unix::fs::symlink("/etc/nonexistent-es", root.join("l_none")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("l_file")).unwrap();
    let mut server = Binary::ready(&[&format!("--root={}", root.display())]).await;
    // Through a link to a directory, to nothing, or to a file outside the
    // roots: the same answer, and what lies beyond is not looked at.
    for (n, link) in ["l_dir", "l_none", "l_file"].into_iter().enumerate() {
        let watch = json!({"watchId": n, "missing": [uri(&root.join(link).join("x"))]});
        assert_eq!(
            server.result("fs/watchMissing", watch).await,
            json!({"watching": true}),
            "{link}"
        );
    }
    // A git-style update inside the present .git, then an unrelated file
    // beside it: the .git watch stays quiet; the probe fires first.
    let git = json!({"watchId": "git", "present": uri(&root.join(".git"))});
    server.result("fs/watchMissing", git).await;
    std::fs::write(root.join(".git/HEAD.lock"), "ref: x\n").unwrap();
    std::fs::rename(root.join(".git/HEAD.lock"), root.join(".git/HEAD")).unwrap();
    std::fs::write(root.join("README"), "x").unwrap();
    let probe = json!({"watchId": "probe", "missing": [uri(&root.join("probe"))]});
    server.result("fs/watchMissing", probe).await;
    std::fs::write(root.join("probe"), "").unwrap();
    assert_eq!(fired(&mut server).await, json!("probe"));
    std::fs::remove_dir_all(root.join(".git")).unwrap();
    assert_eq!(fired(&mut server).await, json!("git"));
}
