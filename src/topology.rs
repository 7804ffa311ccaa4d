// SPDX-License-Identifier: GPL-2.0

//! Which msvm devices exist and which can reach each other's memory over
//! PCIe peer-to-peer.
//!
//! The registry of the bound devices, `crate::registry::TOPOLOGY`, is one
//! [`Topology`]; this module is pure (KUnit-tested).

use kernel::num::casts::u32_as_usize;
use kernel::prelude::*;

use core::fmt;

use crate::mm::pci::{P2pLink, P2pPath};

/// At most this many devices are bound at once (`MSVM_MAX_DEVICES`).
pub(crate) const MAX_DEVICES: usize = u32_as_usize(crate::mm::abi::MSVM_MAX_DEVICES);

/// How one device sees another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    /// msvm index of the other device.
    pub(crate) index: usize,
    /// This device's P2P link to the peer's memory: its path, its distance
    /// (`None` with no path), and why.
    pub(crate) link: P2pLink,
}

/// A P2P link as the probe log and debugfs say it: its path, distance
/// and why.
pub(crate) struct LinkText<'a>(pub(crate) &'a P2pLink);

impl fmt::Display for LinkText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self.0;
        let why = match (l.why.common_bridge, l.why.acs_redirect) {
            (true, false) => "one switch, no ACS redirect",
            (true, true) => "one switch, ACS redirect on the path",
            (false, _) => "no common switch",
        };
        let d = l.distance.unwrap_or(0);
        match l.path {
            P2pPath::Bus => write!(f, "P2P inside the switch (bus address), distance {d}: {why}"),
            P2pPath::HostBridge => write!(
                f,
                "P2P through the host bridge (DMA-mapped), distance {d}: {why}, host bridge passes P2P"
            ),
            P2pPath::None => write!(
                f,
                "no P2P path: {why}, host bridge not whitelisted for P2P"
            ),
        }
    }
}

// The probe log's `dev_info!` formats with the kernel's `Display`.
impl kernel::fmt::Display for LinkText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The devices and their pairwise P2P links.
///
/// Generic over the per-device node so that the logic is tested with plain
/// values (KUnit, below) and used with real PCI devices (`crate::registry::GpuNode`).
///
/// # Invariants
///
/// - `links[a][b]` is [`P2pLink::NONE`] unless both `nodes[a]` and
///   `nodes[b]` are `Some` and `a != b`.
pub(crate) struct Topology<N> {
    nodes: [Option<N>; MAX_DEVICES],
    /// Owner group of each present device (see [`Topology::group`]).
    groups: [usize; MAX_DEVICES],
    /// `links[provider][client]`: `client`'s link to `provider`'s memory.
    links: [[P2pLink; MAX_DEVICES]; MAX_DEVICES],
}

impl<N> Topology<N> {
    /// An empty topology.
    pub(crate) const fn new() -> Self {
        // INVARIANT: no links.
        Self {
            nodes: [const { None }; MAX_DEVICES],
            groups: [0; MAX_DEVICES],
            links: [[P2pLink::NONE; MAX_DEVICES]; MAX_DEVICES],
        }
    }

    /// Adds `node` at the lowest free index and records its links to and
    /// from every present device, as `link(provider, client)` gives them.
    ///
    /// Fails with `ENOSPC` when [`MAX_DEVICES`] devices are present.
    pub(crate) fn insert(
        &mut self,
        node: N,
        mut link: impl FnMut(&N, &N) -> P2pLink,
    ) -> Result<usize> {
        let index = self.nodes.iter().position(Option::is_none).ok_or(ENOSPC)?;
        // INVARIANT: row and column `index` are none (`new`, `remove`) but
        // for the present devices `j`, never `index` itself (it is free),
        // and `nodes[index]` is filled just below.
        for (j, other) in self.nodes.iter().enumerate() {
            if let Some(other) = other {
                self.links[index][j] = link(&node, other);
                self.links[j][index] = link(other, &node);
            }
        }
        self.nodes[index] = Some(node);
        self.groups[index] = self.pick_group(index);
        Ok(index)
    }

    /// The group a new device at `index` joins: the first existing group
    /// (by lowest member index) all of whose members it reaches both ways,
    /// else a new group with the lowest id no present device uses.
    fn pick_group(&self, index: usize) -> usize {
        let present = |j: usize| j != index && self.nodes[j].is_some();
        let reach = |j: usize| self.links[j][index].reaches() && self.links[index][j].reaches();
        for first in (0..MAX_DEVICES).filter(|&j| present(j)) {
            let g = self.groups[first];
            // Only try each group once, from its lowest member.
            if (0..first).any(|j| present(j) && self.groups[j] == g) {
                continue;
            }
            if (0..MAX_DEVICES)
                .filter(|&j| present(j) && self.groups[j] == g)
                .all(reach)
            {
                return g;
            }
        }
        (0..MAX_DEVICES)
            .find(|&g| !(0..MAX_DEVICES).any(|j| present(j) && self.groups[j] == g))
            .unwrap_or(index)
    }

    /// The owner group of device `index`: devices that all reach each other
    /// over P2P share one, and so one `dev_private_owner`, so that each
    /// sees the others' device pages as they are.
    pub(crate) fn group(&self, index: usize) -> Option<usize> {
        self.get(index).map(|_| self.groups[index])
    }

    /// Removes the device at `index`, with its links, and returns it.
    pub(crate) fn remove(&mut self, index: usize) -> Option<N> {
        let node = self.nodes.get_mut(index)?.take()?;
        // INVARIANT: `index` is gone: so are its row and column.
        for j in 0..MAX_DEVICES {
            self.links[index][j] = P2pLink::NONE;
            self.links[j][index] = P2pLink::NONE;
        }
        Some(node)
    }

    /// The device at `index`.
    pub(crate) fn get(&self, index: usize) -> Option<&N> {
        self.nodes.get(index)?.as_ref()
    }

    /// The device at `index`, to update what the topology keeps of it.
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut N> {
        self.nodes.get_mut(index)?.as_mut()
    }

    /// Whether devices `a` and `b` (both present) share an owner group: each
    /// works on the other's memory in place.
    pub(crate) fn same_group(&self, a: usize, b: usize) -> bool {
        matches!((self.group(a), self.group(b)), (Some(x), Some(y)) if x == y)
    }

    /// One present device of each owner group, lowest index first.
    pub(crate) fn group_leaders(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_DEVICES).filter(move |&i| {
            self.nodes[i].is_some()
                && !(0..i).any(|j| self.nodes[j].is_some() && self.groups[j] == self.groups[i])
        })
    }

    /// Number of devices present.
    pub(crate) fn len(&self) -> usize {
        self.nodes.iter().filter(|n| n.is_some()).count()
    }

    /// Every other present device as seen from `index` (as a client of their
    /// memory), in index order. Empty if `index` is not present.
    pub(crate) fn peers(&self, index: usize) -> impl Iterator<Item = Peer> + '_ {
        let present = self.get(index).is_some();
        self.nodes
            .iter()
            .enumerate()
            .filter(move |(j, n)| present && *j != index && n.is_some())
            .map(move |(j, _)| Peer {
                index: j,
                link: self.links[j][index],
            })
    }
}

#[kunit_tests(msvm_topology)]
mod tests {
    use super::*;
    use crate::mm::pci::P2pWhy;

    /// A fake device: its id and the switch it sits behind (0: own port).
    #[derive(Clone, Copy)]
    struct Fake(u32, u32);

    /// A link at `d` hops inside a switch.
    fn bus(d: u32) -> P2pLink {
        P2pLink {
            path: P2pPath::Bus,
            distance: Some(d),
            why: P2pWhy {
                common_bridge: true,
                acs_redirect: false,
            },
        }
    }

    /// Same switch: distance 4 (as `pci_p2pdma` reports behind one switch),
    /// inside it; else none (a host bridge not whitelisted).
    fn dist(a: &Fake, b: &Fake) -> P2pLink {
        if a.1 != 0 && a.1 == b.1 {
            bus(4)
        } else {
            P2pLink::NONE
        }
    }

    /// A peer's index and distance.
    fn seen(p: Peer) -> (usize, Option<u32>) {
        (p.index, p.link.distance)
    }

    #[test]
    fn empty_has_no_devices() {
        let t: Topology<Fake> = Topology::new();
        assert_eq!(t.len(), 0);
        assert!(t.get(0).is_none());
        assert_eq!(t.peers(0).count(), 0);
    }

    #[test]
    fn matrix_from_switches() -> Result {
        let mut t = Topology::new();
        assert_eq!(t.insert(Fake(10, 1), dist)?, 0);
        assert_eq!(t.insert(Fake(11, 1), dist)?, 1);
        assert_eq!(t.insert(Fake(12, 0), dist)?, 2);
        assert_eq!(t.len(), 3);
        let mut p = KVec::new();
        for peer in t.peers(0) {
            p.push(peer, GFP_KERNEL)?;
        }
        assert_eq!(p.len(), 2);
        assert_eq!(seen(p[0]), (1, Some(4)));
        assert_eq!(p[0].link, bus(4));
        assert_eq!(seen(p[1]), (2, None));
        assert_eq!(p[1].link, P2pLink::NONE);
        // Symmetric, and the isolated device reaches nobody.
        assert_eq!(t.peers(1).next().map(seen), Some((0, Some(4))));
        assert!(t
            .peers(2)
            .all(|p| p.link.distance.is_none() && !p.link.reaches()));
        Ok(())
    }

    #[test]
    fn remove_frees_the_lowest_index_and_clears_distances() -> Result {
        let mut t = Topology::new();
        t.insert(Fake(10, 1), dist)?;
        t.insert(Fake(11, 1), dist)?;
        t.insert(Fake(12, 1), dist)?;
        assert_eq!(t.remove(1).map(|f| f.0), Some(11));
        assert!(t.remove(1).is_none());
        assert_eq!(t.len(), 2);
        assert!(t.peers(0).all(|p| p.index != 1));
        // The freed index is reused, with fresh distances.
        assert_eq!(t.insert(Fake(13, 0), dist)?, 1);
        assert_eq!(
            t.peers(0).find(|p| p.index == 1).map(|p| p.link.distance),
            Some(None)
        );
        assert_eq!(
            t.peers(2).find(|p| p.index == 0).map(|p| p.link.distance),
            Some(Some(4))
        );
        Ok(())
    }

    #[test]
    fn full_topology_is_enospc() -> Result {
        let mut t = Topology::new();
        for i in 0..MAX_DEVICES {
            assert_eq!(t.insert(Fake(i as u32, 1), dist)?, i);
        }
        assert_eq!(t.insert(Fake(99, 1), dist), Err(ENOSPC));
        assert_eq!(t.peers(3).count(), MAX_DEVICES - 1);
        assert!(t.remove(MAX_DEVICES).is_none());
        Ok(())
    }

    #[test]
    fn groups_follow_p2p_cliques() -> Result {
        let mut t = Topology::new();
        t.insert(Fake(10, 1), dist)?;
        t.insert(Fake(11, 1), dist)?;
        t.insert(Fake(12, 0), dist)?;
        assert_eq!(
            (t.group(0), t.group(1), t.group(2)),
            (Some(0), Some(0), Some(1))
        );
        // The first member leaves: its group lives on in the second; a new
        // device that reaches it joins it, one that does not gets a free id.
        t.remove(0);
        assert_eq!(t.insert(Fake(13, 1), dist)?, 0);
        assert_eq!(t.group(0), Some(0));
        t.insert(Fake(14, 2), dist)?;
        assert_eq!(t.group(3), Some(2));
        assert!(t.group(9).is_none());
        assert!(t.same_group(0, 1) && !t.same_group(0, 3) && !t.same_group(0, 9));
        let mut leaders = KVec::new();
        for l in t.group_leaders() {
            leaders.push(l, GFP_KERNEL)?;
        }
        assert_eq!(&leaders[..], &[0, 2, 3]);
        Ok(())
    }

    #[test]
    fn unplugged_group_member_comes_back_to_its_group() -> Result {
        let mut t = Topology::new();
        t.insert(Fake(10, 1), dist)?;
        t.insert(Fake(11, 1), dist)?;
        t.insert(Fake(12, 0), dist)?;
        // Device 1 is unplugged and plugged back: same index, same group;
        // the isolated device keeps its own.
        t.remove(1);
        assert_eq!(t.group(1), None);
        assert!(!t.same_group(0, 1));
        assert_eq!(t.insert(Fake(11, 1), dist)?, 1);
        assert_eq!(
            (t.group(0), t.group(1), t.group(2)),
            (Some(0), Some(0), Some(1))
        );
        // The whole group goes: its id is free for the next device.
        t.remove(0);
        t.remove(1);
        assert_eq!(t.insert(Fake(15, 3), dist)?, 0);
        assert_eq!(t.group(0), Some(0));
        Ok(())
    }

    #[test]
    fn asymmetric_distance_is_kept_per_direction() -> Result {
        let mut t = Topology::new();
        t.insert(Fake(1, 1), dist)?;
        // Device 1 may read device 0's memory, not the other way round.
        t.insert(
            Fake(2, 1),
            |p: &Fake, _c: &Fake| {
                if p.0 == 1 {
                    bus(2)
                } else {
                    P2pLink::NONE
                }
            },
        )?;
        assert_eq!(t.peers(1).next().map(|p| p.link.distance), Some(Some(2)));
        assert_eq!(t.peers(0).next().map(|p| p.link.distance), Some(None));
        Ok(())
    }
}
