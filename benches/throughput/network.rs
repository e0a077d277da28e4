//! Rows for sandboxes with network: a start with a policy (a namespace with
//! only its loopback, and the server's proxy) and one with `network: true`
//! (its namespace and slirp4netns), each against a sandboxed start without
//! network, and (as root) a download from an outside host (a network
//! namespace behind a veth pair, made here) inside the sandbox, through the
//! proxy and through slirp4netns, against the same download on the host.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use exec_server::{Client, NetworkPolicy, Sandbox, StartParams};

use super::{median, micros, Row};

/// Starts timed per run (each takes a slirp4netns of its own).
const STARTS: u32 = 40;
/// The download's size.
const DOWNLOAD_BYTES: u64 = 256 * 1024 * 1024;

async fn starts(client: &Client, prefix: &str, sandbox: &Sandbox) {
    for i in 0..STARTS {
        let params =
            StartParams::new(format!("{prefix}-{i}"), ["true"], "/").sandbox(sandbox.clone());
        let mut process = client.start(params).await.unwrap();
        assert_eq!(process.wait().await.unwrap().code, 0);
    }
}

pub(super) async fn rows(client: &Client, rows: &mut Vec<Row>) {
    let scratch =
        std::env::temp_dir().join(format!("exec-server-bench-net-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let plain = Sandbox::restricted([scratch.clone()]);
    let networked = Sandbox::restricted([scratch.clone()]).network(true);
    let proxied =
        Sandbox::restricted([scratch.clone()]).network_policy(NetworkPolicy::allow(["10.78.0.2"]));
    let mut n = 0;
    let without = median(|| {
        n += 1;
        let (client, sandbox, prefix) = (client.clone(), plain.clone(), format!("nonet-{n}"));
        async move { starts(&client, &prefix, &sandbox).await }
    })
    .await;
    let with_policy = median(|| {
        n += 1;
        let (client, sandbox, prefix) = (client.clone(), proxied.clone(), format!("policy-{n}"));
        async move { starts(&client, &prefix, &sandbox).await }
    })
    .await;
    rows.push(Row {
        what: "sandboxed start with a network policy -> exited (us each)",
        server: micros(with_policy, STARTS),
        baseline: micros(without, STARTS),
        baseline_what: "sandboxed without network",
        unit: "us",
        higher_is_better: false,
    });
    let probe = StartParams::new("net-probe", ["true"], "/").sandbox(networked.clone());
    let slirp = match client.start(probe).await {
        Ok(mut probe) => {
            let _ = probe.wait().await;
            true
        }
        Err(error) => {
            println!("(network: true rows left out: {error})");
            false
        }
    };
    if slirp {
        let with = median(|| {
            n += 1;
            let (client, sandbox, prefix) = (client.clone(), networked.clone(), format!("net-{n}"));
            async move { starts(&client, &prefix, &sandbox).await }
        })
        .await;
        rows.push(Row {
            what: "sandboxed start with network: true -> exited (us each)",
            server: micros(with, STARTS),
            baseline: micros(without, STARTS),
            baseline_what: "sandboxed without network",
            unit: "us",
            higher_is_better: false,
        });
    }
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        println!("(not root: the outside host for the download row cannot be made)");
        return;
    }
    let file = scratch.join("download");
    let out = std::fs::File::create(&file).unwrap();
    out.set_len(DOWNLOAD_BYTES).unwrap();
    let outside = Outside::start(&scratch);
    let url = format!("http://{}:8080/download", outside.far);
    let fetch = format!(
        "import sys, urllib.request\nr = urllib.request.urlopen(sys.argv[1])\nn = 0\nwhile True:\n    b = r.read(1 << 20)\n    if not b: break\n    n += len(b)\nassert n == {DOWNLOAD_BYTES}, n"
    );
    let on_host = median(|| {
        let (fetch, url) = (fetch.clone(), url.clone());
        async move {
            let status = tokio::process::Command::new("python3")
                .args(["-c", &fetch, &url])
                .status()
                .await
                .unwrap();
            assert!(status.success());
        }
    })
    .await;
    let through_proxy = median(|| {
        n += 1;
        let (client, sandbox) = (client.clone(), proxied.clone());
        let params = StartParams::new(format!("fetch-{n}"), ["python3", "-c", &fetch, &url], "/")
            .sandbox(sandbox);
        async move {
            let mut process = client.start(params).await.unwrap();
            assert_eq!(process.wait().await.unwrap().code, 0);
        }
    })
    .await;
    rows.push(Row {
        what: "download 256 MiB from another host through the policy's proxy (MiB/s)",
        server: mib_per_s(through_proxy),
        baseline: mib_per_s(on_host),
        baseline_what: "the same download on the host",
        unit: "MiB/s",
        higher_is_better: true,
    });
    if !slirp {
        drop(outside);
        std::fs::remove_dir_all(&scratch).unwrap();
        return;
    }
    let inside = median(|| {
        n += 1;
        let (client, sandbox) = (client.clone(), networked.clone());
        let params = StartParams::new(format!("fetch-{n}"), ["python3", "-c", &fetch, &url], "/")
            .sandbox(sandbox);
        async move {
            let mut process = client.start(params).await.unwrap();
            assert_eq!(process.wait().await.unwrap().code, 0);
        }
    })
    .await;
    rows.push(Row {
        what: "download 256 MiB from another host, network: true (MiB/s)",
        server: mib_per_s(inside),
        baseline: mib_per_s(on_host),
        baseline_what: "the same download on the host",
        unit: "MiB/s",
        higher_is_better: true,
    });
    drop(outside);
    std::fs::remove_dir_all(&scratch).unwrap();
}

fn mib_per_s(time: Duration) -> f64 {
    DOWNLOAD_BYTES as f64 / (1024.0 * 1024.0) / time.as_secs_f64()
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().unwrap();
    assert!(status.success(), "ip {args:?}");
}

/// A host behind a veth pair in a namespace of its own, serving `dir`.
struct Outside {
    server: std::process::Child,
    far: &'static str,
}

const NAMESPACE: &str = "es-bench-outside";

impl Outside {
    fn start(dir: &Path) -> Outside {
        let _ = Command::new("ip").args(["netns", "del", NAMESPACE]).stderr(Stdio::null()).status();
        ip(&["netns", "add", NAMESPACE]);
        ip(&[
            "link", "add", "esbench0", "type", "veth", "peer", "name", "esbench1", "netns",
            NAMESPACE,
        ]);
        ip(&["addr", "add", "10.78.0.1/24", "dev", "esbench0"]);
        ip(&["link", "set", "esbench0", "up"]);
        ip(&["-n", NAMESPACE, "addr", "add", "10.78.0.2/24", "dev", "esbench1"]);
        ip(&["-n", NAMESPACE, "link", "set", "esbench1", "up"]);
        ip(&["-n", NAMESPACE, "link", "set", "lo", "up"]);
        let route = Command::new("ip").args(["route", "get", "10.78.0.2"]).output().unwrap();
        assert!(
            String::from_utf8_lossy(&route.stdout).contains("dev esbench0 "),
            "10.78.0.2 must lead into the bench's namespace"
        );
        let server = Command::new("ip")
            .args([
                "netns",
                "exec",
                NAMESPACE,
                "python3",
                "-m",
                "http.server",
                "8080",
                "--directory",
            ])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect("10.78.0.2:8080").is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the outside host's server did not start"
            );
            std::thread::yield_now();
        }
        Outside { server, far: "10.78.0.2" }
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip").args(["netns", "del", NAMESPACE]).status();
    }
}
