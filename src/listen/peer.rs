//! Who is at the other end of a local TCP connection: the uid that owns the
//! peer's socket (a `NETLINK_SOCK_DIAG` query for the exact 4-tuple, as `ss`
//! makes; `/proc/net/tcp{,6}` when netlink is unavailable). Nothing walks
//! `/proc` for who holds the socket: no sandboxed process can reach this
//! host's sockets (see `sandbox::network`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// What the kernel says of a peer's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerSocket {
    /// The uid that owns the peer's socket.
    pub(crate) uid: u32,
    /// The socket's inode (`socket:[INODE]` in `/proc/PID/fd`).
    pub(crate) inode: u64,
}

pub(crate) use crate::addresses::is_this_host;

/// Asks the kernel who owns peer sockets: one `NETLINK_SOCK_DIAG` socket,
/// opened with the listener, so a lookup needs no new descriptor (a server
/// out of descriptors still tells its owner from others).
pub(crate) struct PeerLookup {
    /// `None` when netlink is unavailable: `/proc/net/tcp` is read instead.
    netlink: Option<OwnedFd>,
    seq: u32,
}

impl PeerLookup {
    pub(crate) fn new() -> PeerLookup {
        // SAFETY: socket(2) with constant arguments.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            tracing::warn!(error = %io::Error::last_os_error(), "no sock_diag socket; peers are looked up in /proc/net/tcp");
            return PeerLookup { netlink: None, seq: 0 };
        }
        // SAFETY: a new descriptor owned by nobody else.
        PeerLookup { netlink: Some(unsafe { OwnedFd::from_raw_fd(fd) }), seq: 0 }
    }

    /// The owner of the socket at `peer` connected to `local` (the two ends
    /// as the server's accepted socket sees them).
    pub(crate) fn lookup(&mut self, local: SocketAddr, peer: SocketAddr) -> io::Result<PeerSocket> {
        let (local, peer) = (unmapped(local), unmapped(peer));
        match &self.netlink {
            Some(socket) => {
                self.seq = self.seq.wrapping_add(1);
                diag(socket, self.seq, local, peer)
            }
            None => proc_net(local, peer),
        }
    }
}

/// A v4-mapped v6 address as the v4 address it is (the peer's socket is AF_INET).
fn unmapped(address: SocketAddr) -> SocketAddr {
    match address.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), address.port()),
            None => address,
        },
        IpAddr::V4(_) => address,
    }
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const INET_DIAG_NOCOOKIE: u32 = !0;

#[repr(C)]
#[derive(Clone, Copy)]
struct NlHeader {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    interface: u32,
    cookie: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DiagRequest {
    header: NlHeader,
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DiagMessage {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: SockId,
    expires: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
}

fn address_bytes(ip: IpAddr) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => bytes.copy_from_slice(&v6.octets()),
    }
    bytes
}

/// One `SOCK_DIAG_BY_FAMILY` request for the peer's socket (source = the
/// peer, destination = us) and its one answer (the kernel answers within
/// the send; the receive never waits).
fn diag(socket: &OwnedFd, seq: u32, local: SocketAddr, peer: SocketAddr) -> io::Result<PeerSocket> {
    // Whatever an earlier lookup left unread goes first.
    let mut answer = [0u8; 1024];
    // SAFETY: recv(2) into a buffer of the given length, without waiting.
    while unsafe {
        libc::recv(socket.as_raw_fd(), answer.as_mut_ptr().cast(), answer.len(), libc::MSG_DONTWAIT)
    } > 0
    {}
    let family = if peer.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let request = DiagRequest {
        header: NlHeader {
            len: std::mem::size_of::<DiagRequest>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: libc::NLM_F_REQUEST as u16,
            seq,
            pid: 0,
        },
        family: family as u8,
        protocol: libc::IPPROTO_TCP as u8,
        ext: 0,
        pad: 0,
        states: !0,
        id: SockId {
            sport: peer.port().to_be_bytes(),
            dport: local.port().to_be_bytes(),
            src: address_bytes(peer.ip()),
            dst: address_bytes(local.ip()),
            interface: 0,
            cookie: [INET_DIAG_NOCOOKIE; 2],
        },
    };
    // SAFETY: the kernel reads `size_of::<DiagRequest>()` bytes of `request`
    // (an address of zeros is the kernel's own netlink peer).
    let sent = unsafe {
        let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as u16;
        libc::sendto(
            socket.as_raw_fd(),
            std::ptr::addr_of!(request).cast(),
            std::mem::size_of::<DiagRequest>(),
            0,
            std::ptr::addr_of!(kernel).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut answer = [0u8; 1024];
    // SAFETY: recv(2) into a buffer of the given length; the kernel answers at once.
    let read =
        unsafe { libc::recv(socket.as_raw_fd(), answer.as_mut_ptr().cast(), answer.len(), 0) };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    let answer = &answer[..read as usize];
    let header_len = std::mem::size_of::<NlHeader>();
    if answer.len() < header_len {
        return Err(io::Error::other("a short sock_diag answer"));
    }
    // SAFETY: at least a header's bytes, read unaligned.
    let header: NlHeader = unsafe { std::ptr::read_unaligned(answer.as_ptr().cast()) };
    if header.seq != seq {
        return Err(io::Error::other("a sock_diag answer to another request"));
    }
    if header.kind == NLMSG_ERROR {
        let code = answer
            .get(header_len..header_len + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(libc::EIO, i32::from_ne_bytes);
        // ENOENT: no such socket (the peer is gone).
        return Err(io::Error::from_raw_os_error(code.checked_neg().unwrap_or(libc::EIO)));
    }
    if header.kind != SOCK_DIAG_BY_FAMILY
        || answer.len() < header_len + std::mem::size_of::<DiagMessage>()
    {
        return Err(io::Error::other("an unexpected sock_diag answer"));
    }
    // SAFETY: the message's bytes follow the header, read unaligned.
    let message: DiagMessage =
        unsafe { std::ptr::read_unaligned(answer[header_len..].as_ptr().cast()) };
    open_socket(message.state, message.uid, u64::from(message.inode))
}

/// TCP states in which the peer's socket is still open in some process.
const ESTABLISHED: u8 = 1;
const FIN_WAIT1: u8 = 4;
const FIN_WAIT2: u8 = 5;

/// A peer socket that some process still holds: established (or only its
/// writing side shut), with an inode. A socket its process has closed
/// already (an orphan in FIN-WAIT, a TIME-WAIT entry) reports uid 0 and
/// inode 0, which must never pass for root's.
fn open_socket(state: u8, uid: u32, inode: u64) -> io::Result<PeerSocket> {
    if inode == 0 || !matches!(state, ESTABLISHED | FIN_WAIT1 | FIN_WAIT2) {
        return Err(io::Error::other(format!(
            "the peer's socket is closed already (TCP state {state})"
        )));
    }
    Ok(PeerSocket { uid, inode })
}

/// The same answer from `/proc/net/tcp` or `tcp6`: the line whose local
/// address is the peer's and whose remote address is ours.
fn proc_net(local: SocketAddr, peer: SocketAddr) -> io::Result<PeerSocket> {
    let table = if peer.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    let text = std::fs::read_to_string(table)?;
    let (want_local, want_remote) = (proc_address(peer), proc_address(local));
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(from), Some(to), Some(state), Some(uid), Some(inode)) =
            (fields.get(1), fields.get(2), fields.get(3), fields.get(7), fields.get(9))
        else {
            continue;
        };
        if from.eq_ignore_ascii_case(&want_local) && to.eq_ignore_ascii_case(&want_remote) {
            let bad = |what: &str| io::Error::other(format!("a bad {what} in /proc/net/tcp"));
            let state = u8::from_str_radix(state, 16).map_err(|_| bad("state"))?;
            let uid = uid.parse().map_err(|_| bad("uid"))?;
            let inode = inode.parse().map_err(|_| bad("inode"))?;
            return open_socket(state, uid, inode);
        }
    }
    Err(io::Error::from_raw_os_error(libc::ENOENT))
}

/// An address as `/proc/net/tcp` prints it: each 32-bit word of the address
/// in host order, in hex, then `:PORT` in hex.
fn proc_address(address: SocketAddr) -> String {
    let words: Vec<u32> = match address.ip() {
        IpAddr::V4(v4) => vec![u32::from_ne_bytes(v4.octets())],
        IpAddr::V6(v6) => {
            v6.octets().chunks(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
    };
    let mut text: String = words.iter().map(|w| format!("{w:08X}")).collect();
    text.push_str(&format!(":{:04X}", address.port()));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_owner_of_a_loopback_peer_both_ways() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let listener = std::net::TcpListener::bind(bind).unwrap();
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (accepted, peer) = listener.accept().unwrap();
            let local = accepted.local_addr().unwrap();
            let found = PeerLookup::new().lookup(local, peer).unwrap();
            // SAFETY: geteuid cannot fail.
            assert_eq!(found.uid, unsafe { libc::geteuid() });
            let own = std::fs::read_link(format!("/proc/self/fd/{}", client.as_raw_fd())).unwrap();
            assert_eq!(own.to_str().unwrap(), format!("socket:[{}]", found.inode));
            assert_eq!(proc_net(unmapped(local), unmapped(peer)).unwrap(), found);
            // Closed by its process: an orphan with inode 0 and uid 0, never root's.
            drop(client);
            let closed = PeerLookup::new().lookup(local, peer).unwrap_err();
            assert!(
                closed.to_string().starts_with("the peer's socket is closed already"),
                "{closed}"
            );
            assert!(proc_net(unmapped(local), unmapped(peer)).is_err());
            drop(accepted);
        }
    }
}
