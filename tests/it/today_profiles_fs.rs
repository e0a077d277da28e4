//! fs methods under today's `restricted` permission profiles (DIALECT-GAPS
//! §1.2): what upstream's tests expect to succeed does, and every escape is
//! refused with a code and phrase upstream's client accepts ("Permission
//! denied" with -32600, "Read-only file system", or -32004), with the files
//! outside unchanged.

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::{b64, scratch, snapshot, unb64, Harness};

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A context whose entries are `(path, access)`.
fn paths(entries: &[(&Path, &str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(
            |(path, access)| json!({"path": {"type": "path", "path": uri(path)}, "access": access}),
        )
        .collect();
    json!({"permissions": {"type": "managed", "network": "restricted",
        "file_system": {"type": "restricted", "entries": entries}},
        "windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": false, "useLegacyLandlock": false})
}

/// `allowed/` (read), `w/` (write), `outside/`, and links out of both.
struct Layout {
    dir: PathBuf,
    allowed: PathBuf,
    w: PathBuf,
    outside: PathBuf,
}

fn layout(name: &str) -> Layout {
    let dir = scratch(name);
    let (allowed, w, outside) = (dir.join("allowed"), dir.join("w"), dir.join("outside"));
    for d in [&allowed, &w, &outside, &allowed.join("sub")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(allowed.join("file.txt"), "ok").unwrap();
    std::fs::write(allowed.join("sub/inner.txt"), "inner").unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::fs::write(outside.join("hard.txt"), "old").unwrap();
    symlink(outside.join("secret.txt"), allowed.join("link")).unwrap();
    symlink(&outside, allowed.join("dir-link")).unwrap();
    symlink(allowed.join("sub"), allowed.join("sub-link")).unwrap();
    symlink(outside.join("secret.txt"), w.join("out-link")).unwrap();
    symlink(&outside, w.join("dir-link")).unwrap();
    std::fs::hard_link(outside.join("hard.txt"), w.join("hard")).unwrap();
    Layout { dir, allowed, w, outside }
}

/// Asserts an error upstream's `assert_sandbox_denied` accepts, exactly.
fn denied(error: &Value, code: i64, message: String) {
    assert_eq!(
        (error["code"].as_i64(), error["message"].as_str()),
        (Some(code), Some(message.as_str()))
    );
}

#[tokio::test]
async fn a_read_root_reads_and_nothing_else() {
    let l = layout("today-profile-read");
    let before = snapshot(&l.dir);
    let sandbox = paths(&[(&l.allowed, "read")]);
    let mut h = Harness::ready().await;
    let call = |path: &Path| json!({"path": uri(path), "sandbox": sandbox.clone()});
    let read = h.result("fs/readFile", call(&l.allowed.join("file.txt"))).await;
    assert_eq!(unb64(&read["dataBase64"]), b"ok");
    let meta = h.result("fs/getMetadata", call(&l.allowed.join("file.txt"))).await;
    assert_eq!(meta["isFile"], true);
    let canonical = h.result("fs/canonicalize", call(&l.allowed.join("sub-link/inner.txt"))).await;
    assert_eq!(canonical["path"], uri(&l.allowed.join("sub/inner.txt")));
    let open = json!({"handleId": "h", "path": uri(&l.allowed.join("file.txt")), "sandbox": sandbox.clone()});
    h.result("fs/open", open).await;
    let block = h.result("fs/readBlock", json!({"handleId": "h", "offset": 0, "len": 10})).await;
    assert_eq!((unb64(&block["chunk"]), &block["eof"]), (b"ok".to_vec(), &json!(true)));
    let walked =
        h.result("fs/walk", json!({"path": uri(&l.allowed), "sandbox": sandbox.clone()})).await;
    assert!(walked["entries"].as_array().is_some_and(|e| !e.is_empty()), "{walked}");

    let link = l.allowed.join("link");
    let error = h.error("fs/readFile", call(&link)).await;
    denied(
        &error,
        -32600,
        format!(
            "cannot read {}: Permission denied: the sandbox keeps this call from it",
            link.display()
        ),
    );
    let through = l.allowed.join("dir-link");
    let error = h.error("fs/readDirectory", call(&through)).await;
    assert_eq!(error["code"], -32600, "{error}");
    assert!(error["message"].as_str().unwrap().contains("Permission denied"), "{error}");
    let secret = l.outside.join("secret.txt");
    let error = h.error("fs/readFile", call(&secret)).await;
    denied(
        &error,
        -32600,
        format!(
            "cannot read {}: Permission denied: the sandbox keeps this call from it",
            secret.display()
        ),
    );
    // The loop's cached answer to getMetadata is not taken under a sandbox.
    let error = h.error("fs/getMetadata", call(&secret)).await;
    assert_eq!(error["code"], -32600, "{error}");
    let missing = l.allowed.join("missing");
    let error = h.error("fs/readFile", call(&missing)).await;
    assert_eq!(error["code"], -32004, "{error}");
    let new = l.allowed.join("new");
    let write = json!({"path": uri(&new), "dataBase64": b64(b"x"), "sandbox": sandbox.clone()});
    let error = h.error("fs/writeFile", write).await;
    denied(
        &error,
        -32603,
        format!(
            "cannot write {}: Read-only file system: the sandbox lets this call only read it",
            new.display()
        ),
    );
    assert_eq!(snapshot(&l.dir), before, "nothing changed");
}

#[tokio::test]
async fn a_write_root_writes_and_its_links_lead_nowhere() {
    let l = layout("today-profile-write");
    let before_outside = snapshot(&l.outside);
    let sandbox = paths(&[(&l.w, "write")]);
    let mut h = Harness::ready().await;
    let with = |mut params: Value| {
        params["sandbox"] = sandbox.clone();
        params
    };
    let f = l.w.join("f");
    h.result("fs/writeFile", with(json!({"path": uri(&f), "dataBase64": b64(b"x")}))).await;
    let nested = l.w.join("a/b");
    h.result("fs/createDirectory", with(json!({"path": uri(&nested), "recursive": true}))).await;
    h.result("fs/remove", with(json!({"path": uri(&f)}))).await;
    // A link pointing outside is removed itself, and copied as a link.
    let copy = json!({"sourcePath": uri(&l.w.join("out-link")), "destinationPath": uri(&l.w.join("copied-link"))});
    h.result("fs/copy", with(copy)).await;
    assert_eq!(std::fs::read_link(l.w.join("copied-link")).unwrap(), l.outside.join("secret.txt"));
    h.result("fs/remove", with(json!({"path": uri(&l.w.join("out-link"))}))).await;
    assert!(!l.w.join("out-link").exists());
    // A hard link keeps its inode: both names read the new bytes.
    let ino = std::fs::metadata(l.w.join("hard")).unwrap().ino();
    h.result(
        "fs/writeFile",
        with(json!({"path": uri(&l.w.join("hard")), "dataBase64": b64(b"new")})),
    )
    .await;
    assert_eq!(std::fs::read_to_string(l.outside.join("hard.txt")).unwrap(), "new");
    assert_eq!(std::fs::metadata(l.w.join("hard")).unwrap().ino(), ino);
    std::fs::write(l.outside.join("hard.txt"), "old").unwrap();

    let through = l.w.join("copied-link");
    let error = h
        .error("fs/writeFile", with(json!({"path": uri(&through), "dataBase64": b64(b"x")})))
        .await;
    denied(
        &error,
        -32600,
        format!(
            "cannot write {}: Permission denied: the sandbox keeps this call from it",
            through.display()
        ),
    );
    let inside_link = l.w.join("dir-link/made");
    let error = h
        .error("fs/createDirectory", with(json!({"path": uri(&inside_link), "recursive": true})))
        .await;
    assert_eq!(error["code"], -32600, "{error}");
    let copy_out = json!({"sourcePath": uri(&nested), "destinationPath": uri(&l.w.join("dir-link/copy")), "recursive": true});
    let error = h.error("fs/copy", with(copy_out)).await;
    assert_eq!(error["code"], -32600, "{error}");
    let outside_new = l.outside.join("new");
    let error = h
        .error("fs/writeFile", with(json!({"path": uri(&outside_new), "dataBase64": b64(b"x")})))
        .await;
    assert_eq!(error["code"], -32600, "{error}");
    let mut after = snapshot(&l.outside);
    after.retain(|path, _| path != &l.outside.join("hard.txt"));
    let mut expected = before_outside;
    expected.retain(|path, _| path != &l.outside.join("hard.txt"));
    assert_eq!(after, expected, "nothing outside changed");
}

#[tokio::test]
async fn project_roots_come_from_workspace_roots_only() {
    let dir = scratch("today-profile-project");
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
    std::fs::write(dir.join("workspace/x"), "inside").unwrap();
    std::fs::write(dir.join("y"), "beside").unwrap();
    let mut h = Harness::ready().await;
    let project =
        json!({"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "read"});
    let context = |workspace: Option<&Path>, cwd: bool| {
        let mut c = json!({"permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "restricted", "entries": [project.clone()]}}});
        if cwd {
            c["cwd"] = json!(uri(&dir));
        }
        if let Some(w) = workspace {
            c["workspaceRoots"] = json!([uri(w)]);
        }
        c
    };
    let read = |path: PathBuf, sandbox: Value| json!({"path": uri(&path), "sandbox": sandbox});
    let inside = read(dir.join("workspace/x"), context(Some(&dir.join("workspace")), true));
    assert_eq!(unb64(&h.result("fs/readFile", inside).await["dataBase64"]), b"inside");
    let beside = read(dir.join("y"), context(Some(&dir.join("workspace")), true));
    assert_eq!(h.error("fs/readFile", beside).await["code"], -32600);
    let no_roots = read(dir.join("workspace/x"), context(None, true));
    assert_eq!(h.error("fs/readFile", no_roots).await["code"], -32600);
    let no_cwd = read(dir.join("workspace/x"), context(Some(&dir.join("workspace")), false));
    let error = h.error("fs/readFile", no_cwd).await;
    denied(
        &error,
        -32600,
        "file system sandbox context with dynamic permissions requires cwd".into(),
    );
}

#[tokio::test]
async fn denied_paths_and_carve_outs_hold_for_fs_calls() {
    let l = layout("today-profile-deny");
    std::fs::create_dir_all(l.allowed.join("private")).unwrap();
    std::fs::write(l.allowed.join("private/p"), "private").unwrap();
    std::fs::create_dir_all(l.w.join(".git")).unwrap();
    std::fs::write(l.w.join(".git/config"), "[core]").unwrap();
    let before = snapshot(&l.dir);
    let sandbox =
        paths(&[(&l.allowed, "read"), (&l.allowed.join("private"), "deny"), (&l.w, "write")]);
    let mut h = Harness::ready().await;
    let with = |mut params: Value| {
        params["sandbox"] = sandbox.clone();
        params
    };
    let private = l.allowed.join("private/p");
    let error = h.error("fs/readFile", with(json!({"path": uri(&private)}))).await;
    denied(
        &error,
        -32600,
        format!(
            "cannot read {}: Permission denied: the sandbox keeps this call from it",
            private.display()
        ),
    );
    let copy = json!({"sourcePath": uri(&l.allowed), "destinationPath": uri(&l.w.join("copy")), "recursive": true});
    let error = h.error("fs/copy", with(copy)).await;
    denied(
        &error,
        -32600,
        format!(
        "cannot copy {}: Permission denied: it holds {}, which the sandbox keeps from this call",
        l.allowed.display(),
        l.allowed.join("private").display()
    ),
    );
    let config = l.w.join(".git/config");
    let write = json!({"path": uri(&config), "dataBase64": b64(b"x")});
    let error = h.error("fs/writeFile", with(write)).await;
    denied(
        &error,
        -32603,
        format!(
            "cannot write {}: Read-only file system: the sandbox lets this call only read it",
            config.display()
        ),
    );
    let error = h.error("fs/remove", with(json!({"path": uri(&l.w), "recursive": true}))).await;
    assert_eq!(error["code"], -32600, "{error}");
    let read = h.result("fs/readFile", with(json!({"path": uri(&config)}))).await;
    assert_eq!(unb64(&read["dataBase64"]), b"[core]");
    // An existing directory is taken as made only where the call may read:
    // a denied one or one no entry covers answers as a missing one does.
    let git = json!({"path": uri(&l.w.join(".git")), "recursive": true});
    assert_eq!(h.result("fs/createDirectory", with(git)).await, json!({}));
    for dir in [l.allowed.join("private"), l.outside.clone(), l.outside.join("missing")] {
        let made = json!({"path": uri(&dir), "recursive": true});
        let error = h.error("fs/createDirectory", with(made)).await;
        assert_eq!(error["code"], -32600, "{dir:?}: {error}");
        assert!(error["message"].as_str().unwrap().contains("Permission denied"), "{error}");
    }
    assert_eq!(snapshot(&l.dir), before, "nothing changed");
}

#[tokio::test]
async fn deny_globs_are_matched_on_every_path_an_fs_call_opens() {
    let l = layout("today-profile-globs");
    std::fs::create_dir_all(l.w.join("src/deep")).unwrap();
    std::fs::write(l.w.join("src/deep/prod.env"), "KEY=1").unwrap();
    std::fs::write(l.w.join("src/main.rs"), "fn main() {}").unwrap();
    symlink(l.w.join("src/deep/prod.env"), l.w.join("innocent")).unwrap();
    let mut sandbox = paths(&[(&l.w, "write")]);
    let glob = json!({"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"});
    sandbox["permissions"]["file_system"]["entries"].as_array_mut().unwrap().push(glob);
    sandbox["cwd"] = json!(uri(&l.w));
    let mut h = Harness::ready().await;
    let with = |mut params: Value| {
        params["sandbox"] = sandbox.clone();
        params
    };
    let main = h.result("fs/readFile", with(json!({"path": uri(&l.w.join("src/main.rs"))}))).await;
    assert_eq!(unb64(&main["dataBase64"]), b"fn main() {}");
    for path in [l.w.join("src/deep/prod.env"), l.w.join("innocent")] {
        let error = h.error("fs/readFile", with(json!({"path": uri(&path)}))).await;
        denied(
            &error,
            -32600,
            format!(
                "cannot read {}: Permission denied: the sandbox keeps this call from it",
                path.display()
            ),
        );
    }
    let new = l.w.join("src/new.env");
    let error =
        h.error("fs/writeFile", with(json!({"path": uri(&new), "dataBase64": b64(b"x")}))).await;
    assert_eq!(error["code"], -32600, "{error}");
    assert!(!new.exists());
    let copy = json!({"sourcePath": uri(&l.w.join("src")), "destinationPath": uri(&l.w.join("copy")), "recursive": true});
    let error = h.error("fs/copy", with(copy)).await;
    denied(
        &error,
        -32600,
        format!(
        "cannot copy {}: Permission denied: it holds {}, which the sandbox keeps from this call",
        l.w.join("src").display(),
        l.w.join("src/deep/prod.env").display()
    ),
    );
    assert_eq!(std::fs::read_to_string(l.w.join("src/deep/prod.env")).unwrap(), "KEY=1");
}

#[tokio::test]
async fn trees_are_not_copied_over_or_moved_past_what_the_list_denies() {
    let l = layout("today-profile-trees");
    std::fs::create_dir_all(l.w.join(".git")).unwrap();
    std::fs::write(l.w.join(".git/config"), "[core]").unwrap();
    std::fs::create_dir_all(l.w.join("sub/secret")).unwrap();
    std::fs::write(l.w.join("sub/secret/s"), "s").unwrap();
    let src = l.dir.join("src");
    std::fs::create_dir_all(src.join(".git")).unwrap();
    std::fs::write(src.join(".git/config"), "overwritten").unwrap();
    let before = snapshot(&l.w);
    let sandbox = paths(&[(&src, "read"), (&l.w, "write"), (&l.w.join("sub/secret"), "deny")]);
    let mut h = Harness::ready().await;
    let with = |mut params: Value| {
        params["sandbox"] = sandbox.clone();
        params
    };
    // A copy merged into the writable root may not land in its read-only .git.
    let copy = json!({"sourcePath": uri(&src), "destinationPath": uri(&l.w), "recursive": true});
    let error = h.error("fs/copy", with(copy)).await;
    let git = l.w.join(".git");
    denied(
        &error,
        -32603,
        format!(
            "cannot copy {}: Read-only file system: the sandbox lets this call only read it",
            git.display()
        ),
    );
    // A rename may not carry a denied directory to a name the list allows.
    let rename =
        json!({"sourcePath": uri(&l.w.join("sub")), "destinationPath": uri(&l.w.join("moved"))});
    let error = h.error("fs/rename", with(rename)).await;
    denied(
        &error,
        -32600,
        format!(
        "cannot rename {}: Permission denied: it holds {}, which the sandbox keeps from this call",
        l.w.join("sub").display(),
        l.w.join("sub/secret").display()
    ),
    );
    assert_eq!(snapshot(&l.w), before, "nothing changed");
}

#[tokio::test]
async fn a_watch_under_an_access_list_is_refused_not_left_unconfined() {
    let l = layout("today-profile-watch");
    let mut h = Harness::ready().await;
    let context = paths(&[(&l.allowed, "read")]);
    let error = h.error("fs/watch", json!({"path": uri(&l.allowed), "sandbox": context})).await;
    assert_eq!(error["code"], -32602, "{error}");
    let part_b = json!({"mode": "restricted", "access": [{"path": l.allowed, "access": "read"}]});
    let error = h.error("fs/watch", json!({"path": l.allowed, "sandbox": part_b})).await;
    denied(
        &error,
        -32602,
        format!(
            "cannot watch {}: a sandbox access list cannot confine a watch; give readableRoots",
            l.allowed.display()
        ),
    );
}

#[tokio::test]
async fn deny_globs_hold_through_a_linked_cwd_and_for_names_that_are_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let l = layout("today-profile-globs-linked");
    let raw = l.w.join(std::ffi::OsStr::from_bytes(b"s\xffcret.env"));
    std::fs::write(&raw, "KEY=1").unwrap();
    std::fs::write(l.w.join("plain.env"), "KEY=2").unwrap();
    let linked = l.dir.join("w-link");
    symlink(&l.w, &linked).unwrap();
    let mut sandbox = paths(&[(&l.w, "write")]);
    let glob = json!({"path": {"type": "glob_pattern", "pattern": "*.env"}, "access": "deny"});
    sandbox["permissions"]["file_system"]["entries"].as_array_mut().unwrap().push(glob);
    // The cwd, which the relative glob is taken from, is given through a link.
    sandbox["cwd"] = json!(uri(&linked));
    let mut h = Harness::ready().await;
    let raw_uri = format!("file://{}/s%FFcret.env", l.w.display());
    for (path, shown) in
        [(uri(&l.w.join("plain.env")), l.w.join("plain.env")), (raw_uri, raw.clone())]
    {
        let error = h.error("fs/readFile", json!({"path": path, "sandbox": sandbox.clone()})).await;
        denied(
            &error,
            -32600,
            format!(
                "cannot read {}: Permission denied: the sandbox keeps this call from it",
                shown.display()
            ),
        );
    }
    assert_eq!(std::fs::read(&raw).unwrap(), b"KEY=1");
}

#[tokio::test]
async fn a_sandbox_that_would_be_ignored_is_refused_instead() {
    let l = layout("today-profile-shapes");
    let target = l.outside.join("secret.txt");
    let mut h = Harness::ready().await;
    let cases = [
        (json!("readOnly"), "sandbox must be an object".to_owned()),
        (
            json!({"mode": "none", "permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": []}}}),
            "sandbox holds both `mode` (a v0 sandbox) and `permissions` (a sandbox context); send one".to_owned(),
        ),
        (
            json!({"mode": "restricted", "writableRoots": []}),
            "sandbox {\"mode\": \"restricted\"} cannot confine fs/writeFile (only process/start and fs/watch take one); confine it with a sandbox context (`permissions`)".to_owned(),
        ),
    ];
    for (sandbox, problem) in cases {
        let params = json!({"path": uri(&target), "dataBase64": b64(b"pwned"), "sandbox": sandbox});
        let error = h.error("fs/writeFile", params).await;
        denied(&error, -32602, format!("invalid params for fs/writeFile: {problem}"));
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "secret");
    let read =
        h.result("fs/readFile", json!({"path": uri(&target), "sandbox": {"mode": "none"}})).await;
    assert_eq!(unb64(&read["dataBase64"]), b"secret");
}

#[tokio::test]
async fn the_cwds_codex_is_read_only_even_before_it_exists() {
    let l = layout("today-profile-codex");
    let mut sandbox = paths(&[(&l.w, "write")]);
    sandbox["cwd"] = json!(uri(&l.w));
    let mut h = Harness::ready().await;
    let config = l.w.join(".codex/config.toml");
    let made = json!({"path": uri(&l.w.join(".codex")), "sandbox": sandbox.clone()});
    let error = h.error("fs/createDirectory", made).await;
    denied(
        &error,
        -32603,
        format!(
            "cannot create directory {}: Read-only file system: the sandbox lets this call only read it",
            l.w.join(".codex").display()
        ),
    );
    let write = json!({"path": uri(&config), "dataBase64": b64(b"x"), "sandbox": sandbox});
    // Its parent is missing: refused as upstream's client accepts.
    let error = h.error("fs/writeFile", write).await;
    assert_eq!(error["code"], -32004, "{error}");
    assert!(!l.w.join(".codex").exists(), "an fs call makes nothing to keep read-only");
}

#[tokio::test]
async fn no_answer_tells_what_exists_where_the_list_does_not_reach() {
    let l = layout("today-profile-oracle");
    std::fs::create_dir_all(l.outside.join("exists")).unwrap();
    std::fs::write(l.outside.join("exists/f"), "f").unwrap();
    std::fs::write(l.w.join("mine"), "mine").unwrap();
    let sandbox = paths(&[(&l.w, "write"), (&l.allowed.join("sub"), "read")]);
    let mut h = Harness::ready().await;
    let mut codes = Vec::new();
    for dir in [l.outside.join("exists"), l.outside.join("missing")] {
        let p = |rel: &str| uri(&if rel.is_empty() { dir.clone() } else { dir.join(rel) });
        let calls = [
            ("fs/getMetadata", json!({"path": p("")})),
            ("fs/readDirectory", json!({"path": p("")})),
            ("fs/walk", json!({"path": p("")})),
            ("fs/canonicalize", json!({"path": p("")})),
            ("fs/readFile", json!({"path": p("f")})),
            ("fs/open", json!({"handleId": "h", "path": p("f")})),
            ("fs/writeFile", json!({"path": p("new"), "dataBase64": b64(b"x")})),
            ("fs/createDirectory", json!({"path": p(""), "recursive": true})),
            ("fs/remove", json!({"path": p(""), "recursive": true})),
            (
                "fs/copy",
                json!({"sourcePath": p(""), "destinationPath": uri(&l.w.join("c")), "recursive": true}),
            ),
            ("fs/rename", json!({"sourcePath": uri(&l.w.join("mine")), "destinationPath": p("r")})),
        ];
        let mut these = Vec::new();
        for (method, mut params) in calls {
            params["sandbox"] = sandbox.clone();
            let error = h.error(method, params).await;
            these.push((method, error["code"].clone()));
        }
        codes.push(these);
    }
    assert_eq!(codes[0], codes[1], "existing, then missing");
    assert!(codes[0].iter().all(|(_, code)| *code == -32600), "{:?}", codes[0]);
    assert_eq!(std::fs::read_to_string(l.w.join("mine")).unwrap(), "mine");
    assert!(!l.outside.join("missing").exists());
}
