//! Free loopback ports for servers that cannot bind port 0 and report it back (`weed mini` needs
//! ten fixed ports per instance).

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, TcpListener};

/// Offset of a component's gRPC port from its HTTP port. weed assumes it in places even when the
/// gRPC port is given explicitly (its admin worker dials admin port + 10000), so keep to it.
pub(crate) const GRPC_OFFSET: u16 = 10_000;

/// HTTP ports are drawn from `LOW..HIGH`, so both a port and its gRPC partner stay below Linux's
/// ephemeral range (32768–60999 by default): an outgoing connection of some other process cannot
/// take one between the check and the server's bind.
const LOW: u16 = 15_000;
const HIGH: u16 = 22_000;

/// `N` ports `p` in `LOW..HIGH` such that `p` and `p + GRPC_OFFSET` could both be bound on
/// `127.0.0.1` just now, all distinct.
///
/// All probe listeners are held until every port is chosen, then released for the server. Another
/// process can still grab one in between; callers detect the server's bind failure and retry
/// with fresh ports.
pub(crate) fn pick_free_port_pairs<const N: usize>() -> anyhow::Result<[u16; N]> {
    let random = RandomState::new();
    let mut held: Vec<TcpListener> = Vec::with_capacity(2 * N);
    let mut seen = HashSet::new();
    let mut ports = [0u16; N];
    let mut found = 0;
    let span = u64::from(HIGH - LOW);
    for attempt in 0u64..20_000 {
        if found == N {
            break;
        }
        let port = LOW + u16::try_from(random.hash_one(attempt) % span)?;
        if !seen.insert(port) {
            continue;
        }
        let Ok(http) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) else {
            continue;
        };
        let Ok(grpc) = TcpListener::bind((Ipv4Addr::LOCALHOST, port + GRPC_OFFSET)) else {
            continue;
        };
        held.push(http);
        held.push(grpc);
        ports[found] = port;
        found += 1;
    }
    anyhow::ensure!(
        found == N,
        "found only {found} of {N} free port pairs (p, p+{GRPC_OFFSET}) on 127.0.0.1 with p in \
         {LOW}..{HIGH}"
    );
    drop(held);
    Ok(ports)
}

/// One port in `22_000..25_000` (between the HTTP ports above and their gRPC partners, below the
/// ephemeral range) that could be bound on `127.0.0.1` just now: for a server that must come back
/// on the same port after being killed.
pub(crate) fn pick_free_port() -> anyhow::Result<u16> {
    let random = RandomState::new();
    for attempt in 0u64..20_000 {
        let port = 22_000 + u16::try_from(random.hash_one(attempt) % 3_000)?;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port in 22000..25000 on 127.0.0.1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_distinct_and_bindable() {
        let ports = pick_free_port_pairs::<5>().unwrap();
        let set: HashSet<_> = ports.iter().collect();
        assert_eq!(set.len(), 5);
        for p in ports {
            assert!((LOW..HIGH).contains(&p));
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
            TcpListener::bind((Ipv4Addr::LOCALHOST, p + GRPC_OFFSET)).unwrap();
        }
    }
}
