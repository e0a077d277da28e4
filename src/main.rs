//! The `exec-server` binary: everything lives in the library's private `cli` module.

/// The static build's allocator: musl's own halves the output stream
/// (docs/platforms.md).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // mimalloc v3 (libmimalloc-sys's default): arenas committed on demand,
    // and freed pages purged 10 ms after they are freed (v3's default is
    // 1000 ms), so the server's resident memory tracks what it holds. At
    // once (0), every listener connection's thread purged and refaulted its
    // pages: a WebSocket upgrade took 399-456 us in the bench against
    // 204-286 with 10 ms, for about 1 MiB less peak while streaming
    // (docs/platforms.md).
    #[cfg(target_env = "musl")]
    // SAFETY: sets a process-wide option of the allocator, before any thread starts.
    unsafe {
        // mimalloc v3's options: arena_eager_commit (4), purge_delay (15, ms).
        for (option, value) in [(4, 0), (15, 10)] {
            libmimalloc_sys::mi_option_set(option, value);
        }
    }
    exec_server::run_binary()
}
