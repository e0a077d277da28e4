//! A sandbox with network gets a network namespace of its own: its own
//! loopback, and egress only through `slirp4netns` (a user-mode TCP/IP stack
//! on the host's side), with `prohibit` routes inside the namespace for every
//! address of this host, the link-local range and slirp4netns's gateway to
//! the host. Nothing on this host is reachable from inside; other hosts are.
//!
//! The trampoline does it all, in order: [`prepare`] (in the host's
//! namespaces: the host's addresses, and a helper process forked to become
//! slirp4netns, waiting), then the namespaces, then [`Egress::attach`] (the
//! helper attaches and configures `tap0` while the trampoline builds the
//! view), then [`Attaching::finish`] (it said it is ready; the routes are set
//! while the trampoline still holds `CAP_NET_ADMIN` in its namespace).
//! slirp4netns lives as long as the sandbox's init holds its exit pipe: it
//! ends when the namespace's last process does.

use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::sys;

/// How long slirp4netns may take to attach (it takes about 40 ms).
const READY_TIMEOUT_MS: libc::c_int = 5000;
/// slirp4netns's gateway, which would lead to the host's loopback.
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

/// The helper that carries a sandbox's traffic: `slirp4netns` on the
/// server's `PATH`, or `None` when it is not installed.
pub(crate) fn helper() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("slirp4netns")).find(|candidate| {
        let Ok(name) = CString::new(candidate.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: access(2) of a NUL-terminated path.
        candidate.is_absolute() && unsafe { libc::access(name.as_ptr(), libc::X_OK) } == 0
    })
}

/// What refuses a start with network when the helper is missing.
pub(crate) fn missing() -> String {
    "a sandbox with network needs slirp4netns (Debian package slirp4netns) on the server's PATH, and it is not there; without it the sandbox would share the host's network".to_owned()
}

/// The helper, forked and waiting, and what the namespace must keep from.
pub(crate) struct Egress {
    /// Written once the namespace exists: the helper then becomes slirp4netns.
    go: OwnedFd,
    /// slirp4netns writes `1` here once `tap0` is configured.
    ready: OwnedFd,
    /// slirp4netns ends when this closes: the sandbox's init keeps it.
    exit: OwnedFd,
    helper: libc::pid_t,
    /// This host's addresses and local ranges, looked up before the namespace was made.
    host: Vec<(IpAddr, u8)>,
}

/// In the host's namespaces: looks up this host's addresses and forks the
/// helper, which waits for [`Egress::connect`].
pub(crate) fn prepare(helper: &Path) -> Result<Egress, String> {
    // SAFETY: access(2) of a constant path.
    if unsafe { libc::access(c"/dev/net/tun".as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        return Err(sys::failed(&format!(
            "a sandbox with network needs /dev/net/tun for slirp4netns, and uid {uid} cannot open it"
        )));
    }
    // Every address the host answers for: its interfaces' and its local
    // routes' (ranges no interface lists). The namespace's loopback is its own.
    let listed = |e: std::io::Error| format!("cannot list this host's addresses: {e}");
    let mut host: Vec<(IpAddr, u8)> = crate::addresses::host_addresses()
        .map_err(listed)?
        .into_iter()
        .map(|a| (a, if a.is_ipv4() { 32 } else { 128 }))
        .collect();
    host.extend(crate::addresses::local_routes().map_err(listed)?);
    host.retain(|(a, _)| !a.is_loopback());
    host.sort();
    host.dedup();
    let program = sys::c_path(helper)?;
    let (go_read, go) = pipe()?;
    let (ready, ready_write) = pipe()?;
    let (exit_read, exit) = pipe()?;
    // SAFETY: getpid cannot fail.
    let trampoline = unsafe { libc::getpid() };
    // It parses every packet the sandbox sends: a seccomp filter, and as
    // root its own mount namespace and no capability but binding low ports
    // (as another user it has none to drop, and that option would fail).
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut args = vec![
        "slirp4netns".to_owned(),
        "--configure".to_owned(),
        "--mtu=65520".to_owned(),
        "--disable-host-loopback".to_owned(),
        "--enable-seccomp".to_owned(),
        format!("--ready-fd={}", ready_write.as_raw_fd()),
        format!("--exit-fd={}", exit_read.as_raw_fd()),
        format!("--userns-path=/proc/{trampoline}/ns/user"),
        trampoline.to_string(),
        "tap0".to_owned(),
    ];
    if root {
        args.insert(1, "--enable-sandbox".to_owned());
    }
    let args = args
        .into_iter()
        .map(|arg| CString::new(arg).map_err(|_| "a slirp4netns argument holds a NUL".to_owned()))
        .collect::<Result<Vec<_>, _>>()?;
    // Made before the fork: the child allocates nothing.
    let mut pointers: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: the trampoline is single-threaded; the child runs only our code.
    match unsafe { libc::fork() } {
        -1 => Err(sys::failed("cannot start the sandbox's network helper")),
        0 => {
            drop((go, ready, exit));
            become_helper(&program, &pointers, go_read, &[ready_write, exit_read])
        }
        pid => Ok(Egress { go, ready, exit, helper: pid, host }),
    }
}

/// The helper's side: out of the program's process group and terminal,
/// waits for the namespace, then becomes slirp4netns. Never returns.
fn become_helper(
    program: &CString,
    argv: &[*const libc::c_char],
    go: OwnedFd,
    keep: &[OwnedFd],
) -> ! {
    // SAFETY: plain calls on this process; the descriptors are valid.
    unsafe {
        // Signals for the program's group (Ctrl-C at its terminal) are not for it.
        libc::setpgid(0, 0);
        // The trampoline ignores signals; slirp4netns ends on SIGTERM as usual.
        for signal in 1..libc::SIGRTMIN() {
            if !matches!(signal, libc::SIGKILL | libc::SIGSTOP) {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        // Nothing of the trampoline's goes with it (the report pipe above all).
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            libc::_exit(127);
        }
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        if null > 2 {
            libc::close(null);
        }
        // As root slirp4netns sandboxes itself in a mount namespace (pivot_root,
        // then unmounting the old root): in a namespace of its own whose
        // mounts are private first, or the unmounts would reach the host's
        // (its named network namespaces in /run/netns among them).
        if libc::geteuid() == 0
            && (libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0)
        {
            libc::_exit(127);
        }
        let mut byte = 0u8;
        if libc::read(go.as_raw_fd(), (&raw mut byte).cast(), 1) != 1 {
            libc::_exit(0);
        }
        for fd in keep {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0);
        }
        // Nothing of the client's either: it runs in the host's namespaces
        // with the server's privileges, so it starts at / with an empty
        // environment (no LD_PRELOAD, no PATH lookups; its path is absolute).
        if libc::chdir(c"/".as_ptr()) != 0 {
            libc::_exit(127);
        }
        let no_env: [*const libc::c_char; 1] = [std::ptr::null()];
        libc::execve(program.as_ptr(), argv.as_ptr(), no_env.as_ptr());
        libc::_exit(127)
    }
}

/// The helper attaching to the namespace while the trampoline goes on.
pub(crate) struct Attaching {
    ready: OwnedFd,
    exit: OwnedFd,
    helper: libc::pid_t,
    host: Vec<(IpAddr, u8)>,
}

impl Egress {
    /// In the new namespaces: lets the helper attach (it takes a few
    /// milliseconds; the trampoline builds the view meanwhile).
    pub(crate) fn attach(self) -> Result<Attaching, String> {
        let Egress { go, ready, exit, helper, host } = self;
        sys::write_all(go.as_raw_fd(), b"1")
            .map_err(|e| format!("cannot start the sandbox's network helper: {e}"))?;
        Ok(Attaching { ready, exit, helper, host })
    }
}

impl Attaching {
    /// Waits until the helper is ready, then keeps the host's addresses out
    /// of reach. The exit pipe is returned: whoever holds it keeps the
    /// network up.
    pub(crate) fn finish(self) -> Result<OwnedFd, String> {
        let Attaching { ready, exit, helper, host } = self;
        if !wait_ready(&ready) {
            return Err(helper_failed(helper));
        }
        let routes = Routes::open()?;
        for (address, prefix) in &host {
            routes.prohibit(*address, *prefix)?;
        }
        routes.prohibit(IpAddr::V4(Ipv4Addr::new(169, 254, 0, 0)), 16)?;
        routes.prohibit(IpAddr::V4(GATEWAY), 32)?;
        Ok(exit)
    }
}

fn wait_ready(ready: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: ready.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut poll, 1, READY_TIMEOUT_MS) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return false;
        }
        let mut byte = 0u8;
        // SAFETY: reads one byte into a valid buffer.
        return unsafe { libc::read(ready.as_raw_fd(), (&raw mut byte).cast(), 1) } == 1
            && byte == b'1';
    }
}

/// Why the helper did not come up: its exit status, when it ended.
fn helper_failed(helper: libc::pid_t) -> String {
    let mut status = 0;
    // SAFETY: waits without blocking for our own child.
    let reaped = unsafe { libc::waitpid(helper, &mut status, libc::WNOHANG) };
    let how = if reaped == helper && libc::WIFEXITED(status) {
        format!("it exited with status {}", libc::WEXITSTATUS(status))
    } else if reaped == helper && libc::WIFSIGNALED(status) {
        format!("it was killed by signal {}", libc::WTERMSIG(status))
    } else {
        // SAFETY: ends and reaps our own child, which did not answer in time.
        unsafe {
            libc::kill(helper, libc::SIGKILL);
            libc::waitpid(helper, &mut status, 0);
        }
        format!("it was not ready within {READY_TIMEOUT_MS} ms")
    };
    format!("cannot connect the sandbox's network namespace through slirp4netns: {how} (it needs /dev/net/tun and user namespaces)")
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    crate::fd::pipe().map_err(|e| format!("cannot create a pipe: {e}"))
}

/// A `NETLINK_ROUTE` socket of the sandbox's namespace.
struct Routes(OwnedFd);

impl Routes {
    fn open() -> Result<Routes, String> {
        // SAFETY: socket(2) with constant arguments.
        let fd = unsafe {
            libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE)
        };
        if fd < 0 {
            return Err(sys::failed("cannot open the sandbox's routing socket"));
        }
        // SAFETY: a new descriptor owned by nobody else.
        Ok(Routes(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// `ip route add prohibit ADDRESS/PREFIX`: a connect there fails with
    /// EACCES and no packet leaves. An IPv6 route where the namespace has no
    /// IPv6 is not needed (nothing is routed there) and not added.
    fn prohibit(&self, address: IpAddr, prefix: u8) -> Result<(), String> {
        let (family, bytes): (u8, Vec<u8>) = match address {
            IpAddr::V4(v4) => (libc::AF_INET as u8, v4.octets().to_vec()),
            IpAddr::V6(v6) => (libc::AF_INET6 as u8, v6.octets().to_vec()),
        };
        let mut message = Vec::with_capacity(64);
        let attribute_len = 4 + bytes.len();
        let total = 16 + 12 + attribute_len;
        // struct nlmsghdr
        message.extend_from_slice(&(total as u32).to_ne_bytes());
        message.extend_from_slice(&libc::RTM_NEWROUTE.to_ne_bytes());
        let flags = libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL;
        message.extend_from_slice(&(flags as u16).to_ne_bytes());
        message.extend_from_slice(&1u32.to_ne_bytes());
        message.extend_from_slice(&0u32.to_ne_bytes());
        // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
        message.extend_from_slice(&[
            family,
            prefix,
            0,
            0,
            libc::RT_TABLE_MAIN,
            libc::RTPROT_STATIC,
            libc::RT_SCOPE_UNIVERSE,
            libc::RTN_PROHIBIT,
        ]);
        message.extend_from_slice(&0u32.to_ne_bytes());
        // RTA_DST
        message.extend_from_slice(&(attribute_len as u16).to_ne_bytes());
        message.extend_from_slice(&libc::RTA_DST.to_ne_bytes());
        message.extend_from_slice(&bytes);
        let shown = format!("cannot keep {address}/{prefix} out of the sandbox's reach");
        sys::write_all(self.0.as_raw_fd(), &message).map_err(|e| format!("{shown}: {e}"))?;
        let mut answer = [0u8; 256];
        // SAFETY: reads into a valid buffer of its size.
        let n =
            unsafe { libc::recv(self.0.as_raw_fd(), answer.as_mut_ptr().cast(), answer.len(), 0) };
        if n < 20 {
            return Err(sys::failed(&shown));
        }
        // struct nlmsgerr after the header: error 0 is the acknowledgement.
        let error = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
        match -error {
            0 | libc::EEXIST => Ok(()),
            libc::EAFNOSUPPORT | libc::ENETUNREACH if family == libc::AF_INET6 as u8 => Ok(()),
            code => Err(format!("{shown}: {}", std::io::Error::from_raw_os_error(code))),
        }
    }
}
