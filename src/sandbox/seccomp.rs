//! The seccomp filter of a sandboxed program, about what Landlock and the
//! mount view leave open:
//! - no Unix-domain socket of its own (`socket(AF_UNIX, ...)`), so no
//!   connection to a socket outside the writable roots (an ssh agent, Docker,
//!   D-Bus); stream and seqpacket `socketpair`s still work, datagram ones do
//!   not (`sendto` on one reaches any datagram socket by path);
//! - without network, no socket at all: no TCP or UDP, v4 or v6, loopback
//!   included, nothing listening, no vsock, packet or netlink socket;
//! - no keyrings (`add_key`, `request_key`, `keyctl`): the user keyring is
//!   shared by every process of the user;
//! - no io_uring, which would create sockets past this filter, and no system
//!   call of another ABI (x32, i386), which would name them by other numbers.

use std::io;

#[cfg(target_arch = "x86_64")]
mod arch {
    pub(super) const AUDIT_ARCH: u32 = 0xC000_003E;
    pub(super) const NR_SOCKET: u32 = 41;
    pub(super) const NR_SOCKETPAIR: u32 = 53;
    pub(super) const NR_KEYRINGS: [u32; 3] = [248, 249, 250];
    /// x32 system calls have this bit set.
    pub(super) const FOREIGN_ABI_BIT: Option<u32> = Some(0x4000_0000);
}
#[cfg(target_arch = "aarch64")]
mod arch {
    pub(super) const AUDIT_ARCH: u32 = 0xC000_00B7;
    pub(super) const NR_SOCKET: u32 = 198;
    pub(super) const NR_SOCKETPAIR: u32 = 199;
    pub(super) const NR_KEYRINGS: [u32; 3] = [217, 218, 219];
    pub(super) const FOREIGN_ABI_BIT: Option<u32> = None;
}

const NR_IO_URING_SETUP: u32 = 425;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
/// The low 32 bits of the first argument (little-endian `seccomp_data.args[0]`).
const OFFSET_ARG0: u32 = 16;
/// The low 32 bits of the second argument.
const OFFSET_ARG1: u32 = 24;
/// `SOCK_DGRAM`, and the mask of the type bits (the rest are flags).
const SOCK_DGRAM: u32 = 2;
const SOCK_TYPE_MASK: u32 = 0xf;

/// Installs the filter on the calling thread; NoNewPrivs must be set.
pub(crate) fn install(network: bool) -> Result<(), String> {
    let program = filter(network);
    let prog = libc::sock_fprog {
        len: u16::try_from(program.len()).map_err(|_| "seccomp filter too long".to_owned())?,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: a valid filter program that outlives the call (the kernel copies it).
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(format!("cannot install the seccomp filter: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// Whether this kernel has seccomp filters.
pub(crate) fn available() -> bool {
    // SAFETY: a query without side effects.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP) >= 0 }
}

fn filter(network: bool) -> Vec<libc::sock_filter> {
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA);
    let mut program = vec![
        statement(LD_W_ABS, OFFSET_ARCH),
        jump(JEQ_K, arch::AUDIT_ARCH, 1, 0),
        statement(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        statement(LD_W_ABS, OFFSET_NR),
    ];
    if let Some(bit) = arch::FOREIGN_ABI_BIT {
        program.push(jump(JSET_K, bit, 0, 1));
        program.push(statement(RET_K, libc::SECCOMP_RET_KILL_PROCESS));
    }
    let refuse = statement(RET_K, errno(libc::EACCES));
    let allow = statement(RET_K, libc::SECCOMP_RET_ALLOW);
    program.extend([jump(JEQ_K, NR_IO_URING_SETUP, 0, 1), statement(RET_K, errno(libc::ENOSYS))]);
    for nr in arch::NR_KEYRINGS {
        program.extend([jump(JEQ_K, nr, 0, 1), refuse]);
    }
    // socketpair: a datagram pair refused (its sendto names any socket by path).
    program.extend([
        jump(JEQ_K, arch::NR_SOCKETPAIR, 0, 4),
        statement(LD_W_ABS, OFFSET_ARG1),
        statement(AND_K, SOCK_TYPE_MASK),
        jump(JEQ_K, SOCK_DGRAM, 0, 1),
        refuse,
        // The number again (the test above changed the accumulator).
        statement(LD_W_ABS, OFFSET_NR),
    ]);
    if network {
        // socket: AF_UNIX refused, the rest allowed.
        program.extend([
            jump(JEQ_K, arch::NR_SOCKET, 0, 3),
            statement(LD_W_ABS, OFFSET_ARG0),
            jump(JEQ_K, libc::AF_UNIX as u32, 0, 1),
            refuse,
            allow,
        ]);
    } else {
        // socket: refused, whatever the family.
        program.extend([jump(JEQ_K, arch::NR_SOCKET, 0, 1), refuse, allow]);
    }
    program
}

fn statement(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump lands inside the program, and it ends by allowing.
    #[test]
    fn jumps_stay_inside_the_program() {
        for network in [false, true] {
            check(&filter(network));
        }
    }

    fn check(program: &[libc::sock_filter]) {
        for (at, insn) in program.iter().enumerate() {
            if insn.code & 0x07 == libc::BPF_JMP as u16 {
                assert!(at + 1 + usize::from(insn.jt.max(insn.jf)) < program.len(), "jump at {at}");
            }
        }
        let last = program.last().unwrap();
        assert_eq!((last.code, last.k), (RET_K, libc::SECCOMP_RET_ALLOW));
    }
}
