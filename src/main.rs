//! The `exec-server` binary: everything lives in the library's private `cli` module.

fn main() -> std::process::ExitCode {
    exec_server::run_binary()
}
