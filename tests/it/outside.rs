//! An outside host for network tests, made without touching this
//! machine's network: two network namespaces of the test's own, a "host"
//! where the server runs and an "outside" host behind a veth pair, removed
//! on every path (a panic included). Each address is checked with `ip route
//! get` in the test's host before it is used.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;

use crate::binary::{Binary, BIN};
use crate::sandbox::{User, NOBODY};
use crate::support::within;

/// Two network namespaces of the test's own: the server's "host", and an
/// "outside" host behind a veth pair (host side `10.77.N.1`, far side
/// `10.77.N.2`, which also has 169.254.169.254, routed there from the host),
/// serving `dir` over HTTP on port 8080 of every address it has. The host
/// has a local range, `10.88.N.0/24`, that no interface lists (AnyIP).
pub struct TestHosts {
    pub host: String,
    pub outside: String,
    pub host_link: String,
    pub near: IpAddr,
    pub far: IpAddr,
    /// A second address of the outside host.
    pub far2: IpAddr,
    pub anyip: IpAddr,
    server: Option<Child>,
    /// What the outside HTTP server logged (one line per request).
    pub log: std::path::PathBuf,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

pub fn ip(args: &[&str]) -> String {
    let output = Command::new("ip").args(args).output().unwrap();
    assert!(output.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

impl TestHosts {
    pub fn start(dir: &std::path::Path) -> TestHosts {
        let n = (std::process::id() + NEXT.fetch_add(1, Ordering::SeqCst)) % 250 + 1;
        let (host, outside) = (format!("es-host-{n}"), format!("es-outside-{n}"));
        // Namespaces left by a killed run of the same number go first.
        for namespace in [&host, &outside] {
            let _ =
                Command::new("ip").args(["netns", "del", namespace]).stderr(Stdio::null()).status();
        }
        // From here on, Drop removes whatever was made (on a panic too).
        let mut hosts = TestHosts {
            host: host.clone(),
            outside: outside.clone(),
            host_link: format!("esh{n}"),
            near: format!("10.77.{n}.1").parse().unwrap(),
            far: format!("10.77.{n}.2").parse().unwrap(),
            far2: format!("10.77.{n}.3").parse().unwrap(),
            anyip: format!("10.88.{n}.7").parse().unwrap(),
            server: None,
            log: dir.with_extension("log"),
        };
        let far_link = format!("eso{n}");
        ip(&["netns", "add", &host]);
        ip(&["netns", "add", &outside]);
        let link = &hosts.host_link;
        ip(&["-n", &host, "link", "add", link, "type", "veth", "peer", "name", &far_link]);
        ip(&["-n", &host, "link", "set", &far_link, "netns", &outside]);
        ip(&["-n", &host, "addr", "add", &format!("10.77.{n}.1/24"), "dev", link]);
        ip(&["-n", &host, "link", "set", link, "up"]);
        ip(&["-n", &host, "link", "set", "lo", "up"]);
        ip(&["-n", &host, "route", "add", "local", &format!("10.88.{n}.0/24"), "dev", "lo"]);
        ip(&["-n", &outside, "addr", "add", &format!("10.77.{n}.2/24"), "dev", &far_link]);
        ip(&["-n", &outside, "addr", "add", &format!("10.77.{n}.3/24"), "dev", &far_link]);
        ip(&["-n", &outside, "addr", "add", "169.254.169.254/32", "dev", &far_link]);
        ip(&["-n", &outside, "link", "set", &far_link, "up"]);
        ip(&["-n", &outside, "link", "set", "lo", "up"]);
        ip(&["-n", &host, "route", "add", "169.254.169.254/32", "via", &format!("10.77.{n}.2")]);
        let server = Command::new("ip")
            .args(["netns", "exec", &outside, "python3", "-m", "http.server", "8080"])
            .arg("--directory")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&hosts.log).unwrap())
            .spawn()
            .unwrap();
        hosts.server = Some(server);
        hosts.confirm_outside(hosts.far);
        hosts
    }

    /// Runs `work` on a thread in the host's network namespace (its sockets
    /// stay there, whichever thread uses them later).
    pub fn in_host<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.host);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let namespace = std::fs::File::open(&path).unwrap();
                    // SAFETY: setns of this thread alone, to a namespace file we hold open.
                    let rc = unsafe {
                        libc::setns(std::os::fd::AsRawFd::as_raw_fd(&namespace), libc::CLONE_NEWNET)
                    };
                    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                    work()
                })
                .join()
                .unwrap()
        })
    }

    /// The server binary as `user`, in the host's network namespace, after the handshake.
    pub async fn server(&self, user: User) -> Binary {
        let mut command = tokio::process::Command::new("nsenter");
        command.arg(format!("--net=/run/netns/{}", self.host)).arg("--");
        if user == User::Nobody {
            let ids = [format!("--reuid={NOBODY}"), format!("--regid={NOBODY}")];
            command.arg("setpriv").args(ids).args(["--clear-groups", "--"]);
        }
        command.arg(*BIN).stderr(Stdio::inherit());
        let mut server = Binary::from_command(command);
        server.result("initialize", json!({"clientName": "netns-test"})).await;
        server.send_line(r#"{"method":"initialized"}"#).await;
        server
    }

    /// The host's addresses that a socket can bind to (link-local v6 needs a scope: left out).
    pub fn addresses(&self) -> Vec<IpAddr> {
        parse_addresses(&ip(&["-n", &self.host, "-o", "addr", "show"]))
    }

    /// Fails unless `address` leads, from the test's host, into the outside namespace.
    pub fn confirm_outside(&self, address: IpAddr) {
        let route = ip(&["-n", &self.host, "route", "get", &address.to_string()]);
        assert!(
            route.contains(&format!("dev {} ", self.host_link)),
            "{address} does not lead into the test's outside host: {route}"
        );
    }

    /// Waits until its HTTP server answers at `address` (from the test's host).
    pub async fn serving(&self, address: IpAddr) {
        self.confirm_outside(address);
        within("the outside host's HTTP server", async {
            loop {
                if let Ok(body) = self.in_host(|| http_get(address, "/")) {
                    if body.starts_with("HTTP/1.0 200") {
                        return;
                    }
                }
                tokio::task::yield_now().await;
            }
        })
        .await;
    }
}

impl Drop for TestHosts {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        // Their links, addresses and routes go with them.
        for namespace in [&self.host, &self.outside] {
            let _ = Command::new("ip").args(["netns", "del", namespace]).status();
        }
    }
}

/// A plain HTTP/1.0 GET from this host; the whole answer.
pub fn http_get(address: IpAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(
        &SocketAddr::new(address, 8080),
        std::time::Duration::from_secs(2),
    )?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// This host's addresses that a socket can bind to (link-local v6 needs a scope: left out).
pub fn host_addresses() -> Vec<IpAddr> {
    parse_addresses(&ip(&["-o", "addr", "show"]))
}

/// The addresses in `ip -o addr show`'s output, but link-local v6 ones.
pub fn parse_addresses(text: &str) -> Vec<IpAddr> {
    let mut addresses: Vec<IpAddr> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet" || *w == "inet6")?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .filter(|address: &IpAddr| match address {
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
            IpAddr::V4(_) => true,
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses
}

impl TestHosts {
    /// The server binary in the host's network namespace and a mount
    /// namespace of its own where `hosts_file` is bind-mounted on
    /// /etc/hosts (the machine's own is never touched), after the handshake
    /// (`initialize` params extended by `init`).
    pub async fn server_with_hosts(
        &self,
        hosts_file: &std::path::Path,
        args: &[&str],
        init: serde_json::Value,
    ) -> Binary {
        let mut server = Binary::from_command(self.command_with_hosts(hosts_file, args));
        let mut params = json!({"clientName": "outside-test"});
        if let (Some(params), Some(extra)) = (params.as_object_mut(), init.as_object()) {
            params.extend(extra.clone());
        }
        server.result("initialize", params).await;
        server.send_line(r#"{"method":"initialized"}"#).await;
        server
    }

    /// The server binary with `args`, in the host's network namespace and a
    /// mount namespace of its own where `hosts_file` is bind-mounted on /etc/hosts.
    pub fn command_with_hosts(
        &self,
        hosts_file: &std::path::Path,
        args: &[&str],
    ) -> tokio::process::Command {
        self.command_with_files(hosts_file, None, args)
    }

    /// [`TestHosts::command_with_hosts`], with `resolv` bind-mounted on
    /// /etc/resolv.conf too when given.
    pub fn command_with_files(
        &self,
        hosts_file: &std::path::Path,
        resolv: Option<&std::path::Path>,
        args: &[&str],
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("nsenter");
        command.arg(format!("--net=/run/netns/{}", self.host)).arg("--");
        command.args(["unshare", "--mount", "--propagation", "private", "--"]);
        let resolv = resolv.map_or(String::new(), |r| {
            format!("mount --bind '{}' /etc/resolv.conf && ", r.display())
        });
        let script = format!("mount --bind \"$0\" /etc/hosts && {resolv}exec \"$@\"");
        command.args(["sh", "-c", &script]);
        command.arg(hosts_file).arg(*BIN).args(args).stderr(Stdio::inherit());
        command
    }

    /// The request lines the outside HTTP server logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
