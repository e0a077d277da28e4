//! fs/getMetadata on a FUSE filesystem served by the test: never an answer from stale cached attributes.
//!
//! Needs /dev/fuse and Debian's python3-fusepy (`.ci/run` installs it). Without
//! them the test skips with a loud message, except in CI (`CI` set), where a
//! missing component is a failure.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::binary::Binary;
use crate::support::{scratch, within};

const PYTHON: &str = "/usr/bin/python3";

/// The fixture's filesystem, mounted; unmounted and stopped when dropped (the
/// stopped child is reaped by tokio in the background: `kill_on_drop`).
pub struct Mount {
    child: Child,
    pub point: PathBuf,
    control: PathBuf,
}

impl Mount {
    /// Mounts `fixtures/fuse_size.py`, or returns `None` (after saying why) when it cannot run here.
    async fn start(dir: &Path) -> Option<Mount> {
        Mount::start_fixture(dir, "fuse_size.py").await
    }

    /// Mounts `fixtures/NAME` (run as `NAME MOUNTPOINT CONTROL`).
    pub async fn start_fixture(dir: &Path, name: &str) -> Option<Mount> {
        let usable = Path::new("/dev/fuse").exists()
            && std::process::Command::new(PYTHON)
                .args(["-c", "import fusepy"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
        if !usable {
            let message =
                "/dev/fuse or python3-fusepy is missing (.ci/run installs python3-fusepy)";
            assert!(std::env::var_os("CI").is_none(), "{message}");
            eprintln!("SKIPPED: {message}");
            return None;
        }
        let point = dir.join("mnt");
        let control = dir.join("size");
        std::fs::create_dir(&point).unwrap();
        std::fs::write(&control, "5").unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
        let mut child = Command::new(PYTHON)
            .arg(fixture)
            .arg(&point)
            .arg(&control)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = within("the FUSE filesystem to be mounted", lines.next_line()).await.unwrap();
        if ready.as_deref() != Some("ready") {
            // The fixture exited: mounting is not allowed here (no CAP_SYS_ADMIN, say).
            let message = "the FUSE fixture could not mount (see its stderr above)";
            assert!(std::env::var_os("CI").is_none(), "{message}");
            eprintln!("SKIPPED: {message}");
            return None;
        }
        Some(Mount { child, point, control })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.point).status();
        let _ = self.child.start_kill();
    }
}

#[tokio::test]
async fn metadata_on_fuse_is_asked_of_its_server_every_time() {
    let dir = scratch("fuse");
    let Some(mount) = Mount::start(&dir).await else { return };
    let file = mount.point.join("f");
    let mut server = Binary::ready(&[]).await;
    let size = |meta: serde_json::Value| meta["size"].clone();
    // The first call warms every cache the server could use for the next ones.
    for expected in [5, 5, 9, 9, 12] {
        std::fs::write(&mount.control, expected.to_string()).unwrap();
        let meta = server.result("fs/getMetadata", json!({"path": file})).await;
        assert_eq!(size(meta), json!(expected));
    }
    drop(mount);
    std::fs::remove_dir_all(dir).unwrap();
}
