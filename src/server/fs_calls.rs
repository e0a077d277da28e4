//! fs/* requests off the loop: a few run at once on blocking threads, the rest wait in a bounded queue.
//!
//! Each call decodes its params, does its syscalls and encodes its reply on a
//! blocking thread, so a FIFO, a device, a hung mount or a multi-GiB copy
//! delays nothing but itself. Replies go out as calls finish, in any order,
//! with one exception that keeps a session piped in by hand meaningful: calls
//! whose paths overlap as written (the same path, or one inside the other)
//! run one after the other, in arrival order. At shutdown the set is dropped:
//! calls still stuck in a syscall are abandoned with their threads.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::{Id, JoinSet};
use tokio::time::{Duration, Instant};

use super::reply::{decode, reply};
use crate::dialect::{fs_rules, outbound, Dialect, FsConfine};
use crate::fs::{self, Handles, Roots};
use crate::hold::ServerRoom;
use crate::protocol::*;
use crate::transport::Line;

/// fs calls running at once.
const FS_IN_FLIGHT: usize = 4;
/// fs calls waiting for a slot; at this many the loop takes no more input from
/// the connection until one starts (backpressure, as for a full outbox).
const FS_QUEUED: usize = 64;
/// Bytes of waiting fs requests; at this many the loop takes no more input
/// (the last call taken may pass it by one message).
const FS_QUEUED_BYTES: usize = 64 * 1024 * 1024;
/// The longest `fs/getMetadata` line tried from the kernel's caches on the
/// loop: a path (PATH_MAX is 4096 bytes, more as base64) and its options. A
/// larger one, padded with whatever a client likes, is decoded on a blocking
/// thread like any call, so it cannot stall the loop.
const CACHED_MAX_BYTES: usize = 16 * 1024;
/// How long after starting a call the loop keeps polling instead of sleeping
/// (see [`FsCalls::spinning`]).
const SPIN: Duration = Duration::from_micros(150);

struct Running {
    id: RequestId,
    method: String,
    paths: Vec<PathBuf>,
}

/// An fs request as the dispatcher hands it over.
pub(super) struct Call {
    pub(super) id: RequestId,
    pub(super) method: String,
    pub(super) params: Value,
    pub(super) bytes: usize,
    /// How to answer it.
    pub(super) dialect: Dialect,
    /// The connection has spoken today's dialect: its handle calls (which
    /// name no path, so their own dialect cannot tell) follow today's rules.
    pub(super) today: bool,
    /// Under a sandbox context: how the call is confined.
    pub(super) confine: Option<FsConfine>,
}

struct Job {
    call: Call,
    /// The paths it names, cleaned lexically, for ordering.
    paths: Vec<PathBuf>,
}

/// The fs calls of one connection.
pub(super) struct FsCalls {
    roots: Arc<Roots>,
    /// The connection's `fs/open` handles.
    handles: Arc<Handles>,
    /// Where an `fs/readFile` answer is charged, from before the file is
    /// read until the answer is written.
    room: ServerRoom,
    /// Closed when the calls are dropped: a call waiting for room gives up.
    gate: Arc<Semaphore>,
    running: JoinSet<Line>,
    /// What each running call is, to order later calls and to answer it if it panics.
    running_paths: HashMap<Id, Running>,
    queue: VecDeque<Job>,
    queued_bytes: usize,
    /// When the loop stops polling for the calls started last.
    spin_until: Option<Instant>,
}

impl FsCalls {
    pub(super) fn new(roots: Arc<Roots>, room: ServerRoom) -> FsCalls {
        FsCalls {
            roots,
            handles: Arc::default(),
            room,
            gate: Arc::new(Semaphore::new(0)),
            running: JoinSet::new(),
            running_paths: HashMap::new(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            spin_until: None,
        }
    }

    /// No call is running or waiting.
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty() && self.queue.is_empty()
    }

    /// Whether the loop should poll again at once rather than sleep: a call
    /// started less than [`SPIN`] ago is running. A metadata call is done in
    /// a few microseconds, but a sleeping loop thread takes a cross-CPU wake-up
    /// to see it (tens of microseconds on a VM, where the idle CPU halts);
    /// polling for a bounded 150 us per call keeps the CPU awake instead.
    pub(super) fn spinning(&self) -> bool {
        !self.running.is_empty() && self.spin_until.is_some_and(|until| Instant::now() < until)
    }

    /// Whether another call may be taken: the loop stops reading the
    /// connection's input while the queue is full (it still notices EOF, see
    /// `serve`), so pipelined calls wait instead of being refused.
    pub(super) fn has_room(&self) -> bool {
        self.queue.len() < FS_QUEUED && self.queued_bytes < FS_QUEUED_BYTES
    }

    /// Starts the call, or queues it when [`FS_IN_FLIGHT`] already run. The
    /// loop takes input only while [`FsCalls::has_room`], so the refusal of a
    /// full queue (the encoded error is returned) is a last resort that a
    /// client following the protocol never sees.
    /// A cached `fs/getMetadata` is answered at once (the reply is returned).
    pub(super) fn submit(&mut self, call: Call) -> Option<String> {
        let paths = named_paths(&call.params);
        if call.method == GetMetadata::NAME
            && call.confine.is_none()
            && call.bytes <= CACHED_MAX_BYTES
            && !self.overlaps_earlier(&paths, self.queue.len())
        {
            if let Some(line) = self.cached_metadata(&call.id, &call.params) {
                return Some(line);
            }
        }
        let bytes = call.bytes;
        if self.queue.len() >= FS_QUEUED {
            let error = ErrorObject::invalid_request(format!(
                "too many fs calls waiting: {} wait behind {} running (the limit is {FS_QUEUED} calls); wait for replies before sending more",
                self.queue.len(),
                self.running.len()
            ));
            return Some(encode_response::<Empty>(&call.id, &Err(error)));
        }
        self.queue.push_back(Job { call, paths });
        self.queued_bytes += bytes;
        self.start_queued();
        None
    }

    /// Whether a call on `paths` must wait for one running, or for one of the
    /// first `queued_before` waiting ones.
    fn overlaps_earlier(&self, paths: &[PathBuf], queued_before: usize) -> bool {
        self.running_paths.values().any(|other| overlap(paths, &other.paths))
            || self.queue.iter().take(queued_before).any(|earlier| overlap(paths, &earlier.paths))
    }

    /// The reply to `fs/getMetadata` when the kernel's caches alone can give
    /// it (see `fs::cached_metadata`): answered on the loop, no thread hop.
    fn cached_metadata(&self, id: &RequestId, params: &Value) -> Option<String> {
        let params = decode::<GetMetadata>(params.clone()).ok()?;
        let meta = fs::cached_metadata(&self.roots, &params)?;
        Some(reply::<GetMetadata>(id, Ok(meta)))
    }

    /// Refuses every call still waiting (the connection is ending) and drops the rest.
    pub(super) fn refuse_waiting(&mut self, out: &mut Vec<Line>) {
        for job in self.queue.drain(..) {
            let error = ErrorObject::invalid_request(format!(
                "{} was not run: the connection is ending",
                job.call.method
            ));
            out.push(encode_response::<Empty>(&job.call.id, &Err(error)).into());
        }
        self.queued_bytes = 0;
    }

    /// The encoded reply of the next call to finish; pending while none runs.
    pub(super) async fn next_reply(&mut self) -> Line {
        loop {
            match self.running.join_next_with_id().await {
                Some(Ok((task, line))) => {
                    self.running_paths.remove(&task);
                    self.start_queued();
                    return line;
                }
                Some(Err(error)) => {
                    // A panic in a handler is a bug; the client still gets an answer.
                    tracing::error!(%error, "an fs call failed");
                    let running = self.running_paths.remove(&error.id());
                    self.start_queued();
                    if let Some(Running { id, method, .. }) = running {
                        let error =
                            ErrorObject::internal(format!("{method} failed: internal error"));
                        return encode_response::<Empty>(&id, &Err(error)).into();
                    }
                }
                None => std::future::pending().await,
            }
        }
    }

    /// Starts waiting calls, in order, that overlap nothing running or waiting before them.
    fn start_queued(&mut self) {
        let mut index = 0;
        while index < self.queue.len() && self.running.len() < FS_IN_FLIGHT {
            if self.overlaps_earlier(&self.queue[index].paths, index) {
                index += 1;
                continue;
            }
            let Some(job) = self.queue.remove(index) else { return };
            self.queued_bytes -= job.call.bytes;
            let running = Running {
                id: job.call.id.clone(),
                method: job.call.method.clone(),
                paths: job.paths,
            };
            let (roots, handles) = (self.roots.clone(), self.handles.clone());
            let (room, gate) = (self.room.clone(), self.gate.clone());
            let task = self
                .running
                .spawn_blocking(move || run(&roots, &handles, (&room, &gate), job.call));
            self.spin_until = Some(Instant::now() + SPIN);
            self.running_paths.insert(task.id(), running);
        }
    }
}

impl Drop for FsCalls {
    fn drop(&mut self) {
        self.gate.close();
    }
}

/// Decodes, runs and encodes one call (on a blocking thread).
fn run(roots: &Roots, handles: &Handles, room: (&ServerRoom, &Semaphore), call: Call) -> Line {
    let Call { id, method, params, dialect, today, confine, .. } = call;
    let connection = if today { Dialect::Today } else { dialect };
    let rules = fs_rules::handle_rules(connection);
    let choices = fs_rules::fs_rules(dialect);
    let word = |refusal| fs_rules::refusal(connection, refusal);
    // A call under a sandbox context: confined as it says.
    let confined;
    let roots = match confine {
        None => roots,
        Some(confine) => match confined_roots(roots, &confine) {
            Ok(inner) => {
                confined = inner;
                &confined
            }
            Err(error) => return encode_response::<Empty>(&id, &Err(error)).into(),
        },
    };
    let answer = |line: Result<String, ErrorObject>| match line {
        Ok(line) => line,
        Err(error) => encode_response::<Empty>(&id, &Err(outbound::error(dialect, error))),
    };
    // `followSymlinks: false`, where the caller reads it strictly: no link on the way.
    let strict = |path: &std::path::Path, follow: Option<bool>, how: fs::Strict| {
        if choices.no_link_components && follow == Some(false) {
            fs::refuse_links(roots, path, how)
        } else {
            Ok(())
        }
    };
    // The bulk path: the data is encoded straight into the reply line,
    // whose whole size is charged before the file is read.
    if method == ReadFile::NAME {
        let mut held = None;
        // The answer's JSON around its data.
        let around = encode_read_file(&id, &[]).len();
        let mut reserve = |bytes: u64| {
            // The bytes and their base64 line are both in memory until the
            // line is made; then only the line's charge is kept.
            let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            let cost = bytes.saturating_add(b64_len(bytes)).saturating_add(around);
            if cost < CHARGED_FROM {
                // Small: bounded by the calls in flight and the outbox, and
                // never held up by a room other connections filled.
                return Ok(());
            }
            held = room.0.wait_blocking(cost, room.1);
            held.is_some().then_some(()).ok_or_else(|| {
                ErrorObject::internal(
                    "fs/readFile failed: the connection ended while the answer waited for room",
                )
            })
        };
        let line = decode::<ReadFile>(params)
            .and_then(|p| {
                strict(&p.path, p.follow_symlinks, fs::Strict::Read)?;
                fs::read_file_charged(roots, p, &mut reserve)
                    .map_err(|r| fs_rules::refusal(dialect, r))
            })
            .map(|result| encode_read_file(&id, &result.data_base64.0));
        let line = answer(line);
        if held.as_ref().is_some_and(|held| held.bytes() > line.len()) {
            // The file's bytes were freed with the line made: give them back.
            crate::transport::give_back_memory();
        }
        if let Some(held) = held.as_mut() {
            held.shrink_to(line.len());
        }
        return Line::charged(line, held);
    }
    // A call whose answer can be large (a walk holds up to 32 MiB of paths,
    // a listing is as long as its directory) is charged before it runs when
    // the room has it, so the room bounds how many are built at once; then it
    // keeps what its line takes. When the room is full (other connections'
    // answers wait for their readers) it is built uncharged and its line then
    // waits for room like any other answer: a small listing is never held up.
    let before = match method.as_str() {
        Walk::NAME | ReadDirectory::NAME => room.0.try_estimate(BUILD_CHARGE),
        _ => None,
    };
    let line = match method.as_str() {
        WriteFile::NAME => answer(ok::<WriteFile>(&id, params, |p| {
            strict(&p.path, p.follow_symlinks, fs::Strict::Write)?;
            fs::write_file(roots, p, &choices)
        })),
        CreateDirectory::NAME => {
            answer(ok::<CreateDirectory>(&id, params, |p| fs::create_directory(roots, p)))
        }
        GetMetadata::NAME => answer(ok::<GetMetadata>(&id, params, |p| {
            strict(&p.path, p.follow_symlinks, fs::Strict::Stat)?;
            fs::get_metadata(roots, p)
        })),
        ReadDirectory::NAME => {
            answer(ok::<ReadDirectory>(&id, params, |p| fs::read_directory(roots, p, &choices)))
        }
        Remove::NAME => answer(ok::<Remove>(&id, params, |p| {
            let how = fs::Strict::Remove { recursive: p.recursive.unwrap_or(true) };
            strict(&p.path, p.follow_symlinks, how)?;
            fs::remove(roots, p)
        })),
        Copy::NAME => answer(ok::<Copy>(&id, params, |p| fs::copy(roots, p, &choices))),
        Rename::NAME => answer(ok::<Rename>(&id, params, |p| fs::rename(roots, p))),
        EnvironmentConfigRead::NAME => answer(ok::<EnvironmentConfigRead>(&id, params, |p| {
            crate::dialect::environment_config::read(roots, &p)
        })),
        Canonicalize::NAME => answer(ok::<Canonicalize>(&id, params, |p| {
            fs::canonicalize(roots, &p.path).map(|path| path_result(dialect, &path))
        })),
        Walk::NAME => answer(ok::<Walk>(&id, params, |p| {
            fs::walk(roots, &p.path, &p.options, &choices.walk)
                .map(|walked| walk_result(dialect, walked))
        })),
        Open::NAME => answer(ok::<Open>(&id, params, |p| {
            let handle_id =
                handles.open(roots, p.handle_id, &p.path, p.mode, &rules).map_err(word)?;
            Ok(HandleParams { handle_id })
        })),
        ReadBlock::NAME => answer(ok::<ReadBlock>(&id, params, |p| {
            handles.read_block(&p.handle_id, p.offset, p.len, &rules).map_err(word)
        })),
        WriteBlock::NAME => answer(ok::<WriteBlock>(&id, params, |p| {
            handles.write_block(&p.handle_id, p.offset, &p.chunk.0, &rules).map_err(word)
        })),
        Close::NAME => {
            answer(ok::<Close>(&id, params, |p| handles.close(&p.handle_id, &rules).map_err(word)))
        }
        other => encode_response::<Empty>(
            &id,
            &Err(ErrorObject::new(
                codes::METHOD_NOT_FOUND,
                format!("method {other} is not an fs method"),
            )),
        ),
    };
    let held = match before {
        Some(mut held) => {
            room.0.fit(&mut held, line.len());
            Some(held)
        }
        // Any other large answer (a block) is charged once made, until it
        // is written: the room bounds what waits for the writer.
        None if line.len() >= CHARGED_FROM => room.0.wait_blocking(line.len(), room.1),
        None => None,
    };
    Line::charged(line, held)
}

/// What a walk or a listing is charged while it is built: a walk's most.
const BUILD_CHARGE: usize = 33 * 1024 * 1024;

/// Answers from this size on are charged to the room (smaller ones are
/// bounded by the outbox, `OUTBOX_BYTES` past the first line).
const CHARGED_FROM: usize = 64 * 1024;

/// Decodes, handles and encodes call `M`; the error is left for the dialect to word.
fn ok<M: Method>(
    id: &RequestId,
    params: Value,
    handler: impl FnOnce(M::Params) -> Result<M::Result, ErrorObject>,
) -> Result<String, ErrorObject> {
    let result = decode::<M>(params).and_then(handler)?;
    Ok(reply::<M>(id, Ok(result)))
}

/// The roots of a call under a sandbox context: with an access list, every
/// path it opens is checked against the list (resolved now); with the older
/// writable roots, a write lies beneath one of them (each inside the
/// server's roots).
fn confined_roots(roots: &Roots, confine: &FsConfine) -> Result<Roots, ErrorObject> {
    if confine.sandbox.access.is_some() {
        let map =
            crate::sandbox::resolve_map(&confine.sandbox, roots, crate::sandbox::Globs::Match)?;
        let need = if confine.writes { fs::Need::Write } else { fs::Need::Read };
        return roots.guarded(Arc::new(map), need).map_err(|e| {
            ErrorObject::internal(format!("cannot confine the call to its sandbox: {e}"))
        });
    }
    let writable = confine.sandbox.writable_roots.as_deref().unwrap_or_default();
    if writable.is_empty() {
        return Err(ErrorObject::invalid_request(
            "the sandbox context allows no writes (a readOnly file system)",
        ));
    }
    roots.within(writable)
}

fn path_result(dialect: Dialect, path: &Path) -> PathResult {
    let base64 = (dialect == Dialect::V0 && path.to_str().is_none())
        .then(|| Base64(path.as_os_str().as_encoded_bytes().to_vec()));
    PathResult { path: outbound::path(dialect, path), path_base64: base64 }
}

fn walk_result(dialect: Dialect, walked: fs::Walked) -> WalkResult {
    let entries = walked
        .entries
        .iter()
        .map(|(path, directory)| WalkEntry {
            path: path_result(dialect, path),
            kind: if *directory { "directory" } else { "file" }.to_owned(),
        })
        .collect();
    let errors = walked
        .errors
        .iter()
        .map(|(path, message)| WalkError {
            path: outbound::path(dialect, path),
            message: message.clone(),
        })
        .collect();
    WalkResult { entries, errors, truncated: walked.truncated }
}

/// The paths a request names (strings or base64 twins), cleaned lexically.
/// Only absolute paths below `/` take part: a call that will fail validation,
/// or one on `/` itself, must not queue behind (or hold up) everything.
fn named_paths(params: &Value) -> Vec<PathBuf> {
    let mut paths = all_named_paths(params);
    paths.retain(|path| path.is_absolute() && path.parent().is_some());
    paths
}

fn all_named_paths(params: &Value) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    // A handle orders its calls like a path (open, blocks, close in arrival
    // order); the NUL in its name means it is never a real path.
    if let Some(handle) = params.get("handleId").and_then(Value::as_str) {
        paths.push(PathBuf::from(format!("/\0handle/{handle}")));
    }
    for key in ["path", "sourcePath", "destinationPath"] {
        if let Some(text) = params.get(key).and_then(Value::as_str) {
            paths.push(clean(Path::new(text)));
        }
        let twin = format!("{key}Base64");
        if let Some(bytes) =
            params.get(&twin).and_then(Value::as_str).and_then(|t| Base64::decode(t).ok())
        {
            paths.push(clean(Path::new(&OsString::from_vec(bytes.0))));
        }
    }
    paths
}

/// `path` without `.`, `//` and with `..` applied, as written (no symlinks resolved).
fn clean(path: &Path) -> PathBuf {
    let mut cleaned = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                cleaned.pop();
            }
            Component::CurDir => {}
            other => cleaned.push(other),
        }
    }
    cleaned
}

/// Whether some path of `a` is, contains or lies inside some path of `b`.
fn overlap(a: &[PathBuf], b: &[PathBuf]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.starts_with(y) || y.starts_with(x)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_overlap_when_one_contains_the_other() {
        let paths = |v: Value| named_paths(&v);
        let file = paths(json!({"path": "/tmp/a/./f"}));
        assert_eq!(file, vec![PathBuf::from("/tmp/a/f")]);
        assert!(overlap(&file, &paths(json!({"path": "/tmp/a"}))));
        assert!(overlap(&file, &paths(json!({"path": "/tmp/a/b/../f"}))));
        assert!(!overlap(&file, &paths(json!({"path": "/tmp/ab"}))));
        let copy = paths(json!({"sourcePath": "/x", "destinationPath": "/tmp/a/f"}));
        assert!(overlap(&file, &copy));
        let twin = paths(json!({"pathBase64": "L3RtcC9hL2Y="}));
        assert_eq!(twin, vec![PathBuf::from("/tmp/a/f")]);
        assert!(!overlap(&file, &paths(json!({"nothing": 1}))));
        assert!(!overlap(&file, &paths(json!({"path": "/"}))));
        assert!(!overlap(&file, &paths(json!({"path": ""}))));
        assert!(!overlap(&file, &paths(json!({"path": "tmp/a"}))));
    }
}

#[cfg(test)]
mod queue_tests {
    use super::*;
    use serde_json::json;

    fn metadata_call(id: i64, params: Value) -> Call {
        let (method, dialect, confine) = (GetMetadata::NAME.into(), Dialect::V0, None);
        Call { id: RequestId::from(id), method, params, bytes: 10, dialect, today: false, confine }
    }

    #[tokio::test]
    async fn a_full_queue_says_so_and_refuses_only_past_it() {
        let mut calls =
            FsCalls::new(Arc::new(Roots::default()), ServerRoom::new(Arc::default(), 1 << 20));
        // Nothing is joined here, so the running slots stay taken.
        for n in 0..(FS_IN_FLIGHT + FS_QUEUED) {
            assert!(calls.has_room(), "room before call {n}");
            let params = json!({"path": format!("/tmp/queue-test-{n}")});
            let refused = calls.submit(metadata_call(n as i64, params));
            assert_eq!(refused, None, "call {n} was refused");
        }
        assert!(!calls.has_room());
        let params = json!({"path": "/tmp/one-too-many"});
        let refused = calls.submit(metadata_call(-7, params));
        assert_eq!(
            refused.as_deref(),
            Some(
                r#"{"id":-7,"error":{"code":-32600,"message":"too many fs calls waiting: 64 wait behind 4 running (the limit is 64 calls); wait for replies before sending more"}}"#
            )
        );
        let mut out = Vec::new();
        calls.refuse_waiting(&mut out);
        assert_eq!(out.len(), FS_QUEUED);
        assert_eq!(
            out[0],
            r#"{"id":4,"error":{"code":-32600,"message":"fs/getMetadata was not run: the connection is ending"}}"#
        );
    }
}
