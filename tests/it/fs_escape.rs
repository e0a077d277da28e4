//! `--root` holds under every fs method and process/start's cwd: a table of escape attempts, each followed by a byte-for-byte check of a sentinel tree outside.

use std::os::unix::fs::symlink;
use std::path::Path;

use exec_server::server::Config;
use serde_json::{json, Value};

use crate::support::{b64, scratch, snapshot, start_params, Harness};

/// What an attempt must answer.
enum Expect {
    /// -32600 `path P is outside the allowed roots`, P being this field of the params.
    Outside(&'static str),
    /// Success.
    Done,
    /// An error with this code and `data.kind`.
    Error(i64, &'static str),
}

fn p(path: &Path) -> String {
    path.to_str().unwrap().to_owned()
}

/// The root's contents: links out of it at every level, a loop, and trees to copy and remove.
fn populate(root: &Path, outside: &Path) {
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    symlink(outside, root.join("escape")).unwrap();
    symlink(outside.join("secret"), root.join("escape-file")).unwrap();
    symlink("../outside", root.join("rel-escape")).unwrap();
    symlink("/proc/self/fd/1", root.join("fd-link")).unwrap();
    symlink("/proc/self/root", root.join("proc-root")).unwrap();
    symlink("loop-b", root.join("loop-a")).unwrap();
    symlink("loop-a", root.join("loop-b")).unwrap();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    symlink(outside, root.join("sub/deeper/escape")).unwrap();
    // A source tree with links out at two levels, and a destination whose
    // existing entries link out where the copy will write.
    std::fs::create_dir_all(root.join("src/inner")).unwrap();
    std::fs::write(root.join("src/inner/secret"), b"from src").unwrap();
    std::fs::write(root.join("src/secret"), b"from src").unwrap();
    symlink(outside, root.join("src/out")).unwrap();
    symlink(outside.join("secret"), root.join("src/inner/out-file")).unwrap();
    std::fs::create_dir_all(root.join("dst/inner")).unwrap();
    symlink(outside.join("secret"), root.join("dst/secret")).unwrap();
    symlink(outside, root.join("dst/inner/secret")).unwrap();
    symlink(outside, root.join("dst-link-dir")).unwrap();
}

fn cases(root: &Path, outside: &Path) -> Vec<(&'static str, Value, Expect)> {
    let r = |rel: &str| format!("{}/{rel}", p(root));
    let o = |rel: &str| format!("{}/{rel}", p(outside));
    let proc_root = format!("/proc/self/root{}", o("secret"));
    use Expect::*;
    vec![
        ("fs/readFile", json!({"path": r("escape/secret")}), Outside("path")),
        ("fs/readFile", json!({"path": r("escape-file")}), Outside("path")),
        ("fs/readFile", json!({"path": r("rel-escape/secret")}), Outside("path")),
        ("fs/readFile", json!({"path": r("sub/deeper/escape/secret")}), Outside("path")),
        ("fs/readFile", json!({"path": r("sub/../../outside/secret")}), Outside("path")),
        ("fs/readFile", json!({"path": r("fd-link")}), Outside("path")),
        ("fs/readFile", json!({"path": r("proc-root") + &o("secret")}), Outside("path")),
        ("fs/readFile", json!({"path": proc_root}), Outside("path")),
        ("fs/readFile", json!({"path": "/proc/self/fd/1"}), Outside("path")),
        ("fs/readFile", json!({"path": r("loop-a")}), Error(-32603, "other")),
        (
            "fs/writeFile",
            json!({"path": r("escape/secret"), "dataBase64": b64(b"x")}),
            Outside("path"),
        ),
        (
            "fs/writeFile",
            json!({"path": r("escape/new"), "dataBase64": b64(b"x")}),
            Outside("path"),
        ),
        (
            "fs/writeFile",
            json!({"path": r("escape-file"), "dataBase64": b64(b"x")}),
            Outside("path"),
        ),
        (
            "fs/writeFile",
            json!({"path": r("escape-file"), "dataBase64": b64(b"x"), "append": true}),
            Outside("path"),
        ),
        ("fs/writeFile", json!({"path": r("escape/."), "dataBase64": b64(b"x")}), Outside("path")),
        ("fs/writeFile", json!({"path": r("fd-link"), "dataBase64": b64(b"x")}), Outside("path")),
        ("fs/createDirectory", json!({"path": r("escape/new")}), Outside("path")),
        ("fs/createDirectory", json!({"path": r("escape/a/b/c")}), Outside("path")),
        (
            "fs/createDirectory",
            json!({"path": r("sub/deeper/escape/new"), "recursive": false}),
            Outside("path"),
        ),
        ("fs/getMetadata", json!({"path": r("escape-file")}), Outside("path")),
        ("fs/getMetadata", json!({"path": r("escape-file"), "followSymlinks": false}), Done),
        ("fs/readDirectory", json!({"path": r("escape")}), Outside("path")),
        ("fs/readDirectory", json!({"path": r("escape/.")}), Outside("path")),
        ("fs/readDirectory", json!({"path": r("sub/deeper/escape/")}), Outside("path")),
        ("fs/readDirectory", json!({"path": r("src")}), Done),
        ("fs/remove", json!({"path": r("escape/.")}), Done),
        ("fs/remove", json!({"path": r("escape/")}), Done),
        ("fs/remove", json!({"path": r("escape//")}), Done),
        ("fs/remove", json!({"path": r("escape/secret")}), Outside("path")),
        ("fs/remove", json!({"path": r("escape"), "followSymlinks": true}), Outside("path")),
        ("fs/remove", json!({"path": r("dst")}), Done),
        ("fs/remove", json!({"path": r("src")}), Done),
        ("fs/remove", json!({"path": r("sub")}), Done),
        (
            "fs/remove",
            json!({"path": r("sub/deeper/escape/secret"), "force": false}),
            Outside("path"),
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("escape"), "destinationPath": r("x"), "recursive": true}),
            Done,
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("escape/secret"), "destinationPath": r("x")}),
            Outside("sourcePath"),
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("escape/."), "destinationPath": r("x"), "recursive": true}),
            Done,
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("src/secret"), "destinationPath": r("escape-file")}),
            Outside("destinationPath"),
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("src/secret"), "destinationPath": r("escape/new")}),
            Outside("destinationPath"),
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("src"), "destinationPath": r("escape"), "recursive": true}),
            Outside("destinationPath"),
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("src"), "destinationPath": r("dst-link-dir"), "recursive": true}),
            Outside("destinationPath"),
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("src"), "destinationPath": r("copy"), "recursive": true}),
            Done,
        ),
        // Merging into dst: dst/secret (a link out) is replaced, dst/inner/secret
        // (a link out where a file goes) too; nothing is written through them.
        (
            "fs/copy",
            json!({"sourcePath": r("src"), "destinationPath": r("dst"), "recursive": true}),
            Done,
        ),
        (
            "fs/copy",
            json!({"sourcePath": r("sub"), "destinationPath": r("sub2"), "recursive": true}),
            Done,
        ),
        (
            "fs/rename",
            json!({"sourcePath": r("escape/secret"), "destinationPath": r("x")}),
            Outside("sourcePath"),
        ),
        (
            "fs/rename",
            json!({"sourcePath": r("src/secret"), "destinationPath": r("escape/x")}),
            Outside("destinationPath"),
        ),
        (
            "fs/rename",
            json!({"sourcePath": r("src/secret"), "destinationPath": r("../outside/secret")}),
            Outside("destinationPath"),
        ),
        ("fs/rename", json!({"sourcePath": r("escape/."), "destinationPath": r("moved")}), Done),
        (
            "process/start",
            start_params("p", &["true"], json!({"cwd": r("escape")})),
            Outside("cwd"),
        ),
        (
            "process/start",
            start_params("p", &["true"], json!({"cwd": r("rel-escape/")})),
            Outside("cwd"),
        ),
        (
            "process/start",
            start_params("p", &["true"], json!({"cwd": r("sub/deeper/escape/.")})),
            Outside("cwd"),
        ),
        (
            "process/start",
            start_params("p", &["true"], json!({"cwd": r("proc-root")})),
            Outside("cwd"),
        ),
        (
            "process/start",
            start_params("p", &["true"], json!({"cwd": "/proc/self/root/"})),
            Outside("cwd"),
        ),
        (
            "process/start",
            start_params("p", &["true"], json!({"cwd": r("loop-a")})),
            Outside("cwd"),
        ),
    ]
}

#[tokio::test]
async fn no_fs_method_reaches_outside_the_root() {
    let dir = scratch("fs-escape");
    let (root, outside) = (dir.join("root"), dir.join("outside"));
    std::fs::create_dir_all(outside.join("nested")).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(outside.join("secret"), b"outside secret").unwrap();
    std::fs::write(outside.join("nested/deep"), b"deep secret").unwrap();
    symlink("secret", outside.join("link")).unwrap();
    let sentinel = snapshot(&outside);
    let config = Config { roots: vec![root.clone()], ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    for (method, params, expect) in cases(&root, &outside) {
        populate(&root, &outside);
        let response = h.call(method, params.clone()).await;
        let what = format!("{method} {params}");
        match expect {
            Expect::Outside(field) => {
                let path = params[field].as_str().unwrap();
                assert_eq!(
                    response["error"],
                    json!({"code": -32600, "message": format!("path {path} is outside the allowed roots")}),
                    "{what}"
                );
            }
            Expect::Done => assert!(response.get("result").is_some(), "{what}: {response}"),
            Expect::Error(code, kind) => {
                assert_eq!(response["error"]["code"], code, "{what}: {response}");
                assert_eq!(response["error"]["data"]["kind"], kind, "{what}: {response}");
            }
        }
        assert_eq!(snapshot(&outside), sentinel, "{what} changed the tree outside the root");
    }
}

#[tokio::test]
async fn trees_are_copied_and_removed_without_following_links() {
    let dir = scratch("fs-escape-trees");
    let (root, outside) = (dir.join("root"), dir.join("outside"));
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(outside.join("secret"), b"outside secret").unwrap();
    populate(&root, &outside);
    let config = Config { roots: vec![root.clone()], ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    let r = |rel: &str| p(&root.join(rel));
    h.result(
        "fs/copy",
        json!({"sourcePath": r("src"), "destinationPath": r("dst"), "recursive": true}),
    )
    .await;
    // The links in dst were replaced by the files, not written through.
    assert_eq!(std::fs::read(root.join("dst/secret")).unwrap(), b"from src");
    assert_eq!(std::fs::read(root.join("dst/inner/secret")).unwrap(), b"from src");
    assert!(!std::fs::symlink_metadata(root.join("dst/secret")).unwrap().is_symlink());
    // Links in the source were copied as links.
    assert_eq!(std::fs::read_link(root.join("dst/out")).unwrap(), outside);
    assert_eq!(
        std::fs::read_link(root.join("dst/inner/out-file")).unwrap(),
        outside.join("secret")
    );
    assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"outside secret");
    // A link where the copy needs a directory is an error, never followed.
    std::fs::remove_dir_all(root.join("dst/inner")).unwrap();
    symlink(&outside, root.join("dst/inner")).unwrap();
    let error = h
        .error(
            "fs/copy",
            json!({"sourcePath": r("src"), "destinationPath": r("dst"), "recursive": true}),
        )
        .await;
    assert_eq!(error["data"], json!({"kind": "notADirectory", "path": r("dst/inner")}), "{error}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    h.result("fs/remove", json!({"path": r("dst")})).await;
    assert!(!root.join("dst").exists());
    assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"outside secret");
}
