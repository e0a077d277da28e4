//! Copy, readDirectory and walk in today's dialect (DIALECT-GAPS §4), beside
//! exec-server.v0's unchanged answers.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::{json, Value};

use crate::support::{scratch, Harness};

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
}

/// `real/f`, and links: dangling, to the file, to the directory.
fn linked_tree(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    std::fs::create_dir(dir.join("real")).unwrap();
    std::fs::write(dir.join("real/f"), "x").unwrap();
    symlink(dir.join("nowhere"), dir.join("broken-link")).unwrap();
    symlink(dir.join("real/f"), dir.join("file-link")).unwrap();
    symlink(dir.join("real"), dir.join("target-link")).unwrap();
    dir
}

#[tokio::test]
async fn a_recursive_copy_skips_special_files() {
    let dir = scratch("today-copy-special");
    std::fs::create_dir_all(dir.join("src/sub")).unwrap();
    std::fs::write(dir.join("src/sub/f"), "x").unwrap();
    mkfifo(&dir.join("src/sub/fifo"));
    let mut h = Harness::ready().await;
    let copy = json!({"sourcePath": uri(&dir.join("src")), "destinationPath": uri(&dir.join("dst")), "recursive": true});
    assert_eq!(h.result("fs/copy", copy).await, json!({}));
    let mut names: Vec<_> = std::fs::read_dir(dir.join("dst/sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["f"]);
    let alone = json!({"sourcePath": uri(&dir.join("src/sub/fifo")), "destinationPath": uri(&dir.join("one")), "recursive": true});
    let error = h.error("fs/copy", alone).await;
    assert_eq!(error["message"], "fs/copy only supports regular files, directories, and symlinks");
    // exec-server.v0 still refuses the tree.
    let v0 = json!({"sourcePath": dir.join("src"), "destinationPath": dir.join("v0"), "recursive": true});
    let error = h.error("fs/copy", v0).await;
    assert_eq!(error["message"], "fs/copy only supports regular files, directories, and symlinks");
}

#[tokio::test]
async fn a_listing_leaves_out_dangling_links_and_follows_the_others() {
    let dir = linked_tree("today-list");
    let mut h = Harness::ready().await;
    let entry =
        |name: &str, d: bool, f: bool| json!({"fileName": name, "isDirectory": d, "isFile": f});
    let today = h.result("fs/readDirectory", json!({"path": uri(&dir)})).await;
    assert_eq!(
        today["entries"],
        json!([
            entry("file-link", false, true),
            entry("real", true, false),
            entry("target-link", true, false)
        ])
    );
    let v0 = h.result("fs/readDirectory", json!({"path": dir})).await;
    assert_eq!(v0["entries"][0], entry("broken-link", false, false));
}

async fn walk(h: &mut Harness, path: &Path, options: Value) -> Value {
    h.call("fs/walk", json!({"path": uri(path), "options": options})).await
}

#[tokio::test]
async fn walk_bounds_are_refused_before_the_root_is_looked_at() {
    let dir = scratch("today-walk-bounds");
    let missing = dir.join("missing");
    let mut h = Harness::ready().await;
    let zero =
        json!({"code": -32600, "message": "filesystem walk limits must be greater than zero"});
    let over = json!({"code": -32600, "message": "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"});
    assert_eq!(walk(&mut h, &missing, json!({"maxEntries": 0})).await["error"], zero);
    assert_eq!(walk(&mut h, &missing, json!({"maxDirectories": 0})).await["error"], zero);
    assert_eq!(walk(&mut h, &missing, json!({"maxDepth": 65})).await["error"], over);
    assert_eq!(walk(&mut h, &missing, json!({"maxDirectories": 10001})).await["error"], over);
    assert_eq!(walk(&mut h, &missing, json!({"maxEntries": 50001})).await["error"], over);
    assert_eq!(walk(&mut h, &missing, json!({})).await["error"]["code"], -32004);
    std::fs::write(dir.join("file"), "x").unwrap();
    let empty = json!({"entries": [], "errors": [], "truncated": false});
    assert_eq!(walk(&mut h, &dir.join("file"), json!({})).await["result"], empty);
    // exec-server.v0 clamps the bounds and refuses a file root, as before.
    let v0 =
        h.call("fs/walk", json!({"path": dir.join("file"), "options": {"maxEntries": 0}})).await;
    assert_eq!(v0["error"]["code"], -32603, "{v0}");
}

#[tokio::test]
async fn walk_reports_links_only_as_followed_directories() {
    let dir = linked_tree("today-walk-links");
    let mut h = Harness::ready().await;
    let at = |rel: &str, kind: &str| json!({"path": format!("{}/{rel}", uri(&dir)), "kind": kind});
    let plain = walk(&mut h, &dir, json!({"followDirectorySymlinks": false})).await;
    assert_eq!(
        plain["result"],
        json!({"entries": [at("real", "directory"), at("real/f", "file")], "errors": [], "truncated": false})
    );
    let followed = walk(&mut h, &dir, json!({"followDirectorySymlinks": true})).await;
    assert_eq!(
        followed["result"]["entries"],
        json!([at("real", "directory"), at("target-link", "directory"), at("real/f", "file")])
    );
    let empty = json!({"entries": [], "errors": [], "truncated": false});
    let link_root = walk(&mut h, &dir.join("target-link"), json!({})).await;
    assert_eq!(link_root["result"], empty);
}

#[tokio::test]
async fn walk_names_that_are_not_utf8_are_lossy_and_not_found() {
    let dir = scratch("today-walk-names");
    let name = std::ffi::OsStr::from_bytes(b"invalid-\xff");
    std::fs::write(dir.join(name), "x").unwrap();
    let mut h = Harness::ready().await;
    let options = json!({"maxDepth": 0, "maxDirectories": 1, "maxEntries": 1});
    let walked = walk(&mut h, &dir, options).await;
    assert_eq!(
        walked["result"],
        json!({
            "entries": [],
            "errors": [{"path": format!("{}/invalid-%EF%BF%BD", uri(&dir)), "message": "No such file or directory (os error 2)"}],
            "truncated": false
        })
    );
}

#[tokio::test]
async fn follow_symlinks_false_refuses_a_link_in_any_component() {
    let dir = linked_tree("today-nofollow");
    let mut h = Harness::ready().await;
    let path = |rel: &str| uri(&dir.join(rel));
    let error = |reply: &Value| {
        (
            reply["error"]["code"].clone(),
            reply["error"]["message"].as_str().unwrap_or("").to_owned(),
        )
    };
    // A link above the last component: ENOTDIR, for every method.
    for method in ["fs/readFile", "fs/getMetadata", "fs/remove"] {
        let reply =
            h.call(method, json!({"path": path("target-link/f"), "followSymlinks": false})).await;
        let (code, message) = error(&reply);
        assert_eq!(code, -32603, "{method}: {reply}");
        assert!(message.ends_with("Not a directory (os error 20)"), "{method}: {message}");
    }
    let write =
        json!({"path": path("target-link/f"), "dataBase64": "eQ==", "followSymlinks": false});
    let (code, message) = error(&h.call("fs/writeFile", write).await);
    assert_eq!(code, -32603);
    assert!(message.ends_with("Not a directory (os error 20)"), "{message}");
    assert_eq!(std::fs::read_to_string(dir.join("real/f")).unwrap(), "x");
    // The last component a link: reads and writes loop, metadata and remove refuse.
    let reply =
        h.call("fs/readFile", json!({"path": path("file-link"), "followSymlinks": false})).await;
    let (code, message) = error(&reply);
    assert_eq!(code, -32603);
    assert!(message.ends_with("Too many levels of symbolic links (os error 40)"), "{message}");
    for method in ["fs/getMetadata", "fs/remove"] {
        let reply =
            h.call(method, json!({"path": path("file-link"), "followSymlinks": false})).await;
        assert_eq!(
            reply["error"],
            json!({"code": -32600, "message": "path contains a symbolic link"}),
            "{method}"
        );
    }
    assert!(dir.join("file-link").symlink_metadata().is_ok(), "the link was kept");
    // A real path works; a directory is not removed recursively without following.
    let real =
        h.result("fs/getMetadata", json!({"path": path("real"), "followSymlinks": false})).await;
    assert_eq!(real["isDirectory"], true);
    let reply = h.call("fs/remove", json!({"path": path("real"), "followSymlinks": false})).await;
    assert_eq!(
        reply["error"],
        json!({"code": -32603, "message": "recursive no-follow removal is unsupported"})
    );
    let read =
        h.result("fs/readFile", json!({"path": path("real/f"), "followSymlinks": false})).await;
    assert_eq!(read["dataBase64"], "eA==");
    // exec-server.v0 (plain paths): only a last link counts, as before.
    let plain = dir.join("target-link/f");
    let read = h.result("fs/readFile", json!({"path": plain, "followSymlinks": false})).await;
    assert_eq!(read["dataBase64"], "eA==");
}
