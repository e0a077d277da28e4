//! Where this process's cgroups are: for each controller, the hierarchy that
//! has it (cgroup v1, or v2 when no v1 hierarchy binds it) and this
//! process's own directory there, read from `/proc/self/mountinfo` and
//! `/proc/self/cgroup`. The parsers are pure, so both versions are tested
//! on text.

use std::path::{Path, PathBuf};

/// The cgroup interface a hierarchy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

/// A controller a limit needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub(crate) const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The kernel's name for it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }

    /// The limit it enforces, as messages name it.
    pub(crate) fn limit(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "process",
            Controller::Cpu => "CPU",
        }
    }
}

/// A controller's hierarchy and this process's directory in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    pub(crate) version: Version,
    /// This process's cgroup: where the server's own directory is made.
    pub(crate) dir: PathBuf,
}

/// Finds `controller`'s hierarchy. `controllers_of` reads a v2 directory's
/// `cgroup.controllers` (the enabled controllers, space-separated).
pub(crate) fn find(
    controller: Controller,
    mountinfo: &str,
    cgroups: &str,
    controllers_of: impl Fn(&Path) -> Option<String>,
) -> Result<Hierarchy, String> {
    let name = controller.name();
    let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
    // A controller bound to a v1 hierarchy is not available in v2.
    if let Some(mount) =
        mounts.iter().find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == name))
    {
        let path = cgroups
            .lines()
            .filter_map(|line| {
                // `ID:CONTROLLERS:PATH`; the path may hold colons.
                let mut fields = line.splitn(3, ':');
                fields.next()?;
                Some((fields.next()?, fields.next()?))
            })
            .find(|(list, _)| list.split(',').any(|c| c == name))
            .map(|(_, path)| path)
            .ok_or_else(|| format!("this process is in no cgroup of the {name} hierarchy"))?;
        return Ok(Hierarchy { version: Version::V1, dir: mount.dir_of(path) });
    }
    let Some(mount) = mounts.iter().find(|m| m.fstype == "cgroup2") else {
        return Err(format!("no cgroup hierarchy on this host has the {name} controller"));
    };
    let path = cgroups
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| "this process is in no cgroup v2 cgroup".to_owned())?;
    let dir = mount.dir_of(path);
    let enabled = controllers_of(&dir).unwrap_or_default();
    if enabled.split_whitespace().any(|c| c == name) {
        return Ok(Hierarchy { version: Version::V2, dir });
    }
    Err(format!(
        "the {name} controller is not delegated to this server's cgroup {} (it has: {}); start the server in a delegated cgroup of its own, e.g. `systemd-run --user --scope -p Delegate=yes exec-server`",
        dir.display(),
        if enabled.trim().is_empty() { "none" } else { enabled.trim() }
    ))
}

/// Where every cgroup hierarchy (v1 or v2) is mounted.
pub(crate) fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    let mounts = mountinfo.lines().filter_map(Mount::parse);
    mounts.filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2").map(|m| m.point).collect()
}

/// One line of `/proc/self/mountinfo`, the fields that matter here.
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    options: String,
}

impl Mount {
    /// `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
    fn parse(line: &str) -> Option<Mount> {
        let (before, after) = line.split_once(" - ")?;
        let mut fields = before.split(' ');
        let root = unescape(fields.nth(3)?);
        let point = PathBuf::from(unescape(fields.next()?));
        let mut after = after.split(' ');
        let fstype = after.next()?.to_owned();
        let options = after.nth(1).unwrap_or_default().to_owned();
        Some(Mount { root, point, fstype, options })
    }

    /// The directory of cgroup `path` (as `/proc/self/cgroup` names it) under this mount.
    fn dir_of(&self, path: &str) -> PathBuf {
        let relative = path.strip_prefix(self.root.as_str()).unwrap_or(path);
        self.point.join(relative.trim_start_matches('/'))
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Three octal digits make at most 0o777: above a byte they stay text.
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .map(|d| d.iter().fold(0u16, |value, digit| value * 8 + u16::from(digit - b'0')))
            .and_then(|value| u8::try_from(value).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
33 30 0:29 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
34 30 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const V1_CGROUPS: &str = "8:pids:/\n4:memory:/process_api/8f45\n1:cpu:/\n0::/\n";

    #[test]
    fn v1_controllers_win_over_an_empty_v2() {
        let none = |_: &Path| Some("hugetlb".to_owned());
        assert_eq!(
            find(Controller::Memory, V1_MOUNTS, V1_CGROUPS, none),
            Ok(Hierarchy {
                version: Version::V1,
                dir: PathBuf::from("/sys/fs/cgroup/memory/process_api/8f45")
            })
        );
        assert_eq!(
            find(Controller::Pids, V1_MOUNTS, V1_CGROUPS, none).map(|h| h.dir),
            Ok(PathBuf::from("/sys/fs/cgroup/pids"))
        );
    }

    const V2_MOUNTS: &str =
        "27 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
    const V2_CGROUPS: &str =
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope\n";

    #[test]
    fn a_delegated_v2_scope_is_found_and_an_undelegated_one_named() {
        let delegated = |dir: &Path| {
            assert_eq!(
                dir,
                Path::new("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope")
            );
            Some("cpu memory pids\n".to_owned())
        };
        assert_eq!(
            find(Controller::Cpu, V2_MOUNTS, V2_CGROUPS, delegated).map(|h| h.version),
            Ok(Version::V2)
        );
        let bare = |_: &Path| Some("memory pids\n".to_owned());
        let error = find(Controller::Cpu, V2_MOUNTS, V2_CGROUPS, bare).unwrap_err();
        assert!(error.starts_with("the cpu controller is not delegated to this server's cgroup /sys/fs/cgroup/user.slice/"), "{error}");
        assert!(error.contains("(it has: memory pids)"), "{error}");
    }

    #[test]
    fn every_hierarchy_is_a_mount_point() {
        let points = mount_points(V1_MOUNTS);
        let expected =
            ["cpu", "memory", "pids", "unified"].map(|c| PathBuf::from("/sys/fs/cgroup").join(c));
        assert_eq!(points, expected);
    }

    #[test]
    fn no_hierarchy_is_named() {
        assert_eq!(
            find(Controller::Pids, "1 0 8:1 / / rw - ext4 /dev/vda rw\n", "0::/\n", |_| None),
            Err("no cgroup hierarchy on this host has the pids controller".to_owned())
        );
    }

    #[test]
    fn mount_points_and_namespaced_roots_are_read() {
        let mounts =
            "40 30 0:31 /lxc/c1 /sys/fs/cgroup/my\\040memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            find(Controller::Memory, mounts, "4:memory:/lxc/c1/job\n", |_| None).map(|h| h.dir),
            Ok(PathBuf::from("/sys/fs/cgroup/my memory/job"))
        );
        assert_eq!(unescape("a\\777b\\101"), "a\\777bA");
    }
}
