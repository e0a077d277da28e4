//! The fs/* methods, their defaults, limits, errors and `--root` confinement.

use std::os::unix::fs::symlink;

use exec_server::server::Config;
use serde_json::{json, Value};

use crate::support::{b64, scratch, unb64, Harness};

fn p(path: &std::path::Path) -> String {
    path.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn write_read_and_ranges() {
    let dir = scratch("fs-rw");
    let file = p(&dir.join("a.txt"));
    let mut h = Harness::ready().await;
    assert_eq!(
        h.result("fs/writeFile", json!({"path": file, "dataBase64": b64(b"hello")})).await,
        json!({})
    );
    h.result("fs/writeFile", json!({"path": file, "dataBase64": b64(b" world"), "append": true}))
        .await;
    let read = h.result("fs/readFile", json!({"path": file})).await;
    assert_eq!(read, json!({"dataBase64": b64(b"hello world")}));
    let range = h.result("fs/readFile", json!({"path": file, "offset": 6, "length": 3})).await;
    assert_eq!(unb64(&range["dataBase64"]), b"wor");
    let tail = h.result("fs/readFile", json!({"path": file, "offset": 6})).await;
    assert_eq!(unb64(&tail["dataBase64"]), b"world");
    let short = h.result("fs/readFile", json!({"path": file, "offset": 9, "length": 100})).await;
    assert_eq!(unb64(&short["dataBase64"]), b"ld");
    let at_end = h.result("fs/readFile", json!({"path": file, "offset": 11})).await;
    assert_eq!(at_end, json!({"dataBase64": ""}));
    assert_eq!(
        h.error("fs/readFile", json!({"path": file, "offset": 12})).await,
        json!({"code": -32600, "message": format!("cannot read {file}: offset 12 is past the end of the file (11 bytes)"), "data": {"kind": "invalidInput", "path": file}})
    );
    // Overwrite truncates.
    h.result("fs/writeFile", json!({"path": file, "dataBase64": b64(b"x")})).await;
    assert_eq!(h.result("fs/readFile", json!({"path": file})).await, json!({"dataBase64": "eA=="}));
}

#[tokio::test]
async fn read_and_write_errors() {
    let dir = scratch("fs-errors");
    let missing = p(&dir.join("missing"));
    let mut h = Harness::ready().await;
    assert_eq!(
        h.error("fs/readFile", json!({"path": missing})).await,
        json!({"code": -32603, "message": format!("cannot read {missing}: No such file or directory (os error 2)"), "data": {"kind": "notFound", "path": missing}})
    );
    assert_eq!(
        h.error("fs/writeFile", json!({"path": p(&dir.join("f")), "dataBase64": "not base64!"}))
            .await,
        json!({"code": -32600, "message": "fs/writeFile requires valid base64 dataBase64: Invalid symbol 32, offset 3."})
    );
    let nested = p(&dir.join("no/such/dir/f"));
    assert_eq!(
        h.error("fs/writeFile", json!({"path": nested, "dataBase64": ""})).await["data"],
        json!({"kind": "notFound", "path": nested})
    );
    assert_eq!(
        h.error("fs/readFile", json!({"path": p(&dir)})).await["data"],
        json!({"kind": "isADirectory", "path": p(&dir)})
    );
    assert_eq!(
        h.error("fs/getMetadata", json!({"path": "relative.txt"})).await,
        json!({"code": -32602, "message": "path must be absolute: relative.txt"})
    );
    // The limit applies to the bytes returned, not to the length asked for.
    std::fs::write(dir.join("small"), b"x").unwrap();
    let read = h
        .result("fs/readFile", json!({"path": p(&dir.join("small")), "length": 536870913u64}))
        .await;
    assert_eq!(read, json!({"dataBase64": "eA=="}));
    // A sparse file past the limit is refused whole, without reading it.
    let big = std::fs::File::create(dir.join("big")).unwrap();
    big.set_len(536870913).unwrap();
    assert_eq!(
        h.error("fs/readFile", json!({"path": p(&dir.join("big"))})).await,
        json!({"code": -32600, "message": "file is too large to read: limit is 536870912 bytes"})
    );
}

#[tokio::test]
async fn a_file_over_the_read_limit_is_refused() {
    let dir = scratch("fs-large");
    let file = dir.join("sparse");
    std::fs::File::create(&file).unwrap().set_len(512 * 1024 * 1024 + 1).unwrap();
    let mut h = Harness::ready().await;
    assert_eq!(
        h.error("fs/readFile", json!({"path": p(&file)})).await,
        json!({"code": -32600, "message": "file is too large to read: limit is 536870912 bytes"})
    );
    // A range of it is fine.
    let range = h
        .result("fs/readFile", json!({"path": p(&file), "offset": 536870900u64, "length": 4}))
        .await;
    assert_eq!(unb64(&range["dataBase64"]), vec![0; 4]);
}

#[tokio::test]
async fn directories_metadata_and_listing() {
    let dir = scratch("fs-dirs");
    let deep = p(&dir.join("a/b/c"));
    let mut h = Harness::ready().await;
    assert_eq!(h.result("fs/createDirectory", json!({"path": deep})).await, json!({}));
    let flat = p(&dir.join("x/y"));
    assert_eq!(
        h.error("fs/createDirectory", json!({"path": flat, "recursive": false})).await["data"],
        json!({"kind": "notFound", "path": flat})
    );
    assert_eq!(
        h.error("fs/createDirectory", json!({"path": p(&dir.join("a")), "recursive": false})).await
            ["data"]["kind"],
        "alreadyExists"
    );
    std::fs::write(dir.join("a/file.txt"), b"12345").unwrap();
    symlink(dir.join("a/file.txt"), dir.join("a/link")).unwrap();
    let meta = h.result("fs/getMetadata", json!({"path": p(&dir.join("a/file.txt"))})).await;
    assert_eq!(meta["isFile"], true);
    assert_eq!(meta["isDirectory"], false);
    assert_eq!(meta["isSymlink"], false);
    assert_eq!(meta["size"], 5);
    assert_eq!(meta["readonly"], false);
    let modified = std::fs::metadata(dir.join("a/file.txt")).unwrap().modified().unwrap();
    let modified_ms = modified.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(meta["modifiedAtMs"], modified_ms);
    // Birth time where the filesystem records it, else 0.
    let created = std::fs::metadata(dir.join("a/file.txt")).unwrap().created().ok();
    let created_ms =
        created.map_or(0, |t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64);
    assert_eq!(meta["createdAtMs"], created_ms);
    let link = h.result("fs/getMetadata", json!({"path": p(&dir.join("a/link"))})).await;
    assert_eq!(
        (link["isSymlink"].clone(), link["isFile"].clone(), link["size"].clone()),
        (json!(true), json!(true), json!(5))
    );
    let listing = h.result("fs/readDirectory", json!({"path": p(&dir.join("a"))})).await;
    assert_eq!(
        listing,
        json!({"entries": [
            {"fileName": "b", "isDirectory": true, "isFile": false},
            {"fileName": "file.txt", "isDirectory": false, "isFile": true},
            {"fileName": "link", "isDirectory": false, "isFile": true},
        ]})
    );
    let missing = p(&dir.join("nope"));
    assert_eq!(
        h.error("fs/readDirectory", json!({"path": missing})).await["data"]["kind"],
        "notFound"
    );
    assert_eq!(
        h.error("fs/readDirectory", json!({"path": p(&dir.join("a/file.txt"))})).await["data"]
            ["kind"],
        "notADirectory"
    );
    let mut perms = std::fs::metadata(dir.join("a/file.txt")).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(dir.join("a/file.txt"), perms).unwrap();
    assert_eq!(
        h.result("fs/getMetadata", json!({"path": p(&dir.join("a/file.txt"))})).await["readonly"],
        true
    );
}

#[tokio::test]
async fn remove_defaults_and_errors() {
    let dir = scratch("fs-remove");
    std::fs::create_dir_all(dir.join("tree/sub")).unwrap();
    std::fs::write(dir.join("tree/sub/f"), b"x").unwrap();
    let mut h = Harness::ready().await;
    let tree = p(&dir.join("tree"));
    assert_eq!(
        h.error("fs/remove", json!({"path": tree, "recursive": false})).await["data"],
        json!({"kind": "directoryNotEmpty", "path": tree})
    );
    assert_eq!(h.result("fs/remove", json!({"path": tree})).await, json!({}));
    assert!(!dir.join("tree").exists());
    assert_eq!(h.result("fs/remove", json!({"path": tree})).await, json!({}));
    assert_eq!(
        h.error("fs/remove", json!({"path": tree, "force": false})).await,
        json!({"code": -32603, "message": format!("cannot remove {tree}: No such file or directory (os error 2)"), "data": {"kind": "notFound", "path": tree}})
    );
    // A symlink is removed itself, not its target.
    std::fs::write(dir.join("target"), b"keep").unwrap();
    symlink(dir.join("target"), dir.join("link")).unwrap();
    h.result("fs/remove", json!({"path": p(&dir.join("link"))})).await;
    assert_eq!(std::fs::read(dir.join("target")).unwrap(), b"keep");
}

#[tokio::test]
async fn copy_files_trees_and_symlinks() {
    let dir = scratch("fs-copy");
    std::fs::create_dir_all(dir.join("src/inner")).unwrap();
    std::fs::write(dir.join("src/inner/f"), b"data").unwrap();
    symlink("inner/f", dir.join("src/rel-link")).unwrap();
    let mut h = Harness::ready().await;
    let src = p(&dir.join("src"));
    assert_eq!(
        h.error(
            "fs/copy",
            json!({"sourcePath": src, "destinationPath": p(&dir.join("dst")), "recursive": false})
        )
        .await,
        json!({"code": -32600, "message": "fs/copy requires recursive: true when sourcePath is a directory"})
    );
    assert_eq!(
        h.error("fs/copy", json!({"sourcePath": src, "destinationPath": p(&dir.join("src/inner/deeper")), "recursive": true})).await,
        json!({"code": -32600, "message": "fs/copy cannot copy a directory to itself or one of its descendants"})
    );
    assert_eq!(
        h.error("fs/copy", json!({"sourcePath": src, "destinationPath": src, "recursive": true}))
            .await["message"],
        "fs/copy cannot copy a directory to itself or one of its descendants"
    );
    h.result(
        "fs/copy",
        json!({"sourcePath": src, "destinationPath": p(&dir.join("dst")), "recursive": true}),
    )
    .await;
    assert_eq!(std::fs::read(dir.join("dst/inner/f")).unwrap(), b"data");
    assert_eq!(
        std::fs::read_link(dir.join("dst/rel-link")).unwrap(),
        std::path::Path::new("inner/f")
    );
    // A tree's destination gets its missing parents, as in Part A.
    h.result(
        "fs/copy",
        json!({"sourcePath": src, "destinationPath": p(&dir.join("new/parents/dst")), "recursive": true}),
    )
    .await;
    assert_eq!(std::fs::read(dir.join("new/parents/dst/inner/f")).unwrap(), b"data");
    h.result("fs/copy", json!({"sourcePath": p(&dir.join("src/inner/f")), "destinationPath": p(&dir.join("one")), "recursive": false})).await;
    assert_eq!(std::fs::read(dir.join("one")).unwrap(), b"data");
    let missing = p(&dir.join("missing"));
    assert_eq!(
        h.error("fs/copy", json!({"sourcePath": missing, "destinationPath": p(&dir.join("x"))}))
            .await["data"],
        json!({"kind": "notFound", "path": missing})
    );
    let fifo = dir.join("fifo");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    assert_eq!(
        h.error(
            "fs/copy",
            json!({"sourcePath": p(&fifo), "destinationPath": p(&dir.join("y")), "recursive": true})
        )
        .await,
        json!({"code": -32600, "message": "fs/copy only supports regular files, directories, and symlinks"})
    );
}

#[tokio::test]
async fn rename_and_its_errors() {
    let dir = scratch("fs-rename");
    std::fs::write(dir.join("a"), b"1").unwrap();
    let mut h = Harness::ready().await;
    let (a, b) = (p(&dir.join("a")), p(&dir.join("b")));
    assert_eq!(
        h.result("fs/rename", json!({"sourcePath": a, "destinationPath": b})).await,
        json!({})
    );
    assert_eq!(std::fs::read(dir.join("b")).unwrap(), b"1");
    let err = h.error("fs/rename", json!({"sourcePath": a, "destinationPath": b})).await;
    assert_eq!(err["data"], json!({"kind": "notFound", "path": a}));
    let onto_missing_dir = p(&dir.join("no-dir/b"));
    let err =
        h.error("fs/rename", json!({"sourcePath": b, "destinationPath": onto_missing_dir})).await;
    assert_eq!(
        err,
        json!({"code": -32603, "message": format!("cannot rename {b} to {onto_missing_dir}: {onto_missing_dir}: No such file or directory (os error 2)"), "data": {"kind": "notFound", "path": onto_missing_dir}})
    );
}

#[tokio::test]
async fn roots_confine_paths_and_cwds() {
    let dir = scratch("fs-roots");
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("work")).unwrap();
    std::fs::create_dir_all(dir.join("secret")).unwrap();
    std::fs::write(dir.join("secret/key"), b"k").unwrap();
    symlink(dir.join("secret"), root.join("escape")).unwrap();
    let config = Config { roots: vec![root.clone()], ..Config::default() };
    let mut h = Harness::ready_with(config).await;
    let outside = |path: &str| json!({"code": -32600, "message": format!("path {path} is outside the allowed roots")});
    let through_link = p(&root.join("escape/key"));
    assert_eq!(h.error("fs/readFile", json!({"path": through_link})).await, outside(&through_link));
    let dotdot = format!("{}/work/../../secret/key", p(&root));
    assert_eq!(h.error("fs/readFile", json!({"path": dotdot})).await, outside(&dotdot));
    let secret_dir = p(&dir.join("secret"));
    assert_eq!(
        h.error("fs/readDirectory", json!({"path": secret_dir})).await,
        outside(&secret_dir)
    );
    assert_eq!(
        h.error(
            "process/start",
            crate::support::start_params("p", &["true"], json!({"cwd": secret_dir}))
        )
        .await,
        outside(&secret_dir)
    );
    let inside = p(&root.join("work/f"));
    h.result("fs/writeFile", json!({"path": inside, "dataBase64": b64(b"ok")})).await;
    assert_eq!(unb64(&h.result("fs/readFile", json!({"path": inside})).await["dataBase64"]), b"ok");
    h.start_with("p", &["pwd"], json!({"cwd": p(&root.join("work"))})).await;
    assert_eq!(h.output_and_exit("p").await.0, format!("{}\n", p(&root.join("work"))).into_bytes());
    // The link itself can be removed: that does not touch what it points to.
    h.result("fs/remove", json!({"path": p(&root.join("escape"))})).await;
    assert_eq!(std::fs::read(dir.join("secret/key")).unwrap(), b"k");
}

#[tokio::test]
async fn a_file_moves_in_pieces_with_ranges_and_append() {
    let dir = scratch("fs-pieces");
    let source: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("source"), &source).unwrap();
    let mut h = Harness::ready().await;
    let (src, dst) = (p(&dir.join("source")), p(&dir.join("copy")));
    h.result("fs/writeFile", json!({"path": dst, "dataBase64": ""})).await;
    let piece = 1_000_000u64;
    let mut offset = 0u64;
    loop {
        let read: Value =
            h.result("fs/readFile", json!({"path": src, "offset": offset, "length": piece})).await;
        let bytes = unb64(&read["dataBase64"]);
        if bytes.is_empty() {
            break;
        }
        h.result(
            "fs/writeFile",
            json!({"path": dst, "dataBase64": read["dataBase64"], "append": true}),
        )
        .await;
        offset += bytes.len() as u64;
    }
    assert_eq!(offset, source.len() as u64);
    assert_eq!(std::fs::read(dir.join("copy")).unwrap(), source);
}
