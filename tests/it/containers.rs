//! Containers, with real Podman: an image built from the Containerfile (the
//! static binary and busybox, nothing pulled) serves the `Launcher` over
//! `podman exec -i` and its WebSocket listener with a token; a container
//! without the server gets it installed through the exec session and reuses
//! it; `docker` and `kubectl` run the same path through shims that exec
//! Podman; and the launch errors name what went wrong.
//!
//! Podman keeps everything of the tests' own under `target/podman-tests`
//! (its storage, run and temporary directories, and a containers.conf that
//! picks runc and no default ulimits): the machine's containers, images and
//! configuration are not touched. Containers are removed on every path.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use exec_server::{
    ClientOptions, Engine, Error, FileSystem, LaunchCommand, Launcher, RemoteFileSystem,
    StartParams,
};

use crate::support::{scratch, within};

/// The static build the image holds: `$EXEC_SERVER_STATIC_BIN`, else the
/// release musl build in target/.
fn static_binary() -> Option<PathBuf> {
    let path = std::env::var_os("EXEC_SERVER_STATIC_BIN").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/x86_64-unknown-linux-musl/release/exec-server")
    });
    path.is_file().then_some(path)
}

/// Podman with the tests' own storage, or `None` (the test then skips,
/// and fails under `CI=true`).
fn podman() -> Option<(PathBuf, PathBuf)> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let missing = |what: &str| {
        assert!(!ci, "CI=true: {what}");
        eprintln!("skipped: {what}");
        None
    };
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        return missing("Podman here runs as root");
    }
    if Command::new("podman").arg("--version").output().is_err() {
        return missing("podman is not installed (Debian: podman runc)");
    }
    if !Path::new("/bin/busybox").is_file() {
        return missing("/bin/busybox is not there (Debian: busybox-static)");
    }
    let Some(binary) = static_binary() else {
        return missing(
            "no static build: cargo build --release --target x86_64-unknown-linux-musl",
        );
    };
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/podman-tests");
    std::fs::create_dir_all(&base).unwrap();
    let conf = base.join("containers.conf");
    std::fs::write(
        &conf,
        "[containers]\ndefault_ulimits = []\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n",
    )
    .unwrap();
    let wrapper = base.join("podman");
    let script = format!(
        "#!/bin/sh\nexport CONTAINERS_CONF='{conf}'\nexec podman --root '{base}/storage' --runroot '{base}/run' --tmpdir '{base}/tmp' --storage-driver vfs \"$@\"\n",
        conf = conf.display(),
        base = base.display()
    );
    write_executable(&wrapper, &script);
    Some((wrapper, binary))
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let staged = path.with_extension(format!("new-{}", NEXT.fetch_add(1, Ordering::SeqCst)));
    std::fs::write(&staged, text).unwrap();
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// Runs the wrapper; its stdout, or a panic with its stderr.
fn run(podman: &Path, args: &[&str]) -> String {
    let output = Command::new(podman).args(args).stdin(Stdio::null()).output().unwrap();
    assert!(
        output.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A container of the test, removed on every path.
struct Container {
    podman: PathBuf,
    name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Container {
    fn start(podman: &Path, args: &[&str]) -> Container {
        let name =
            format!("es-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        let container = Container { podman: podman.to_path_buf(), name };
        let mut all = vec!["run", "-d", "--name", &container.name];
        all.extend(args);
        run(podman, &all);
        container
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new(&self.podman).args(["rm", "-f", "-t", "0", &self.name]).output();
    }
}

/// The image of the Containerfile, built with nothing pulled.
fn image(podman: &Path, binary: &Path) -> String {
    let context = scratch(&format!("image-context-{}", NEXT.fetch_add(1, Ordering::SeqCst)));
    std::fs::copy(binary, context.join("image-exec-server")).unwrap();
    std::fs::copy("/bin/busybox", context.join("image-busybox")).unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("Containerfile");
    let tag = "localhost/exec-server-test:latest";
    let context = context.display().to_string();
    run(podman, &["build", "-q", "-t", tag, "-f", &file.display().to_string(), &context]);
    tag.to_owned()
}

/// An image of busybox alone (no exec-server), imported from a root file system.
fn busybox_image(podman: &Path) -> String {
    let root = scratch(&format!("busybox-root-{}", NEXT.fetch_add(1, Ordering::SeqCst)));
    for dir in ["bin", "tmp", "root", "etc"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for tool in [
        "sh", "cat", "mkdir", "chmod", "mv", "head", "uname", "sleep", "echo", "rm", "ls", "true",
        "stat", "readlink",
    ] {
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(tool));
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let tar = root.with_extension("tar");
    let status = Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tar).arg(".").status();
    assert!(status.unwrap().success());
    let tag = "localhost/busybox-test:latest";
    run(podman, &["import", "-q", &tar.display().to_string(), tag]);
    tag.to_owned()
}

/// Runs `script` through the launcher's client: its output.
async fn sh(launcher: &Launcher, id: &str, script: &str) -> String {
    let params = StartParams::new(id, ["sh", "-c", script], "/tmp");
    let mut process = launcher.client().start(params).await.unwrap();
    let (output, status) =
        within("a command in the container", process.output_to_end()).await.unwrap();
    assert_eq!(status.code, 0);
    String::from_utf8(output).unwrap()
}

#[tokio::test]
async fn the_image_serves_the_launcher_over_exec_and_its_listener() {
    let Some((podman, binary)) = podman() else { return };
    let tag = image(&podman, &binary);
    let token = scratch("container-token").join("token");
    std::fs::write(&token, "a-token-of-the-test-0123456789").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mount = format!("{}:/run/secrets/token:ro", token.display());
    let container = Container::start(
        &podman,
        &[
            "--network",
            "host",
            "-v",
            &mount,
            &tag,
            "--listen",
            "ws://127.0.0.1:0",
            "--token-file",
            "/run/secrets/token",
        ],
    );
    // Over `podman exec -i`: a command, a file round trip and a tty.
    let command = LaunchCommand::container(Engine::Podman, &container.name).engine_program(&podman);
    let launcher = within("the launch", Launcher::spawn(command)).await.unwrap();
    assert_eq!(
        sh(&launcher, "who", "echo in $(cat /proc/1/comm); id -u").await,
        "in exec-server\n0\n"
    );
    let files = RemoteFileSystem::new(launcher.client().clone());
    files.write_file(Path::new("/tmp/round"), b"trip").await.unwrap();
    assert_eq!(files.read_file(Path::new("/tmp/round")).await.unwrap(), b"trip");
    let tty =
        StartParams::new("tty", ["sh", "-c", "[ -t 0 ] && echo terminal"], "/tmp").with_tty(24, 80);
    let mut process = launcher.client().start(tty).await.unwrap();
    let (output, _) = within("the tty", process.output_to_end()).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&output), "terminal\r\n");
    // The container's own confinement leaves the sandbox short of what it
    // needs: the start is refused, naming it, and nothing runs unconfined.
    let boxed = StartParams::new("boxed", ["touch", "/ran"], "/tmp")
        .sandbox(exec_server::Sandbox::restricted(["/tmp"]));
    let Err(refused) = launcher.client().start(boxed).await else {
        panic!("a sandboxed start ran in the container")
    };
    let object = refused.rpc().expect("an error object");
    assert_eq!(object.code, -32600);
    assert!(object.message.starts_with("cannot sandbox `touch`: "), "{}", object.message);
    assert_eq!(sh(&launcher, "ran", "[ -e /ran ] || echo absent").await, "absent\n");
    // Over its WebSocket listener, with the token.
    let url = within("the listener's URL", async {
        loop {
            let logs = run(&podman, &["logs", &container.name]);
            if let Some(url) = logs.lines().find(|l| l.starts_with("ws://")) {
                return url.to_owned();
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let options = ClientOptions {
        bearer_token: Some("a-token-of-the-test-0123456789".into()),
        ..ClientOptions::default()
    };
    let client = exec_server::Client::connect_ws(&url, options).await.unwrap();
    let mut process = client.start(StartParams::new("ws", ["echo", "over ws"], "/")).await.unwrap();
    let (output, _) = within("the command over WebSocket", process.output_to_end()).await.unwrap();
    assert_eq!(output, b"over ws\n");
    let refused = exec_server::Client::connect_ws(&url, ClientOptions::default()).await;
    assert!(refused.is_err(), "a client without the token was let in");
}

#[tokio::test]
async fn a_container_without_the_server_gets_it_installed_once() {
    let Some((podman, binary)) = podman() else { return };
    let tag = busybox_image(&podman);
    let container = Container::start(&podman, &["--network", "none", &tag, "sleep", "600"]);
    let command = || {
        LaunchCommand::container(Engine::Podman, &container.name)
            .engine_program(&podman)
            .install_if_missing(&binary)
    };
    let first = within("the installing launch", Launcher::spawn(command())).await.unwrap();
    let installed = format!("/root/.cache/exec-server/{}/exec-server", env!("CARGO_PKG_VERSION"));
    let stat = format!("stat -c %i:%Y {installed}");
    let before = sh(&first, "first", &stat).await;
    drop(first);
    let second = within("the second launch", Launcher::spawn(command())).await.unwrap();
    assert_eq!(sh(&second, "second", &stat).await, before, "the second launch installed again");
    // The server that runs the command is the installed copy.
    assert_eq!(sh(&second, "which", "readlink /proc/$PPID/exe").await, format!("{installed}\n"));
}

#[tokio::test]
async fn docker_and_kubectl_run_the_same_path_through_shims() {
    let Some((podman, binary)) = podman() else { return };
    let tag = image(&podman, &binary);
    let container =
        Container::start(&podman, &["--network", "none", &tag, "--listen", "ws://127.0.0.1:0"]);
    let shims = scratch("engine-shims");
    // `docker exec -i` is Podman's command line; `kubectl exec -i POD -c C -- CMD` is translated.
    let docker = shims.join("docker");
    write_executable(&docker, &format!("#!/bin/sh\nexec '{}' \"$@\"\n", podman.display()));
    let kubectl = shims.join("kubectl");
    let translate = format!(
        "#!/bin/sh\n[ \"$1 $2\" = 'exec -i' ] || exit 64\npod=$3; shift 3\nif [ \"$1\" = -c ]; then shift 2; fi\n[ \"$1\" = -- ] && shift\nexec '{}' exec -i \"$pod\" \"$@\"\n",
        podman.display()
    );
    write_executable(&kubectl, &translate);
    for (engine, program) in [(Engine::Docker, &docker), (Engine::Kubectl, &kubectl)] {
        let command = LaunchCommand::container(engine, &container.name)
            .container("app")
            .engine_program(program);
        let launcher = within("the launch through a shim", Launcher::spawn(command)).await.unwrap();
        assert_eq!(sh(&launcher, "shim", "echo through $0").await, "through sh\n", "{engine:?}");
    }
}

#[tokio::test]
async fn launch_errors_name_the_engine_the_container_and_the_directory() {
    let Some((podman, binary)) = podman() else { return };
    let missing =
        LaunchCommand::container(Engine::Docker, "x").engine_program("/nonexistent/docker");
    match Launcher::spawn(missing).await {
        Err(Error::EngineMissing { engine, program, .. }) => {
            assert_eq!((engine.as_str(), program.as_str()), ("docker", "/nonexistent/docker"));
        }
        other => panic!("expected EngineMissing, got {:?}", other.err()),
    }
    let tag = busybox_image(&podman);
    let stopped = Container::start(&podman, &["--network", "none", &tag, "true"]);
    run(&podman, &["wait", &stopped.name]);
    let command = LaunchCommand::container(Engine::Podman, &stopped.name).engine_program(&podman);
    match Launcher::spawn(command).await {
        Err(Error::ContainerNotRunning { engine, target, stderr }) => {
            assert_eq!((engine.as_str(), target.as_str()), ("podman", stopped.name.as_str()));
            assert!(stderr.contains("running"), "{stderr}");
        }
        other => panic!("expected ContainerNotRunning, got {:?}", other.err()),
    }
    let read_only =
        Container::start(&podman, &["--network", "none", "--read-only", &tag, "sleep", "600"]);
    let command = LaunchCommand::container(Engine::Podman, &read_only.name)
        .engine_program(&podman)
        .install_if_missing(&binary)
        .install_dir("/opt/exec-server");
    match Launcher::spawn(command).await {
        Err(Error::InstallRefused { path, stderr }) => {
            assert_eq!(path, "/opt/exec-server");
            assert!(stderr.contains("Read-only file system"), "{stderr}");
        }
        other => panic!("expected InstallRefused, got {:?}", other.err()),
    }
}
