//! One start's cgroup: a directory in each hierarchy its limits need, below
//! the server's own (`exec-server-PID`), with the limits written before
//! anything runs in it; the spawn is put inside (cgroup v1: the spawning
//! thread moves in for the spawn, so the child is born inside; cgroup v2,
//! where a thread cannot move alone: the child joins through the `join`
//! trampoline before it execs); removed by the janitor once it empties.

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::file::write;
use super::hierarchy::{Controller, Hierarchy, Version};
use super::{janitor, join, server_dir};
use crate::protocol::ProcessLimits;

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
}

/// Serialises the moves of spawning threads: the one `tasks` write each way.
static MOVES: Mutex<()> = Mutex::new(());

impl Group {
    /// Makes the cgroup of a start with `limits` (at least one set), whose
    /// sandbox adds `helpers` processes of the server's own (a trampoline and
    /// an init, and a network helper) that do not count against `processes`.
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
        };
        for mut part in parts {
            let first = part.controllers[0];
            let server = server_dir::ensure(&part.home, part.version, &part.controllers)
                .map_err(|reason| Refusal::new(first, reason))?;
            part.dir = match janitor::take_spare(&server) {
                Some(spare) => spare,
                None => {
                    let dir = janitor::fresh_name(&server);
                    fs::create_dir(&dir).map_err(|error| {
                        Refusal::new(first, format!("cannot create {}: {error}", dir.display()))
                    })?;
                    dir
                }
            };
            group.parts.push(part);
            let part = group
                .parts
                .last()
                .map(|part| (part.version, part.dir.clone(), part.controllers.clone()));
            if let Some((version, dir, controllers)) = part {
                for controller in controllers {
                    group.write_limit(version, &dir, controller)?;
                }
            }
        }
        group.oom_base = group.oom_count();
        Ok(group)
    }

    /// The limits the tree runs under.
    pub(crate) fn limits(&self) -> ProcessLimits {
        self.limits
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
        match (controller, version) {
            (Controller::Memory, Version::V1) => {
                let bytes = self.limits.memory_bytes.unwrap_or(u64::MAX);
                write("memory.limit_in_bytes", bytes.to_string())?;
                // With swap accounting, memory and swap together get the same bound.
                match super::group::write(
                    &dir.join("memory.memsw.limit_in_bytes"),
                    &bytes.to_string(),
                ) {
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    other => other.map_err(|e| refuse("memory.memsw.limit_in_bytes", e))?,
                }
            }
            (Controller::Memory, Version::V2) => {
                let bytes = self.limits.memory_bytes.unwrap_or(u64::MAX);
                write("memory.max", bytes.to_string())?;
                match super::group::write(&dir.join("memory.swap.max"), "0") {
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    other => other.map_err(|e| refuse("memory.swap.max", e))?,
                }
            }
            (Controller::Pids, version) => {
                // v1: one more while the spawning thread is inside (see `spawn_inside`).
                let during = u64::from(version == Version::V1);
                let max = self.pids_max.unwrap_or(u64::MAX).saturating_add(during);
                write("pids.max", max.to_string())?;
            }
            (Controller::Cpu, Version::V1) => {
                let quota = self.limits.cpu_percent.unwrap_or(0) * (CPU_PERIOD_US / 100);
                write("cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                write("cpu.cfs_quota_us", quota.to_string())?;
            }
            (Controller::Cpu, Version::V2) => {
                let quota = self.limits.cpu_percent.unwrap_or(0) * (CPU_PERIOD_US / 100);
                write("cpu.max", format!("{quota} {CPU_PERIOD_US}"))?;
            }
        }
        Ok(())
    }

    /// Runs `spawn` so that the child it starts is born in this cgroup: for
    /// v1 hierarchies the calling thread moves in for the spawn and back out
    /// after; for a v2 one, `spawn` gets the program and argv to run instead
    /// (the `join` trampoline, `exe` being this binary).
    pub(crate) fn spawn_inside<T>(
        &self,
        exe: &Path,
        program: &Path,
        argv: &[CString],
        spawn: impl FnOnce(&Path, &[CString]) -> io::Result<T>,
    ) -> io::Result<T> {
        let (program, argv) = match self.parts.iter().find(|part| part.version == Version::V2) {
            Some(part) => join::wrap(exe, &part.dir.join("cgroup.procs"), program, argv)?,
            None => (program.to_path_buf(), argv.to_vec()),
        };
        let v1: Vec<&Part> = self.parts.iter().filter(|part| part.version == Version::V1).collect();
        if v1.is_empty() {
            return spawn(&program, &argv);
        }
        let _moves = MOVES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() }.to_string();
        let mut moved = Vec::new();
        let entered = v1.iter().try_for_each(|part| {
            write(&part.dir.join("tasks"), &tid)?;
            moved.push(*part);
            Ok::<(), io::Error>(())
        });
        let outcome = entered.and_then(|()| spawn(&program, &argv));
        let mut back = Ok(());
        for part in moved {
            if let Err(error) = return_home(&part.home, &tid) {
                tracing::error!(%error, cgroup = %part.home.display(), "a spawning thread cannot return to the server's cgroup");
                back = Err(error);
            }
        }
        // The thread is out: the tree gets exactly its own share of pids.
        if let (Some(max), Some(part)) =
            (self.pids_max, v1.iter().find(|p| p.controllers.contains(&Controller::Pids)))
        {
            back = back.and(write(&part.dir.join("pids.max"), &max.to_string()));
        }
        match (outcome, back) {
            (Ok(spawned), Ok(())) => Ok(spawned),
            (Ok(_), Err(error)) | (Err(error), _) => Err(error),
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

    /// The processes in the cgroup now (none once it is removed).
    pub(crate) fn members(&self) -> Vec<u32> {
        self.parts.first().map(|part| super::members(&part.dir)).unwrap_or_default()
    }

    /// Hands the directories to the janitor, which keeps them as spares or
    /// removes them once they are empty; later calls do nothing.
    pub(crate) fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            janitor::release(self.parts.iter().map(|part| part.dir.clone()).collect());
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

/// Moves thread `tid` back to the server's cgroup `home`.
fn return_home(home: &Path, tid: &str) -> io::Result<()> {
    use std::io::Write;
    let mut homes = HOMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !homes.iter().any(|(dir, _)| dir == home) {
        let file = fs::OpenOptions::new().write(true).open(home.join("tasks"))?;
        homes.push((home.to_path_buf(), file));
    }
    let file = homes.iter_mut().find(|(dir, _)| dir == home).map(|(_, file)| file);
    file.ok_or_else(|| io::Error::other("no tasks file"))?.write_all(tid.as_bytes())
}
