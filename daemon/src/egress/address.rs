//! Which addresses a name may lead to. A program reaches the public internet's addresses only;
//! loopback, private, link-local (cloud metadata at 169.254.169.254), shared, unspecified,
//! multicast, documentation and reserved ones are refused unless the URL gives the address
//! literally and a rule names it. IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4,
//! compatible) are judged by that address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not public, or None when it is.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let why = match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (127, _, _) => "loopback",
        (10, _, _) => "private (10.0.0.0/8)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (169, 254, _) => "link-local (169.254.0.0/16, where cloud metadata services answer)",
        (100, 64..=127, _) => "shared address space (100.64.0.0/10)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved (240.0.0.0/4) or broadcast",
        _ => return None,
    };
    Some(why)
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return special_v4(v4);
    }
    let s = ip.segments();
    let why = match s[0] {
        _ if ip.is_unspecified() => "unspecified (::)",
        _ if ip.is_loopback() => "loopback (::1)",
        0xfe80..=0xfebf => "link-local (fe80::/10)",
        0xfec0..=0xfeff => "site-local (fec0::/10)",
        0xfc00..=0xfdff => "unique local (fc00::/7)",
        0xff00..=0xffff => "multicast",
        0x2001 if s[1] == 0x0db8 => "documentation (2001:db8::/32)",
        0x2001 if s[1] < 0x0200 => "IETF protocol assignments (2001::/23)",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        // The rest of ::/8 that carries no IPv4 address: reserved.
        0x0000 => "reserved (::/8)",
        _ => return None,
    };
    Some(why)
}

/// The IPv4 address an IPv6 one stands for: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d),
/// NAT64 (64:ff9b::/96), 6to4 (2002::/16).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_addresses_pass_and_every_special_range_is_named() {
        for public in [
            "93.184.215.14",
            "8.8.8.8",
            "2606:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
        ] {
            assert_eq!(special(public.parse().unwrap()), None, "{public}");
        }
        let cases = [
            ("127.0.0.1", "loopback"),
            ("127.255.1.2", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "shared"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("192.0.2.1", "documentation"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("fd00::1", "unique local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            // IPv4 inside IPv6: judged by the IPv4 address.
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:7f00:1::", "loopback"),
            ("::2", "reserved"),
        ];
        for (ip, expected) in cases {
            let why = special(ip.parse().unwrap()).unwrap_or_else(|| panic!("{ip} passed"));
            assert!(why.contains(expected), "{ip}: {why}");
        }
        assert_eq!(special("::ffff:8.8.8.8".parse().unwrap()), None);
    }
}
