//! The `exec-server` binary: everything lives in the library's private `cli` module.

/// The static build's allocator: musl's own halves the output stream
/// (docs/platforms.md).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Freed pages go back to the system 10 ms after they are freed (the
    // default delay); commit on demand: the server's resident memory tracks
    // what it holds. At once (0) purged and refaulted every page of each
    // listener connection's thread: a WebSocket upgrade took 245 us instead
    // of 174, with no lower peak while streaming (docs/platforms.md).
    #[cfg(target_env = "musl")]
    // SAFETY: sets a process-wide option of the allocator, before any thread starts.
    unsafe {
        // mimalloc v2's options: eager_commit (3), arena_eager_commit (4), purge_delay (15, ms).
        for (option, value) in [(3, 0), (4, 0), (15, 10)] {
            libmimalloc_sys::mi_option_set(option, value);
        }
    }
    exec_server::run_binary()
}
