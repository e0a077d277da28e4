//! Which addresses are this host's, for a dial that must stay off it:
//! loopback, unspecified, every interface address, the local routing table
//! (ranges no interface lists), link-local (169.254.0.0/16, fe80::/10, the
//! usual metadata addresses among them) and `fd00:ec2::254`. Looked up at
//! each dial, so an address the host gains later is covered too.

use std::net::{IpAddr, Ipv6Addr};

/// The metadata address some clouds serve over IPv6.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// This host's addresses, as listed now.
pub(crate) struct ThisHost {
    addresses: Vec<IpAddr>,
    ranges: Vec<(IpAddr, u8)>,
}

impl ThisHost {
    /// Lists them (a few syscalls: run off the loop). An error means the
    /// list is unknown, and every address must then be refused.
    pub(crate) fn now() -> std::io::Result<ThisHost> {
        Ok(ThisHost {
            addresses: crate::addresses::host_addresses()?,
            ranges: crate::addresses::local_routes()?,
        })
    }

    /// Whether `address` leads to this host (or to link-local metadata).
    pub(crate) fn holds(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        let fixed = match address {
            IpAddr::V4(v4) => {
                v4.is_loopback()
                    || v4.is_unspecified()
                    || v4.is_link_local()
                    || v4.is_broadcast()
                    || v4.octets()[0] == 0
            }
            IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
                    || v6 == METADATA_V6
            }
        };
        fixed
            || self.addresses.iter().any(|a| a.to_canonical() == address)
            || self.ranges.iter().any(|&(range, prefix)| within(address, range, prefix))
    }
}

/// Whether `address` lies in `range/prefix` (same family only).
fn within(address: IpAddr, range: IpAddr, prefix: u8) -> bool {
    match (address, range.to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(r)) => {
            let bits = u32::from(prefix.min(32));
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
            u32::from(a) & mask == u32::from(r) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(r)) => {
            let bits = u32::from(prefix.min(128));
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
            u128::from(a) & mask == u128::from(r) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_link_local_metadata_and_local_ranges_are_this_host() {
        let host = ThisHost {
            addresses: vec!["192.0.2.10".parse().unwrap()],
            ranges: vec![("10.88.0.0".parse().unwrap(), 24)],
        };
        for address in [
            "127.0.0.1",
            "127.3.4.5",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "fe80::1",
            "febf::1",
            "fd00:ec2::254",
            "192.0.2.10",
            "::ffff:192.0.2.10",
            "10.88.0.200",
        ] {
            assert!(host.holds(address.parse().unwrap()), "{address}");
        }
        for address in ["10.88.1.1", "192.0.2.11", "10.20.0.5", "fec0::1", "2001:db8::1"] {
            assert!(!host.holds(address.parse().unwrap()), "{address}");
        }
    }
}
