//! A sandbox whose network is a policy reaches only the hosts it names,
//! through the server's proxy: allowed names by every door (plain HTTP,
//! CONNECT, SOCKS5), refusals that name the host and the reason and open no
//! connection, nothing of this host whatever a name resolves to, the client
//! asked about unlisted hosts, every connection reported, and the bound on
//! connections. Through the real binary, with an outside host of the test's
//! own (`outside`) and names from a hosts file bind-mounted in the server's
//! own mount namespace.

use std::io::ErrorKind;
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use exec_server::{Client, ClientOptions, NetworkDecider, NetworkPolicy, Sandbox, StartParams};
use serde_json::{json, Value};

use crate::binary::Binary;
use crate::outside::TestHosts;
use crate::sandbox::{sandboxed, Tree, User};
use crate::support::{root_or_skip, scratch, unb64, within};

/// The policy most tests run under.
fn policy() -> Value {
    json!({"allow": ["allowed.test", "*.allowed.test", "other.test:9", "127.0.0.1"], "deny": ["denied.allowed.test"]})
}

/// An outside host serving `payload` on two addresses, and a hosts file that names them.
struct Setup {
    hosts: TestHosts,
    hosts_file: PathBuf,
    payload: Vec<u8>,
    tree: Tree,
}

async fn setup(name: &str) -> Option<Setup> {
    if !root_or_skip("network namespaces for the outside host") {
        return None;
    }
    let dir = scratch(&format!("proxy-{name}"));
    let payload: Vec<u8> =
        (0..1_048_576u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(dir.join("payload"), &payload).unwrap();
    let hosts = TestHosts::start(&dir);
    let metadata: IpAddr = "169.254.169.254".parse().unwrap();
    for address in [hosts.far, hosts.far2, metadata] {
        hosts.serving(address).await;
    }
    let hosts_file = dir.with_extension("hosts");
    let names = format!(
        "127.0.0.1 localhost\n{far} allowed.test sub.allowed.test denied.allowed.test\n{far2} other.test\n127.0.0.1 loop.allowed.test\n{near} iface.allowed.test\n{anyip} anyip.allowed.test\n{metadata} meta.allowed.test\n",
        far = hosts.far,
        far2 = hosts.far2,
        near = hosts.near,
        anyip = hosts.anyip,
    );
    std::fs::write(&hosts_file, names).unwrap();
    Some(Setup {
        hosts,
        hosts_file,
        payload,
        tree: Tree::new(&format!("proxy-{name}"), User::Current),
    })
}

/// Runs a sandboxed start to its exit, answering `network/decide` with
/// `decide` (None: no answer): (output, exit code, `network/connection` params).
async fn run_audited(
    server: &mut Binary,
    params: Value,
    mut decide: impl FnMut(&Value) -> Option<bool>,
) -> (String, i64, Vec<Value>) {
    let id = params["processId"].as_str().unwrap().to_owned();
    let started = server.call("process/start", params).await;
    assert!(started.get("error").is_none(), "start failed: {started}");
    let (mut output, mut connections) = (Vec::new(), Vec::new());
    loop {
        let message = server.next().await.expect("the server closed stdout");
        match message["method"].as_str() {
            Some("network/decide") => {
                if let Some(allow) = decide(&message["params"]) {
                    let answer = json!({"id": message["id"], "result": {"allow": allow}});
                    server.send_line(&answer.to_string()).await;
                }
            }
            Some("network/connection") => connections.push(message["params"].clone()),
            Some("process/output") if message["params"]["processId"] == id => {
                output.extend(unb64(&message["params"]["chunk"]));
            }
            Some("process/exited") if message["params"]["processId"] == id => {
                let code = message["params"]["exitCode"].as_i64().unwrap();
                return (String::from_utf8_lossy(&output).into_owned(), code, connections);
            }
            _ => {}
        }
    }
}

fn connection(id: &str, host: &str, port: u16, allowed: bool, reason: &str) -> Value {
    json!({"processId": id, "host": host, "port": port, "allowed": allowed, "reason": reason})
}

fn restricted(tree: &Tree, network: Value) -> Value {
    json!({"mode": "restricted", "writableRoots": [tree.w()], "network": network})
}

#[tokio::test]
async fn allowed_names_are_fetched_through_every_door_and_reported() {
    let Some(setup) = setup("allowed").await else { return };
    let mut server = setup.hosts.server_with_hosts(&setup.hosts_file, &[], json!({})).await;
    let w = setup.tree.w();
    // curl by HTTP_PROXY, by CONNECT (-p), by ALL_PROXY's socks5h (the HTTP
    // variables unset), and Python's urllib by HTTP_PROXY.
    let script = format!(
        "curl -sS -o {w}/plain http://allowed.test:8080/payload && \
         curl -sS -p -o {w}/connect http://sub.allowed.test:8080/payload && \
         env -u HTTP_PROXY -u http_proxy curl -sS -o {w}/socks http://allowed.test:8080/payload && \
         python3 -c \"import urllib.request; open('{w}/urllib', 'wb').write(urllib.request.urlopen('http://allowed.test:8080/payload', timeout=10).read())\""
    );
    let params =
        sandboxed("f", &["sh", "-c", &script], w, json!({}), restricted(&setup.tree, policy()));
    let (output, code, connections) = run_audited(&mut server, params, |_| None).await;
    assert_eq!((output.as_str(), code), ("", 0));
    for name in ["plain", "connect", "socks", "urllib"] {
        let got = std::fs::read(setup.tree.w.join(name)).unwrap();
        assert!(got == setup.payload, "{name}: the download differs");
    }
    assert_eq!(
        connections,
        [
            connection("f", "allowed.test", 8080, true, "allowed by rule allowed.test"),
            connection("f", "sub.allowed.test", 8080, true, "allowed by rule *.allowed.test"),
            connection("f", "allowed.test", 8080, true, "allowed by rule allowed.test"),
            connection("f", "allowed.test", 8080, true, "allowed by rule allowed.test"),
        ]
    );
    assert_eq!(setup.hosts.logged().matches("GET /payload").count(), 4);
}

#[tokio::test]
async fn refusals_name_the_host_and_reason_and_reach_nothing() {
    let Some(setup) = setup("refused").await else { return };
    let mut server = setup.hosts.server_with_hosts(&setup.hosts_file, &[], json!({})).await;
    let far = setup.hosts.far;
    // Each line: what curl got (the body and status, or its exit code).
    let script = format!(
        r#"curl -sS -w ' %{{http_code}}\n' http://other.test:8080/r1
curl -sS -w ' %{{http_code}}\n' http://denied.allowed.test:8080/r2
curl -sS -w ' %{{http_code}}\n' http://{far}:8080/r3
curl -sS -p http://other.test:8080/r4 2>/dev/null; echo "connect $?"
env -u HTTP_PROXY -u http_proxy curl -sS http://other.test:8080/r5 2>/dev/null; echo "socks $?"
curl --noproxy '*' -sS -m 5 http://{far}:8080/r6 2>/dev/null; echo "direct $?"
python3 -c "
import socket
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.connect(('{far}', 8080)) if kind == socket.SOCK_STREAM else s.sendto(b'r7', ('{far}', 53))
        print('reached')
    except OSError as e:
        print(e.errno)
""#
    );
    let params = sandboxed(
        "r",
        &["sh", "-c", &script],
        setup.tree.w(),
        json!({}),
        restricted(&setup.tree, policy()),
    );
    let (output, code, connections) = run_audited(&mut server, params, |_| None).await;
    assert_eq!(code, 0, "{output}");
    assert_eq!(
        output,
        format!(
            "exec-server refused other.test:8080: not in the sandbox's allow list\n 403\n\
             exec-server refused denied.allowed.test:8080: denied by rule denied.allowed.test\n 403\n\
             exec-server refused {far}:8080: not in the sandbox's allow list\n 403\n\
             connect 56\nsocks 97\ndirect 7\n101\n101\n"
        )
    );
    let refused = "not in the sandbox's allow list";
    assert_eq!(
        connections,
        [
            connection("r", "other.test", 8080, false, refused),
            connection(
                "r",
                "denied.allowed.test",
                8080,
                false,
                "denied by rule denied.allowed.test"
            ),
            connection("r", &far.to_string(), 8080, false, refused),
            connection("r", "other.test", 8080, false, refused),
            connection("r", "other.test", 8080, false, refused),
        ]
    );
    let logged = setup.hosts.logged();
    for path in ["/r1", "/r2", "/r3", "/r4", "/r5", "/r6"] {
        assert!(!logged.contains(path), "the outside host saw {path}: {logged}");
    }
}

#[tokio::test]
async fn nothing_of_this_host_is_reached_whatever_the_name_resolves_to() {
    let Some(setup) = setup("this-host").await else { return };
    let hosts = &setup.hosts;
    // Listeners on the host's loopback, its veth address and its local range.
    let addresses = [IpAddr::from([127, 0, 0, 1]), hosts.near, hosts.anyip];
    let listeners: Vec<TcpListener> =
        hosts.in_host(|| addresses.iter().map(|a| TcpListener::bind((*a, 0)).unwrap()).collect());
    let ports: Vec<u16> = listeners.iter().map(|l| l.local_addr().unwrap().port()).collect();
    for listener in &listeners {
        listener.set_nonblocking(true).unwrap();
    }
    let mut server = hosts.server_with_hosts(&setup.hosts_file, &[], json!({})).await;
    let targets = [
        format!("loop.allowed.test:{}", ports[0]),
        format!("127.0.0.1:{}", ports[0]),
        format!("iface.allowed.test:{}", ports[1]),
        format!("anyip.allowed.test:{}", ports[2]),
        "meta.allowed.test:8080".to_owned(),
    ];
    let script: String = targets
        .iter()
        // The proxy is asked for the literal too (NO_PROXY would keep it on
        // the sandbox's own loopback).
        .map(|t| {
            format!("env -u NO_PROXY -u no_proxy curl -sS -w ' %{{http_code}}\\n' http://{t}/h; ")
        })
        .collect();
    let params = sandboxed(
        "h",
        &["sh", "-c", &script],
        setup.tree.w(),
        json!({}),
        restricted(&setup.tree, policy()),
    );
    let (output, code, connections) = run_audited(&mut server, params, |_| None).await;
    assert_eq!(code, 0, "{output}");
    let expected: String = targets
        .iter()
        .map(|t| format!("exec-server refused {t}: resolves to this host\n 403\n"))
        .collect();
    assert_eq!(output, expected);
    let reported: Vec<Value> = targets
        .iter()
        .map(|t| {
            let (host, port) = t.rsplit_once(':').unwrap();
            connection("h", host, port.parse().unwrap(), false, "resolves to this host")
        })
        .collect();
    assert_eq!(connections, reported);
    for listener in &listeners {
        assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    }
    assert!(!hosts.logged().contains("/h "), "the metadata address was reached");
}

#[tokio::test]
async fn the_servers_own_websocket_port_is_refused_by_name_and_address() {
    let Some(setup) = setup("own-port").await else { return };
    let hosts = &setup.hosts;
    let mut command =
        hosts.command_with_hosts(&setup.hosts_file, &["--listen", "ws://127.0.0.1:0"]);
    let mut child = command.stdout(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let url = within("the listening URL", lines.next_line()).await.unwrap().unwrap();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let w = setup.tree.w.clone();
    // The client connects from inside the host's namespace, on a runtime of its own there.
    let (output, asked) = hosts.in_host(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let seen = asked.clone();
            let decider = NetworkDecider::new(move |params| {
                seen.lock().unwrap().push(params.host.clone());
                async move { params.host == "other.test" }
            });
            let options = ClientOptions { network_decider: Some(decider), ..ClientOptions::default() };
            let client = Client::connect_ws(&url, options).await.unwrap();
            let mut policy = NetworkPolicy::allow(["*.allowed.test", "127.0.0.1"]);
            policy.ask = true;
            policy.ask_timeout_ms = Some(10_000);
            let script = format!(
                "for t in loop.allowed.test:{port} 127.0.0.1:{port} other.test:8080 unknown.test:8080 other.test:8080; do env -u NO_PROXY -u no_proxy curl -sS -o /dev/null -w \"$t %{{http_code}}\\n\" http://$t/payload; done"
            );
            let sandbox = Sandbox::restricted([&w]).network_policy(policy);
            let mut params = StartParams::new("own", ["sh", "-c", &script], &w).sandbox(sandbox);
            params.env.insert("PATH".into(), "/usr/bin:/bin".into());
            let mut process = client.start(params).await.unwrap();
            let (output, status) = within("the sandboxed curl", process.output_to_end()).await.unwrap();
            assert_eq!(status.code, 0);
            let asked = asked.lock().unwrap().clone();
            (String::from_utf8(output).unwrap(), asked)
        })
    });
    assert_eq!(
        output,
        format!("loop.allowed.test:{port} 403\n127.0.0.1:{port} 403\nother.test:8080 200\nunknown.test:8080 403\nother.test:8080 200\n")
    );
    // other.test was asked once (its decision holds), unknown.test once.
    assert_eq!(asked, ["other.test", "unknown.test"]);
}

#[tokio::test]
async fn an_unanswered_question_is_denied_in_time_and_asked_again() {
    let Some(setup) = setup("unanswered").await else { return };
    let init = json!({"networkDecisions": true});
    let mut server = setup.hosts.server_with_hosts(&setup.hosts_file, &[], init).await;
    let network = json!({"allow": [], "ask": true, "askTimeoutMs": 300});
    let script = "for n in 1 2; do curl -sS -w ' %{http_code}\\n' http://other.test:8080/u$n; done";
    let params = sandboxed(
        "u",
        &["sh", "-c", script],
        setup.tree.w(),
        json!({}),
        restricted(&setup.tree, network),
    );
    let mut asked = Vec::new();
    let (output, code, connections) = run_audited(&mut server, params, |params| {
        asked.push(params.clone());
        None
    })
    .await;
    assert_eq!(code, 0);
    let body =
        "exec-server refused other.test:8080: no decision from the client within 300 ms\n 403\n";
    assert_eq!(output, body.repeat(2));
    let question = json!({"processId": "u", "host": "other.test", "port": 8080});
    assert_eq!(asked, [question.clone(), question]);
    let reason = "no decision from the client within 300 ms";
    let denied = connection("u", "other.test", 8080, false, reason);
    assert_eq!(connections, [denied.clone(), denied]);
    assert!(!setup.hosts.logged().contains("/u"));
}

#[tokio::test]
async fn the_257th_connection_at_once_is_refused_with_its_reason() {
    let Some(setup) = setup("bound").await else { return };
    // A listener on the outside host that takes and holds every connection.
    let hold = "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', 9000))\ns.listen(1024)\nheld = []\nwhile True:\n    held.append(s.accept())";
    let holder = Command::new("ip")
        .args(["netns", "exec", &setup.hosts.outside, "python3", "-c", hold])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _holder = KillOnDrop(holder);
    let far = setup.hosts.far;
    within("the holding listener", async {
        while setup.hosts.in_host(|| std::net::TcpStream::connect((far, 9000))).is_err() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let mut server = setup.hosts.server_with_hosts(&setup.hosts_file, &[], json!({})).await;
    let script = r#"
import socket
held = []
for i in range(257):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT allowed.test:9000 HTTP/1.1\r\nHost: allowed.test:9000\r\n\r\n")
    held.append(s)
answers = {}
for s in held:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    status = data.split(b" ")[1].decode()
    if status == "403":
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        print(data.split(b"\r\n\r\n", 1)[1].decode().strip())
    answers[status] = answers.get(status, 0) + 1
print(sorted(answers.items()))
"#;
    let params = sandboxed(
        "b",
        &["python3", "-c", script],
        setup.tree.w(),
        json!({}),
        restricted(&setup.tree, policy()),
    );
    let (output, code, connections) = run_audited(&mut server, params, |_| None).await;
    assert_eq!(code, 0, "{output}");
    let reason = "at most 256 proxied connections of one process at once";
    assert_eq!(
        output,
        format!("exec-server refused allowed.test:9000: {reason}\n[('200', 256), ('403', 1)]\n")
    );
    assert_eq!(connections.len(), 257);
    let refused: Vec<&Value> = connections.iter().filter(|c| c["allowed"] == false).collect();
    assert_eq!(refused, [&connection("b", "allowed.test", 9000, false, reason)]);
}

#[tokio::test]
async fn todays_network_proxy_and_mcp_allow_hosts_are_the_same_policy() {
    let Some(setup) = setup("faces").await else { return };
    let hosts = &setup.hosts;
    let w = setup.tree.w();
    let script = "curl -sS -o /dev/null -w '%{http_code}\\n' http://allowed.test:8080/payload; curl -sS -o /dev/null -w '%{http_code}\\n' http://other.test:8080/t";
    // Today's dialect: networkProxy's domains, with no sandbox of its own.
    let mut server = hosts.server_with_hosts(&setup.hosts_file, &[], json!({})).await;
    let start = json!({
        "processId": "t", "argv": ["sh", "-c", script], "cwd": format!("file://{w}"),
        "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": null,
        "managedNetwork": null, "enforceManagedNetwork": true,
        "networkProxy": {"proxy": {"enabled": true, "mode": "full", "domains": {"allowed.test": "allow", "other.test": "deny"}}},
    });
    let (output, code, connections) = run_audited(&mut server, start, |_| None).await;
    assert_eq!((output.as_str(), code), ("200\n403\n", 0));
    assert_eq!(
        connections,
        [
            connection("t", "allowed.test", 8080, true, "allowed by rule allowed.test"),
            connection("t", "other.test", 8080, false, "denied by rule other.test"),
        ]
    );
    // MCP: --mcp-allow-host.
    let mut command =
        hosts.command_with_hosts(&setup.hosts_file, &["--mcp", "--mcp-allow-host", "allowed.test"]);
    command.current_dir(w);
    let mut mcp = Binary::from_command(command);
    let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "proxy-test", "version": "1"}}});
    mcp.send_line(&init.to_string()).await;
    assert_eq!(mcp.next().await.unwrap()["result"]["protocolVersion"], "2025-11-25");
    mcp.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "exec_command", "arguments": {"cmd": script, "login": false, "yield_time_ms": 20000}}});
    mcp.send_line(&call.to_string()).await;
    let answer = loop {
        let message = mcp.next().await.unwrap();
        if message["id"] == 1 {
            break message;
        }
    };
    assert_eq!(answer["result"]["structuredContent"]["output"], "200\n403\n", "{answer}");
}

#[tokio::test]
async fn malformed_policies_and_unanswerable_asks_are_refused() {
    let tree = Tree::new("proxy-malformed", User::Current);
    let mut server = Binary::ready(&[]).await;
    let cases = [
        (json!({"allow": ["::1"]}), "sandbox network pattern \"::1\" is malformed: an IPv6 literal must be written in brackets, as [::1]:443"),
        (json!({"allow": ["a.*.b"]}), "sandbox network pattern \"a.*.b\" is malformed: a host name is dot-separated labels of letters, digits, `-` and `_` (`*` only as a leading `*.`)"),
        (json!({"deny": ["h:99999"]}), "sandbox network pattern \"h:99999\" is malformed: the port must be a number from 1 to 65535"),
        (json!({"ask": true}), "sandbox network ask needs a client that answers network/decide: say networkDecisions: true in initialize"),
    ];
    for (network, message) in cases {
        let params = sandboxed("m", &["true"], tree.w(), json!({}), restricted(&tree, network));
        let error = server.error("process/start", params).await;
        assert_eq!(error, json!({"code": -32602, "message": message}));
    }
    let params =
        sandboxed("m", &["true"], tree.w(), json!({}), restricted(&tree, json!({"allowed": []})));
    let error = server.error("process/start", params).await;
    assert_eq!(error["code"], -32602);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("unknown field `allowed`"), "{message}");
    // The server keeps serving.
    let params = sandboxed(
        "ok",
        &["true"],
        tree.w(),
        json!({}),
        restricted(&tree, json!({"allow": ["pypi.org"]})),
    );
    assert_eq!(server.result("process/start", params).await["processId"], "ok");
}

#[test]
fn contradicting_flags_are_refused_naming_both() {
    let bin = *crate::binary::BIN;
    for (args, named) in [
        (
            &["--mcp", "--mcp-network", "--mcp-allow-host", "pypi.org"][..],
            ["--mcp-allow-host", "--mcp-network"],
        ),
        (&["--sandbox-allow-host", "pypi.org"][..], ["--sandbox-allow-host", "--sandbox"]),
        (
            &["--sandbox", "--sandbox-allow-host", "[nope]"][..],
            ["--sandbox-allow-host", "not an IPv6 address"],
        ),
    ] {
        let output = Command::new(bin).args(args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for name in named {
            assert!(stderr.contains(name), "{args:?}: {stderr}");
        }
    }
}

/// A child killed (and reaped) when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn hosts_that_are_not_hosts_are_refused_unasked_and_other_spellings_are_the_address() {
    let Some(setup) = setup("spellings").await else { return };
    let init = json!({"networkDecisions": true});
    let mut server = setup.hosts.server_with_hosts(&setup.hosts_file, &[], init).await;
    let far = setup.hosts.far;
    let network = json!({"allow": ["allowed.test"], "deny": [far.to_string()], "ask": true, "askTimeoutMs": 5000});
    // Raw requests: a CONNECT whose host carries terminal escapes, a SOCKS
    // name with a newline, the denied address as a v4-mapped literal, and
    // two forms only the resolver reads as that address.
    let script = format!(
        r#"
import socket
def http(line):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(line.encode() + b"\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    print(data.split(b"\r\n")[0].decode(), "|", data.split(b"\r\n\r\n", 1)[1].decode().strip())
def socks(name):
    s = socket.create_connection(("127.0.0.1", 1080))
    s.sendall(b"\x05\x01\x00")
    s.recv(2)
    s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + b"\x00\x50")
    print("socks", s.recv(10)[1])
http("CONNECT pypi.org\x1b[2Kevil:443 HTTP/1.1")
socks(b"pypi.org\n[ok] allowed")
http("GET http://[::ffff:{far}]:8080/s1 HTTP/1.1")
http("GET http://170786819:8080/s2 HTTP/1.1")
http("GET http://0x0a4d0002:8080/s3 HTTP/1.1")
"#
    );
    let params = sandboxed(
        "s",
        &["python3", "-c", &script],
        setup.tree.w(),
        json!({}),
        restricted(&setup.tree, network),
    );
    let mut asked = Vec::new();
    let (output, code, connections) = run_audited(&mut server, params, |params| {
        asked.push(params.clone());
        Some(true)
    })
    .await;
    assert_eq!(code, 0, "{output}");
    let malformed = "not a host name or an IP literal: a host name is dot-separated labels of letters, digits, `-` and `_` (`*` only as a leading `*.`)";
    let numeric = "not a host name or an IP literal: an IPv4 address is written as four decimal numbers (1.2.3.4), an IPv6 one in brackets";
    assert_eq!(
        output,
        format!(
            "HTTP/1.1 400 Bad Request | exec-server refused the request: {malformed}\n\
             socks 2\n\
             HTTP/1.1 403 Forbidden | exec-server refused [::ffff:{far}]:8080: denied by rule {far}\n\
             HTTP/1.1 400 Bad Request | exec-server refused the request: {numeric}\n\
             HTTP/1.1 400 Bad Request | exec-server refused the request: {numeric}\n"
        )
    );
    assert_eq!(asked, Vec::<Value>::new(), "nothing was put to the client");
    let hosts: Vec<&str> = connections.iter().map(|c| c["host"].as_str().unwrap()).collect();
    assert_eq!(
        hosts,
        [
            "pypi.org\\u{1b}[2Kevil",
            "pypi.org\\n[ok] allowed",
            &format!("::ffff:{far}"),
            "170786819",
            "0x0a4d0002"
        ]
    );
    assert!(!setup.hosts.logged().contains("/s"), "the outside host was reached");
}

#[tokio::test]
async fn a_resolver_that_never_answers_holds_up_no_fs_call() {
    let Some(setup) = setup("blackhole").await else { return };
    // A name server on the outside host that reads and never answers.
    // It says "q" for each query it takes.
    let hole = "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('0.0.0.0', 53))\nprint('up', flush=True)\nwhile True:\n    s.recv(512)\n    print('q', flush=True)";
    let mut holder = Command::new("ip")
        .args(["netns", "exec", &setup.hosts.outside, "python3", "-c", hole])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut queries =
        std::io::BufRead::lines(std::io::BufReader::new(holder.stdout.take().unwrap()));
    let _holder = KillOnDrop(holder);
    assert_eq!(queries.next().unwrap().unwrap(), "up");
    let resolv = setup.hosts_file.with_extension("resolv");
    std::fs::write(
        &resolv,
        format!("nameserver {}\noptions timeout:5 attempts:3\n", setup.hosts.far),
    )
    .unwrap();
    let command = setup.hosts.command_with_files(&setup.hosts_file, Some(&resolv), &[]);
    let mut server = Binary::from_command(command);
    server.result("initialize", json!({"clientName": "blackhole"})).await;
    server.send_line(r#"{"method":"initialized"}"#).await;
    // Many lookups of names under an allowed wildcard, at once and again.
    let flood = "import socket, threading\ndef one(i):\n    s = socket.create_connection(('127.0.0.1', 3128))\n    s.sendall(b'CONNECT r%d.wild.test:80 HTTP/1.1\\r\\n\\r\\n' % i)\n    s.recv(100)\nts = [threading.Thread(target=one, args=(i,)) for i in range(64)]\n[t.start() for t in ts]\n[t.join() for t in ts]";
    let network = json!({"allow": ["*.wild.test"]});
    let params = sandboxed(
        "flood",
        &["python3", "-c", flood],
        setup.tree.w(),
        json!({}),
        restricted(&setup.tree, network),
    );
    let started = server.call("process/start", params).await;
    assert!(started.get("error").is_none(), "{started}");
    // The lookups are under way once the name server has taken queries.
    let taken = tokio::task::spawn_blocking(move || {
        for _ in 0..2 {
            assert_eq!(queries.next().unwrap().unwrap(), "q");
        }
        queries
    });
    let _queries = within("the name server's first queries", taken).await.unwrap();
    // fs calls on blocking threads are answered meanwhile, all within the
    // suite's timeout (before, they waited minutes behind the lookups).
    within("fs calls while lookups hang", async {
        for _ in 0..8 {
            let read = server.result("fs/readFile", json!({"path": "/etc/hostname"})).await;
            assert!(read["dataBase64"].is_string(), "{read}");
            let listed = server.result("fs/readDirectory", json!({"path": "/etc"})).await;
            assert!(listed["entries"].as_array().is_some_and(|e| !e.is_empty()));
        }
    })
    .await;
}
