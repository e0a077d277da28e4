//! Descriptors the process table and the sandbox both make for children.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A pipe as (read end, write end), both close-on-exec.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fd` as a descriptor numbered at least `lowest` (moved there, close-on-exec,
/// when it is below): a source the spawn's dup2s onto the numbers below
/// `lowest` can never clobber.
pub(crate) fn at_least(fd: OwnedFd, lowest: RawFd) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    if fd.as_raw_fd() >= lowest {
        return Ok(fd);
    }
    // SAFETY: duplicates a valid descriptor to a new one of at least `lowest`.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, lowest) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Room for the control message of up to 8 descriptors.
type Control = [u64; 8];

/// One `sendmsg` of `bytes` with `fds` attached (SCM_RIGHTS): how many bytes
/// went (the rest is sent without descriptors). At most 8 descriptors.
pub(crate) fn send_with_fds(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let mut iov = libc::iovec { iov_base: bytes.as_ptr().cast_mut().cast(), iov_len: bytes.len() };
    let mut control: Control = [0; 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = u32::try_from(std::mem::size_of_val(fds)).unwrap_or(u32::MAX);
        // SAFETY: CMSG_SPACE computes a size from a length.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        if space > std::mem::size_of::<Control>() {
            return Err(io::Error::from_raw_os_error(libc::E2BIG));
        }
        message.msg_control = control.as_mut_ptr().cast();
        // (The field types differ between glibc and musl.)
        message.msg_controllen = space as _;
        // SAFETY: the control buffer holds `space` bytes (checked above) and
        // is aligned for cmsghdr; the first header is within it.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(header).cast(), fds.len());
        }
    }
    loop {
        // SAFETY: a valid message over live buffers.
        let sent = unsafe { libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL) };
        if let Ok(sent) = usize::try_from(sent) {
            return Ok(sent);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// One `recvmsg` into `buffer`: the bytes read and the descriptors that came
/// with them (close-on-exec); EMSGSIZE when more came than 8 descriptors' room.
pub(crate) fn receive_with_fds(
    socket: RawFd,
    buffer: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut control: Control = [0; 8];
    let mut iov = libc::iovec { iov_base: buffer.as_mut_ptr().cast(), iov_len: buffer.len() };
    // SAFETY: msghdr is plain data; the pointers set below outlive the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of::<Control>() as _;
    let got = loop {
        // SAFETY: a valid message over live buffers; received descriptors are close-on-exec.
        let got = unsafe { libc::recvmsg(socket, &mut message, libc::MSG_CMSG_CLOEXEC) };
        if let Ok(got) = usize::try_from(got) {
            break got;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walks the control messages recvmsg filled in, within msg_controllen.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    if message.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok((got, fds))
}
