//! Large messages through the real binary: a 200 MiB file in 8 MiB pieces with the server staying small, and the stdio pipes grown for them.

use serde_json::json;

use crate::binary::Binary;
use crate::support::{b64, open_proc_fd, peak_rss_kib, scratch, unb64};

const PIECE: usize = 8 * 1024 * 1024;
const PIECES: usize = 25;

/// Deterministic bytes for piece `index` (xorshift), so nothing large is kept.
fn piece(index: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (index as u64 + 1);
    let mut bytes = Vec::with_capacity(PIECE);
    while bytes.len() < PIECE {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes
}

/// FNV-1a over all bytes fed to it.
struct Checksum(u64);

impl Checksum {
    fn new() -> Checksum {
        Checksum(0xcbf2_9ce4_8422_2325)
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[tokio::test]
async fn a_200_mib_file_round_trips_in_8_mib_pieces() {
    let dir = scratch("large");
    let path = dir.join("big.bin").to_str().unwrap().to_owned();
    let mut server = Binary::ready(&[]).await;
    let mut written = Checksum::new();
    server.result("fs/writeFile", json!({"path": path, "dataBase64": ""})).await;
    for index in 0..PIECES {
        let bytes = piece(index);
        written.feed(&bytes);
        let params = json!({"path": path, "dataBase64": b64(&bytes), "append": true});
        server.result("fs/writeFile", params).await;
    }
    let meta = server.result("fs/getMetadata", json!({"path": path})).await;
    assert_eq!(meta["size"], (PIECE * PIECES) as u64);
    let mut read = Checksum::new();
    let mut offset = 0u64;
    loop {
        let params = json!({"path": path, "offset": offset, "length": PIECE});
        let bytes = unb64(&server.result("fs/readFile", params).await["dataBase64"]);
        if bytes.is_empty() {
            break;
        }
        read.feed(&bytes);
        offset += bytes.len() as u64;
    }
    assert_eq!(offset, (PIECE * PIECES) as u64);
    assert_eq!(read.0, written.0, "checksums differ");
    let peak = peak_rss_kib(server.child.id().unwrap());
    eprintln!("server peak RSS: {peak} KiB");
    assert!(peak < 64 * 1024, "server peak RSS {peak} KiB is over 64 MiB");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The size of the pipe that is descriptor `fd` of process `pid`.
fn pipe_size(pid: u32, fd: i32, flags: i32) -> i32 {
    use std::os::fd::AsRawFd;
    let pipe = open_proc_fd(pid, fd, flags);
    // SAFETY: F_GETPIPE_SZ on a descriptor this test owns.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ) }
}

#[tokio::test]
async fn the_server_grows_its_stdio_pipes_for_large_lines() {
    let server = Binary::ready(&[]).await;
    let pid = server.child.id().unwrap();
    assert_eq!(pipe_size(pid, 0, libc::O_RDONLY), 256 * 1024, "stdin");
    assert_eq!(pipe_size(pid, 1, libc::O_WRONLY), 256 * 1024, "stdout");
}

/// A pipe whose buffer was set to `size`: (read end, write end).
fn pipe_of(size: i32) -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, owned right after; F_SETPIPE_SZ resizes one.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        assert_eq!(libc::fcntl(fds[0], libc::F_SETPIPE_SZ, size), size);
        (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

#[test]
fn a_client_pipe_larger_than_the_servers_choice_is_kept() {
    use std::io::{BufRead, Write};
    let (stdin_read, stdin_write) = pipe_of(1 << 20);
    let (stdout_read, stdout_write) = pipe_of(1 << 20);
    let mut child = std::process::Command::new(*crate::binary::BIN)
        .stdin(stdin_read)
        .stdout(stdout_write)
        .spawn()
        .unwrap();
    let mut input = std::fs::File::from(stdin_write);
    let mut output = std::io::BufReader::new(std::fs::File::from(stdout_read));
    writeln!(input, r#"{{"id":1,"method":"initialize","params":{{"clientName":"pipes"}}}}"#)
        .unwrap();
    let mut reply = String::new();
    output.read_line(&mut reply).unwrap();
    assert!(reply.starts_with(r#"{"id":1,"result":{"#), "{reply}");
    let pid = child.id();
    assert_eq!(pipe_size(pid, 0, libc::O_RDONLY), 1 << 20, "stdin");
    assert_eq!(pipe_size(pid, 1, libc::O_WRONLY), 1 << 20, "stdout");
    drop(input);
    assert!(child.wait().unwrap().success());
}

/// The pid of the one `cat` under `server` not in `known`, added to it.
fn new_cat(server: u32, known: &mut Vec<u32>) -> u32 {
    let fresh: Vec<u32> = crate::support::descendants(server)
        .into_iter()
        .filter(|(pid, name)| name == "cat" && !known.contains(pid))
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(fresh.len(), 1, "one new cat under the server: {fresh:?}");
    known.push(fresh[0]);
    fresh[0]
}

#[tokio::test]
async fn children_stdout_pipes_are_grown_sixteen_at_a_time() {
    use crate::support::start_params;
    let mut server = Binary::ready(&[]).await;
    let pid = server.child.id().unwrap();
    let mut known = Vec::new();
    let mut stdout_sizes = Vec::new();
    let mut stderr_sizes = Vec::new();
    for n in 0..17 {
        let params = start_params(&format!("c{n}"), &["cat"], json!({"pipeStdin": true}));
        server.result("process/start", params).await;
        let child = new_cat(pid, &mut known);
        stdout_sizes.push(pipe_size(child, 1, libc::O_WRONLY));
        stderr_sizes.push(pipe_size(child, 2, libc::O_WRONLY));
    }
    let mut grown = vec![256 * 1024; 16];
    grown.push(64 * 1024);
    assert_eq!(stdout_sizes, grown);
    assert_eq!(stderr_sizes, vec![64 * 1024; 17]);
    // One ends: its slot goes back with its stdout, and the next start gets it.
    let close = json!({"processId": "c0", "chunk": "", "closeStdin": true});
    server.result("process/write", close).await;
    server.notification("process/closed", "c0").await;
    known.retain(|&child| !crate::support::is_dead(child));
    let params = start_params("c17", &["cat"], json!({"pipeStdin": true}));
    server.result("process/start", params).await;
    let child = new_cat(pid, &mut known);
    assert_eq!(pipe_size(child, 1, libc::O_WRONLY), 256 * 1024);
}
