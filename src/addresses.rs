//! This host's own addresses: those of its interfaces, as the kernel lists them now.

use std::net::IpAddr;

/// Every address of this host's interfaces.
pub(crate) fn host_addresses() -> std::io::Result<Vec<IpAddr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut addresses: Vec<IpAddr> = Vec::new();
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: a node of the list getifaddrs made; its address, when set,
        // is a sockaddr of the family it names.
        unsafe {
            let address = (*entry).ifa_addr;
            if !address.is_null() {
                match i32::from((*address).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*address.cast::<libc::sockaddr_in>();
                        addresses.push(IpAddr::from(v4.sin_addr.s_addr.to_ne_bytes()));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*address.cast::<libc::sockaddr_in6>();
                        addresses.push(IpAddr::from(v6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            entry = (*entry).ifa_next;
        }
    }
    // SAFETY: the list getifaddrs made, freed once.
    unsafe { libc::freeifaddrs(list) };
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

/// Whether `address` is this host's: loopback (v4-mapped included), or an
/// address of one of its interfaces. What cannot be listed counts as this
/// host's (the caller refuses then).
pub(crate) fn is_this_host(address: IpAddr) -> bool {
    let address = match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    address.is_loopback() || host_addresses().map_or(true, |list| list.contains(&address))
}

/// The host's `local` routes (table 255, type local): every address this
/// host answers for, ranges included (`ip route add local 10.99.0.0/24 dev
/// lo`, which no interface lists), as (address, prefix length).
pub(crate) fn local_routes() -> std::io::Result<Vec<(IpAddr, u8)>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe {
        libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE)
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut request = Vec::with_capacity(28);
    request.extend_from_slice(&28u32.to_ne_bytes());
    request.extend_from_slice(&libc::RTM_GETROUTE.to_ne_bytes());
    request.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    // SAFETY: sends a buffer of its own length.
    if unsafe { libc::send(socket.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut routes = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: receives into a buffer of its own length.
        let n =
            unsafe { libc::recv(socket.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut rest = &buffer[..n as usize];
        while rest.len() >= 16 {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let kind = u16::from_ne_bytes([rest[4], rest[5]]);
            if len < 16 || len > rest.len() {
                return Err(std::io::Error::other("a malformed netlink answer"));
            }
            match kind {
                k if k == libc::NLMSG_DONE as u16 => return Ok(routes),
                k if k == libc::NLMSG_ERROR as u16 => {
                    return Err(std::io::Error::other("the route dump failed"));
                }
                k if k == libc::RTM_NEWROUTE => {
                    if let Some(route) = local_route(&rest[16..len]) {
                        routes.push(route);
                    }
                }
                _ => {}
            }
            rest = &rest[len.next_multiple_of(4).min(rest.len())..];
        }
    }
}

/// The destination of an `rtmsg` that is a local route.
fn local_route(message: &[u8]) -> Option<(IpAddr, u8)> {
    let [family, prefix, _, _, table, _, _, kind] = *message.get(..8)? else { return None };
    if table != libc::RT_TABLE_LOCAL || kind != libc::RTN_LOCAL {
        return None;
    }
    let mut attributes = message.get(12..)?;
    while attributes.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([attributes[0], attributes[1]]));
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]);
        if len < 4 || len > attributes.len() {
            return None;
        }
        let data = &attributes[4..len];
        if kind == libc::RTA_DST {
            let address = match (i32::from(family), data.len()) {
                (libc::AF_INET, 4) => IpAddr::from(<[u8; 4]>::try_from(data).ok()?),
                (libc::AF_INET6, 16) => IpAddr::from(<[u8; 16]>::try_from(data).ok()?),
                _ => return None,
            };
            return Some((address, prefix));
        }
        attributes = &attributes[len.next_multiple_of(4).min(attributes.len())..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_the_interfaces_are_this_host() {
        for address in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert!(is_this_host(address.parse().unwrap()), "{address}");
        }
        for address in host_addresses().unwrap() {
            assert!(is_this_host(address), "{address}");
        }
        // TEST-NET-3 and documentation v6: on no interface of a test machine.
        assert!(!is_this_host("203.0.113.77".parse().unwrap()));
        assert!(!is_this_host("2001:db8::77".parse().unwrap()));
        assert!(!is_this_host("::ffff:203.0.113.77".parse().unwrap()));
    }

    #[test]
    fn the_local_table_holds_every_interface_address_and_loopback() {
        let routes = local_routes().unwrap();
        assert!(routes.contains(&("127.0.0.0".parse().unwrap(), 8)), "{routes:?}");
        for address in host_addresses().unwrap() {
            let IpAddr::V4(_) = address else { continue };
            assert!(routes.contains(&(address, 32)), "{address} in {routes:?}");
        }
    }
}
