//! An address or an address block (`10.0.0.0/8`, `2001:db8::/32`, `127.0.0.1`).

use std::net::IpAddr;

/// An address block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

fn to_u128(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

impl Cidr {
    /// `ADDR` or `ADDR/BITS`.
    pub fn parse(s: &str) -> Option<Self> {
        let (addr, bits) = match s.trim().split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s.trim(), None),
        };
        let net: IpAddr = addr.parse().ok()?;
        let max = to_u128(net).1;
        let bits = match bits {
            Some(b) => b.parse::<u8>().ok().filter(|b| *b <= max)?,
            None => max,
        };
        Some(Self { net, bits })
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let ((a, len_a), (b, len_b)) = (to_u128(self.net), to_u128(ip));
        if len_a != len_b {
            return false;
        }
        let shift = u32::from(len_a - self.bits);
        a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn blocks() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.255.1.2".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.1.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let one = Cidr::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        for bad in ["10.0.0.0/33", "nope", "10.0.0/8", ""] {
            assert!(Cidr::parse(bad).is_none(), "{bad}");
        }
    }
}
