//! `just bench`: exec-server against baselines measured in the same run.
//!
//! Every row pairs the server's figure with a baseline taken in the same run:
//! raw pipes, direct spawns, `tokio::fs`, a line echoed by `cat`, and the bench
//! client's own ceiling against a fake server (this executable re-run as
//! `BENCH_ROLE=fake`: it answers every request at once and replays
//! pre-encoded output), so the server is never blamed for the client.
//! Prints a table, then the same rows as JSON (also written to
//! `target/bench.json`). `EXEC_SERVER_BIN` measures another build;
//! `BENCH_ONLY=fs,stream` runs only those sections (round, startup, spawn, stream, fs, ws, peer, static, net, tunnel, watch, mcp).
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use exec_server::protocol::{GetMetadata, PathParams, ProcessTerminate, TerminateParams};
use exec_server::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

#[path = "throughput/network.rs"]
mod network;
#[path = "throughput/peer.rs"]
mod peer;
#[path = "throughput/tunnel.rs"]
mod tunnel;

const BIN: &str = env!("CARGO_BIN_EXE_exec-server");
const OUTPUT_BYTES: u64 = 256 * 1024 * 1024;
const CHUNK: usize = 64 * 1024;
const SPAWNS: u32 = 200;
const ROUND_TRIPS: u32 = 2000;
const FILE_BYTES: usize = 64 * 1024 * 1024;
const PIECE: u64 = 8 * 1024 * 1024;
const RUNS: usize = 3;
const HANDSHAKES: u32 = 50;
/// Runs of a row measured in turn with its baseline.
const PAIRED_RUNS: usize = 5;
/// Streams on one server before its "while streaming" peak RSS is read.
const RSS_AFTER_STREAMS: usize = 3;

struct Row {
    what: &'static str,
    server: f64,
    baseline: f64,
    baseline_what: &'static str,
    unit: &'static str,
    higher_is_better: bool,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.server / self.baseline
    }

    fn print(&self) {
        let note = if self.higher_is_better { "of baseline" } else { "x baseline" };
        println!(
            "{:<46} {:>9.1} {:<5} | {:<34} {:>9.1} {:<5} | {:.2} {note}",
            self.what,
            self.server,
            self.unit,
            self.baseline_what,
            self.baseline,
            self.unit,
            self.ratio()
        );
    }

    fn json(&self) -> String {
        format!(
            r#"{{"what":"{}","server":{:.3},"baseline":{:.3},"baseline_what":"{}","unit":"{}","ratio":{:.4}}}"#,
            self.what,
            self.server,
            self.baseline,
            self.baseline_what,
            self.unit,
            self.ratio()
        )
    }
}

/// The median of `RUNS` timings of `f`.
async fn median<F, Fut>(mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    median_of(|| {
        let start = Instant::now();
        let run = f();
        async move {
            run.await;
            start.elapsed()
        }
    })
    .await
}

fn mib_per_s(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / time.as_secs_f64()
}

fn micros(time: Duration, count: u32) -> f64 {
    time.as_secs_f64() * 1e6 / f64::from(count)
}

fn server_binary() -> String {
    // Absolute: some rows start it from another directory.
    std::env::var("EXEC_SERVER_BIN")
        .ok()
        .and_then(|path| std::path::absolute(path).ok())
        .map_or_else(|| BIN.to_owned(), |path| path.to_string_lossy().into_owned())
}

fn head_argv() -> Vec<String> {
    vec!["head".into(), "-c".into(), OUTPUT_BYTES.to_string(), "/dev/zero".into()]
}

/// The median of [`RUNS`] runs of `f`, each reporting its own duration.
async fn median_of<F, Fut>(mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Duration>,
{
    let mut times = Vec::new();
    for _ in 0..RUNS {
        times.push(f().await);
    }
    middle(times)
}

/// The middle of `times`.
fn middle(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Starts `argv` `count` times in turn, each time writing an `initialize`
/// line and waiting for the first line back (`cat` echoes it); the total of
/// spawn -> reply (each process's exit is not counted).
async fn handshakes(argv: Vec<String>, count: u32) -> Duration {
    let mut total = Duration::ZERO;
    let line = b"{\"id\":1,\"method\":\"initialize\",\"params\":{\"clientName\":\"bench\"}}\n";
    for _ in 0..count {
        let start = Instant::now();
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(line).await.unwrap();
        let mut reply = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut reply).await.unwrap();
        total += start.elapsed();
        assert!(!reply.is_empty(), "{} answered nothing", argv[0]);
        drop(stdin);
        child.wait().await.unwrap();
    }
    total
}

async fn direct_output() {
    let argv = head_argv();
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buffer = vec![0; CHUNK];
    let mut total = 0u64;
    loop {
        let n = stdout.read(&mut buffer).await.unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    child.wait().await.unwrap();
    assert_eq!(total, OUTPUT_BYTES);
}

async fn server_output(client: &Client, id: &str) {
    let mut process = client.start(StartParams::new(id, head_argv(), "/")).await.unwrap();
    let mut total = 0u64;
    while let Some(chunk) = process.next_output().await.unwrap() {
        total += chunk.bytes.len() as u64;
    }
    assert_eq!(total, OUTPUT_BYTES);
}

/// The server's own stream ceiling: a fresh server's stdout read raw, payload
/// bytes counted from each chunk's base64 length (no JSON parse, no decode).
/// Returns the time and the server's peak RSS in MiB.
async fn raw_output() -> (Duration, f64) {
    let mut server = tokio::process::Command::new(server_binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::with_capacity(1 << 20, server.stdout.take().unwrap());
    let argv = head_argv().iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(",");
    let requests = format!(
        "{{\"id\":1,\"method\":\"initialize\",\"params\":{{\"clientName\":\"raw\"}}}}\n\
         {{\"method\":\"initialized\"}}\n\
         {{\"id\":2,\"method\":\"process/start\",\"params\":{{\"processId\":\"raw\",\"argv\":[{argv}],\"cwd\":\"/\"}}}}\n"
    );
    let start = Instant::now();
    stdin.write_all(requests.as_bytes()).await.unwrap();
    let mut payload = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        if stdout.read_until(b'\n', &mut line).await.unwrap() == 0 {
            break;
        }
        if let Some(at) = find(&line, br#""chunk":""#) {
            let text = &line[at + 9..];
            let len = find(text, b"\"").unwrap();
            let padding = text[..len].iter().rev().take_while(|&&b| b == b'=').count();
            payload += (len / 4 * 3 - padding) as u64;
        } else if find(&line, br#""method":"process/closed""#).is_some() {
            break;
        }
    }
    let took = start.elapsed();
    assert_eq!(payload, OUTPUT_BYTES);
    let rss = peak_rss_mib(server.id().unwrap());
    drop(stdin);
    server.wait().await.unwrap();
    (took, rss)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

async fn direct_spawns_in_turn() {
    for _ in 0..SPAWNS {
        let status = tokio::process::Command::new("true").status().await.unwrap();
        assert!(status.success());
    }
}

/// Whether util-linux `unshare` can make user namespaces here.
async fn unshare_works() -> bool {
    tokio::process::Command::new("unshare")
        .args(["--user", "--map-current-user", "--mount", "--pid", "--ipc", "--fork", "true"])
        .status()
        .await
        .is_ok_and(|status| status.success())
}

async fn server_spawns_in_turn(
    client: &Client,
    prefix: &str,
    sandbox: Option<&Sandbox>,
    limits: Option<ProcessLimits>,
) {
    for i in 0..SPAWNS {
        let mut params = StartParams::new(format!("{prefix}-{i}"), ["true"], "/");
        if let Some(sandbox) = sandbox {
            params = params.sandbox(sandbox.clone());
        }
        if let Some(limits) = limits {
            params = params.limits(limits);
        }
        let mut process = client.start(params).await.unwrap();
        assert_eq!(process.wait().await.unwrap().code, 0);
    }
}

async fn direct_spawns_at_once() {
    let mut children: Vec<_> =
        (0..SPAWNS).map(|_| tokio::process::Command::new("true").spawn().unwrap()).collect();
    for child in &mut children {
        assert!(child.wait().await.unwrap().success());
    }
}

async fn server_spawns_at_once(client: &Client, prefix: &str) {
    let starts = (0..SPAWNS).map(|i| {
        let client = client.clone();
        let params = StartParams::new(format!("{prefix}-{i}"), ["true"], "/");
        async move { client.start(params).await.unwrap() }
    });
    let mut processes = Vec::new();
    for start in starts.map(tokio::spawn).collect::<Vec<_>>() {
        processes.push(start.await.unwrap());
    }
    for process in &mut processes {
        assert_eq!(process.wait().await.unwrap().code, 0);
    }
}

async fn cat_round_trips() {
    let mut cat = tokio::process::Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = cat.stdin.take().unwrap();
    let mut lines = BufReader::new(cat.stdout.take().unwrap()).lines();
    for i in 0..ROUND_TRIPS {
        let line = format!(
            "{{\"id\":{i},\"method\":\"fs/getMetadata\",\"params\":{{\"path\":\"/tmp\"}}}}\n"
        );
        stdin.write_all(line.as_bytes()).await.unwrap();
        lines.next_line().await.unwrap().unwrap();
    }
    drop(stdin);
    cat.wait().await.unwrap();
}

async fn terminate_round_trips(client: &Client) {
    for _ in 0..ROUND_TRIPS {
        let params = TerminateParams::new("no-such-process");
        assert!(!client.call::<ProcessTerminate>(&params).await.unwrap().running);
    }
}

async fn metadata_round_trips(client: &Client) {
    for _ in 0..ROUND_TRIPS {
        let meta = client.call::<GetMetadata>(&PathParams::new("/tmp")).await.unwrap();
        assert!(meta.is_directory);
    }
}

async fn fs_round_trip(fs: &impl FileSystem, dir: &std::path::Path, data: &[u8]) {
    let path = dir.join("bench.bin");
    fs.write_file(&path, &[]).await.unwrap();
    for piece in data.chunks(PIECE as usize) {
        fs.append_file(&path, piece).await.unwrap();
    }
    let mut offset = 0;
    while offset < data.len() as u64 {
        offset += fs.read_range(&path, offset, PIECE).await.unwrap().len() as u64;
    }
}

async fn direct_fs_round_trip(dir: &std::path::Path, data: &[u8]) {
    let path = dir.join("direct.bin");
    tokio::fs::write(&path, data).await.unwrap();
    let back = tokio::fs::read(&path).await.unwrap();
    assert_eq!(back.len(), data.len());
}

/// The machine's busy time, all CPUs, in clock ticks (`/proc/stat`: user,
/// nice, system, irq, softirq, steal).
fn busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu = stat.lines().next().unwrap();
    let ticks: Vec<u64> = cpu.split_whitespace().skip(1).map(|t| t.parse().unwrap()).collect();
    ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
}

/// Busy ticks and wall time summed over the runs of one way of streaming
/// [`OUTPUT_BYTES`].
#[derive(Default)]
struct Cpu {
    ticks: u64,
    wall: Duration,
    runs: u32,
}

impl Cpu {
    fn add(&mut self, ticks_before: u64, wall: Duration) {
        self.ticks += busy_ticks() - ticks_before;
        self.wall += wall;
        self.runs += 1;
    }

    fn seconds(&self) -> f64 {
        // SAFETY: sysconf only reads a constant of the system.
        self.ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    }

    fn ms_per_gib(&self) -> f64 {
        let gib = (OUTPUT_BYTES * u64::from(self.runs)) as f64 / (1u64 << 30) as f64;
        self.seconds() * 1e3 / gib
    }

    fn cores(&self) -> f64 {
        self.seconds() / self.wall.as_secs_f64()
    }
}

/// Peak resident memory of `pid` in MiB (VmHWM).
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024.0
}

async fn launch() -> Launcher {
    Launcher::spawn(LaunchCommand::new(server_binary())).await.unwrap()
}

async fn launch_fake() -> Launcher {
    let mut command = LaunchCommand::new(std::env::current_exe().unwrap());
    command.env.push(("BENCH_ROLE".into(), "fake".into()));
    Launcher::spawn(command).await.unwrap()
}

fn main() {
    if std::env::var_os("BENCH_ROLE").is_some() {
        fake_server();
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    println!("exec-server benchmarks: median of {RUNS} runs, baselines measured in this run");
    let mut rows = Vec::new();
    let stdio = launch().await;
    let client = stdio.client().clone();
    let fake = launch_fake().await;
    let fake_client = fake.client().clone();
    let mut n = 0;

    if wanted("round") {
        // Round trips: the baseline is the same client code against a fake server
        // that answers at once (the "echo through the same client").
        let echo = median(cat_round_trips).await;
        let ceiling = median(|| terminate_round_trips(&fake_client)).await;
        let metadata = median(|| metadata_round_trips(&client)).await;
        rows.push(Row {
            what: "fs/getMetadata round trip (us)",
            server: micros(metadata, ROUND_TRIPS),
            baseline: micros(ceiling, ROUND_TRIPS),
            baseline_what: "same client, fake server",
            unit: "us",
            higher_is_better: false,
        });
        let terminate = median(|| terminate_round_trips(&client)).await;
        rows.push(Row {
            what: "process/terminate (unknown id) round trip (us)",
            server: micros(terminate, ROUND_TRIPS),
            baseline: micros(ceiling, ROUND_TRIPS),
            baseline_what: "same client, fake server",
            unit: "us",
            higher_is_better: false,
        });
        rows.push(Row {
            what: "client ceiling: round trip to a fake server (us)",
            server: micros(ceiling, ROUND_TRIPS),
            baseline: micros(echo, ROUND_TRIPS),
            baseline_what: "a line echoed by cat, raw",
            unit: "us",
            higher_is_better: false,
        });
    }
    if wanted("startup") {
        // Start-up: a fresh server (or bridge) process until its initialize
        // reply, against a fresh `cat` until it echoes a line.
        let echo = median_of(|| handshakes(vec!["cat".to_owned()], HANDSHAKES)).await;
        let server = server_binary();
        let stdio = median_of(|| handshakes(vec![server.clone()], HANDSHAKES)).await;
        rows.push(Row {
            what: "spawn -> initialize reply, stdio server (us)",
            server: micros(stdio, HANDSHAKES),
            baseline: micros(echo, HANDSHAKES),
            baseline_what: "spawn cat -> a line echoed",
            unit: "us",
            higher_is_better: false,
        });
        let dir = std::env::temp_dir().join(format!("exec-server-bench-d-{}", std::process::id()));
        let socket = dir.join("run").join("d.sock");
        let url = format!("unix:{}", socket.display());
        let mut daemon = std::process::Command::new(&server)
            .args(["--listen", &url])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut announced = String::new();
        std::io::BufReader::new(daemon.stdout.take().unwrap()).read_line(&mut announced).unwrap();
        // An older build without --connect: the row is left out.
        if announced.starts_with("unix:") {
            let bridged = median_of(|| {
                handshakes(vec![server.clone(), "--connect".into(), url.clone()], HANDSHAKES)
            })
            .await;
            rows.push(Row {
                what: "spawn -> initialize reply, --connect bridge (us)",
                server: micros(bridged, HANDSHAKES),
                baseline: micros(echo, HANDSHAKES),
                baseline_what: "spawn cat -> a line echoed",
                unit: "us",
                higher_is_better: false,
            });
        }
        let _ = daemon.kill();
        let _ = daemon.wait();
        let _ = std::fs::remove_dir_all(&dir);
    }

    if wanted("spawn") {
        // Spawns.
        let direct = median(direct_spawns_in_turn).await;
        let served = median(|| {
            n += 1;
            let prefix = format!("turn-{n}");
            let client = client.clone();
            async move { server_spawns_in_turn(&client, &prefix, None, None).await }
        })
        .await;
        rows.push(Row {
            what: "process/start of true -> exited (us each)",
            server: micros(served, SPAWNS),
            baseline: micros(direct, SPAWNS),
            baseline_what: "direct spawn + wait",
            unit: "us",
            higher_is_better: false,
        });
        // Memory, process and CPU limits: a cgroup per start (as root; an
        // older build or a server that cannot enforce them leaves the row out).
        let limits = ProcessLimits::new(Some(256 << 20), Some(64), Some(100));
        let probe = StartParams::new("limits-probe", ["true"], "/").limits(limits);
        if client.start(probe).await.is_ok() {
            let limited = median(|| {
                n += 1;
                let prefix = format!("limited-{n}");
                let client = client.clone();
                async move { server_spawns_in_turn(&client, &prefix, None, Some(limits)).await }
            })
            .await;
            rows.push(Row {
                what: "start of true with memory, process and CPU limits -> exited (us each)",
                server: micros(limited, SPAWNS),
                baseline: micros(served, SPAWNS),
                baseline_what: "unlimited, same server",
                unit: "us",
                higher_is_better: false,
            });
        } else {
            println!("(this server cannot enforce limits here: the limited row is left out)");
        }
        let scratch =
            std::env::temp_dir().join(format!("exec-server-bench-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        let sandbox = Sandbox::restricted([scratch.clone()]);
        let probe = StartParams::new("sandbox-probe", ["true"], "/").sandbox(sandbox.clone());
        // An older build (EXEC_SERVER_BIN) may have no sandbox: the row is left out.
        if client.start(probe).await.is_ok() {
            let confined = median(|| {
                n += 1;
                let prefix = format!("sandboxed-{n}");
                let client = client.clone();
                let sandbox = sandbox.clone();
                async move { server_spawns_in_turn(&client, &prefix, Some(&sandbox), None).await }
            })
            .await;
            rows.push(Row {
                what: "sandboxed start of true -> exited (us each)",
                server: micros(confined, SPAWNS),
                baseline: micros(served, SPAWNS),
                baseline_what: "unsandboxed, same server",
                unit: "us",
                higher_is_better: false,
            });
            // The kernel's floor for these namespaces: util-linux `unshare`
            // making the same user, mount, PID and IPC namespaces around
            // `true` (no view, no Landlock, no seccomp), against a direct spawn.
            if unshare_works().await {
                let namespaced = median(|| async {
                    for _ in 0..SPAWNS {
                        let status = tokio::process::Command::new("unshare")
                            .args(["--user", "--map-current-user", "--mount", "--pid", "--ipc"])
                            .args(["--fork", "true"])
                            .status()
                            .await
                            .unwrap();
                        assert!(status.success());
                    }
                })
                .await;
                rows.push(Row {
                    what: "`unshare -Ucmpi -f true`: the same namespaces, no server (us each)",
                    server: micros(namespaced, SPAWNS),
                    baseline: micros(direct, SPAWNS),
                    baseline_what: "direct spawn + wait of true",
                    unit: "us",
                    higher_is_better: false,
                });
            }
            // An access list: the system read, the scratch writable, a masked
            // directory, a masked file and a read-only carve-out inside it.
            for dir in ["secret", ".git"] {
                std::fs::create_dir_all(scratch.join(dir)).unwrap();
            }
            std::fs::write(scratch.join("prod.env"), "KEY=1").unwrap();
            let entry =
                |path: PathBuf, access| AccessEntry { path, access, optional: false, make: false };
            let mut entries: Vec<AccessEntry> = ["/usr", "/bin", "/lib", "/lib64", "/etc"]
                .iter()
                .map(|dir| entry(PathBuf::from(dir), Access::Read))
                .collect();
            entries.push(entry(scratch.clone(), Access::Write));
            entries.push(entry(scratch.join("secret"), Access::Deny));
            let mut listed = Sandbox::access(entries);
            listed.deny_globs = Some(vec![format!("{}/**/*.env", scratch.display())]);
            listed.keep_read_only = Some(vec![".git".to_owned()]);
            let probe = StartParams::new("access-probe", ["true"], "/").sandbox(listed.clone());
            if client.start(probe).await.is_ok() {
                let listed_median = median(|| {
                    n += 1;
                    let prefix = format!("listed-{n}");
                    let client = client.clone();
                    let listed = listed.clone();
                    async move { server_spawns_in_turn(&client, &prefix, Some(&listed), None).await }
                })
                .await;
                rows.push(Row {
                    what: "start under an access list (3 masks and binds) -> exited (us each)",
                    server: micros(listed_median, SPAWNS),
                    baseline: micros(confined, SPAWNS),
                    baseline_what: "sandboxed with writableRoots, same server",
                    unit: "us",
                    higher_is_better: false,
                });
            } else {
                println!("(this server has no access lists: their row is left out)");
            }
        } else {
            println!("(this server has no sandbox: the sandboxed row is left out)");
        }
        std::fs::remove_dir_all(&scratch).unwrap();
        let direct = median(direct_spawns_at_once).await;
        let served = median(|| {
            n += 1;
            let prefix = format!("fan-{n}");
            let client = client.clone();
            async move { server_spawns_at_once(&client, &prefix).await }
        })
        .await;
        rows.push(Row {
            what: "200 true at once -> all exited (ms)",
            server: served.as_secs_f64() * 1e3,
            baseline: direct.as_secs_f64() * 1e3,
            baseline_what: "200 direct spawns, then waits",
            unit: "ms",
            higher_is_better: false,
        });
    }
    if wanted("stream") {
        // Output stream, on a fresh server so its peak memory is the stream's.
        let streamer = launch().await;
        let stream_client = streamer.client().clone();
        // The pipe read directly moves between two speeds from run to run
        // here (about 1.0 and 1.9 GiB/s, as the scheduler places `head` and
        // the reader): the two are measured in turn, five times each.
        let (mut directs, mut serveds) = (Vec::new(), Vec::new());
        // Read after three streams, as before the runs were paired.
        let mut streaming_rss = 0.0;
        const { assert!(RSS_AFTER_STREAMS <= PAIRED_RUNS) };
        // Both CPUs' busy time over all runs of each: what each way costs per
        // byte, and how much of the machine it got.
        let (mut direct_cpu, mut served_cpu) = (Cpu::default(), Cpu::default());
        for run in 0..PAIRED_RUNS {
            let start = Instant::now();
            let before = busy_ticks();
            direct_output().await;
            let took = start.elapsed();
            direct_cpu.add(before, took);
            directs.push(took);
            n += 1;
            let start = Instant::now();
            let before = busy_ticks();
            server_output(&stream_client, &format!("out-{n}")).await;
            let took = start.elapsed();
            served_cpu.add(before, took);
            serveds.push(took);
            if run + 1 == RSS_AFTER_STREAMS {
                streaming_rss = peak_rss_mib(streamer.pid());
            }
        }
        let (direct, served) = (middle(directs), middle(serveds));
        let base = mib_per_s(OUTPUT_BYTES, direct);
        rows.push(Row {
            what: "stdout of head -c 256MiB -> client (MiB/s)",
            server: mib_per_s(OUTPUT_BYTES, served),
            baseline: base,
            baseline_what: "reading the pipe directly",
            unit: "MiB/s",
            higher_is_better: true,
        });
        rows.push(Row {
            what: "the same: CPU time of all processes per GiB (ms)",
            server: served_cpu.ms_per_gib(),
            baseline: direct_cpu.ms_per_gib(),
            baseline_what: "reading the pipe directly",
            unit: "ms",
            higher_is_better: false,
        });
        rows.push(Row {
            what: "the same: CPUs busy while streaming",
            server: served_cpu.cores(),
            baseline: direct_cpu.cores(),
            baseline_what: "reading the pipe directly",
            unit: "CPUs",
            higher_is_better: true,
        });
        let mut raw = Vec::new();
        for _ in 0..RUNS {
            raw.push(raw_output().await);
        }
        raw.sort_by_key(|run| run.0);
        let (raw_time, raw_rss) = raw[RUNS / 2];
        rows.push(Row {
            what: "the same, read raw (no decode) (MiB/s)",
            server: mib_per_s(OUTPUT_BYTES, raw_time),
            baseline: base,
            baseline_what: "reading the pipe directly",
            unit: "MiB/s",
            higher_is_better: true,
        });
        rows.push(Row {
            what: "server peak RSS, raw 256 MiB stream (MiB)",
            server: raw_rss,
            baseline: 8.0,
            baseline_what: "the target",
            unit: "MiB",
            higher_is_better: false,
        });
        let ceiling = median(|| {
            n += 1;
            let id = format!("fake-{n}");
            let client = fake_client.clone();
            async move { server_output(&client, &id).await }
        })
        .await;
        rows.push(Row {
            what: "client ceiling: pre-encoded output (MiB/s)",
            server: mib_per_s(OUTPUT_BYTES, ceiling),
            baseline: base,
            baseline_what: "reading the pipe directly",
            unit: "MiB/s",
            higher_is_better: true,
        });
        rows.push(Row {
            what: "server peak RSS while streaming (MiB)",
            server: streaming_rss,
            baseline: 11.0,
            baseline_what: "9 MiB and two exited processes' 1 MiB each",
            unit: "MiB",
            higher_is_better: false,
        });
        drop(streamer);
        // The row above is read after three streams on one server, so it
        // holds the retained output (1 MiB each) of the two that exited:
        // here one stream through the Client on a fresh server each time.
        let mut fresh = Vec::new();
        for run in 0..RUNS {
            let streamer = launch().await;
            server_output(streamer.client(), &format!("fresh-{run}")).await;
            fresh.push(peak_rss_mib(streamer.pid()));
        }
        fresh.sort_by(f64::total_cmp);
        rows.push(Row {
            what: "server peak RSS, one stream through the Client (MiB)",
            server: fresh[RUNS / 2],
            baseline: 9.0,
            baseline_what: "the target",
            unit: "MiB",
            higher_is_better: false,
        });
    }
    if wanted("fs") {
        // Files.
        let dir = std::env::temp_dir().join(format!("exec-server-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
        let direct = median(|| direct_fs_round_trip(&dir, &data)).await;
        let remote_fs = RemoteFileSystem::new(client.clone());
        let served = median(|| fs_round_trip(&remote_fs, &dir, &data)).await;
        let bytes = 2 * FILE_BYTES as u64;
        rows.push(Row {
            what: "fs write+read 64 MiB in 8 MiB pieces (MiB/s)",
            server: mib_per_s(bytes, served),
            baseline: mib_per_s(bytes, direct),
            baseline_what: "tokio::fs write + read",
            unit: "MiB/s",
            higher_is_better: true,
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }
    if wanted("ws") {
        // WebSocket against stdio (a build without --listen skips these).
        match Launcher::spawn_listening(
            LaunchCommand::new(server_binary()),
            ClientOptions::default(),
        )
        .await
        {
            Ok(ws) => {
                let (_listening, url) = listening().await;
                let served = median_of(|| upgrades(&url, UPGRADES)).await;
                let plain = plain_upgrade_server().await;
                let baseline = median_of(|| upgrades(&plain, UPGRADES)).await;
                rows.push(Row {
                    what: "WebSocket upgrade, peer uid checked (us)",
                    server: micros(served, UPGRADES),
                    baseline: micros(baseline, UPGRADES),
                    baseline_what: "the same upgrade, bench's own server",
                    unit: "us",
                    higher_is_better: false,
                });
                let ws_client = ws.client().clone();
                let over_ws = median(|| terminate_round_trips(&ws_client)).await;
                let terminate = median(|| terminate_round_trips(&client)).await;
                rows.push(Row {
                    what: "round trip over WebSocket (us)",
                    server: micros(over_ws, ROUND_TRIPS),
                    baseline: micros(terminate, ROUND_TRIPS),
                    baseline_what: "the same over stdio",
                    unit: "us",
                    higher_is_better: false,
                });
                let stdio_stream = median(|| {
                    n += 1;
                    let id = format!("stdio-{n}");
                    let client = client.clone();
                    async move { server_output(&client, &id).await }
                })
                .await;
                let ws_stream = median(|| {
                    n += 1;
                    let id = format!("ws-{n}");
                    let client = ws_client.clone();
                    async move { server_output(&client, &id).await }
                })
                .await;
                rows.push(Row {
                    what: "output 256 MiB over WebSocket (MiB/s)",
                    server: mib_per_s(OUTPUT_BYTES, ws_stream),
                    baseline: mib_per_s(OUTPUT_BYTES, stdio_stream),
                    baseline_what: "the same over stdio",
                    unit: "MiB/s",
                    higher_is_better: true,
                });
            }
            Err(error) => println!("(WebSocket rows skipped: {error})"),
        }
    }
    if wanted("peer") {
        peer::rows(&mut rows).await;
    }
    if wanted("static") {
        static_rows(&mut rows).await;
    }
    if wanted("net") {
        network::rows(&client, &mut rows).await;
    }
    if wanted("tunnel") {
        tunnel_rows(&client, &mut rows).await;
    }
    if wanted("watch") {
        watch_rows(&client, &mut rows).await;
    }
    if wanted("mcp") {
        mcp_rows(&client, &mut rows).await;
    }

    println!();
    for row in &rows {
        row.print();
    }
    let json = format!("[{}]", rows.iter().map(Row::json).collect::<Vec<_>>().join(","));
    println!("\n{json}");
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench.json");
    let _ = std::fs::write(target, &json);
}

/// 256 MiB through a forward over stdio, against a direct read and `ssh -L`.
async fn tunnel_rows(client: &Client, rows: &mut Vec<Row>) {
    let port = tunnel::source().await;
    let direct = median_of(|| tunnel::read_all(port)).await;
    let (_forward, local) = tunnel::forward(client, port).await;
    let through = median_of(|| tunnel::read_all(local)).await;
    let mib = |time| mib_per_s(tunnel::TUNNEL_BYTES, time);
    rows.push(Row {
        what: "tunnel 256 MiB via Client::forward (MiB/s)",
        server: mib(through),
        baseline: mib(direct),
        baseline_what: "direct loopback TCP",
        unit: "MiB/s",
        higher_is_better: true,
    });
    if let Some((ssh_local, _children, dir)) = tunnel::ssh_forward(port).await {
        let ssh = median_of(|| tunnel::read_all(ssh_local)).await;
        rows.push(Row {
            what: "tunnel 256 MiB via Client::forward (MiB/s)",
            server: mib(through),
            baseline: mib(ssh),
            baseline_what: "ssh -L through a local sshd",
            unit: "MiB/s",
            higher_is_better: true,
        });
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `exec_command`s in a row per run of the MCP row.
const MCP_CALLS: u32 = 100;

/// `exec_command {cmd: "true", shell: "/bin/sh", login: false}` through the
/// MCP face (sandboxed, the working directory writable), against the same
/// sandboxed start of `/bin/sh -c true` through our own protocol.
/// An MCP server (the binary, its first line `opening`) and its pipes; `None`
/// for a binary without an MCP face.
async fn mcp_session(
    scratch: &std::path::Path,
    opening: &str,
) -> Option<(tokio::process::Child, McpPipes)> {
    let mut child = tokio::process::Command::new(server_binary())
        .current_dir(scratch)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    stdin.write_all(opening.as_bytes()).await.unwrap();
    let answer = lines.next_line().await.unwrap().unwrap_or_default();
    if !answer.contains("\"result\"") {
        return None;
    }
    Some((child, (stdin, lines)))
}

type McpPipes =
    (tokio::process::ChildStdin, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>);

/// The time of `MCP_CALLS` calls of `exec_command` of `true`, one after
/// another, from id `first`; `meta` is the request envelope (empty for the
/// handshake era).
async fn mcp_calls(pipes: &mut McpPipes, meta: &str, first: u64) -> Duration {
    let (stdin, lines) = pipes;
    let start = Instant::now();
    for id in first..first + u64::from(MCP_CALLS) {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{{meta}"name":"exec_command","arguments":{{"cmd":"true","shell":"/bin/sh","login":false}}}}}}"#
        );
        stdin.write_all(format!("{call}\n").as_bytes()).await.unwrap();
        let answer = lines.next_line().await.unwrap().unwrap();
        assert!(answer.contains("Process exited with code 0"), "{answer}");
    }
    start.elapsed()
}

/// The time of `MCP_CALLS` sandboxed starts of `/bin/sh -c true` through
/// our own protocol, each waited for, with the environment the MCP face
/// gives its commands: its own, which it has from the bench (under `cargo
/// bench` that holds an `LD_LIBRARY_PATH` of three directories, which
/// `/bin/sh`'s loader searches on every start).
async fn protocol_starts(
    client: &Client,
    sandbox: &Sandbox,
    cwd: &std::path::Path,
    tag: usize,
) -> Duration {
    let start = Instant::now();
    for i in 0..MCP_CALLS {
        let id = format!("mcp-base-{tag}-{i}");
        let mut params =
            StartParams::new(id, ["/bin/sh", "-c", "true"], cwd).sandbox(sandbox.clone());
        params.env = std::env::vars().collect();
        let mut process = client.start(params).await.unwrap();
        assert_eq!(process.wait().await.unwrap().code, 0);
    }
    start.elapsed()
}

async fn mcp_rows(client: &Client, rows: &mut Vec<Row>) {
    let scratch =
        std::env::temp_dir().join(format!("exec-server-bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
    let opening =
        format!("{init}\n{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\n");
    let Some((mut child, mut pipes)) = mcp_session(&scratch, &opening).await else {
        println!("(this server has no MCP face: the MCP row is left out)");
        return;
    };
    // MCP 2026-07-28: every request carries its envelope; no handshake.
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"#;
    let discover = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{{{}}}}}"#,
        meta.trim_end_matches(',')
    );
    let mut modern = mcp_session(&scratch, &format!("{discover}\n")).await;
    if modern.is_none() {
        println!("(this server has no MCP 2026-07-28: its row is left out)");
    }
    // The three are measured in turn, as a start's time drifts over a run.
    let sandbox = Sandbox::restricted([scratch.clone()]);
    let (mut over_mcp, mut ours, mut over_modern) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..PAIRED_RUNS {
        let first = 1 + run as u64 * u64::from(MCP_CALLS);
        over_mcp.push(mcp_calls(&mut pipes, "", first).await);
        ours.push(protocol_starts(client, &sandbox, &scratch, run).await);
        if let Some((_, pipes)) = modern.as_mut() {
            over_modern.push(mcp_calls(pipes, meta, first).await);
        }
    }
    let over_mcp = middle(over_mcp);
    rows.push(Row {
        what: "MCP exec_command of true, sandboxed (us each)",
        server: micros(over_mcp, MCP_CALLS),
        baseline: micros(middle(ours), MCP_CALLS),
        baseline_what: "the same start, our protocol",
        unit: "us",
        higher_is_better: false,
    });
    if modern.is_some() {
        rows.push(Row {
            what: "MCP exec_command of true, MCP 2026-07-28 (us each)",
            server: micros(middle(over_modern), MCP_CALLS),
            baseline: micros(over_mcp, MCP_CALLS),
            baseline_what: "the same, MCP 2025-06-18",
            unit: "us",
            higher_is_better: false,
        });
    }
    // End of input ends each server.
    drop(pipes);
    let _ = child.wait().await;
    if let Some((mut child, pipes)) = modern {
        drop(pipes);
        let _ = child.wait().await;
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Upgrades in a row per run of the upgrade row.
const UPGRADES: u32 = 500;

/// `count` TCP connections to `url`, each sending an upgrade request and
/// reading the answer's head, one after another.
async fn upgrades(url: &str, count: u32) -> Duration {
    let address = url.trim_start_matches("ws://").to_owned();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    let start = Instant::now();
    for _ in 0..count {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let read = stream.read(&mut buffer).await.unwrap();
            assert!(read > 0, "the server closed before answering the upgrade");
            head.extend_from_slice(&buffer[..read]);
        }
        assert!(head.starts_with(b"HTTP/1.1 101 "), "{}", String::from_utf8_lossy(&head));
    }
    start.elapsed()
}

/// A `--listen ws://127.0.0.1:0` server of its own (killed when dropped) and its URL.
async fn listening() -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(server_binary())
        .args(["--listen", "ws://127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next_line().await.unwrap().unwrap();
    (child, url)
}

/// A bench-local server that reads each upgrade request and answers 101 at
/// once, with no check at all: the baseline of the upgrade row.
async fn plain_upgrade_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut head = Vec::new();
                let mut buffer = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => head.extend_from_slice(&buffer[..read]),
                    }
                }
                let key = tokio_tungstenite::tungstenite::handshake::derive_accept_key(
                    b"dGhlIHNhbXBsZSBub25jZQ==",
                );
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {key}\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                // Held until the client goes, as the server holds its connections.
                let _ = stream.read(&mut buffer).await;
            });
        }
    });
    url
}

/// Whether `BENCH_ONLY` (unset: everything) names `section`.
fn wanted(section: &str) -> bool {
    std::env::var("BENCH_ONLY").map_or(true, |only| only.split(',').any(|s| s.trim() == section))
}

/// `BENCH_ROLE=fake`: a server that costs nothing. Every request gets a result
/// at once (one that decodes as any of the results the bench asks for), and a
/// `process/start` is followed by 256 MiB of pre-encoded output in 64 KiB chunks.
fn fake_server() {
    let stdin = std::io::stdin().lock();
    // The pipe the real server asks for its stdout (256 KiB), so the client
    // is measured through the same pipe.
    // SAFETY: F_SETPIPE_SZ only resizes the buffer of the pipe on stdout.
    unsafe { libc::fcntl(1, libc::F_SETPIPE_SZ, 256 << 10) };
    let mut stdout = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let chunk = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(vec![0u8; CHUNK])
    };
    for line in stdin.lines() {
        let line = line.unwrap();
        let Some(id) = field(&line, r#""id":"#) else { continue };
        if line.contains(r#""method":"process/start""#) {
            let process = field(&line, r#""processId":"#).unwrap();
            writeln!(stdout, r#"{{"id":{id},"result":{{"processId":{process}}}}}"#).unwrap();
            let count = OUTPUT_BYTES as usize / CHUNK;
            for seq in 1..=count {
                writeln!(stdout, r#"{{"method":"process/output","params":{{"processId":{process},"seq":{seq},"stream":"stdout","chunk":"{chunk}"}}}}"#).unwrap();
            }
            writeln!(stdout, r#"{{"method":"process/exited","params":{{"processId":{process},"seq":{count},"exitCode":0}}}}"#).unwrap();
            writeln!(
                stdout,
                r#"{{"method":"process/closed","params":{{"processId":{process},"seq":{count}}}}}"#
            )
            .unwrap();
        } else {
            let result = r#"{"protocolVersion":"exec-server.v0","running":false,"capabilities":{"methods":[],"notifications":["process/output","process/exited","process/closed"]}}"#;
            writeln!(stdout, r#"{{"id":{id},"result":{result}}}"#).unwrap();
        }
        stdout.flush().unwrap();
    }
}

/// The JSON value after `key` in `line` (a number or a quoted string without escapes).
fn field(line: &str, key: &str) -> Option<String> {
    let rest = &line[line.find(key)? + key.len()..];
    let end = if let Some(quoted) = rest.strip_prefix('"') {
        quoted.find('"')? + 2
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].to_owned())
}

/// `fs/watch`: setting up a watch of 20,000 files against walking the same tree,
/// and change-to-notification latency against inotify read directly.
async fn watch_rows(client: &Client, rows: &mut Vec<Row>) {
    let dir = std::env::temp_dir().join(format!("exec-server-bench-watch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in 0..200 {
        let sub = dir.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("f{f}")), "").unwrap();
        }
    }
    let walk = median(|| async { walk(&dir) }).await;
    let setup = median(|| async {
        let watch = client.watch(&dir, true).await.unwrap();
        watch.unwatch().await.unwrap();
    })
    .await;
    rows.push(Row {
        what: "fs/watch of 20,000 files in 200 dirs (ms)",
        server: setup.as_secs_f64() * 1e3,
        baseline: walk.as_secs_f64() * 1e3,
        baseline_what: "walking the tree (read_dir)",
        unit: "ms",
        higher_is_better: false,
    });
    let mut watch = client.watch(&dir, true).await.unwrap();
    let mut served = Vec::new();
    let mut burst = Vec::new();
    for n in 0..100 {
        let file = dir.join(format!("d{}/lat{n}", n % 200));
        // Even changes come after a quiet period longer than the 50 ms
        // window (delivered at once); odd ones right after the previous
        // delivery (merged into the window, by design).
        if n % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        let start = Instant::now();
        std::fs::write(&file, "x").unwrap();
        'wait: loop {
            for change in watch.next().await.unwrap() {
                if std::path::Path::new(&change.path) == file {
                    break 'wait;
                }
            }
        }
        if n % 2 == 0 {
            served.push(start.elapsed());
        } else {
            burst.push(start.elapsed());
        }
    }
    drop(watch);
    burst.sort();
    let direct = direct_inotify_latencies(&dir, 100);
    for (what, pick) in [("p50", 50usize), ("p99", 99)] {
        served.sort();
        let mut direct = direct.clone();
        direct.sort();
        rows.push(Row {
            what: if pick == 50 {
                "change after quiet -> fs/changed, p50 (ms)"
            } else {
                "change after quiet -> fs/changed, p99 (ms)"
            },
            server: served[(pick * served.len() / 100).min(served.len() - 1)].as_secs_f64() * 1e3,
            baseline: direct[pick.min(direct.len() - 1)].as_secs_f64() * 1e3,
            baseline_what: if what == "p50" {
                "inotify read directly, p50"
            } else {
                "inotify read directly, p99"
            },
            unit: "ms",
            higher_is_better: false,
        });
    }
    // A change right after a delivery waits for the window's end.
    rows.push(Row {
        what: "change in a burst -> fs/changed, p50 (ms)",
        server: burst[burst.len() / 2].as_secs_f64() * 1e3,
        baseline: 50.0,
        baseline_what: "the merge window",
        unit: "ms",
        higher_is_better: false,
    });
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(dir: &std::path::Path) {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            }
        }
    }
}

/// Write-to-event latency of a bare inotify watch on one directory, read blocking.
fn direct_inotify_latencies(dir: &std::path::Path, count: usize) -> Vec<Duration> {
    let sub = dir.join("d0");
    let c_sub = std::ffi::CString::new(sub.to_str().unwrap()).unwrap();
    // SAFETY: plain inotify calls on descriptors this function owns and closes.
    unsafe {
        let fd = libc::inotify_init1(libc::IN_CLOEXEC);
        assert!(fd >= 0);
        assert!(
            libc::inotify_add_watch(fd, c_sub.as_ptr(), libc::IN_CREATE | libc::IN_CLOSE_WRITE)
                >= 0
        );
        let mut latencies = Vec::new();
        let mut buffer = [0u8; 4096];
        for n in 0..count {
            let start = Instant::now();
            std::fs::write(sub.join(format!("direct{n}")), "x").unwrap();
            assert!(libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) > 0);
            latencies.push(start.elapsed());
        }
        libc::close(fd);
        latencies
    }
}

/// The static build (`EXEC_SERVER_STATIC_BIN`, else `just static`'s) against
/// the glibc build (`EXEC_SERVER_GLIBC_BIN`, else `just ship`'s) in the same
/// run: start-up, the stream through the `Client`, and peak RSS while streaming.
async fn static_rows(rows: &mut Vec<Row>) {
    let path = std::env::var("EXEC_SERVER_STATIC_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/x86_64-unknown-linux-musl/ship/exec-server")
            .to_owned()
    });
    if !std::path::Path::new(&path).is_file() {
        println!("(static rows left out: no {path}; `just static` builds it)");
        return;
    }
    // `just bench` measures the static build; this section sets the glibc
    // `ship` build beside it (`EXEC_SERVER_GLIBC_BIN` names another).
    let glibc = std::env::var("EXEC_SERVER_GLIBC_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/ship/exec-server").to_owned()
    });
    if !std::path::Path::new(&glibc).is_file() {
        println!("(static rows left out: no {glibc}; `just ship` builds it)");
        return;
    }
    let startup = |binary: String| median_of(move || handshakes(vec![binary.clone()], HANDSHAKES));
    let (ours, theirs) = (startup(path.clone()).await, startup(glibc.clone()).await);
    rows.push(Row {
        what: "static build: spawn -> initialize reply (us)",
        server: micros(ours, HANDSHAKES),
        baseline: micros(theirs, HANDSHAKES),
        baseline_what: "the glibc build",
        unit: "us",
        higher_is_better: false,
    });
    let mut results = Vec::new();
    for binary in [&path, &glibc] {
        let launcher = Launcher::spawn(LaunchCommand::new(binary)).await.unwrap();
        let client = launcher.client().clone();
        let mut n = 0;
        let time = median(|| {
            n += 1;
            let (client, id) = (client.clone(), format!("static-out-{n}"));
            async move { server_output(&client, &id).await }
        })
        .await;
        results.push((time, peak_rss_mib(launcher.pid())));
    }
    rows.push(Row {
        what: "static build: 256 MiB through the Client (MiB/s)",
        server: mib_per_s(OUTPUT_BYTES, results[0].0),
        baseline: mib_per_s(OUTPUT_BYTES, results[1].0),
        baseline_what: "the glibc build",
        unit: "MiB/s",
        higher_is_better: true,
    });
    rows.push(Row {
        what: "static build: peak RSS streaming (MiB)",
        server: results[0].1,
        baseline: results[1].1,
        baseline_what: "the glibc build",
        unit: "MiB",
        higher_is_better: false,
    });
}
