//! A sandbox with network has a network namespace of its own: other hosts
//! are reached, nothing on the server's host is (its loopback, every
//! address of its interfaces, the server's own listener), and without
//! slirp4netns a networked start is refused.
//!
//! The test that reaches "other hosts" changes nothing of this machine's
//! network: it makes two network namespaces of its own, a "host" where the
//! server runs (with a local range and a route to 169.254.169.254 of its
//! own) and an "outside" host behind a veth pair, and removes both on every
//! path (a panic included). Each address is checked with `ip route get` in
//! the test's host first.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::process::{Command, Stdio};

use exec_server::{Client, ClientOptions, Sandbox, StartParams};
use serde_json::json;

use crate::binary::Binary;
use crate::outside::{host_addresses, ip, TestHosts};
use crate::sandbox::{run, run_started, sandboxed, Tree, User, NOBODY};
use crate::support::{root_or_skip, scratch, within};
use crate::websocket::WsServer;

/// What the sandbox tries: a TCP connect to each `host:port` and a UDP
/// datagram to each; one line per try.
const PROBE: &str = r#"
import socket, sys
for target in sys.argv[1:]:
    kind, host, port = target.split(",")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if kind == "tcp":
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect((host, int(port)))
            print(target, "connected")
        except OSError as e:
            print(target, e.__class__.__name__, e.errno)
    else:
        s = socket.socket(family, socket.SOCK_DGRAM)
        try:
            s.sendto(b"probe", (host, int(port)))
            print(target, "sent")
        except OSError as e:
            print(target, e.__class__.__name__, e.errno)
    s.close()
"#;

#[tokio::test]
async fn a_networked_sandbox_reaches_other_hosts_and_nothing_on_this_one() {
    if !root_or_skip("a network namespace for the outside host") {
        return;
    }
    let dir = scratch("netns-outside");
    let payload: Vec<u8> =
        (0..1_048_576u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(dir.join("payload"), &payload).unwrap();
    let hosts = TestHosts::start(&dir);
    hosts.serving(hosts.far).await;
    // The metadata address answers the test's host, from the outside namespace.
    let metadata: IpAddr = "169.254.169.254".parse().unwrap();
    hosts.serving(metadata).await;
    // Listeners on every address of the host (the veth's side included),
    // and on one of its local range (AnyIP).
    let mut addresses = hosts.addresses();
    assert!(addresses.contains(&hosts.near), "{addresses:?}");
    addresses.push(hosts.anyip);
    let (tcp, udp) = hosts.in_host(|| {
        let tcp: Vec<TcpListener> =
            addresses.iter().map(|a| TcpListener::bind((*a, 0)).unwrap()).collect();
        let udp: Vec<UdpSocket> =
            addresses.iter().map(|a| UdpSocket::bind((*a, 0)).unwrap()).collect();
        (tcp, udp)
    });
    for socket in &tcp {
        socket.set_nonblocking(true).unwrap();
    }
    for socket in &udp {
        socket.set_nonblocking(true).unwrap();
    }
    let mut targets: Vec<String> = Vec::new();
    for (listener, socket) in tcp.iter().zip(&udp) {
        let (t, u) = (listener.local_addr().unwrap(), socket.local_addr().unwrap());
        targets.push(format!("tcp,{},{}", t.ip(), t.port()));
        targets.push(format!("udp,{},{}", u.ip(), u.port()));
    }
    targets.push(format!("tcp,{metadata},8080"));
    for user in User::all() {
        let tree = Tree::new("netns", user);
        let mut server = hosts.server(user).await;
        let got = tree.w.join("got");
        let script = format!(
            "import urllib.request; open('{}', 'wb').write(urllib.request.urlopen('http://{}:8080/payload', timeout=10).read())",
            got.display(),
            hosts.far
        );
        let mut argv = vec!["python3", "-c", PROBE];
        argv.extend(targets.iter().map(String::as_str));
        let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()], "network": true});
        let started = server
            .call("process/start", sandboxed("probe", &argv, tree.w(), json!({}), sandbox.clone()))
            .await;
        if user == User::Nobody && !tun_usable_by_nobody() {
            // This host keeps /dev/net/tun from other users: refused, never run bare.
            assert_eq!(
                started["error"],
                json!({"code": -32600, "message": format!("cannot sandbox `python3`: a sandbox with network needs /dev/net/tun for slirp4netns, and uid {NOBODY} cannot open it: Permission denied (os error 13)")})
            );
            continue;
        }
        assert!(started.get("error").is_none(), "{started}");
        let (output, code) = run_started(&mut server, "probe").await;
        assert_eq!(code, 0, "{output}");
        let mut expected: Vec<String> = Vec::new();
        for target in &targets {
            let host: IpAddr = target.split(',').nth(1).unwrap().parse().unwrap();
            let udp = target.starts_with("udp");
            let verdict = match (host.is_loopback(), udp) {
                // Its own loopback: nothing listens there, and a datagram goes nowhere.
                (true, true) => "sent",
                (true, false) => "ConnectionRefusedError 111",
                // A prohibit route: EACCES at once, no packet leaves.
                (false, _) => "PermissionError 13",
            };
            expected.push(format!("{target} {verdict}"));
        }
        assert_eq!(output.lines().collect::<Vec<_>>(), expected);
        // No listener of this host saw a connection or a datagram.
        for listener in &tcp {
            assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
        }
        for socket in &udp {
            let mut buffer = [0u8; 16];
            assert_eq!(socket.recv_from(&mut buffer).unwrap_err().kind(), ErrorKind::WouldBlock);
        }
        // Another host is reached, and what it sends arrives whole.
        let (output, code) = run(
            &mut server,
            sandboxed("fetch", &["python3", "-c", &script], tree.w(), json!({}), sandbox),
        )
        .await;
        assert_eq!((output.as_str(), code), ("", 0));
        assert!(std::fs::read(&got).unwrap() == payload, "the download differs");
    }
}

/// Whether uid 65534 may open /dev/net/tun here (Debian makes it 0666; some
/// containers keep it 0600).
fn tun_usable_by_nobody() -> bool {
    let status = Command::new("setpriv")
        .args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups"])
        .args(["sh", "-c", "exec 3<>/dev/net/tun"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    status.success()
}

#[tokio::test]
async fn a_networked_sandbox_cannot_reach_its_own_servers_listener() {
    let tree = Tree::new("netns-listener", User::Current);
    for args in [&["--listen", "ws://127.0.0.1:0"][..], &["--listen", "ws://[::1]:0"][..]] {
        let server = WsServer::start(args).await;
        let client = Client::connect_ws(&server.url, ClientOptions::default()).await.unwrap();
        let address: SocketAddr = server.url.strip_prefix("ws://").unwrap().parse().unwrap();
        // Its own loopback, and every address of this host: no connection.
        let mut argv = vec!["python3".to_owned(), "-c".to_owned(), PROBE.to_owned()];
        argv.push(format!("tcp,{},{}", address.ip(), address.port()));
        for host in host_addresses() {
            argv.push(format!("tcp,{host},{}", address.port()));
        }
        let sandbox = Sandbox::restricted([&tree.w]).network(true);
        let params = StartParams::new("boxed", argv.clone(), &tree.w).sandbox(sandbox);
        let mut boxed = client.start(params).await.unwrap();
        let (output, status) = within("the sandboxed probe", boxed.output_to_end()).await.unwrap();
        let output = String::from_utf8(output).unwrap();
        assert_eq!(status.code, 0, "{output}");
        for line in output.lines() {
            let (target, verdict) = line.split_once(' ').unwrap();
            let host: IpAddr = target.split(',').nth(1).unwrap().parse().unwrap();
            let expected = if host.is_loopback() {
                "ConnectionRefusedError 111"
            } else {
                "PermissionError 13"
            };
            assert_eq!(verdict, expected, "{line}");
        }
        assert_eq!(output.lines().count(), argv.len() - 3);
        // Nor can it take one of this host's addresses as its source.
        for host in host_addresses().into_iter().filter(|h| !h.is_loopback()) {
            let bind = "import socket, sys\ntry:\n    socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET).bind((sys.argv[1], 0))\n    print('bound')\nexcept OSError as e:\n    print(e.errno)";
            let argv = ["python3", "-c", bind, &host.to_string()];
            let sandbox = Sandbox::restricted([&tree.w]).network(true);
            let params = StartParams::new(format!("bind-{host}"), argv, &tree.w).sandbox(sandbox);
            let mut bound = client.start(params).await.unwrap();
            let (output, _) = within("the binding probe", bound.output_to_end()).await.unwrap();
            assert_eq!(String::from_utf8(output).unwrap(), "99\n", "{host}");
        }
    }
}

#[tokio::test]
async fn a_networked_start_leaves_the_hosts_mounts_alone() {
    if !root_or_skip("a named network namespace of the host") {
        return;
    }
    // A named namespace is a mount in /run/netns: slirp4netns's own mount
    // sandbox once unmounted it through the host's shared mounts.
    let name = format!("es-mounts-{}", std::process::id());
    let _ = Command::new("ip").args(["netns", "del", &name]).stderr(Stdio::null()).status();
    ip(&["netns", "add", &name]);
    // Removed on every path, a failed assertion included.
    let _namespace = NamedNamespace(name.clone());
    let tree = Tree::new("netns-mounts", User::Current);
    let mut server = Binary::ready(&[]).await;
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()], "network": true});
    assert_eq!(
        run(&mut server, sandboxed("m", &["true"], tree.w(), json!({}), sandbox)).await,
        (String::new(), 0)
    );
    let alive = Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]).output().unwrap();
    assert!(alive.status.success(), "{}", String::from_utf8_lossy(&alive.stderr));
}

#[tokio::test]
async fn without_slirp4netns_a_networked_start_is_refused_and_nothing_runs() {
    let tree = Tree::new("netns-missing", User::Current);
    let marker = tree.w.join("ran");
    let mut command = tokio::process::Command::new(*crate::binary::BIN);
    command.env("PATH", "/nonexistent");
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "it"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    let script = format!("touch {}", marker.display());
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()], "network": true});
    let mut params = sandboxed("n", &["/bin/sh", "-c", &script], tree.w(), json!({}), sandbox);
    params["env"]["PATH"] = json!("/nonexistent");
    let answer = server.call("process/start", params).await;
    assert_eq!(
        answer["error"],
        json!({"code": -32600, "message": "process/start refused: a sandbox with network needs slirp4netns (Debian package slirp4netns) on the server's PATH, and it is not there; without it the sandbox would share the host's network"})
    );
    // Without network the same server runs it.
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
    let mut params = sandboxed("m", &["/bin/sh", "-c", "echo ok"], tree.w(), json!({}), sandbox);
    params["env"]["PATH"] = json!("/nonexistent");
    assert_eq!(run(&mut server, params).await, ("ok\n".to_owned(), 0));
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_root_through_a_link_inside_a_writable_root_is_refused() {
    let tree = Tree::new("netns-relink", User::Current);
    let link = tree.w.join("link");
    std::os::unix::fs::symlink(&tree.out, &link).unwrap();
    let mut server = Binary::ready(&[]).await;
    for (field, roots) in
        [("writableRoots", json!([tree.w(), link])), ("readableRoots", json!(["/usr", link]))]
    {
        let mut sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()]});
        sandbox[field] = roots;
        let answer = server
            .call("process/start", sandboxed("l", &["true"], tree.w(), json!({}), sandbox))
            .await;
        let kind = if field == "writableRoots" { "writable" } else { "readable" };
        assert_eq!(
            answer["error"],
            json!({"code": -32600, "message": format!(
                "sandbox {kind} root {} goes through the symlink {}, which lies inside writable {} (a process could have pointed it anywhere)",
                link.display(), link.display(), tree.w()
            )})
        );
    }
    // A link outside every writable root (Debian's /bin) stays allowed.
    let sandbox = json!({"mode": "restricted", "writableRoots": [tree.w()], "readableRoots": ["/bin", "/usr", "/lib", "/lib64"]});
    let (output, code) = run(
        &mut server,
        sandboxed("b", &["/bin/sh", "-c", "echo fine"], tree.w(), json!({}), sandbox),
    )
    .await;
    assert_eq!((output.as_str(), code), ("fine\n", 0));
}

/// A named network namespace of a test, deleted when dropped.
struct NamedNamespace(String);

impl Drop for NamedNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).stderr(Stdio::null()).status();
    }
}
