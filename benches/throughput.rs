//! `just bench`: exec-server against baselines measured in the same run.
//!
//! Each line reports the server's figure, the baseline's, and their ratio:
//! output throughput vs reading the same command's stdout directly, spawn
//! latency vs spawning directly, fs throughput vs tokio::fs, and request
//! round trips vs a line echoed through `cat` over pipes. A last line reports
//! how far past its grace a graceful terminate of a SIGTERM-ignoring shell ends.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use exec_server::protocol::{GetMetadata, PathParams, TerminateParams};
use exec_server::server::Config;
use exec_server::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_exec-server");

/// The server binary to measure: `EXEC_SERVER_BIN` (to compare builds), else this crate's.
fn server_binary() -> String {
    std::env::var("EXEC_SERVER_BIN").unwrap_or_else(|_| BIN.to_owned())
}
const OUTPUT_BYTES: u64 = 256 * 1024 * 1024;
const SPAWNS: u32 = 200;
const ROUND_TRIPS: u32 = 2000;
const FILE_BYTES: usize = 64 * 1024 * 1024;
const PIECE: u64 = 8 * 1024 * 1024;
const RUNS: usize = 3;

/// The median of `RUNS` timings of `f`.
async fn median<F, Fut>(mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        f().await;
        times.push(start.elapsed());
    }
    times.sort();
    times[RUNS / 2]
}

fn report(what: &str, server: f64, baseline: f64, unit: &str, higher_is_better: bool) {
    let ratio = server / baseline;
    let note = if higher_is_better { "of baseline" } else { "x baseline" };
    println!("{what:<44} {server:>10.1} {unit:<6} baseline {baseline:>10.1} {unit:<6} ratio {ratio:.2} {note}");
}

fn mib_per_s(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / time.as_secs_f64()
}

fn head_argv() -> Vec<String> {
    vec!["head".into(), "-c".into(), OUTPUT_BYTES.to_string(), "/dev/zero".into()]
}

async fn direct_output() {
    let argv = head_argv();
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buffer = vec![0; 64 * 1024];
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

async fn direct_spawns() {
    for _ in 0..SPAWNS {
        let status = tokio::process::Command::new("true").status().await.unwrap();
        assert!(status.success());
    }
}

async fn server_spawns(client: &Client, prefix: &str) {
    for i in 0..SPAWNS {
        let mut process =
            client.start(StartParams::new(format!("{prefix}-{i}"), ["true"], "/")).await.unwrap();
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
        let line = format!("{{\"id\":{i},\"method\":\"process/terminate\",\"params\":{{\"processId\":\"no-such-process\"}}}}\n");
        stdin.write_all(line.as_bytes()).await.unwrap();
        lines.next_line().await.unwrap().unwrap();
    }
    drop(stdin);
    cat.wait().await.unwrap();
}

async fn server_round_trips(client: &Client) {
    for _ in 0..ROUND_TRIPS {
        let params = TerminateParams::new("no-such-process");
        assert!(!client.terminate(params).await.unwrap().running);
    }
}

async fn metadata_round_trips(client: &Client) {
    for _ in 0..ROUND_TRIPS {
        let params = PathParams::new("/tmp");
        assert!(client.call::<GetMetadata>(&params).await.unwrap().is_directory);
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

#[tokio::main]
async fn main() {
    let launcher = Launcher::spawn(LaunchCommand::new(server_binary())).await.unwrap();
    let remote = launcher.client().clone();
    let in_process = Client::in_process(Config::default()).await.unwrap();
    let ws_launcher =
        Launcher::spawn_listening(LaunchCommand::new(server_binary()), ClientOptions::default())
            .await
            .unwrap();
    let ws = ws_launcher.client().clone();
    println!("exec-server benchmarks (median of {RUNS} runs; baselines measured in this run)");

    let direct = median(direct_output).await;
    let mut n = 0;
    let via_binary = median(|| {
        n += 1;
        let id = format!("out-{n}");
        let remote = remote.clone();
        async move { server_output(&remote, &id).await }
    })
    .await;
    let via_duplex = median(|| {
        n += 1;
        let id = format!("out-{n}");
        let client = in_process.clone();
        async move { server_output(&client, &id).await }
    })
    .await;
    let base = mib_per_s(OUTPUT_BYTES, direct);
    report(
        "output 256 MiB, binary over stdio (MiB/s)",
        mib_per_s(OUTPUT_BYTES, via_binary),
        base,
        "MiB/s",
        true,
    );
    report(
        "output 256 MiB, in-process duplex (MiB/s)",
        mib_per_s(OUTPUT_BYTES, via_duplex),
        base,
        "MiB/s",
        true,
    );
    let via_ws = median(|| {
        n += 1;
        let id = format!("out-{n}");
        let ws = ws.clone();
        async move { server_output(&ws, &id).await }
    })
    .await;
    report(
        "output 256 MiB, WebSocket vs stdio (MiB/s)",
        mib_per_s(OUTPUT_BYTES, via_ws),
        mib_per_s(OUTPUT_BYTES, via_binary),
        "MiB/s",
        true,
    );

    let direct = median(direct_spawns).await;
    let via_binary = median(|| {
        n += 1;
        let prefix = format!("spawn-{n}");
        let remote = remote.clone();
        async move { server_spawns(&remote, &prefix).await }
    })
    .await;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / SPAWNS as f64;
    report("spawn+exit of `true`, binary (us each)", per(via_binary), per(direct), "us", false);

    let direct = median(cat_round_trips).await;
    let via_binary = median(|| {
        let remote = remote.clone();
        async move { server_round_trips(&remote).await }
    })
    .await;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / ROUND_TRIPS as f64;
    report("request round trip, process/terminate (us)", per(via_binary), per(direct), "us", false);
    let via_ws = median(|| {
        let ws = ws.clone();
        async move { server_round_trips(&ws).await }
    })
    .await;
    report("round trip over WebSocket vs stdio (us)", per(via_ws), per(via_binary), "us", false);
    let via_binary = median(|| {
        let remote = remote.clone();
        async move { metadata_round_trips(&remote).await }
    })
    .await;
    report("request round trip, fs/getMetadata (us)", per(via_binary), per(direct), "us", false);

    let dir = std::env::temp_dir().join(format!("exec-server-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
    let direct = median(|| direct_fs_round_trip(&dir, &data)).await;
    let remote_fs = RemoteFileSystem::new(remote.clone());
    let via_binary = median(|| fs_round_trip(&remote_fs, &dir, &data)).await;
    let bytes = 2 * FILE_BYTES as u64;
    report(
        "fs write+read 64 MiB in 8 MiB pieces (MiB/s)",
        mib_per_s(bytes, via_binary),
        mib_per_s(bytes, direct),
        "MiB/s",
        true,
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let grace = Duration::from_millis(200);
    let params = StartParams::new(
        "stubborn",
        ["sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.01; done"],
        "/",
    );
    let mut stubborn = remote.start(params).await.unwrap();
    stubborn.next_output().await.unwrap();
    let start = Instant::now();
    stubborn.terminate(Some(grace)).await.unwrap();
    let exit = stubborn.wait().await.unwrap();
    let took = start.elapsed();
    println!(
        "terminate graceMs=200 of a SIGTERM-ignoring shell: {exit:?} after {:.1} ms ({:.1} ms past the grace)",
        took.as_secs_f64() * 1e3,
        (took.saturating_sub(grace)).as_secs_f64() * 1e3
    );
    let outcome = launcher.shutdown(Duration::from_secs(5)).await.unwrap();
    println!("server shutdown: {outcome:?}");
}
