//! FIFOs and `fs/open` handles in today's dialect (DIALECT-GAPS §3): upstream's
//! texts and limits; exec-server.v0 connections keep this server's own.

use std::path::Path;

use serde_json::{json, Value};

use crate::support::{scratch, Harness};

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
}

/// The `(code, message)` of an error reply.
async fn refused(h: &mut Harness, method: &str, params: Value) -> (i64, String) {
    let error = h.error(method, params).await;
    (error["code"].as_i64().unwrap(), error["message"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn fifos_and_directories_are_not_files_and_nothing_waits_for_a_writer() {
    let dir = scratch("today-fifo");
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let mut h = Harness::ready().await;
    let not_a_file = (-32600, format!("path `{}` is not a file", fifo.display()));
    let read = json!({"path": uri(&fifo)});
    assert_eq!(refused(&mut h, "fs/readFile", read).await, not_a_file);
    let open = json!({"handleId": "f", "path": uri(&fifo)});
    assert_eq!(refused(&mut h, "fs/open", open).await, not_a_file);
    let no_follow = json!({"path": uri(&fifo), "followSymlinks": false});
    assert_eq!(
        refused(&mut h, "fs/readFile", no_follow).await,
        (-32600, "path is not a regular file".to_owned())
    );
    let directory = json!({"path": uri(&dir)});
    assert_eq!(
        refused(&mut h, "fs/readFile", directory).await,
        (-32600, format!("path `{}` is not a file", dir.display()))
    );
    // exec-server.v0 keeps its own words (and a directory its I/O error).
    let v0 = json!({"path": fifo});
    assert_eq!(
        refused(&mut h, "fs/readFile", v0).await,
        (-32600, format!("cannot read {}: it is a FIFO, not a regular file", fifo.display()))
    );
    assert_eq!(
        refused(&mut h, "fs/readFile", json!({"path": dir})).await,
        (-32603, format!("cannot read {}: Is a directory (os error 21)", dir.display()))
    );
}

#[tokio::test]
async fn at_most_128_handles_per_connection_and_close_frees_one() {
    let dir = scratch("today-handles");
    let file = dir.join("f");
    std::fs::write(&file, "x").unwrap();
    let mut h = Harness::ready().await;
    for n in 0..128 {
        let open = json!({"handleId": format!("h{n}"), "path": uri(&file)});
        assert_eq!(h.result("fs/open", open).await, json!({"handleId": format!("h{n}")}));
    }
    let open = json!({"handleId": "one-more", "path": uri(&file)});
    assert_eq!(
        refused(&mut h, "fs/open", open.clone()).await,
        (-32600, "at most 128 file reads may be open per connection".to_owned())
    );
    assert_eq!(h.result("fs/close", json!({"handleId": "h7"})).await, json!({}));
    assert_eq!(h.result("fs/open", open).await, json!({"handleId": "one-more"}));
}

#[tokio::test]
async fn handle_ids_and_lengths_are_refused_in_upstreams_words() {
    let dir = scratch("today-handle-ids");
    let file = dir.join("f");
    std::fs::write(&file, "x").unwrap();
    let mut h = Harness::ready().await;
    let long = "a".repeat(33);
    let too_long = (-32600, "file read handle ID must not exceed 32 bytes".to_owned());
    let open = json!({"handleId": long, "path": uri(&file)});
    assert_eq!(refused(&mut h, "fs/open", open).await, too_long);
    let read = json!({"handleId": long, "offset": 0, "len": 1});
    assert_eq!(refused(&mut h, "fs/readBlock", read).await, too_long);
    assert_eq!(refused(&mut h, "fs/close", json!({"handleId": long})).await, too_long);
    let exact = "b".repeat(32);
    let open = json!({"handleId": exact, "path": uri(&file)});
    assert_eq!(h.result("fs/open", open.clone()).await, json!({"handleId": exact}));
    assert_eq!(
        refused(&mut h, "fs/open", open).await,
        (-32600, format!("file read handle `{exact}` already exists"))
    );
    let read = json!({"handleId": "nope", "offset": 0, "len": 1});
    assert_eq!(
        refused(&mut h, "fs/readBlock", read).await,
        (-32004, "unknown file read handle `nope`".to_owned())
    );
    let read = json!({"handleId": exact, "offset": 0, "len": 1048577});
    assert_eq!(
        refused(&mut h, "fs/readBlock", read).await,
        (-32600, "file read block length must be between 1 and 1048576".to_owned())
    );
    assert_eq!(
        refused(&mut h, "fs/close", json!({"handleId": "nope"})).await,
        (-32004, "unknown file read handle `nope`".to_owned())
    );
}

#[tokio::test]
async fn a_v0_connection_keeps_its_own_handle_words() {
    let dir = scratch("v0-handle-ids");
    let file = dir.join("f");
    std::fs::write(&file, "x").unwrap();
    let mut h = Harness::ready().await;
    let long = "a".repeat(33);
    let open = json!({"handleId": long, "path": file});
    assert_eq!(
        refused(&mut h, "fs/open", open).await,
        (-32602, format!("handleId must be 1 to 32 bytes; \"{long}\" is 33"))
    );
    let read = json!({"handleId": long, "offset": 0, "len": 1});
    assert_eq!(
        refused(&mut h, "fs/readBlock", read).await,
        (-32600, format!("unknown file handle \"{long}\""))
    );
}
