// SPDX-License-Identifier: GPL-2.0

//! `DevPt`'s KUnit tests.

use kernel::prelude::*;

#[kunit_tests(msvm_devpt)]
mod tests {
    use super::super::super::fault::{Fault, FaultError};
    use super::super::super::kunit_dev::{pfn_valid, with_device};
    use super::super::super::numa::Home;
    use super::super::super::p2p::PeerRoute;
    use super::super::super::pagemap::{BusRange, OwnerKey, Pagemap, PagemapOps, PeerAddr};
    use super::super::super::pci::P2pPath;
    use super::super::*;

    /// A pagemap's owner that does nothing: its pages stand for a peer's
    /// memory in the cases below.
    struct Peer;

    impl PagemapOps for Peer {
        type Bus = BusRange;

        fn folio_freeing(&self, _first: usize, _nr: usize) {}

        fn folio_freed(&self, _freed: usize, _left: usize) {}

        fn migrate_to_ram(&self, _fault: Fault<'_>) -> Result<(), FaultError> {
            Err(FaultError::Sigbus)
        }
    }

    static PEER: OwnerKey<Peer> = OwnerKey::new();

    /// Own entries (which map nothing) put straight into a table, as `set`
    /// does once it has its leaf.
    fn own(t: &mut DevPt, addr: usize, writable: bool) {
        own_for(t, addr, writable, Life::Kept);
    }

    fn own_for(t: &mut DevPt, addr: usize, writable: bool, life: Life) {
        let block = addr / BLOCK_SIZE;
        if t.leaves.get(&block).is_none() {
            let mut s = Spare::new(1).unwrap();
            let (node, leaf) = s.leaves.pop().unwrap();
            t.leaves.insert(node.into_node(block, leaf));
        }
        let leaf = t.leaves.get_mut(&block).unwrap();
        let w = if writable { WRITABLE } else { 0 };
        let j = if life == Life::Job { JOB } else { 0 };
        leaf.ptes[addr % BLOCK_SIZE / PAGE_SIZE] = Pte {
            word: KIND_OWN << KIND_SHIFT | w | j | 1,
            addr: 0,
        };
        leaf.live += 1;
    }

    /// The bus-side address the pages of the case's pagemap stand for: no
    /// BAR's, never reached (KUnit's device maps it, and nothing accesses
    /// what it maps). A machine may have RAM there: the case then maps
    /// none of it (`dma_map_resource` of RAM is a DMA API misuse, which
    /// `CONFIG_DMA_API_DEBUG` reports).
    const BUS: u64 = 1 << 40;

    /// What the case's bus-address routes add to a page's physical
    /// address (a bus offset, as some host bridges have).
    const BUS_OFFSET: u64 = 1 << 32;

    /// A peer entry's bus address is its own page's: `set` makes no entry
    /// of a page with the address of another, and maps the page's own
    /// (unless RAM is there) through the host bridge; inside a switch, the
    /// entry holds the page's bus address.
    #[test]
    fn a_peer_entry_maps_its_own_page() -> Result {
        // SAFETY: page aligned; the only mappings of the range are made
        // for KUnit's device below, which reaches nothing, and only where
        // there is no RAM.
        let bus = unsafe { BusRange::kunit(BUS, BLOCK_SIZE) };
        let map = Pagemap::new(
            BLOCK_SIZE,
            &PEER,
            c"msvm_kunit_devpt",
            Home::LOCAL,
            bus,
            |_| try_init!(Peer {}? Error),
        )?;
        let mut scratch = KVec::with_capacity(2, GFP_KERNEL)?;
        let mut pages = KVec::with_capacity(2, GFP_KERNEL)?;
        map.alloc_pages(2, &mut scratch, |i, p| {
            // Room for as many as the scratch holds.
            let _ = pages.push((i, p), GFP_KERNEL);
        });
        if pages.len() != 2 {
            return Err(ENOMEM);
        }
        let (ia, a, b) = (pages[0].0, pages[0].1.page(), pages[1].1.page());
        let a_pfn = a.pfn();
        // SAFETY: the map's range is `BusRange::kunit`'s, which stands for
        // no device memory.
        let (own, other) = unsafe {
            (
                map.peer_addr(a).ok_or(EINVAL)?,
                map.peer_addr(b).ok_or(EINVAL)?,
            )
        };
        // CAST: a page index fits in `u64`.
        let want = BUS + (ia * PAGE_SIZE) as u64;
        // RAM at `a`'s bus-side address: no mapping of it is made.
        // CAST: a physical address fits in `usize` on 64-bit kernels.
        let ram = pfn_valid(want as usize / PAGE_SIZE);
        let addr = 7 * BLOCK_SIZE + 5 * PAGE_SIZE;
        // What `set` says with `b`'s address and with `a`'s (unless `ram`),
        // whether the first made an entry, the second's bus address, and
        // whether the device's mappings bounce (no P2P mapping then).
        let (refused, left_none, made, entry, bounce, bus_entry) =
            with_device(|dev| -> Result<_> {
                let d: &Device = dev;
                /// `p`'s route for `d` along `path`.
                fn route<'p>(p: PeerAddr<'p>, d: &Device, path: P2pPath) -> Result<PeerRoute<'p>> {
                    // SAFETY: the map's range stands for no BAR, so no
                    // `pci_p2pdma` path is more right than another: through
                    // the host bridge, the page's address is mapped for the
                    // device (which reaches nothing); inside a switch, nothing
                    // is mapped.
                    unsafe { PeerRoute::new(p, d, path, p.phys() + BUS_OFFSET).ok_or(EINVAL) }
                }
                let (own_hb, other_hb) = (
                    route(own, d, P2pPath::HostBridge)?,
                    route(other, d, P2pPath::HostBridge)?,
                );
                let own_bus = route(own, d, P2pPath::Bus)?;
                // SAFETY: `dev` is bound while this runs, and the table is
                // detached below, before it returns.
                let mut t = unsafe { DevPt::new(Some(d.into())) };
                let c = Counters::new(0);
                let mut spare = Spare::new(1)?;
                let how = (true, Life::Job);
                let refused = {
                    let other = Bind::Peer(other_hb);
                    // SAFETY: the table is the case's own, of no mirror:
                    // nothing but this case changes it, and page `a` is
                    // held (`pages`) for longer than the table lives.
                    unsafe { t.set(dev, &c, addr, a, other, how, &mut spare) }
                };
                let left_none = t.mapping(addr).is_none();
                let made = if ram {
                    Ok(false)
                } else {
                    // SAFETY: as above.
                    unsafe { t.set(dev, &c, addr, a, Bind::Peer(own_hb), how, &mut spare) }
                };
                let mut entry = None;
                let i = addr % BLOCK_SIZE / PAGE_SIZE;
                t.for_each_entry(addr / BLOCK_SIZE, i..i + 1, |_, m, bus_addr, _| {
                    if let Mapping::Peer(p) = m {
                        entry = Some((p.pfn(), bus_addr));
                    }
                });
                // Inside a switch: an entry at the page's bus address, which
                // nothing maps (the bus offset shows it is not the physical
                // address).
                let b_at = addr + PAGE_SIZE;
                let bus_made = {
                    let own = Bind::Peer(own_bus);
                    // SAFETY: as above.
                    unsafe { t.set(dev, &c, b_at, a, own, how, &mut spare) }
                };
                let mut bus_entry = None;
                t.for_each_entry(b_at / BLOCK_SIZE, i + 1..i + 2, |_, m, bus_addr, _| {
                    if let Mapping::Peer(p) = m {
                        bus_entry = Some((p.pfn(), bus_addr));
                    }
                });
                t.detach(&c);
                Ok((
                    refused,
                    left_none,
                    made,
                    entry,
                    dma::force_bounce(dev),
                    (bus_made, bus_entry),
                ))
            })??;
        drop(pages);
        assert_eq!(refused, Ok(false));
        assert!(left_none);
        assert_eq!(bus_entry, (Ok(true), Some((a_pfn, want + BUS_OFFSET))));
        if ram {
            pr_info!("msvm_devpt: RAM at {want:#x}: its own address not mapped\n");
        } else if !bounce {
            // dma-direct: the bus address is the physical address.
            assert_eq!(made, Ok(true));
            assert_eq!(entry, Some((a_pfn, want)));
        }
        Ok(())
    }

    #[test]
    fn covers_needs_every_entry_and_its_permission() {
        // SAFETY: no device.
        let mut t = unsafe { DevPt::new(None) };
        let a = 5 * BLOCK_SIZE - 2 * PAGE_SIZE;
        for i in 0..4 {
            own(&mut t, a + i * PAGE_SIZE, i != 3);
        }
        assert!(t.covers(a, 4, false, true));
        assert!(t.covers(a, 3, true, true));
        assert!(!t.covers(a, 4, true, true));
        assert!(!t.covers(a, 5, false, true));
        assert!(!t.covers(a - PAGE_SIZE, 2, false, true));
        // From the first page lacking the access to the last.
        assert_eq!(t.uncovered(a, 2, true), None);
        assert_eq!(t.uncovered(a, 2, false), None);
        assert_eq!(
            t.uncovered(a - PAGE_SIZE, 3, false),
            Some((a - PAGE_SIZE, 1))
        );
        let b = 5 * BLOCK_SIZE;
        assert_eq!(t.uncovered(b, 4, true), Some((b + PAGE_SIZE, 3)));
        assert_eq!(t.uncovered(b, 1, true), None);
        assert_eq!(t.missing_leaves(a, 4), 0);
        assert_eq!(t.missing_leaves(a, 2 * BLOCK_PAGES), 1);
    }

    #[test]
    fn zap_removes_the_range_and_frees_empty_leaves() {
        // SAFETY: no device.
        let mut t = unsafe { DevPt::new(None) };
        for b in [1usize, 2, 7] {
            for i in 0..BLOCK_PAGES {
                own(&mut t, b * BLOCK_SIZE + i * PAGE_SIZE, true);
            }
        }
        assert_eq!(t.bytes(), 3 * LEAF_BYTES);
        // Half of block 1 and all of block 2.
        let start = BLOCK_SIZE + BLOCK_SIZE / 2;
        assert_eq!(
            t.zap(start, 3 * BLOCK_SIZE, None, false),
            (BLOCK_PAGES / 2 + BLOCK_PAGES) as u64
        );
        assert_eq!(t.bytes(), 2 * LEAF_BYTES);
        assert!(t.covers(BLOCK_SIZE, BLOCK_PAGES / 2, true, false));
        assert!(!t.covers(start, 1, false, true));
        assert!(t.covers(7 * BLOCK_SIZE, BLOCK_PAGES, true, false));
        // A range with no entries, then everything.
        assert_eq!(t.zap(3 * BLOCK_SIZE, 7 * BLOCK_SIZE, None, false), 0);
        let z = t.zap(0, 0, None, false);
        assert_eq!(z, (BLOCK_PAGES / 2 + BLOCK_PAGES) as u64);
        assert_eq!(t.bytes(), 0);
    }

    #[test]
    fn a_zap_invalidates_the_tlb() {
        // SAFETY: no device.
        let mut t = unsafe { DevPt::new(None) };
        let a = 9 * BLOCK_SIZE + 3 * PAGE_SIZE;
        own(&mut t, a, true);
        own(&mut t, a + PAGE_SIZE, true);
        // The first lookup walks, the second finds the TLB's translation.
        assert!(t.translate(a).is_some());
        assert!(t.translate(a).is_some());
        assert_eq!(t.tlb_counts(), (1, 1));
        let c = Counters::new(0);
        assert_eq!(t.zap(a, a + PAGE_SIZE, Some(&c), false), 1);
        assert_eq!(c.tlb_invalidations.load(Relaxed), 1);
        // Gone from the TLB too; its neighbour is walked again.
        assert!(t.translate(a).is_none());
        assert!(t.translate(a + PAGE_SIZE).is_some());
        assert!(t.translate(a + PAGE_SIZE).is_some());
        assert_eq!(t.tlb_counts(), (1, 2));
        // A zap of nothing invalidates nothing.
        assert_eq!(t.zap(a, a + PAGE_SIZE, Some(&c), false), 0);
        assert_eq!(c.tlb_invalidations.load(Relaxed), 1);
    }

    #[test]
    fn job_entries_cover_only_for_jobs_in_place() {
        // SAFETY: no device.
        let mut t = unsafe { DevPt::new(None) };
        let a = 3 * BLOCK_SIZE;
        for i in 0..8 {
            let life = if i % 2 == 0 { Life::Job } else { Life::Kept };
            own_for(&mut t, a + i * PAGE_SIZE, true, life);
        }
        own_for(&mut t, a + BLOCK_SIZE, true, Life::Job);
        // A job in place runs from all of them; another's placement pass
        // looks at the pages behind the job entries first.
        assert!(t.covers(a, 8, true, true));
        assert!(!t.covers(a, 9, false, true));
        assert!(t.covers(a + BLOCK_SIZE, 1, true, true));
        assert!(!t.covers(a, 8, true, false));
        assert!(!t.covers(a + BLOCK_SIZE, 1, false, false));
        assert!(t.covers(a + PAGE_SIZE, 1, true, false));
        // An invalidation zaps both kinds.
        assert_eq!(t.zap(a, a + 2 * BLOCK_SIZE, None, false), 9);
        assert!(!t.covers(a + PAGE_SIZE, 1, false, true));
        assert_eq!(t.missing_leaves(a, 1), 1);
    }
}
