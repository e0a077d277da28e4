//! The seccomp filter of a sandboxed program, about what Landlock and the
//! mount view leave open:
//! - with network, sockets of IPv4, IPv6 and netlink only, and no
//!   `NETLINK_SOCK_DIAG` socket (it would list the host's sockets and their
//!   owners; `NETLINK_ROUTE`, which `getifaddrs` uses, stays): no vsock, which
//!   the sandbox's network namespace would not confine;
//! - no Unix-domain socket of its own (`socket(AF_UNIX, ...)`), so no
//!   connection to a socket outside the writable roots (an ssh agent, Docker,
//!   D-Bus); stream and seqpacket `socketpair`s still work, datagram ones do
//!   not (`sendto` on one reaches any datagram socket by path);
//! - without network, no socket at all: no TCP or UDP, v4 or v6, loopback
//!   included, nothing listening, no vsock, packet or netlink socket;
//! - no keyrings (`add_key`, `request_key`, `keyctl`): the user keyring is
//!   shared by every process of the user;
//! - no io_uring, which would create sockets past this filter, and no system
//!   call of another ABI (x32, i386), which would name them by other numbers;
//! - no new mount and no new namespace: the mount API (`mount`, `umount2`,
//!   `pivot_root`, `fsopen`, `fsconfig`, `fsmount`, `fspick`, `open_tree`,
//!   `move_mount`, `mount_setattr`, `open_tree_attr`) and `setns` are EPERM, as
//!   are `unshare` and `clone` with any `CLONE_NEW*` flag; `clone3`, whose
//!   flags a filter cannot read, is ENOSYS (glibc then falls back to `clone`).
//!   A fresh mount (a cgroup2 `fsmount` in a nested user namespace) would be
//!   outside the read-only view, and Landlock does not check metadata;
//! - no leases (`fcntl(F_SETLEASE)`), which stall writers outside for the
//!   lease-break time;
//! - with `readableRoots`, no inotify or fanotify watch: a watch names the
//!   files created in any directory, readable or not.

use std::io;

#[cfg(target_arch = "x86_64")]
mod arch {
    pub(super) const AUDIT_ARCH: u32 = 0xC000_003E;
    pub(super) const NR_SOCKET: u32 = 41;
    pub(super) const NR_SOCKETPAIR: u32 = 53;
    pub(super) const NR_KEYRINGS: [u32; 3] = [248, 249, 250];
    /// x32 system calls have this bit set.
    pub(super) const FOREIGN_ABI_BIT: Option<u32> = Some(0x4000_0000);
    pub(super) const NR_CLONE: u32 = 56;
    pub(super) const NR_UNSHARE: u32 = 272;
    pub(super) const NR_FCNTL: u32 = 72;
    /// mount, umount2, pivot_root, setns.
    pub(super) const NR_MOUNTS: [u32; 4] = [165, 166, 155, 308];
    /// inotify_add_watch, fanotify_init, fanotify_mark.
    pub(super) const NR_WATCHES: [u32; 3] = [254, 300, 301];
}
#[cfg(target_arch = "aarch64")]
mod arch {
    pub(super) const AUDIT_ARCH: u32 = 0xC000_00B7;
    pub(super) const NR_SOCKET: u32 = 198;
    pub(super) const NR_SOCKETPAIR: u32 = 199;
    pub(super) const NR_KEYRINGS: [u32; 3] = [217, 218, 219];
    pub(super) const FOREIGN_ABI_BIT: Option<u32> = None;
    pub(super) const NR_CLONE: u32 = 220;
    pub(super) const NR_UNSHARE: u32 = 97;
    pub(super) const NR_FCNTL: u32 = 25;
    /// mount, umount2, pivot_root, setns.
    pub(super) const NR_MOUNTS: [u32; 4] = [40, 39, 41, 268];
    /// inotify_add_watch, fanotify_init, fanotify_mark.
    pub(super) const NR_WATCHES: [u32; 3] = [27, 262, 263];
}

const NR_IO_URING_SETUP: u32 = 425;
const NR_CLONE3: u32 = 435;
/// The new mount API, the same number on every architecture: open_tree,
/// move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr, open_tree_attr.
const NR_NEW_MOUNTS: [u32; 8] = [428, 429, 430, 431, 432, 433, 442, 467];
/// Every `CLONE_NEW*` flag: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
/// NEWPID, NEWNET, NEWTIME.
const CLONE_NEW_ANY: u32 = 0x7E02_0080;
const F_SETLEASE: u32 = 1024;

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
/// The low 32 bits of the third argument.
const OFFSET_ARG2: u32 = 32;
/// `SOCK_DGRAM`, and the mask of the type bits (the rest are flags).
const SOCK_DGRAM: u32 = 2;
const SOCK_TYPE_MASK: u32 = 0xf;

/// What the filter refuses beyond its fixed rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The host's IP network is allowed.
    pub(crate) network: bool,
    /// Reads are confined (`readableRoots`): no inotify or fanotify watch.
    pub(crate) confined_reads: bool,
    /// What a refused socket fails with (EACCES, or EPERM as upstream's filter answers).
    pub(crate) socket_errno: i32,
}

/// Installs the filter on the calling thread; NoNewPrivs must be set.
pub(crate) fn install(rules: Rules) -> Result<(), String> {
    let program = filter(rules);
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

fn filter(rules: Rules) -> Vec<libc::sock_filter> {
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
    let refuse_socket = statement(RET_K, errno(rules.socket_errno));
    let not_permitted = statement(RET_K, errno(libc::EPERM));
    let allow = statement(RET_K, libc::SECCOMP_RET_ALLOW);
    let missing = statement(RET_K, errno(libc::ENOSYS));
    program.extend([jump(JEQ_K, NR_IO_URING_SETUP, 0, 1), missing]);
    program.extend([jump(JEQ_K, NR_CLONE3, 0, 1), missing]);
    for nr in arch::NR_KEYRINGS {
        program.extend([jump(JEQ_K, nr, 0, 1), refuse]);
    }
    for nr in arch::NR_MOUNTS.into_iter().chain(NR_NEW_MOUNTS) {
        program.extend([jump(JEQ_K, nr, 0, 1), not_permitted]);
    }
    if rules.confined_reads {
        for nr in arch::NR_WATCHES {
            program.extend([jump(JEQ_K, nr, 0, 1), refuse]);
        }
    }
    // unshare and clone: refused with any CLONE_NEW* flag (the first argument).
    for nr in [arch::NR_UNSHARE, arch::NR_CLONE] {
        program.extend([
            jump(JEQ_K, nr, 0, 4),
            statement(LD_W_ABS, OFFSET_ARG0),
            jump(JSET_K, CLONE_NEW_ANY, 0, 1),
            not_permitted,
            allow,
        ]);
    }
    // fcntl: F_SETLEASE refused.
    program.extend([
        jump(JEQ_K, arch::NR_FCNTL, 0, 4),
        statement(LD_W_ABS, OFFSET_ARG1),
        jump(JEQ_K, F_SETLEASE, 0, 1),
        refuse,
        allow,
    ]);
    // socketpair: a datagram pair refused (its sendto names any socket by path).
    program.extend([
        jump(JEQ_K, arch::NR_SOCKETPAIR, 0, 4),
        statement(LD_W_ABS, OFFSET_ARG1),
        statement(AND_K, SOCK_TYPE_MASK),
        jump(JEQ_K, SOCK_DGRAM, 0, 1),
        refuse_socket,
        // The number again (the test above changed the accumulator).
        statement(LD_W_ABS, OFFSET_NR),
    ]);
    if rules.network {
        // socket: only IPv4, IPv6 (both in the sandbox's own network
        // namespace) and netlink other than NETLINK_SOCK_DIAG (which lists
        // every socket of the host and its owner). AF_UNIX, and families a
        // network namespace does not confine (AF_VSOCK reaches the host's
        // vsock listeners), are refused.
        program.extend([
            jump(JEQ_K, arch::NR_SOCKET, 0, 8),
            statement(LD_W_ABS, OFFSET_ARG0),
            jump(JEQ_K, libc::AF_INET as u32, 6, 0),
            jump(JEQ_K, libc::AF_INET6 as u32, 5, 0),
            jump(JEQ_K, libc::AF_NETLINK as u32, 1, 0),
            refuse_socket,
            statement(LD_W_ABS, OFFSET_ARG2),
            jump(JEQ_K, libc::NETLINK_SOCK_DIAG as u32, 0, 1),
            refuse_socket,
            allow,
        ]);
    } else {
        // socket: refused, whatever the family.
        program.extend([jump(JEQ_K, arch::NR_SOCKET, 0, 1), refuse_socket, allow]);
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
            for confined_reads in [false, true] {
                check(&filter(Rules { network, confined_reads, socket_errno: libc::EACCES }));
            }
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
