//! The inotify system calls: an instance, watches added through a descriptor
//! (`/proc/self/fd/N`, so the watched directory is the one opened, never a
//! path looked up again), and the events read from it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// What a watched directory reports.
pub(crate) const DIR_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_EXCL_UNLINK
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;
/// What a watched file reports.
pub(crate) const FILE_MASK: u32 = libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_DONT_FOLLOW;

/// One event as the kernel gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEvent {
    pub(crate) wd: i32,
    pub(crate) mask: u32,
    pub(crate) cookie: u32,
    /// The entry's name inside the watched directory (empty for the directory itself).
    pub(crate) name: Vec<u8>,
}

/// An inotify instance (non-blocking, close-on-exec).
pub(crate) struct Inotify(OwnedFd);

impl Inotify {
    pub(crate) fn new() -> io::Result<Inotify> {
        // SAFETY: plain flags; returns a new descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor owned by nobody else.
        Ok(Inotify(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Watches the object `target` is open on; returns the watch descriptor.
    pub(crate) fn add(&self, target: &OwnedFd, mask: u32) -> io::Result<i32> {
        let path = std::ffi::CString::new(format!("/proc/self/fd/{}", target.as_raw_fd()))
            .map_err(io::Error::other)?;
        // The magic link is followed on purpose (it is the object itself):
        // IN_DONT_FOLLOW must not apply to it.
        let mask = mask & !libc::IN_DONT_FOLLOW;
        // SAFETY: a valid instance and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.0.as_raw_fd(), path.as_ptr(), mask) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    pub(crate) fn remove(&self, wd: i32) {
        // SAFETY: removing a watch of our own instance; an unknown wd is EINVAL, ignored.
        unsafe { libc::inotify_rm_watch(self.0.as_raw_fd(), wd) };
    }

    /// Reads whatever events are queued (none when it would block).
    pub(crate) fn read(&self, buffer: &mut [u8]) -> io::Result<Vec<RawEvent>> {
        let mut events = Vec::new();
        loop {
            // SAFETY: a valid buffer of the given length.
            let n =
                unsafe { libc::read(self.0.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
            if n < 0 {
                let error = io::Error::last_os_error();
                return match error.kind() {
                    io::ErrorKind::WouldBlock => Ok(events),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(error),
                };
            }
            if n == 0 {
                return Ok(events);
            }
            parse(&buffer[..n as usize], &mut events);
            if events.len() > 4096 {
                return Ok(events);
            }
        }
    }
}

/// Splits a buffer of `inotify_event` records.
fn parse(mut bytes: &[u8], events: &mut Vec<RawEvent>) {
    const HEADER: usize = 16;
    while bytes.len() >= HEADER {
        let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let (wd, mask, cookie, len) = (word(0) as i32, word(4), word(8), word(12) as usize);
        let end = (HEADER + len).min(bytes.len());
        let raw_name = &bytes[HEADER..end];
        let name = raw_name.split(|b| *b == 0).next().unwrap_or(&[]).to_vec();
        events.push(RawEvent { wd, mask, cookie, name });
        bytes = &bytes[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_with_their_padded_names() {
        let mut buffer = Vec::new();
        for (wd, mask, name) in
            [(1i32, libc::IN_CREATE, &b"a.txt"[..]), (2, libc::IN_Q_OVERFLOW, &b""[..])]
        {
            let padded = if name.is_empty() { 0 } else { 16 };
            buffer.extend_from_slice(&wd.to_ne_bytes());
            buffer.extend_from_slice(&mask.to_ne_bytes());
            buffer.extend_from_slice(&7u32.to_ne_bytes());
            buffer.extend_from_slice(&(padded as u32).to_ne_bytes());
            let mut field = name.to_vec();
            field.resize(padded, 0);
            buffer.extend_from_slice(&field);
        }
        let mut events = Vec::new();
        parse(&buffer, &mut events);
        assert_eq!(
            events,
            [
                RawEvent { wd: 1, mask: libc::IN_CREATE, cookie: 7, name: b"a.txt".to_vec() },
                RawEvent { wd: 2, mask: libc::IN_Q_OVERFLOW, cookie: 7, name: vec![] },
            ]
        );
    }
}
