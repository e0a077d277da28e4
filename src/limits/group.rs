//! One start's cgroup: a directory in each hierarchy its limits need, below
//! the server's own (`exec-server-PID`), with the limits written before
//! anything runs in it; the spawn is put inside (cgroup v1: the spawning
//! thread moves in for the spawn, so the child is born inside; cgroup v2,
//! where a thread cannot move alone: the child joins through the `join`
//! trampoline before it execs); handed to the janitor once it empties.

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::file::write;
use super::hierarchy::{Controller, Hierarchy, Version};
use super::janitor::{self, Retired};
use super::{join, server_dir};
use crate::protocol::{ProcessLimits, MAX_PROCESSES};

/// CFS period the CPU limit is written against (100 ms, the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// A start's limits could not be put in force: which, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The limit, as messages name it (`memory`, `process`, `CPU`).
    pub(crate) limit: &'static str,
    pub(crate) reason: String,
}

impl Refusal {
    fn new(controller: Controller, reason: impl Into<String>) -> Refusal {
        Refusal { limit: controller.limit(), reason: reason.into() }
    }
}

/// One hierarchy's directory of a start.
#[derive(Debug)]
struct Part {
    version: Version,
    dir: PathBuf,
    /// The server's own cgroup there, where its threads return after a spawn.
    home: PathBuf,
    controllers: Vec<Controller>,
}

/// The cgroup of one limited start, in every hierarchy it needs.
#[derive(Debug)]
pub(crate) struct Group {
    parts: Vec<Part>,
    limits: ProcessLimits,
    /// `pids.max` once the spawn is done: the tree's processes plus the server's helpers.
    pids_max: Option<u64>,
    /// The memory controller's OOM-kill count when the cgroup was taken (a
    /// spare may have served an earlier start).
    oom_base: u64,
    released: AtomicBool,
    /// Set by the janitor once the cgroup is empty and handed on.
    retired: Retired,
}

impl Group {
    /// Makes the cgroup of a start with `limits` (at least one set), whose
    /// sandbox adds `helpers` processes of the server's own (an init, and a
    /// network helper) that do not count against `processes`.
    pub(crate) fn create(limits: ProcessLimits, helpers: u64) -> Result<Group, Refusal> {
        let wanted = [
            (Controller::Memory, limits.memory_bytes.is_some()),
            (Controller::Pids, limits.processes.is_some()),
            (Controller::Cpu, limits.cpu_percent.is_some()),
        ];
        let mut parts: Vec<Part> = Vec::new();
        for (controller, _) in wanted.into_iter().filter(|(_, wanted)| *wanted) {
            let Hierarchy { version, dir: home } = super::hierarchy_of(controller)
                .map_err(|reason| Refusal::new(controller, reason))?;
            match parts.iter_mut().find(|part| part.home == home) {
                Some(part) => part.controllers.push(controller),
                None => parts.push(Part {
                    version,
                    dir: PathBuf::new(),
                    home,
                    controllers: vec![controller],
                }),
            }
        }
        let pids_max = limits.processes.map(|n| n.saturating_add(helpers));
        let mut group = Group {
            parts: Vec::new(),
            limits,
            pids_max,
            oom_base: 0,
            released: AtomicBool::new(false),
            retired: Retired::default(),
        };
        for mut part in parts {
            let first = part.controllers[0];
            let server = server_dir::ensure(&part.home, part.version, &part.controllers)
                .map_err(|reason| Refusal::new(first, reason))?;
            // A spare that will not take this start's limits (its last tree
            // left more charged than the new bound) goes; a fresh one is made.
            if let Some(spare) = janitor::take_spare(&server) {
                part.dir = spare;
                match group.write_limits(&part) {
                    Ok(()) => {
                        group.parts.push(part);
                        continue;
                    }
                    Err(_) => janitor::discard(vec![part.dir.clone()]),
                }
            }
            part.dir = janitor::fresh_name(&server);
            fs::create_dir(&part.dir).map_err(|error| {
                Refusal::new(first, format!("cannot create {}: {error}", part.dir.display()))
            })?;
            let written = group.write_limits(&part);
            group.parts.push(part);
            written?;
        }
        group.oom_base = group.oom_count();
        Ok(group)
    }

    /// The limits the tree runs under.
    pub(crate) fn limits(&self) -> ProcessLimits {
        self.limits
    }

    /// The `cgroup.procs` files of the server's own cgroups, where a
    /// sandbox's trampoline goes once it has started the tree's init: one
    /// per hierarchy the group is in.
    pub(crate) fn homes(&self) -> Vec<PathBuf> {
        self.parts.iter().map(|part| part.home.join("cgroup.procs")).collect()
    }

    /// Writes the limits of `part`'s controllers, as they stand while the
    /// spawn is under way (see [`Group::spawn_inside`]).
    fn write_limits(&self, part: &Part) -> Result<(), Refusal> {
        for &controller in &part.controllers {
            self.write_limit(part.version, &part.dir, controller)?;
        }
        Ok(())
    }

    fn write_limit(
        &self,
        version: Version,
        dir: &Path,
        controller: Controller,
    ) -> Result<(), Refusal> {
        let refuse = |file: &str, error: io::Error| {
            Refusal::new(controller, format!("cannot write {}: {error}", dir.join(file).display()))
        };
        let write =
            |file: &str, value: String| write(&dir.join(file), &value).map_err(|e| refuse(file, e));
        // A file the kernel does not have here (no swap accounting) is skipped.
        let optional = |file: &str, value: &str| match super::file::write(&dir.join(file), value) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other.map_err(|e| refuse(file, e)),
        };
        match (controller, version) {
            (Controller::Memory, Version::V1) => {
                let bytes = self.limits.memory_bytes.unwrap_or(u64::MAX).to_string();
                // Memory may not exceed memory+swap: lift that first (a
                // spare holds its last tree's), then set both to the bound.
                optional("memory.memsw.limit_in_bytes", "-1")?;
                write("memory.limit_in_bytes", bytes.clone())?;
                optional("memory.memsw.limit_in_bytes", &bytes)?;
            }
            (Controller::Memory, Version::V2) => {
                let bytes = self.limits.memory_bytes.unwrap_or(u64::MAX);
                write("memory.max", bytes.to_string())?;
                optional("memory.swap.max", "0")?;
            }
            (Controller::Pids, version) => {
                // v1: one more while the spawning thread is inside.
                let during = u64::from(version == Version::V1);
                write("pids.max", pids_value(self.pids_max, during))?;
            }
            (Controller::Cpu, Version::V1) => {
                // No quota while the spawning thread is inside: a spare whose
                // last tree spent its period would hold up every start
                // behind it. The quota is written once the thread is out.
                write("cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                write("cpu.cfs_quota_us", "-1".to_owned())?;
            }
            (Controller::Cpu, Version::V2) => {
                write("cpu.max", format!("{} {CPU_PERIOD_US}", self.cpu_quota()))?;
            }
        }
        Ok(())
    }

    /// The CFS quota of `cpuPercent`, per [`CPU_PERIOD_US`].
    fn cpu_quota(&self) -> u64 {
        self.limits.cpu_percent.unwrap_or(0) * (CPU_PERIOD_US / 100)
    }

    /// Runs `spawn` (which returns the child's pid) so that the child is
    /// born in this cgroup: for v1 hierarchies the calling thread moves in
    /// for the spawn and back out after, then the limits that would hold the
    /// thread up (CPU) or count it (pids) are set to the tree's own; for a v2
    /// one, `spawn` gets the program and argv to run instead (the `join`
    /// trampoline, `exe` being this binary), and `true` as its third
    /// argument: the join takes the program's environment sealed (`env_fd`),
    /// and passes it on untouched when `program` is the sandbox's
    /// `trampoline`. A child whose cgroup could not be put in order is
    /// killed: nothing runs with less than was asked.
    pub(crate) fn spawn_inside(
        &self,
        exe: &Path,
        program: &Path,
        argv: &[CString],
        trampoline: bool,
        spawn: impl FnOnce(&Path, &[CString], bool) -> io::Result<u32>,
    ) -> io::Result<u32> {
        let v2 = self.parts.iter().find(|part| part.version == Version::V2);
        let joining = v2.is_some();
        let (program, argv) = match v2 {
            Some(part) => {
                join::wrap(exe, &part.dir.join("cgroup.procs"), program, argv, trampoline)?
            }
            None => (program.to_path_buf(), argv.to_vec()),
        };
        let v1: Vec<&Part> = self.parts.iter().filter(|part| part.version == Version::V1).collect();
        if v1.is_empty() {
            return spawn(&program, &argv, joining);
        }
        // The way back is opened first: a thread that could not return must not leave.
        for part in &v1 {
            open_home(&part.home).map_err(|error| {
                let tasks = part.home.join("tasks");
                io::Error::new(error.kind(), format!("cannot enforce the limits: the server cannot move its threads back to {}: {error}", tasks.display()))
            })?;
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() }.to_string();
        let mut moved = Vec::new();
        let entered = v1.iter().try_for_each(|part| {
            write(&part.dir.join("tasks"), &tid)?;
            moved.push(*part);
            Ok::<(), io::Error>(())
        });
        let outcome = entered.and_then(|()| spawn(&program, &argv, joining));
        let mut settled = Ok(());
        for part in moved {
            if let Err(error) = return_home(&part.home, &tid) {
                tracing::error!(%error, cgroup = %part.home.display(), "a spawning thread cannot return to the server's cgroup");
                settled = Err(error);
            }
        }
        for part in &v1 {
            if part.controllers.contains(&Controller::Pids) {
                let max = pids_value(self.pids_max, 0);
                settled = settled.and(write(&part.dir.join("pids.max"), &max));
            }
            if part.controllers.contains(&Controller::Cpu) {
                // The kernel refuses more than the server's own cgroup has;
                // the tree is bounded by it anyway.
                let quota = self.cpu_quota().min(home_cpu_quota(&part.home)).to_string();
                settled = settled.and(write(&part.dir.join("cpu.cfs_quota_us"), &quota));
            }
        }
        match (outcome, settled) {
            (Ok(pid), Ok(())) => Ok(pid),
            (Ok(pid), Err(error)) => {
                // SAFETY: kill with our own unreaped child's pid (it cannot
                // have been reused); the orphan reaper reaps it.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                Err(error)
            }
            (Err(error), _) => Err(error),
        }
    }

    /// How many processes of the tree the memory limit killed so far.
    pub(crate) fn oom_kills(&self) -> u64 {
        self.oom_count().saturating_sub(self.oom_base)
    }

    /// The memory controller's OOM-kill count.
    fn oom_count(&self) -> u64 {
        let Some(part) = self.parts.iter().find(|p| p.controllers.contains(&Controller::Memory))
        else {
            return 0;
        };
        let file = match part.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        fs::read_to_string(part.dir.join(file))
            .ok()
            .and_then(|text| {
                text.lines().find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// The processes in the cgroup now (none once it is retired: emptied and
    /// handed on).
    pub(crate) fn members(&self) -> Vec<u32> {
        // Once retired, its cgroup may hold another start's tree: never ours
        // to kill. (Read before the file: a read that sees a new owner's
        // member is followed by one that sees the flag.)
        if self.retired.load(Ordering::SeqCst) {
            return Vec::new();
        }
        self.parts.first().map(|part| super::members(&part.dir)).unwrap_or_default()
    }

    /// Hands the directories to the janitor, which keeps them as spares or
    /// removes them once they are empty; later calls do nothing.
    pub(crate) fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            let dirs = self.parts.iter().map(|part| part.dir.clone()).collect();
            janitor::release(dirs, self.retired.clone());
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.release();
    }
}

/// The server's own `tasks` files, kept open: every spawn writes to them.
static HOMES: Mutex<Vec<(PathBuf, fs::File)>> = Mutex::new(Vec::new());

/// Opens the server's `tasks` file in `home`, once.
fn open_home(home: &Path) -> io::Result<()> {
    let mut homes = HOMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !homes.iter().any(|(dir, _)| dir == home) {
        let file = fs::OpenOptions::new().write(true).open(home.join("tasks"))?;
        homes.push((home.to_path_buf(), file));
    }
    Ok(())
}

/// Moves thread `tid` back to the server's cgroup `home` (opened by [`open_home`]).
fn return_home(home: &Path, tid: &str) -> io::Result<()> {
    use std::io::Write;
    let mut homes = HOMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = homes.iter_mut().find(|(dir, _)| dir == home).map(|(_, file)| file);
    file.ok_or_else(|| io::Error::other("the tasks file was not opened"))?.write_all(tid.as_bytes())
}

/// The CPU quota of the server's own cgroup `home` (v1) per
/// [`CPU_PERIOD_US`], or `u64::MAX` when it has none.
fn home_cpu_quota(home: &Path) -> u64 {
    let read = |file: &str| fs::read_to_string(home.join(file)).ok()?.trim().parse::<i64>().ok();
    match (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
        (Some(quota), Some(period)) if quota > 0 && period > 0 => {
            (quota as u64).saturating_mul(CPU_PERIOD_US) / period as u64
        }
        _ => u64::MAX,
    }
}

/// `pids.max` for `max` processes and `extra` more, within what the kernel
/// takes (`PID_MAX_LIMIT`, which is also the most a start may ask for).
fn pids_value(max: Option<u64>, extra: u64) -> String {
    max.map_or_else(
        || "max".to_owned(),
        |max| max.saturating_add(extra).min(MAX_PROCESSES).to_string(),
    )
}
