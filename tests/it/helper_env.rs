//! Nothing a client sends runs outside the sandbox: a library the client
//! wrote (with `fs/writeFile`, into the root of a `--sandbox --root R`
//! server) and named in `LD_PRELOAD` is loaded by the sandboxed program and by
//! no process of the server's own (the trampoline, exec'd or forked, the
//! cgroup join, slirp4netns), however the start is made.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::binary::Binary;
use crate::sandbox::{run, Tree, User};
use crate::support::{b64, root_or_skip, scratch, wait_dead};

/// A library whose constructor leaves a file named after the process
/// (`comm-pid`) in `$MARK_OUT` (outside the sandbox's reach) and in
/// `$MARK_IN` (the writable root): where it ran, and whether it could write
/// outside.
const MARKER_LIBRARY: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char name[64] = "unknown", path[4096];
    int fd = open("/proc/self/comm", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, name, sizeof name - 1);
        if (n > 0) name[n - 1] = 0;
        close(fd);
    }
    const char *dirs[2] = { getenv("MARK_OUT"), getenv("MARK_IN") };
    for (int i = 0; i < 2; i++) {
        if (!dirs[i]) continue;
        snprintf(path, sizeof path, "%s/%s-%d", dirs[i], name, (int)getpid());
        int out = open(path, O_WRONLY | O_CREAT, 0644);
        if (out >= 0) close(out);
    }
}
"#;

/// The library built by `cc` (the suite needs it; CI installs it).
fn build_library() -> Vec<u8> {
    let dir = scratch("helper-env-lib");
    std::fs::write(dir.join("mark.c"), MARKER_LIBRARY).unwrap();
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("mark.so"))
        .arg(dir.join("mark.c"))
        .status()
        .expect("cc, to build the test's library (Debian package gcc)");
    assert!(status.success(), "cc failed: {status}");
    std::fs::read(dir.join("mark.so")).unwrap()
}

/// The names of the files the library left in `dir`, pids cut off, sorted.
fn marks(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            Some(name.rsplit_once('-')?.0.to_owned())
        })
        .collect();
    names.sort();
    names
}

/// A `--sandbox --root R` server (with `extra` flags) that holds the
/// library at `R/mark.so`, written by the client; its path.
async fn server_with_library(tree: &Tree, library: &[u8], extra: &[&str]) -> (Binary, PathBuf) {
    let root = format!("--root={}", tree.w());
    let mut args = vec!["--sandbox", root.as_str()];
    args.extend_from_slice(extra);
    let mut server = User::Current.ready(&args, &[]).await;
    let path = tree.w.join("mark.so");
    let params = json!({"path": path, "dataBase64": b64(library)});
    assert_eq!(server.result("fs/writeFile", params).await, json!({}));
    (server, path)
}

/// `true` with the library preloaded, `extra` merged into its start params;
/// what it left where, as (outside, inside) after it exited 0.
async fn start_preloaded(
    server: &mut Binary,
    tree: &Tree,
    library: &Path,
    id: &str,
    extra: Value,
) -> (Vec<String>, Vec<String>) {
    let (outside, inside) = (tree.out.join(id), tree.w.join(id));
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(&inside).unwrap();
    let env = json!({"PATH": "/usr/bin:/bin", "LD_PRELOAD": library, "MARK_OUT": outside, "MARK_IN": inside});
    let mut params =
        json!({"processId": id, "argv": ["true"], "cwd": tree.w(), "env": env, "tty": false});
    params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    assert_eq!(run(server, params).await, (String::new(), 0), "{id}");
    (marks(&outside), marks(&inside))
}

/// The library ran in the program (inside: `true`) and nowhere outside.
fn only_the_program() -> (Vec<String>, Vec<String>) {
    (Vec::new(), vec!["true".to_owned()])
}

#[tokio::test]
async fn a_preloaded_library_runs_only_in_the_sandboxed_program() {
    let library = build_library();
    let tree = Tree::new("helper-env", User::Current);
    let (mut server, path) = server_with_library(&tree, &library, &[]).await;
    // Through the forker (the first start starts it), twice.
    for id in ["forked", "forked-again"] {
        let marks = start_preloaded(&mut server, &tree, &path, id, json!({})).await;
        assert_eq!(marks, only_the_program(), "{id}");
    }
    // The trampoline exec'd: after the forker is gone.
    let forker = crate::forker::the_forker(server.child.id().unwrap());
    // SAFETY: a signal to the server's forker, found by its name and parent.
    assert_eq!(unsafe { libc::kill(forker as libc::pid_t, libc::SIGKILL) }, 0);
    wait_dead(forker).await;
    let marks = start_preloaded(&mut server, &tree, &path, "exec", json!({})).await;
    assert_eq!(marks, only_the_program(), "exec");
}

#[tokio::test]
async fn a_preloaded_library_stays_out_of_a_limited_starts_helpers() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let library = build_library();
    let tree = Tree::new("helper-env-limits", User::Current);
    let (mut server, path) = server_with_library(&tree, &library, &[]).await;
    let limits = json!({"limits": {"processes": 16, "memoryBytes": 256 << 20}});
    let marks = start_preloaded(&mut server, &tree, &path, "limited", limits).await;
    assert_eq!(marks, only_the_program());
}

#[tokio::test]
async fn a_preloaded_library_stays_out_of_the_network_helper() {
    let library = build_library();
    let tree = Tree::new("helper-env-net", User::Current);
    let (mut server, path) = server_with_library(&tree, &library, &["--sandbox-network"]).await;
    let sandbox =
        json!({"sandbox": {"mode": "restricted", "writableRoots": [tree.w()], "network": true}});
    let marks = start_preloaded(&mut server, &tree, &path, "networked", sandbox).await;
    assert_eq!(marks, only_the_program());
}
