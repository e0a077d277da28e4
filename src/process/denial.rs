//! Whether a sandboxed process's failure looks like the sandbox refusing it:
//! a guess from its exit code and output, as upstream Codex makes it (its
//! `is_likely_sandbox_denied`), for the shapes that report it.
//!
//! The rule: never for an unsandboxed process or an exit code of 0; yes when
//! the retained output (stdout, stderr and the terminal, lowercased) names a
//! refusal ([`REFUSALS`]); otherwise yes only for 159 (128 + SIGSYS: seccomp
//! killed it). Upstream first refuses the exit codes a shell gives its own
//! failures (2, 126, 127), which 159 is not, so that step decides nothing here.

/// Words of a refusal, matched in the lowercased output.
const REFUSALS: [&str; 7] = [
    "operation not permitted",
    "permission denied",
    "read-only file system",
    "seccomp",
    "sandbox",
    "landlock",
    "failed to write file",
];

/// The guess for a process that exited with `exit_code` after writing
/// `output` (its retained chunks, in order), sandboxed or not.
pub(crate) fn likely<'a>(
    sandboxed: bool,
    exit_code: i32,
    output: impl Iterator<Item = &'a [u8]>,
) -> bool {
    if !sandboxed || exit_code == 0 {
        return false;
    }
    let mut text = Vec::new();
    for chunk in output {
        text.extend_from_slice(chunk);
    }
    let text = String::from_utf8_lossy(&text).to_lowercase();
    if REFUSALS.iter().any(|refusal| text.contains(refusal)) {
        return true;
    }
    exit_code == 128 + libc::SIGSYS
}

#[cfg(test)]
mod tests {
    use super::likely;

    fn guess(sandboxed: bool, code: i32, output: &[&str]) -> bool {
        likely(sandboxed, code, output.iter().map(|s| s.as_bytes()))
    }

    #[test]
    fn refusals_in_the_output_of_a_failed_sandboxed_process() {
        assert!(guess(true, 1, &["touch: cannot touch '/etc/x': Read-only ", "file system\n"]));
        assert!(guess(true, 2, &["sh: 1: cannot create /x: Permission denied\n"]));
        assert!(guess(true, 127, &["Operation not permitted"]));
        assert!(!guess(true, 0, &["Permission denied"]));
        assert!(!guess(false, 1, &["Permission denied"]));
        assert!(!guess(true, 1, &["no such file\n"]));
    }

    #[test]
    fn sigsys_counts_and_shell_failures_do_not() {
        assert!(guess(true, 159, &[]));
        assert!(!guess(false, 159, &[]));
        for code in [2, 126, 127, 1, 137] {
            assert!(!guess(true, code, &["nothing here"]), "{code}");
        }
    }
}
