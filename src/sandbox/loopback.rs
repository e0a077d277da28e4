//! A sandbox whose network is a policy gets a network namespace holding only
//! its own loopback. The trampoline, still holding `CAP_NET_ADMIN` there,
//! brings `lo` up and listens on [`HTTP_PORT`] and [`SOCKS_PORT`] of
//! 127.0.0.1, then hands both listening sockets to the server over the
//! report socket: the server's proxy accepts on them from outside, and the
//! namespace has no other way out (no interface, no route, no resolver).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::report::{LISTENERS, REPORT_FD};
use super::sys;

/// The HTTP proxy's port on the sandbox's loopback.
pub(crate) const HTTP_PORT: u16 = 3128;
/// The SOCKS5 proxy's port on the sandbox's loopback.
pub(crate) const SOCKS_PORT: u16 = 1080;

/// In the new network namespace: `lo` up, the two listeners made and sent.
pub(crate) fn open() -> Result<(), String> {
    bring_up_loopback()?;
    let http = listen(HTTP_PORT)?;
    let socks = listen(SOCKS_PORT)?;
    let fds = [http.as_raw_fd(), socks.as_raw_fd()];
    match crate::fd::send_with_fds(REPORT_FD, &[LISTENERS], &fds) {
        Ok(1) => Ok(()),
        Ok(_) => Err("cannot hand the proxy's listeners to the server: a short write".to_owned()),
        Err(error) => Err(format!("cannot hand the proxy's listeners to the server: {error}")),
    }
}

fn bring_up_loopback() -> Result<(), String> {
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(sys::failed("cannot open a socket to bring up the sandbox's loopback"));
    }
    // SAFETY: a new descriptor owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; its name is "lo" and NUL-terminated.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills the flags of a valid ifreq.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut request) };
    sys::check(rc.into(), "cannot read the sandbox loopback's flags")?;
    // SAFETY: the flags member of the union, just filled.
    unsafe { request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS with the ifreq filled above.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS as _, &request) };
    sys::check(rc.into(), "cannot bring up the sandbox's loopback").map(|_| ())
}

/// A listening TCP socket on 127.0.0.1:`port`, non-blocking (the server's
/// runtime accepts on it).
fn listen(port: u16) -> Result<OwnedFd, String> {
    let flags = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, flags, 0) };
    if fd < 0 {
        return Err(sys::failed("cannot open the sandbox proxy's listener"));
    }
    // SAFETY: a new descriptor owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let address = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be() },
        sin_zero: [0; 8],
    };
    let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: binds to a valid sockaddr_in of its size.
    let rc = unsafe { libc::bind(socket.as_raw_fd(), (&raw const address).cast(), size) };
    sys::check(rc.into(), &format!("cannot bind 127.0.0.1:{port} in the sandbox"))?;
    // SAFETY: listen(2) on our socket.
    let rc = unsafe { libc::listen(socket.as_raw_fd(), 128) };
    sys::check(rc.into(), &format!("cannot listen on 127.0.0.1:{port} in the sandbox"))?;
    Ok(socket)
}
