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
}
