//! Memory, process and CPU limits on a started process and all its
//! descendants together, enforced by a cgroup per limited start (Part B,
//! PROTOCOL.md "Limits").
//!
//! Layout: `hierarchy` (which cgroup hierarchy has each controller, and the
//! server's place in it), `server_dir` (the server's own directory there,
//! and the delegation a v2 one needs), `group` (one start's cgroup: made,
//! limited, spawned into, counted), `join` (the v2 trampoline), `janitor`
//! (keeps emptied cgroups as spares or removes them), `file` (the interface
//! files). The process table uses [`Group`] and knows
//! nothing of hierarchies; nothing here knows the process table.

mod file;
mod group;
mod hierarchy;
mod janitor;
mod join;
mod server_dir;

pub(crate) use self::file::children;
pub(crate) use self::group::{Group, Refusal};
pub(crate) use self::join::run_if_joining;
pub(crate) use self::server_dir::{all as server_dirs, remove_all as remove_server_dir};

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Value};

use self::hierarchy::{Controller, Hierarchy, Version};
use crate::protocol::{
    ErrorObject, LimitField, ProcessLimits, CPU_LIMIT, MEMORY_LIMIT, PROCESSES_LIMIT,
};

/// Each controller's hierarchy, found once.
fn detected() -> &'static [Result<Hierarchy, String>; 3] {
    static DETECTED: OnceLock<[Result<Hierarchy, String>; 3]> = OnceLock::new();
    DETECTED.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let controllers_of =
            |dir: &Path| std::fs::read_to_string(dir.join("cgroup.controllers")).ok();
        Controller::ALL.map(|c| hierarchy::find(c, &mountinfo, &cgroups, controllers_of))
    })
}

/// Where the cgroup hierarchies are mounted here (read once).
pub(crate) fn mount_points() -> &'static [PathBuf] {
    static POINTS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    POINTS.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        hierarchy::mount_points(&mountinfo)
    })
}

/// `controller`'s hierarchy here, or why there is none.
pub(crate) fn hierarchy_of(controller: Controller) -> Result<Hierarchy, String> {
    // `ALL` lists the controllers in declaration order.
    detected()[controller as usize].clone()
}

/// The processes listed in a cgroup directory's `cgroup.procs`, but this
/// one: a spawning thread of the server is listed while it is inside (v1),
/// and the server is never a member to kill or wait for.
/// The cgroups a member made below it (as root, unsandboxed, it may) count too.
pub(crate) fn members(dir: &Path) -> Vec<u32> {
    let mut found = own_members(dir);
    for child in file::children(dir) {
        found.extend(members(&child));
    }
    found
}

/// The processes of `dir` itself (not of the cgroups below it), but this one.
pub(crate) fn own_members(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| {
            text.lines()
                .filter_map(|line| line.trim().parse().ok())
                .filter(|&pid| pid != me)
                .collect()
        })
        .unwrap_or_default()
}

/// The limits a start runs under: what it asks for, each unnamed one taken
/// from the server's `defaults`; None when there are none. A start may lower
/// a default, not raise it.
pub(crate) fn resolve(
    asked: Option<&ProcessLimits>,
    defaults: &ProcessLimits,
) -> Result<Option<ProcessLimits>, ErrorObject> {
    let asked = asked.copied().unwrap_or_default();
    let pick = |field: LimitField, flag: &str, asked: Option<u64>, default: Option<u64>| {
        match (asked, default) {
        (Some(asked), Some(default)) if asked > default => Err(ErrorObject::invalid_request(format!(
            "process/start refused: limits.{} {asked} is above the server's {flag} {default}; a start may lower a default limit, not raise it",
            field.name
        ))),
        _ => Ok(asked.or(default)),
    }
    };
    let limits = ProcessLimits::new(
        pick(MEMORY_LIMIT, "--limit-memory", asked.memory_bytes, defaults.memory_bytes)?,
        pick(PROCESSES_LIMIT, "--limit-processes", asked.processes, defaults.processes)?,
        pick(CPU_LIMIT, "--limit-cpu", asked.cpu_percent, defaults.cpu_percent)?,
    );
    Ok((!limits.is_empty()).then_some(limits))
}

/// The refusal of a start whose limits cannot be put in force.
pub(crate) fn refused(refusal: &Refusal) -> ErrorObject {
    ErrorObject::invalid_request(format!(
        "process/start refused: cannot enforce the {} limit: {}",
        refusal.limit, refusal.reason
    ))
}

/// What `environment/info` says of the limits: for each, whether this server
/// can enforce it (a hierarchy with its controller, writable by the server)
/// and how, or why not, and its default.
pub(crate) fn support(defaults: &ProcessLimits) -> Value {
    let one = |controller: Controller, default: Option<u64>| {
        let mut entry = match hierarchy_of(controller).and_then(|h| writable(&h).map(|()| h)) {
            Ok(hierarchy) => json!({
                "enforced": true,
                "cgroup": match hierarchy.version { Version::V1 => "v1", Version::V2 => "v2" },
            }),
            Err(reason) => json!({"enforced": false, "reason": reason}),
        };
        if let Some(default) = default {
            entry["default"] = json!(default);
        }
        entry
    };
    json!({
        "memoryBytes": one(Controller::Memory, defaults.memory_bytes),
        "processes": one(Controller::Pids, defaults.processes),
        "cpuPercent": one(Controller::Cpu, defaults.cpu_percent),
    })
}

fn writable(hierarchy: &Hierarchy) -> Result<(), String> {
    let path = file::c_path(&hierarchy.dir).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path; access only reads it.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot write to {}: {}; an unprivileged server needs a delegated cgroup, e.g. `systemd-run --user --scope -p Delegate=yes exec-server`",
            hierarchy.dir.display(),
            std::io::Error::last_os_error()
        ))
    }
}

/// Parses a `--limit-memory` size: bytes, or with K, M or G (KiB, MiB, GiB).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.trim().char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&text.trim()[..at], c.to_ascii_uppercase()),
        _ => (text.trim(), 'B'),
    };
    let shift = match unit {
        'B' => 0,
        'K' => 10,
        'M' => 20,
        'G' => 30,
        other => {
            return Err(format!("unknown size suffix {other:?}: use K, M or G (KiB, MiB, GiB)"))
        }
    };
    let number: u64 =
        digits.parse().map_err(|_| format!("{text:?} is not a size such as 536870912 or 512M"))?;
    let bytes = number.checked_mul(1 << shift).ok_or_else(|| format!("{text} is too large"))?;
    MEMORY_LIMIT.check(&bytes.into())
}

/// Parses a `--limit-processes` or `--limit-cpu` value in its field's range.
pub(crate) fn parse_count(field: LimitField, text: &str) -> Result<u64, String> {
    let number: u64 =
        text.trim().parse().map_err(|_| format!("{text:?} is not a positive integer"))?;
    field.check(&number.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("4096K"), Ok(4 << 20));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(
            parse_size("1K"),
            Err("limits.memoryBytes must be an integer from 1048576 to 9007199254740992, not 1024"
                .to_owned())
        );
        assert_eq!(
            parse_size("5T"),
            Err("unknown size suffix 'T': use K, M or G (KiB, MiB, GiB)".to_owned())
        );
        assert_eq!(
            parse_size("M"),
            Err("\"M\" is not a size such as 536870912 or 512M".to_owned())
        );
    }

    #[test]
    fn a_start_lowers_defaults_and_cannot_raise_them() {
        let defaults = ProcessLimits::new(Some(512 << 20), None, Some(100));
        assert_eq!(resolve(None, &ProcessLimits::default()), Ok(None));
        assert_eq!(resolve(None, &defaults), Ok(Some(defaults)));
        assert_eq!(
            resolve(Some(&ProcessLimits::new(Some(64 << 20), Some(8), None)), &defaults),
            Ok(Some(ProcessLimits::new(Some(64 << 20), Some(8), Some(100))))
        );
        let raised =
            resolve(Some(&ProcessLimits::new(None, None, Some(200))), &defaults).unwrap_err();
        assert_eq!(raised.code, crate::protocol::codes::INVALID_REQUEST);
        assert_eq!(
            raised.message,
            "process/start refused: limits.cpuPercent 200 is above the server's --limit-cpu 100; a start may lower a default limit, not raise it"
        );
    }
}
