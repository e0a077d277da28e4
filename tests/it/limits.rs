//! Memory, process and CPU limits on a whole process tree, through the real
//! binary and this machine's cgroups (cgroup v1 controllers here and in CI;
//! the v2 path is unit-tested against its interface files). Every bomb is
//! bounded: at most a few hundred forks, at most 512 MiB of allocations.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::binary::Binary;
use crate::sandbox::{run_started, sandboxed, User};
use crate::support::{b64, root_or_skip, scratch, start_params, unb64, within};

const MIB: u64 = 1024 * 1024;

/// Starts `sleep 30` 400 times in the background, counting the forks the
/// kernel refused, then says how many processes it sees and waits.
const FORKER: &str = "import os, subprocess, time\nstarted, refused = [], 0\nfor _ in range(400):\n    try:\n        started.append(subprocess.Popen(['sleep', '30']))\n    except OSError:\n        refused += 1\nseen = len([p for p in os.listdir('/proc') if p.isdigit()])\nprint('started', len(started), 'refused', refused, 'seen', seen, flush=True)\ntime.sleep(30)";

/// Allocates 8 MiB (touched) per line it reads on stdin, up to 512 MiB,
/// saying `step N` after each.
const ALLOCATOR: &str = "import sys\nheld = []\nfor step in range(1, 65):\n    held.append(bytearray(8 << 20))\n    print('step', step, flush=True)\n    sys.stdin.readline()\nprint('finished', flush=True)";

/// The server's own directory in `controller`'s hierarchy (cgroup v1).
fn server_dir(server: u32, controller: &str) -> PathBuf {
    let cgroups = std::fs::read_to_string(format!("/proc/{server}/cgroup")).unwrap();
    let path = cgroups
        .lines()
        .find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, list, path) = (fields.next()?, fields.next()?, fields.next()?);
            list.split(',').any(|c| c == controller).then(|| path.to_owned())
        })
        .unwrap_or_else(|| panic!("the server is in no {controller} cgroup: {cgroups}"));
    Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(path.trim_start_matches('/'))
        .join(format!("exec-server-{server}"))
}

/// The start directories in the server's directory.
fn start_dirs(server: u32, controller: &str) -> Vec<PathBuf> {
    match std::fs::read_dir(server_dir(server, controller)) {
        Ok(entries) => entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect(),
        Err(_) => Vec::new(),
    }
}

fn read_u64(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim().parse().unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

/// Waits until `condition` holds, checking each 10 ms (a cgroup's removal
/// is not an event a test can wait on).
async fn until(what: &str, condition: impl Fn() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

fn limited(id: &str, argv: &[&str], limits: Value) -> Value {
    start_params(id, argv, json!({"limits": limits}))
}

/// Output of `id` until `needle` shows; returns all of it.
async fn output_until(server: &mut Binary, id: &str, needle: &str) -> String {
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains(needle) {
        seen.extend(unb64(&server.notification("process/output", id).await["chunk"]));
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test]
async fn a_memory_limit_ends_the_tree_before_it_grows_past_it() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    let params = limited("m", &["python3", "-c", ALLOCATOR], json!({"memoryBytes": 64 * MIB}));
    let mut params = params;
    params["pipeStdin"] = json!(true);
    server.result("process/start", params).await;
    let pid = server.result("process/list", json!({})).await["processes"][0]["pid"]
        .as_u64()
        .unwrap() as u32;
    let mut steps = 0;
    let exited = loop {
        let message = server.next().await.expect("the server closed stdout");
        match message["method"].as_str() {
            Some("process/output") => {
                steps += 1;
                // Blocked on stdin: its peak so far, sampled from outside.
                let peak = crate::support::peak_rss_kib(pid) * 1024;
                assert!(peak <= 64 * MIB + 4 * MIB, "peak RSS {peak} after step {steps}");
                server
                    .result("process/write", json!({"processId": "m", "chunk": b64(b"\n")}))
                    .await;
            }
            Some("process/exited") => break message["params"].clone(),
            _ => {}
        }
    };
    assert!(steps < 8, "it ran {steps} steps of 8 MiB under 64 MiB");
    assert_eq!(
        exited,
        json!({"processId": "m", "seq": steps, "exitCode": 137, "signal": "SIGKILL", "limit": "memory"})
    );
    let list = server.result("process/list", json!({})).await;
    assert_eq!(list["processes"][0]["limits"], json!({"memoryBytes": 64 * MIB}));
    // Still serving.
    server.result("process/start", start_params("after", &["true"], json!({}))).await;
    assert_eq!(server.notification("process/exited", "after").await["exitCode"], 0);
    // The emptied cgroup is kept as a spare (its high-water mark reset); the
    // next limited start takes it, and the kill it saw is not this one's.
    let server_pid = server.child.id().unwrap();
    let dirs = start_dirs(server_pid, "memory");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    // The killed tree's mark was near 64 MiB; a spare's starts again from
    // what is left charged (the page cache the tree read).
    let mark = || read_u64(&dirs[0].join("memory.max_usage_in_bytes"));
    until("the cgroup to become a spare", || mark() < 32 * MIB).await;
    server
        .result("process/start", limited("next", &["true"], json!({"memoryBytes": 64 * MIB})))
        .await;
    assert_eq!(start_dirs(server_pid, "memory"), dirs);
    assert_eq!(
        server.notification("process/exited", "next").await,
        json!({"processId": "next", "seq": 0, "exitCode": 0})
    );
}

#[tokio::test]
async fn four_children_never_hold_more_than_their_shared_limit() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    let server_pid = server.child.id().unwrap();
    let child =
        "import time\nheld = bytearray(40 << 20)\nprint('holding', flush=True)\ntime.sleep(1)";
    let script = format!("for i in 1 2 3 4; do python3 -c \"{child}\" & done; wait");
    let params = limited("tree", &["sh", "-c", &script], json!({"memoryBytes": 96 * MIB}));
    server.result("process/start", params).await;
    let mut holding = 0;
    let exited = loop {
        let message = server.next().await.expect("the server closed stdout");
        match message["method"].as_str() {
            Some("process/output") => {
                holding += String::from_utf8_lossy(&unb64(&message["params"]["chunk"]))
                    .matches("holding")
                    .count();
                for dir in start_dirs(server_pid, "memory") {
                    let peak = read_u64(&dir.join("memory.max_usage_in_bytes"));
                    assert!(peak <= 96 * MIB, "the tree held {peak} bytes");
                }
            }
            Some("process/exited") => break message["params"].clone(),
            _ => {}
        }
    };
    // Some got their 40 MiB (a later one perhaps after an earlier one was
    // killed); the kernel's own high-water mark above says never together.
    assert!(holding >= 1, "no child got its 40 MiB");
    assert_eq!(exited["limit"], "memory", "{exited}");
}

#[tokio::test]
async fn a_process_limit_bounds_every_background_job_and_others_still_run() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    let server_pid = server.child.id().unwrap();
    server
        .result(
            "process/start",
            limited("bomb", &["python3", "-c", FORKER], json!({"processes": 32})),
        )
        .await;
    let output = output_until(&mut server, "bomb", "\n").await;
    assert!(output.starts_with("started 31 refused 369 "), "{output}");
    let dirs = start_dirs(server_pid, "pids");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert_eq!(read_u64(&dirs[0].join("pids.max")), 32);
    assert_eq!(read_u64(&dirs[0].join("pids.current")), 32);
    assert!(read_u64(&dirs[0].join("pids.peak")) <= 32);
    // An unlimited start on the same server still runs.
    server.result("process/start", start_params("free", &["echo", "free"], json!({}))).await;
    assert_eq!(unb64(&server.notification("process/output", "free").await["chunk"]), b"free\n");
    // Ending the session ends the whole tree: the cgroup empties and goes.
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
    until("the pids cgroup to be removed", || !dirs[0].exists()).await;
}

/// CPU seconds the program used in 3 s of wall time.
const BUSY: &str = "import os, time\nend = time.time() + 3\nwhile time.time() < end: pass\nt = os.times()\nprint(t.user + t.system, flush=True)";

#[tokio::test]
async fn a_cpu_limit_gives_a_busy_loop_its_share_only() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    server
        .result(
            "process/start",
            limited("slow", &["python3", "-c", BUSY], json!({"cpuPercent": 25})),
        )
        .await;
    server
        .result("process/start", start_params("control", &["python3", "-c", BUSY], json!({})))
        .await;
    let mut used = std::collections::HashMap::new();
    while used.len() < 2 {
        let message = server.next().await.expect("the server closed stdout");
        if message["method"] == "process/output" {
            let id = message["params"]["processId"].as_str().unwrap().to_owned();
            let text = String::from_utf8_lossy(&unb64(&message["params"]["chunk"])).into_owned();
            used.insert(id, text.trim().parse::<f64>().unwrap());
        }
    }
    let (slow, control) = (used["slow"], used["control"]);
    assert!(slow <= 3.0 * 0.25 * 1.3, "25% of one CPU for 3 s took {slow} CPU seconds");
    assert!(
        control >= 1.5 * slow,
        "the unlimited control took {control} CPU seconds, the limited {slow}"
    );
}

#[tokio::test]
async fn defaults_apply_a_start_may_lower_them_and_raising_is_refused() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&["--limit-memory", "64M", "--limit-processes", "64"]).await;
    assert_eq!(server.result("environment/info", json!({})).await.get("limits"), None);
    let info = server.result("environment/info", json!({"limits": true})).await;
    assert_eq!(
        info["limits"],
        json!({
            "memoryBytes": {"enforced": true, "cgroup": "v1", "default": 64 * MIB},
            "processes": {"enforced": true, "cgroup": "v1", "default": 64},
            "cpuPercent": {"enforced": true, "cgroup": "v1"},
        })
    );
    let mut params = start_params("d", &["python3", "-c", ALLOCATOR], json!({"pipeStdin": true}));
    params["pipeStdin"] = json!(true);
    server.result("process/start", params).await;
    let list = server.result("process/list", json!({})).await;
    assert_eq!(list["processes"][0]["limits"], json!({"memoryBytes": 64 * MIB, "processes": 64}));
    loop {
        let message = server.next().await.expect("the server closed stdout");
        match message["method"].as_str() {
            Some("process/output") => {
                server
                    .result("process/write", json!({"processId": "d", "chunk": b64(b"\n")}))
                    .await;
            }
            Some("process/exited") => {
                assert_eq!(message["params"]["limit"], "memory", "{message}");
                break;
            }
            _ => {}
        }
    }
    // Lower: fine, and the other default still applies.
    server
        .result("process/start", limited("low", &["true"], json!({"memoryBytes": 32 * MIB})))
        .await;
    let list = server.result("process/list", json!({})).await;
    let low = list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["processId"] == "low")
        .unwrap()
        .clone();
    assert_eq!(low["limits"], json!({"memoryBytes": 32 * MIB, "processes": 64}));
    let error =
        server.error("process/start", limited("high", &["true"], json!({"processes": 65}))).await;
    assert_eq!(
        error,
        json!({"code": -32600, "message": "process/start refused: limits.processes 65 is above the server's --limit-processes 64; a start may lower a default limit, not raise it"})
    );
    for (limits, message) in [
        (json!({"processes": 0}), "limits.processes must be an integer from 1 to 4194304, not 0"),
        (
            json!({"cpuPercent": 12.5}),
            "limits.cpuPercent must be an integer from 1 to 100000, not 12.5",
        ),
        (
            json!({"memoryBytes": -1}),
            "limits.memoryBytes must be an integer from 1048576 to 9007199254740992, not -1",
        ),
    ] {
        let error = server.error("process/start", limited("bad", &["true"], limits)).await;
        assert_eq!(error["code"], -32602, "{error}");
        assert_eq!(error["message"], format!("invalid params for process/start: {message}"));
    }
}

#[tokio::test]
async fn today_dialect_starts_take_limits_too() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    let params = json!({
        "processId": "t", "argv": ["sh", "-c", "cat /proc/self/cgroup"], "cwd": "file:///tmp",
        "envPolicy": {"inherit": "core"}, "tty": false, "limits": {"processes": 5},
    });
    server.result("process/start", params).await;
    let (output, code) = run_started(&mut server, "t").await;
    assert_eq!(code, 0);
    let pid = server.child.id().unwrap();
    assert!(output.contains(&format!(":pids:/exec-server-{pid}/")), "{output}");
}

#[tokio::test]
async fn a_server_that_cannot_enforce_a_limit_refuses_and_runs_nothing() {
    if !root_or_skip("an unprivileged server") {
        return;
    }
    let dir = scratch("limits-nobody");
    User::Nobody.own(&dir);
    let mut server = User::Nobody.ready(&[], &[]).await;
    let info = server.result("environment/info", json!({"limits": true})).await;
    assert_eq!(info["limits"]["memoryBytes"]["enforced"], false, "{info}");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let error = server
        .error(
            "process/start",
            limited("n", &["sh", "-c", &touch], json!({"memoryBytes": 64 * MIB})),
        )
        .await;
    assert_eq!(error["code"], -32600);
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("process/start refused: cannot enforce the memory limit: cannot create /sys/fs/cgroup/memory/"), "{message}");
    assert!(message.ends_with("Permission denied (os error 13)"), "{message}");
    // The same start without limits runs: the refusal was the limit's.
    server.result("process/start", start_params("ok", &["sh", "-c", &touch], json!({}))).await;
    assert_eq!(server.notification("process/exited", "ok").await["exitCode"], 0);
    std::fs::remove_file(&marker).unwrap();
    let error = server
        .error("process/start", limited("n2", &["sh", "-c", &touch], json!({"cpuPercent": 50})))
        .await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("process/start refused: cannot enforce the CPU limit: "),
        "{error}"
    );
    assert!(!marker.exists(), "a refused start ran");
}

#[tokio::test]
async fn a_sandboxed_and_limited_process_cannot_leave_its_cgroup() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let dir = scratch("limits-sandboxed");
    let mut server = Binary::ready(&[]).await;
    let server_pid = server.child.id().unwrap();
    let dirs = format!(
        "{} {}",
        server_dir(server_pid, "memory").display(),
        server_dir(server_pid, "pids").display()
    );
    let script = format!(
        "for d in {dirs}; do for f in $d/*/cgroup.procs $d/../cgroup.procs; do echo $$ 2>/dev/null > $f && echo moved $f; done; done; \
         python3 -c \"{forker}\"; python3 -c 'x = bytearray(128 << 20)' && echo survived",
        forker = FORKER.replace("time.sleep(30)", "for p in started: p.kill(); p.wait()")
    );
    let mut params = sandboxed(
        "s",
        &["sh", "-c", &script],
        dir.to_str().unwrap(),
        json!({}),
        json!({"mode": "restricted", "writableRoots": [dir]}),
    );
    params["limits"] = json!({"memoryBytes": 64 * MIB, "processes": 16});
    server.result("process/start", params).await;
    let (output, _) = run_started(&mut server, "s").await;
    assert!(!output.contains("moved"), "{output}");
    assert!(!output.contains("survived"), "{output}");
    // The shell and the forker hold 2 of the 16: 14 sleeps start. The
    // sandbox's PID namespace shows its init too.
    assert!(output.contains("started 14 refused 386 seen 17"), "{output}");
}

#[tokio::test]
async fn thirty_limited_starts_leave_no_cgroup_behind() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    let server_pid = server.child.id().unwrap();
    for n in 0..30 {
        let id = format!("t{n}");
        let limits = json!({"memoryBytes": 64 * MIB, "processes": 8, "cpuPercent": 50});
        server.result("process/start", limited(&id, &["true"], limits)).await;
        server.notification("process/closed", &id).await;
    }
    for controller in ["memory", "pids", "cpu"] {
        until(&format!("the {controller} start cgroups to go"), || {
            start_dirs(server_pid, controller).is_empty()
        })
        .await;
    }
    let dirs: Vec<PathBuf> =
        ["memory", "pids", "cpu"].iter().map(|c| server_dir(server_pid, c)).collect();
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
    for dir in dirs {
        until(&format!("{} to go", dir.display()), || !dir.exists()).await;
    }
}

#[tokio::test]
async fn a_sigkilled_servers_trees_and_cgroups_go_with_it() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    let server_pid = server.child.id().unwrap();
    let script = "setsid sh -c 'echo escaped $$; exec sleep 300' & wait";
    server
        .result("process/start", limited("k", &["sh", "-c", script], json!({"processes": 8})))
        .await;
    let output = output_until(&mut server, "k", "escaped").await;
    let escaped: u32 = output.split_whitespace().nth(1).unwrap().parse().unwrap();
    let dir = server_dir(server_pid, "pids");
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
    crate::support::wait_dead(escaped).await;
    until(&format!("{} to go", dir.display()), || !dir.exists()).await;
}

#[tokio::test]
async fn a_spare_takes_a_higher_limit_and_the_kernels_ceiling_is_accepted() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    // Lower and higher bounds by turns: an emptied cgroup becomes a spare
    // for the next start, whose bound it must take whether it is above or
    // below the last one's (memory+swap included). Before the fix most of
    // the higher ones were refused (EINVAL).
    for n in 0..20 {
        let id = format!("m{n}");
        let bytes = if n % 2 == 0 { 32 * MIB } else { 64 * MIB };
        server
            .result("process/start", limited(&id, &["true"], json!({"memoryBytes": bytes})))
            .await;
        assert_eq!(server.notification("process/exited", &id).await["exitCode"], 0);
        let list = server.result("process/list", json!({})).await;
        let entry =
            list["processes"].as_array().unwrap().iter().find(|p| p["processId"] == id).cloned();
        assert_eq!(entry.unwrap()["limits"], json!({"memoryBytes": bytes}));
    }
    let most = json!({"processes": 4_194_304});
    server.result("process/start", limited("most", &["true"], most)).await;
    assert_eq!(server.notification("process/exited", "most").await["exitCode"], 0);
}

#[tokio::test]
async fn limits_are_an_object_of_known_members() {
    let mut server = Binary::ready(&[]).await;
    let error =
        server.error("process/start", limited("x", &["true"], json!({"memoryByte": MIB}))).await;
    assert_eq!(error["code"], -32602);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("invalid params for process/start: limits: unknown field `memoryByte`"),
        "{message}"
    );
    let error = server.error("process/start", limited("y", &["true"], json!([67108864, 32]))).await;
    assert_eq!(
        error["message"],
        "invalid params for process/start: limits must be an object of memoryBytes, processes and cpuPercent, not an array"
    );
}

#[tokio::test]
async fn a_writable_root_over_the_cgroups_stays_read_only_for_a_limited_start() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut server = Binary::ready(&[]).await;
    let pids = server_dir(server.child.id().unwrap(), "pids");
    let script = format!(
        "echo max > {0}/*/pids.max && echo RAISED; echo $$ > /sys/fs/cgroup/pids/cgroup.procs && echo MOVED; grep :pids: /proc/self/cgroup",
        pids.display()
    );
    let mut params = sandboxed(
        "w",
        &["sh", "-c", &script],
        "/tmp",
        json!({}),
        json!({"mode": "restricted", "writableRoots": ["/"]}),
    );
    params["limits"] = json!({"processes": 8});
    server.result("process/start", params).await;
    let (output, _) = run_started(&mut server, "w").await;
    assert!(!output.contains("RAISED") && !output.contains("MOVED"), "{output}");
    assert!(output.contains("Read-only file system"), "{output}");
    let inside = json!({"mode": "restricted", "writableRoots": ["/sys/fs/cgroup/pids"]});
    let mut params = sandboxed("i", &["true"], "/tmp", json!({}), inside);
    params["limits"] = json!({"processes": 8});
    let error = server.error("process/start", params).await;
    assert_eq!(
        error,
        json!({"code": -32600, "message": "process/start refused: cannot enforce the limits in this sandbox: the writable root /sys/fs/cgroup/pids is inside the cgroup hierarchy /sys/fs/cgroup/pids: the process could change its own limits"})
    );
}

/// A connection's processes whose cgroup was emptied and handed on: when
/// that connection ends, the next owner of the cgroup (here another
/// connection's `cat`) is not killed with it.
#[tokio::test]
async fn a_recycled_cgroup_is_not_its_old_owners_to_kill() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let mut first = crate::support::Harness::ready().await;
    let bounded = json!({"memoryBytes": 64 * MIB});
    let hold = ["python3", "-c", "x = bytearray(20 << 20)"];
    first.start_with("big", &hold, json!({"limits": bounded})).await;
    first.notification("process/closed", "big").await;
    let dirs = start_dirs(std::process::id(), "memory");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let mark = || read_u64(&dirs[0].join("memory.max_usage_in_bytes"));
    until("the cgroup to become a spare", || mark() < 8 * MIB).await;
    let mut second = crate::support::Harness::ready().await;
    second.start_with("cat", &["cat"], json!({"limits": bounded, "pipeStdin": true})).await;
    let list = second.result("process/list", json!({})).await;
    let pid = list["processes"][0]["pid"].as_u64().unwrap();
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let name = dirs[0].file_name().unwrap().to_str().unwrap();
    assert!(
        cgroup.lines().any(|l| l.contains(":memory:") && l.ends_with(&format!("/{name}"))),
        "{cgroup}"
    );
    // The first connection ends (its exited process is still in its table).
    first.close_input().await;
    within("the first server to end", &mut first.server).await.unwrap().unwrap();
    second.result("process/write", json!({"processId": "cat", "chunk": b64(b"ping")})).await;
    let output = second.notification("process/output", "cat").await;
    assert_eq!(unb64(&output["chunk"]), b"ping");
}

/// Run in a child process of its own by
/// `an_embedded_servers_cgroups_go_when_its_program_exits`: an in-process
/// server makes its cgroup directory with one limited start, and the program
/// then exits normally.
#[tokio::test]
#[ignore = "a helper, run in a child process by an_embedded_servers_cgroups_go_when_its_program_exits"]
async fn embedded_server_with_a_limited_start() {
    let mut server = crate::support::Harness::ready().await;
    server.start_with("t", &["true"], json!({"limits": {"memoryBytes": 64 * MIB}})).await;
    server.notification("process/closed", "t").await;
    assert!(server_dir(std::process::id(), "memory").is_dir());
}

/// A server embedded in a program has no watcher: its directories go when the
/// program exits (they were left behind, one per run of the program).
#[tokio::test]
async fn an_embedded_servers_cgroups_go_when_its_program_exits() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let helper = "limits::embedded_server_with_a_limited_start";
    let child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", helper, "--include-ignored", "--test-threads=1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    // The child is in this process's cgroups: its directory is beside ours.
    let dir = server_dir(std::process::id(), "memory").with_file_name(format!("exec-server-{pid}"));
    let output = within("the embedding program to exit", child.wait_with_output()).await.unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && report.contains("1 passed"), "{report}");
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

/// What a sandboxed tree's background job does once its leader has exited
/// (the test says so through the fifo `argv[1]`): forks children that wait
/// until it ends, as many as the limit lets it (at most 20), and writes
/// their number to the fifo `argv[2]`.
const AFTER_THE_LEADER: &str = "import os, sys\nopen(sys.argv[1]).read()\nr, w = os.pipe()\nn = 0\nwhile n < 20:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        os.read(r, 1)\n        os._exit(0)\n    n += 1\nopen(sys.argv[2], 'w').write(str(n))\nos.read(r, 1)";

/// `processes: N` holds at every moment: the sandbox's trampoline (the
/// leader) leaves the tree's cgroup before the program starts, so its exit
/// frees no slot (before, the tree then held N + 1).
#[tokio::test]
async fn a_sandboxed_tree_holds_its_process_limit_after_its_leader_exits() {
    if !root_or_skip("cgroup limits") {
        return;
    }
    let dir = scratch("limits-after-leader");
    let (go, count) = (dir.join("go"), dir.join("count"));
    for fifo in [&go, &count] {
        let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    }
    let mut server = Binary::ready(&[]).await;
    let job = format!(
        "python3 -c \"$0\" {} {} </dev/null >/dev/null 2>&1 & exit 0",
        go.display(),
        count.display()
    );
    let mut params = sandboxed(
        "leader",
        &["sh", "-c", &job, AFTER_THE_LEADER],
        dir.to_str().unwrap(),
        json!({}),
        json!({"mode": "restricted", "writableRoots": [dir]}),
    );
    params["limits"] = json!({"processes": 5});
    server.result("process/start", params).await;
    // The leader (the trampoline) exits with the program.
    assert_eq!(run_started(&mut server, "leader").await, (String::new(), 0));
    let forked = tokio::task::spawn_blocking(move || {
        std::fs::write(&go, "go").unwrap();
        std::fs::read_to_string(&count).unwrap()
    });
    // The job is one of the 5: it may fork 4.
    assert_eq!(within("the job's count", forked).await.unwrap(), "4");
}
