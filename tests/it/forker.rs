//! The resident forker of sandbox trampolines, through the real binary: one
//! per server, its children the server's own, replaced by an exec of the
//! trampoline when it is gone, and ended with the server.

use serde_json::json;

use crate::binary::Binary;
use crate::sandbox::{run, sandboxed, Tree, User};
use crate::support::{children_of, is_dead, wait_dead, within};

/// The live children of `server` that `is` picks.
fn children(server: u32, is: impl Fn(u32) -> bool) -> Vec<u32> {
    children_of(server).into_iter().filter(|&pid| !is_dead(pid) && is(pid)).collect()
}

/// The forker names itself (its children, until they exec, share its command line).
fn is_forker(pid: u32) -> bool {
    named(pid, "exec-server-fk")
}

fn named(pid: u32, name: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == name)
}

fn restricted(tree: &Tree) -> serde_json::Value {
    json!({"mode": "restricted", "writableRoots": [tree.w()]})
}

/// The server's one forker (the test fails unless there is exactly one).
pub fn the_forker(server: u32) -> u32 {
    let [forker] = children(server, is_forker)[..] else { panic!("no single forker") };
    forker
}

/// Sends `signal` to the forker.
fn signal(forker: u32, signal: libc::c_int) {
    // SAFETY: a signal to a process the test found as the server's forker.
    assert_eq!(unsafe { libc::kill(forker as libc::pid_t, signal) }, 0);
}

/// A server whose forker runs (a sandboxed `true` made it), and the forker's pid.
async fn with_forker(tree: &Tree) -> (Binary, u32) {
    let mut server = User::Current.ready(&[], &[]).await;
    let params = sandboxed("up", &["true"], tree.w(), json!({}), restricted(tree));
    assert_eq!(run(&mut server, params).await, (String::new(), 0));
    let forker = the_forker(server.child.id().unwrap());
    (server, forker)
}

#[tokio::test]
async fn one_forker_starts_every_sandboxed_process_as_the_servers_own_child() {
    let tree = Tree::new("forker-one", User::Current);
    let mut server = User::Current.ready(&[], &[]).await;
    let pid = server.child.id().unwrap();
    assert!(children(pid, is_forker).is_empty(), "a forker before any sandboxed start");
    let params = sandboxed("sleep", &["sleep", "30"], tree.w(), json!({}), restricted(&tree));
    server.result("process/start", params).await;
    let forkers = children(pid, is_forker);
    assert_eq!(forkers.len(), 1, "one forker after the first sandboxed start");
    // The sleeping sandbox's leader: the server's child, named as a trampoline.
    assert_eq!(children(pid, |p| named(p, "exec-server-sb")).len(), 1);
    for n in 0..3 {
        let id = format!("echo-{n}");
        let params =
            sandboxed(&id, &["sh", "-c", "echo $0", &id], tree.w(), json!({}), restricted(&tree));
        assert_eq!(run(&mut server, params).await, (format!("{id}\n"), 0));
    }
    assert_eq!(children(pid, is_forker), forkers, "the same forker serves every start");
    server.result("process/terminate", json!({"processId": "sleep"})).await;
}

#[tokio::test]
async fn a_killed_forker_leaves_sandboxed_starts_working() {
    let tree = Tree::new("forker-killed", User::Current);
    let mut server = User::Current.ready(&[], &[]).await;
    let pid = server.child.id().unwrap();
    let params =
        sandboxed("one", &["sh", "-c", "echo one"], tree.w(), json!({}), restricted(&tree));
    assert_eq!(run(&mut server, params).await, ("one\n".to_owned(), 0));
    let forker = the_forker(pid);
    signal(forker, libc::SIGKILL);
    wait_dead(forker).await;
    let env = json!({"WHO": "two"});
    let params =
        sandboxed("two", &["sh", "-c", "echo $WHO; pwd"], tree.w(), env, restricted(&tree));
    assert_eq!(run(&mut server, params).await, (format!("two\n{}\n", tree.w()), 0));
    let tty = json!({"processId": "tty", "argv": ["sh", "-c", "test -t 0 && echo tty"],
        "cwd": tree.w(), "env": {"PATH": "/usr/bin:/bin"}, "tty": true, "sandbox": restricted(&tree)});
    let (output, code) = run(&mut server, tty).await;
    assert_eq!((output.trim_end(), code), ("tty", 0));
}

#[tokio::test]
async fn the_forker_ends_with_its_server_however_it_ends() {
    let tree = Tree::new("forker-ends", User::Current);
    for kill in [false, true] {
        let mut server = User::Current.ready(&[], &[]).await;
        let pid = server.child.id().unwrap();
        let params = sandboxed("s", &["true"], tree.w(), json!({}), restricted(&tree));
        assert_eq!(run(&mut server, params).await, (String::new(), 0));
        let forker = the_forker(pid);
        if kill {
            server.child.start_kill().unwrap();
        } else {
            server.close_stdin();
        }
        within("the server to exit", server.child.wait()).await.unwrap();
        wait_dead(forker).await;
    }
}

#[tokio::test]
async fn a_cwd_that_cannot_be_entered_fails_as_through_an_exec() {
    let tree = Tree::new("forker-cwd", User::Current);
    let (mut server, forker) = with_forker(&tree).await;
    let missing = tree.base.join("missing");
    let file = tree.out.join("file");
    let cases = [
        (missing, "No such file or directory (os error 2)"),
        (file, "Not a directory (os error 20)"),
    ];
    // Through the forker, then (once it is killed) through an exec of the trampoline.
    for through_forker in [true, false] {
        if !through_forker {
            signal(forker, libc::SIGKILL);
            wait_dead(forker).await;
        }
        for (cwd, os_error) in &cases {
            let params =
                sandboxed("bad", &["true"], cwd.to_str().unwrap(), json!({}), restricted(&tree));
            let reply = server.call("process/start", params).await;
            assert_eq!(
                reply["error"],
                json!({"code": -32603, "message": format!("failed to start `true`: {os_error}")}),
                "through the forker: {through_forker}"
            );
        }
    }
}

#[tokio::test]
async fn a_stopped_forker_is_killed_and_the_next_start_execs() {
    let tree = Tree::new("forker-stopped", User::Current);
    let (mut server, forker) = with_forker(&tree).await;
    signal(forker, libc::SIGSTOP);
    let ran = tree.w.join("ran");
    let touch = ["touch", ran.to_str().unwrap()];
    let reply = server
        .call("process/start", sandboxed("stuck", &touch, tree.w(), json!({}), restricted(&tree)))
        .await;
    assert_eq!(
        reply["error"],
        json!({"code": -32603, "message": "failed to start `touch`: the sandbox forker did not answer within 2 s (it was killed; later starts exec the trampoline)"})
    );
    wait_dead(forker).await;
    assert!(!ran.exists(), "the start that failed ran after all");
    let params =
        sandboxed("after", &["sh", "-c", "echo after"], tree.w(), json!({}), restricted(&tree));
    assert_eq!(run(&mut server, params).await, ("after\n".to_owned(), 0));
}

#[tokio::test]
async fn a_stopped_forker_cannot_hold_a_large_request_forever() {
    let tree = Tree::new("forker-large", User::Current);
    let (mut server, forker) = with_forker(&tree).await;
    signal(forker, libc::SIGSTOP);
    // More than the socket's buffer holds, so the send itself must give up
    // (ten arguments of 100,000 bytes, each under the kernel's 128 KiB
    // limit; the environment does not travel in the request).
    let big = "x".repeat(100_000);
    let mut argv = vec!["sh", "-c", "echo ${#1} ${#10}", "sh"];
    argv.extend(std::iter::repeat_n(big.as_str(), 10));
    let params = sandboxed("large", &argv, tree.w(), json!({}), restricted(&tree));
    assert_eq!(run(&mut server, params).await, ("100000 100000\n".to_owned(), 0));
    wait_dead(forker).await;
}

#[tokio::test]
async fn a_small_descriptor_limit_leaves_the_forker_working() {
    let tree = Tree::new("forker-nofile", User::Current);
    // Just enough for the server; the child used to park descriptors at 64.
    let mut command = tokio::process::Command::new("sh");
    command.args(["-c", r#"ulimit -n 66 && exec "$0""#, *crate::binary::BIN]);
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "forker-test"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let pid = server.child.id().unwrap();
    for (n, tty) in [(0, false), (1, false), (2, true)] {
        let id = format!("s{n}");
        let mut params =
            sandboxed(&id, &["sh", "-c", "echo hi"], tree.w(), json!({}), restricted(&tree));
        params["tty"] = json!(tty);
        let (output, code) = run(&mut server, params).await;
        assert_eq!((output.trim_end(), code), ("hi", 0), "start {n} (tty: {tty})");
    }
    assert_eq!(children(pid, is_forker).len(), 1, "the starts came from the forker");
}

/// The forker is signalled through a pidfd: once it died and was reaped, a
/// process that took its pid (made likely with `ns_last_pid`) is not killed
/// when the next start finds the forker gone.
#[tokio::test]
async fn a_reaped_forkers_pid_taken_by_another_process_is_never_signalled() {
    if !crate::support::root_or_skip("ns_last_pid, to hand the forker's pid to another process") {
        return;
    }
    let tree = Tree::new("forker-reused", User::Current);
    let (mut server, forker) = with_forker(&tree).await;
    signal(forker, libc::SIGKILL);
    // The server reaps it (an exit makes the orphan reaper run).
    within("the forker to be reaped", async {
        let mut n = 0;
        while std::path::Path::new(&format!("/proc/{forker}")).exists() {
            n += 1;
            let params = crate::support::start_params(&format!("reap-{n}"), &["true"], json!({}));
            run(&mut server, params).await;
        }
    })
    .await;
    let mut squatter = within("a process on the forker's pid", async {
        loop {
            std::fs::write("/proc/sys/kernel/ns_last_pid", (forker - 1).to_string()).unwrap();
            let child = tokio::process::Command::new("sleep").arg("60").kill_on_drop(true).spawn();
            let child = child.unwrap();
            if child.id() == Some(forker) {
                return child;
            }
            drop(child);
            tokio::task::yield_now().await;
        }
    })
    .await;
    // The start finds the forker's socket closed, and execs the trampoline.
    let params =
        sandboxed("after", &["sh", "-c", "echo after"], tree.w(), json!({}), restricted(&tree));
    assert_eq!(run(&mut server, params).await, ("after\n".to_owned(), 0));
    assert!(!is_dead(forker), "the process on the forker's old pid was killed");
    assert_eq!(squatter.try_wait().unwrap(), None);
}
