//! fs on regular files only, no data loss (same-file refusals, atomic writes), links as Part A, and names that are not UTF-8.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::json;

use crate::support::{b64, scratch, unb64, Harness};

fn p(path: &Path) -> String {
    path.to_str().unwrap().to_owned()
}

fn invalid(message: String, path: &str) -> serde_json::Value {
    json!({"code": -32600, "message": message, "data": {"kind": "invalidInput", "path": path}})
}

#[tokio::test]
async fn copy_and_rename_onto_the_same_file_are_refused() {
    let dir = scratch("fs-same-file");
    std::fs::write(dir.join("f"), b"precious").unwrap();
    std::fs::hard_link(dir.join("f"), dir.join("hard")).unwrap();
    let mut h = Harness::ready().await;
    let source = p(&dir.join("f"));
    let aliases = [source.clone(), format!("{}/./f", p(&dir)), p(&dir.join("hard"))];
    for alias in aliases {
        for (method, verb) in [("fs/copy", "copy"), ("fs/rename", "rename")] {
            let params = json!({"sourcePath": source, "destinationPath": alias});
            assert_eq!(
                h.error(method, params).await,
                invalid(
                    format!("cannot {verb} {source} to {alias}: they are the same file"),
                    &alias
                ),
                "{method} onto {alias}"
            );
            assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"precious");
            assert_eq!(std::fs::read(dir.join("hard")).unwrap(), b"precious");
        }
    }
}

#[tokio::test]
async fn special_files_are_refused_at_once() {
    let dir = scratch("fs-special");
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let socket = dir.join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut h = Harness::ready().await;
    let cases = [
        (p(&fifo), "a FIFO"),
        (p(&socket), "a socket"),
        ("/dev/zero".to_owned(), "a character device"),
        ("/dev/ptmx".to_owned(), "a character device"),
    ];
    for (path, kind) in cases {
        let message = |verb| format!("cannot {verb} {path}: it is {kind}, not a regular file");
        assert_eq!(
            h.error("fs/readFile", json!({"path": path, "length": 536870912u64})).await,
            invalid(message("read"), &path)
        );
        assert_eq!(
            h.error("fs/writeFile", json!({"path": path, "dataBase64": b64(b"x")})).await,
            invalid(message("write"), &path)
        );
        assert_eq!(
            h.error("fs/writeFile", json!({"path": path, "dataBase64": b64(b"x"), "append": true}))
                .await,
            invalid(message("write"), &path)
        );
    }
}

/// The real binary, its stdin and stdout pipes and its stderr a regular file:
/// no path leads an fs call to them.
#[tokio::test]
async fn the_servers_own_stdio_is_out_of_reach() {
    let dir = scratch("fs-stdio");
    let stderr = std::fs::File::create(dir.join("stderr")).unwrap();
    let mut server = crate::binary::Binary::spawn_with_stderr(&[], stderr.into());
    server.result("initialize", json!({"clientName": "stdio"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    for (path, kind) in
        [("/dev/stdin", "a FIFO"), ("/dev/stdout", "a FIFO"), ("/proc/self/fd/1", "a FIFO")]
    {
        let response = server.call("fs/readFile", json!({"path": path})).await;
        let message = format!("cannot read {path}: it is {kind}, not a regular file");
        assert_eq!(response["error"], invalid(message, path));
        let response =
            server.call("fs/writeFile", json!({"path": path, "dataBase64": b64(b"{}\n")})).await;
        let message = format!("cannot write {path}: it is {kind}, not a regular file");
        assert_eq!(response["error"], invalid(message, path));
    }
    for path in ["/dev/stderr", "/proc/self/fd/2"] {
        let response = server.call("fs/readFile", json!({"path": path})).await;
        let message = format!("cannot read {path}: it is the server's standard error");
        assert_eq!(response["error"], invalid(message, path));
        let params = json!({"path": path, "dataBase64": b64(b"injected"), "append": true});
        let message = format!("cannot write {path}: it is the server's standard error");
        assert_eq!(server.call("fs/writeFile", params).await["error"], invalid(message, path));
    }
    assert!(!std::fs::read(dir.join("stderr")).unwrap().windows(8).any(|w| w == b"injected"));
}

#[tokio::test]
async fn ranges_of_pseudo_files_are_read_by_skipping() {
    let mut h = Harness::ready().await;
    let range = h
        .result("fs/readFile", json!({"path": "/proc/self/status", "offset": 10, "length": 20}))
        .await;
    let status = std::fs::read("/proc/self/status").unwrap();
    // The first lines (Name, Umask, State) are the same for the test's own read.
    assert_eq!(unb64(&range["dataBase64"]), status[10..30].to_vec());
    let past =
        h.error("fs/readFile", json!({"path": "/proc/self/status", "offset": 1 << 30})).await;
    assert_eq!(past["data"]["kind"], "invalidInput");
}

#[tokio::test]
async fn writes_replace_atomically_and_keep_links_and_modes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("fs-atomic");
    std::fs::write(dir.join("target"), b"old").unwrap();
    std::fs::set_permissions(dir.join("target"), std::fs::Permissions::from_mode(0o640)).unwrap();
    symlink("target", dir.join("link")).unwrap();
    let before = std::fs::metadata(dir.join("target")).unwrap();
    let mut h = Harness::ready().await;
    h.result("fs/writeFile", json!({"path": p(&dir.join("link")), "dataBase64": b64(b"new")}))
        .await;
    assert_eq!(std::fs::read_link(dir.join("link")).unwrap(), Path::new("target"));
    assert_eq!(std::fs::read(dir.join("target")).unwrap(), b"new");
    let after = std::fs::metadata(dir.join("target")).unwrap();
    assert_eq!(after.permissions().mode() & 0o7777, 0o640);
    use std::os::unix::fs::MetadataExt;
    assert_ne!(after.ino(), before.ino(), "the file was replaced, not rewritten");
    let listing: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(listing.len(), 2, "no temporary file is left: {listing:?}");
    // followSymlinks false refuses the link.
    let link = p(&dir.join("link"));
    assert_eq!(
        h.error("fs/writeFile", json!({"path": link, "dataBase64": "", "followSymlinks": false}))
            .await,
        invalid(format!("cannot write {link}: it is a symlink and followSymlinks is false"), &link)
    );
    // Append works in place.
    h.result("fs/writeFile", json!({"path": link, "dataBase64": b64(b"!"), "append": true})).await;
    assert_eq!(std::fs::read(dir.join("target")).unwrap(), b"new!");
    assert_eq!(std::fs::metadata(dir.join("target")).unwrap().ino(), after.ino());
}

/// A writer that dies mid-write (SIGXFSZ at the file size limit) or fails
/// mid-write (the same limit with the signal ignored, as a full disk) leaves
/// the old content. The limit applies to a child shell that execs the binary.
#[tokio::test]
async fn a_write_cut_short_leaves_the_old_content() {
    let dir = scratch("fs-atomic-fail");
    let target = dir.join("target");
    let data = b64(&vec![b'x'; 1 << 20]);
    let request = json!({"id": 3, "method": "fs/writeFile", "params": {"path": p(&target), "dataBase64": data}});
    let input = format!(
        "{}\n{}\n{request}\n",
        json!({"id": 1, "method": "initialize", "params": {"clientName": "fsize"}}),
        json!({"method": "initialized"})
    );
    std::fs::write(dir.join("input"), input).unwrap();
    for (setup, killed) in [("", true), ("trap '' XFSZ;", false)] {
        std::fs::write(&target, b"old content").unwrap();
        let script = format!("{setup} ulimit -f 64; exec {} < \"$1\"", *crate::binary::BIN);
        let output = std::process::Command::new("sh")
            .args(["-c", &script, "sh", &p(&dir.join("input"))])
            .output()
            .unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        use std::os::unix::process::ExitStatusExt;
        if killed {
            assert_eq!(output.status.signal(), Some(libc::SIGXFSZ), "{stdout}");
            assert_eq!(stdout.lines().count(), 1, "{stdout}");
        } else {
            let reply: serde_json::Value =
                serde_json::from_str(stdout.lines().nth(1).unwrap()).unwrap();
            assert_eq!(reply["id"], 3);
            assert_eq!(
                reply["error"],
                json!({"code": -32603, "message": format!("cannot write {}: File too large (os error 27)", p(&target)), "data": {"kind": "other", "path": p(&target)}})
            );
            let names = std::fs::read_dir(&dir).unwrap().count();
            assert_eq!(names, 2 + 1, "target, input and the temporary file of the killed run");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old content");
    }
}

#[tokio::test]
async fn metadata_follows_links_unless_told_not_to() {
    let dir = scratch("fs-links");
    symlink(dir.join("missing"), dir.join("dangling")).unwrap();
    std::fs::write(dir.join("f"), b"12345").unwrap();
    symlink("f", dir.join("link")).unwrap();
    let mut h = Harness::ready().await;
    let dangling = p(&dir.join("dangling"));
    assert_eq!(
        h.error("fs/getMetadata", json!({"path": dangling})).await,
        json!({"code": -32603, "message": format!("cannot stat {dangling}: No such file or directory (os error 2)"), "data": {"kind": "notFound", "path": dangling}})
    );
    let own = h.result("fs/getMetadata", json!({"path": dangling, "followSymlinks": false})).await;
    assert_eq!((own["isSymlink"].clone(), own["isFile"].clone()), (json!(true), json!(false)));
    assert_eq!(own["size"], dir.join("missing").as_os_str().len());
    let link = p(&dir.join("link"));
    let own = h.result("fs/getMetadata", json!({"path": link, "followSymlinks": false})).await;
    assert_eq!((own["isSymlink"].clone(), own["size"].clone()), (json!(true), json!(1)));
    assert_eq!(
        h.error("fs/readFile", json!({"path": link, "followSymlinks": false})).await,
        invalid(format!("cannot read {link}: it is a symlink, not a regular file"), &link)
    );
    // fs/remove with followSymlinks removes the target and keeps the link.
    h.result("fs/remove", json!({"path": link, "followSymlinks": true})).await;
    assert!(!dir.join("f").exists());
    assert!(std::fs::symlink_metadata(dir.join("link")).is_ok());
}

#[tokio::test]
async fn names_that_are_not_utf8_stay_addressable() {
    let dir = scratch("fs-names");
    let raw = [dir.as_os_str().as_bytes(), b"/caf\xe9"].concat();
    let name = std::ffi::OsStr::from_bytes(&raw);
    std::fs::write(name, b"latin-1").unwrap();
    let mut h = Harness::ready().await;
    let listing = h.result("fs/readDirectory", json!({"path": p(&dir)})).await;
    assert_eq!(
        listing,
        json!({"entries": [{"fileName": "caf\u{fffd}", "isDirectory": false, "isFile": true, "fileNameBase64": b64(b"caf\xe9")}]})
    );
    let read = h.result("fs/readFile", json!({"pathBase64": b64(&raw)})).await;
    assert_eq!(unb64(&read["dataBase64"]), b"latin-1");
    let renamed = [dir.as_os_str().as_bytes(), b"/d\xe9j\xe0"].concat();
    h.result(
        "fs/rename",
        json!({"sourcePathBase64": b64(&raw), "destinationPathBase64": b64(&renamed)}),
    )
    .await;
    h.result("fs/remove", json!({"pathBase64": b64(&renamed), "force": false})).await;
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    assert_eq!(
        h.error("fs/readFile", json!({"path": p(&dir), "pathBase64": b64(&raw)})).await,
        json!({"code": -32602, "message": "invalid params for fs/readFile: give either `path` or `pathBase64`, not both"})
    );
    assert_eq!(
        h.error("fs/copy", json!({"sourcePath": p(&dir)})).await,
        json!({"code": -32602, "message": "invalid params for fs/copy: missing field `destinationPath` (or `destinationPathBase64`)"})
    );
}
