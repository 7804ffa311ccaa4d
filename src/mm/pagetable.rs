// SPDX-License-Identifier: GPL-2.0

//! A mirror's page table for a device that reaches pages by CPU: what
//! `test_hmm`'s dmirror keeps in its xarray. Each entry maps one page of
//! the mirrored process to the page a valid walk found there (a system
//! page, or a device-private page of some device), with its write
//! permission, or to a page the device holds exclusively
//! (`make_device_exclusive`).
//!
//! The table lives in the lock of its [`Mirror`]: it is filled only from a
//! walk that is still valid under that lock, or from a page made exclusive
//! whose folio is locked meanwhile, and every invalidation of the mirror
//! removes the entries of its range under it before the mm core changes
//! the process's page tables. So an entry names a page that is still
//! mapped at its address, and the page stays valid while the lock is held.
//!
//! Nothing here allocates under the lock: leaves are allocated before it
//! is taken ([`PtSpare`]) and only moved in; removal frees.

use kernel::{
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
};

use super::dma::SysPage;
use super::exclusive::ExclusivePage;
use super::hmm::{Invalidation, Mirror, MirrorGuard, MirrorSeq, MirrorTable, Walk};
use super::migrate::VmaMigration;
use super::page::{PageRef, BLOCK_PAGES, BLOCK_SIZE, PAGE_SIZE};

// An entry: the page frame, and its bits.
const PRESENT: u64 = 1 << 63;
const WRITE: u64 = 1 << 62;
/// Mapped by `make_device_exclusive`: the CPU's access faults.
const EXCLUSIVE: u64 = 1 << 61;
const PFN_MASK: u64 = EXCLUSIVE - 1;

/// The entries of one 2 MiB block of the address space (4 KiB), and how
/// many are present.
struct Leaf {
    ptes: KBox<[u64; BLOCK_PAGES]>,
    live: usize,
}

/// A mirror's page table (see the module's documentation): a leaf per
/// 2 MiB block that has entries, in a red-black tree keyed by the block's
/// index.
///
/// # Invariants
///
/// Every present entry, at its address's page in its block, lies in the
/// mirror's range and names a page that the mirrored mm maps at that
/// address (with write access if the entry says so, or through a
/// device-exclusive entry), and no invalidation of that address that the
/// mirror does not skip has ended since the entry was made (it skips only
/// `make_device_exclusive`'s for its device, which leaves the page mapped
/// there). `live` counts a leaf's present entries; no leaf is empty.
#[derive(Default)]
pub(crate) struct PageTable {
    leaves: RBTree<usize, Leaf>,
}

/// Room for leaves, allocated before the mirror's lock is taken.
pub(crate) struct PtSpare {
    leaves: KVec<(RBTreeNodeReservation<usize, Leaf>, Leaf)>,
}

impl PtSpare {
    /// Room for the entries of `pages` pages from `start`: a leaf for each
    /// 2 MiB block they touch.
    pub(crate) fn new(start: usize, pages: usize) -> Result<Self> {
        let end = start.checked_add(pages * PAGE_SIZE).ok_or(EINVAL)?;
        let n = end.div_ceil(BLOCK_SIZE) - start / BLOCK_SIZE;
        let mut leaves = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
            let ptes = KBox::new([0u64; BLOCK_PAGES], GFP_KERNEL)?;
            leaves.push((node, Leaf { ptes, live: 0 }), GFP_KERNEL)?;
        }
        Ok(Self { leaves })
    }
}

impl PageTable {
    /// An empty table, for [`Mirror::create`].
    pub(crate) fn new() -> Self {
        // INVARIANT: no entries.
        Self::default()
    }

    fn get(&self, addr: usize) -> Option<u64> {
        let leaf = self.leaves.get(&(addr / BLOCK_SIZE))?;
        let pte = leaf.ptes[addr % BLOCK_SIZE / PAGE_SIZE];
        (pte & PRESENT != 0).then_some(pte)
    }

    fn insert(&mut self, addr: usize, pfn: usize, bits: u64, spare: &mut PtSpare) -> Result {
        let block = addr / BLOCK_SIZE;
        if self.leaves.get(&block).is_none() {
            let (node, leaf) = spare.leaves.pop().ok_or(ENOMEM)?;
            self.leaves.insert(node.into_node(block, leaf));
        }
        let leaf = self.leaves.get_mut(&block).ok_or(ENOMEM)?;
        let slot = &mut leaf.ptes[addr % BLOCK_SIZE / PAGE_SIZE];
        if *slot & PRESENT == 0 {
            leaf.live += 1;
        }
        // CAST: a page frame number fits the mask's 61 bits.
        *slot = (pfn as u64 & PFN_MASK) | PRESENT | bits;
        Ok(())
    }

    fn remove(&mut self, start: usize, end: usize) {
        let (first, last) = (start / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        let mut cur = self.leaves.cursor_lower_bound_mut(&first);
        while let Some(mut c) = cur {
            let k = *c.current().0;
            // Past the range, or back before it (the cursor moves to the
            // previous node once the last one is removed).
            if k < first || k >= last {
                break;
            }
            let base = k * BLOCK_SIZE;
            let (_, leaf) = c.current_mut();
            for (i, slot) in leaf.ptes.iter_mut().enumerate() {
                let a = base + i * PAGE_SIZE;
                if a >= start && a < end && *slot & PRESENT != 0 {
                    *slot = 0;
                    leaf.live -= 1;
                }
            }
            if leaf.live == 0 {
                // INVARIANT: no empty leaf stays; freeing does not reclaim.
                let (next, node) = c.remove_current();
                drop(node);
                cur = next;
            } else {
                cur = c.move_next();
            }
        }
    }
}

impl MirrorTable for PageTable {
    fn invalidate(&mut self, inv: &Invalidation) {
        // INVARIANT: the entries of the range go before the mm core
        // changes it.
        self.remove(inv.start, inv.end);
    }
}

/// Where an entry's page is, for the device to read or write it.
pub(crate) enum Target<'g> {
    /// A system page.
    Sys(SysPage<'g>),
    /// A device-private page (its device knows where its data is).
    Device(PageRef<'g>),
}

impl MirrorGuard<'_, PageTable> {
    /// Enters every page of `walk` (`EFAULT` if one has none: the walk did
    /// not fault it in), writable where the walk found it writable, with
    /// room from `spare`. `EAGAIN` if an invalidation came since the walk,
    /// `EINVAL` if it is another mirror's.
    pub(crate) fn map(&mut self, walk: &Walk<'_, '_>, spare: &mut PtSpare) -> Result {
        self.check(walk)?;
        for (i, e) in walk.pfns().iter().enumerate() {
            let pfn = e.pfn().ok_or(EFAULT)?;
            let bits = if e.writable() { WRITE } else { 0 };
            // INVARIANT: found at that address by a walk that no
            // invalidation changed since (checked), and none can while the
            // lock is held.
            self.enter(walk.start() + i * PAGE_SIZE, pfn, bits, spare)?;
        }
        Ok(())
    }

    /// Enters the pages of `walk` that `keep` accepts (a walk that faulted
    /// nothing in: pages it found absent are left out), as [`Self::map`].
    pub(crate) fn map_some(
        &mut self,
        walk: &Walk<'_, '_>,
        spare: &mut PtSpare,
        mut keep: impl FnMut(PageRef<'_>) -> bool,
    ) -> Result {
        self.check(walk)?;
        for (i, e) in walk.pfns().iter().enumerate() {
            let Some(pfn) = e.pfn() else { continue };
            // SAFETY: a page the walk found, which no invalidation changed
            // since (checked above) and none can while the lock is held.
            if !keep(unsafe { PageRef::from_pfn(pfn) }) {
                continue;
            }
            let bits = if e.writable() { WRITE } else { 0 };
            // INVARIANT: as in `map`.
            self.enter(walk.start() + i * PAGE_SIZE, pfn, bits, spare)?;
        }
        Ok(())
    }

    /// Enters the device pages that `mig` installed (after
    /// [`VmaMigration::pages`], before it finalizes), as `test_hmm` maps
    /// them without walking again, with their write permission; only those
    /// `keep` accepts. `seq` must have been read after `mig` was set up:
    /// `EAGAIN` if an invalidation came since (walk instead), `EINVAL` if
    /// the destinations are not installed, the migration is not of the
    /// mirror's mm and range, or `seq` is another mirror's.
    pub(crate) fn map_migrated(
        &mut self,
        mig: &VmaMigration<'_>,
        seq: MirrorSeq<'_>,
        spare: &mut PtSpare,
        mut keep: impl FnMut(PageRef<'_>) -> bool,
    ) -> Result {
        let end = mig.start() + mig.npages() * PAGE_SIZE;
        if !mig.installed()
            || !core::ptr::eq(mig.mm().as_raw(), self.mirror().mm())
            || !self.mirror().covers(mig.start(), end)
        {
            return Err(EINVAL);
        }
        self.check_seq(seq)?;
        for i in 0..mig.npages() {
            let (src, dst) = (mig.src(i), mig.dst(i));
            let Some(page) = mig.dst_page(i).filter(|_| src.migrate()) else {
                continue;
            };
            if !keep(page) {
                continue;
            }
            let bits = if dst.write() { WRITE } else { 0 };
            for k in 0..dst.nr_pages() {
                let Some(p) = page.nth(k) else { break };
                // INVARIANT: the migration mapped `p` at that address
                // (installed, still marked to migrate), and no
                // invalidation came since `seq`, read after the migration
                // collected its pages (checked under the lock, which keeps
                // new ones out): it is still mapped there.
                self.enter(mig.start() + (i + k) * PAGE_SIZE, p.pfn(), bits, spare)?;
            }
        }
        Ok(())
    }

    /// Enters `page`, which the device now holds exclusively at its
    /// address, writable: `EAGAIN` if an invalidation came since it was
    /// made exclusive (make it again), `EINVAL` if it is another mirror's.
    pub(crate) fn map_exclusive(
        &mut self,
        page: &ExclusivePage<'_>,
        spare: &mut PtSpare,
    ) -> Result {
        if !page.of(self.mirror()) {
            return Err(EINVAL);
        }
        if !page.still_valid(self) {
            return Err(EAGAIN);
        }
        // INVARIANT: `page` is mapped at its address through a
        // device-exclusive entry, which only an invalidation of the
        // address turns back or unmaps, and none came since it was made
        // (checked under the lock, which keeps new ones out).
        let pfn = page.page().pfn();
        self.enter(page.address(), pfn, WRITE | EXCLUSIVE, spare)
    }

    /// The page entered at `addr` (writable, if `write`): `None` if there
    /// is none (fault it in).
    pub(crate) fn target(&self, addr: usize, write: bool) -> Option<Target<'_>> {
        let pte = (**self).get(addr)?;
        if write && pte & WRITE == 0 {
            return None;
        }
        // CAST: the mask keeps a page frame number, which fits `usize`.
        let pfn = (pte & PFN_MASK) as usize;
        // SAFETY: a present entry's page is valid while the lock is held
        // (invariant), which the borrow of `self` bounds.
        let page = unsafe { PageRef::from_pfn(pfn) };
        Some(match SysPage::new(page) {
            Some(s) => Target::Sys(s),
            None => Target::Device(page),
        })
    }

    /// Whether some page of `[start, end)` is entered as held exclusively.
    pub(crate) fn any_exclusive(&self, start: usize, end: usize) -> bool {
        // Over the leaves there are (their number is bounded by the memory
        // they take), not the range's pages: a range may be as large as
        // the address space.
        let (first, last) = (start / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        self.leaves
            .iter()
            .filter(|&(&k, _)| k >= first && k < last)
            .any(|(&k, leaf)| {
                leaf.ptes.iter().enumerate().any(|(i, &p)| {
                    let a = k * BLOCK_SIZE + i * PAGE_SIZE;
                    a >= start && a < end && p & PRESENT != 0 && p & EXCLUSIVE != 0
                })
            })
    }

    /// Enters `pfn` at `addr` with `bits` (room from `spare`): `EINVAL`
    /// outside the mirror's range, where no invalidation would remove it.
    fn enter(&mut self, addr: usize, pfn: usize, bits: u64, spare: &mut PtSpare) -> Result {
        if !self
            .mirror()
            .covers(addr, addr.checked_add(PAGE_SIZE).ok_or(EINVAL)?)
        {
            return Err(EINVAL);
        }
        self.table_mut().insert(addr, pfn, bits, spare)
    }
}

/// The mirror of a device that reaches pages by CPU.
pub(crate) type PtMirror = Mirror<PageTable>;

#[kunit_tests(msvm_pagetable)]
mod tests {
    use super::*;

    fn leaves(t: &PageTable) -> usize {
        t.leaves.iter().count()
    }

    /// Entries go in with room from the spare (a leaf per 2 MiB block),
    /// come out of a removed range only, and a leaf goes with its last
    /// entry.
    #[test]
    fn entries_in_and_out_by_range() {
        let mut t = PageTable::new();
        let base = 5 * BLOCK_SIZE;
        // Three pages, the last in the next block.
        let mut spare = PtSpare::new(base + BLOCK_SIZE - 2 * PAGE_SIZE, 3).unwrap();
        assert_eq!(spare.leaves.len(), 2);
        let a = base + BLOCK_SIZE - 2 * PAGE_SIZE;
        t.insert(a, 0x100, WRITE, &mut spare).unwrap();
        t.insert(a + PAGE_SIZE, 0x101, 0, &mut spare).unwrap();
        t.insert(a + 2 * PAGE_SIZE, 0x102, WRITE | EXCLUSIVE, &mut spare)
            .unwrap();
        assert_eq!(leaves(&t), 2);
        assert_eq!(t.get(a).map(|p| p & PFN_MASK), Some(0x100));
        assert_eq!(t.get(a).map(|p| p & WRITE != 0), Some(true));
        assert_eq!(t.get(a + PAGE_SIZE).map(|p| p & WRITE != 0), Some(false));
        assert!(t.get(a - PAGE_SIZE).is_none());
        // The spare is used up: a new block has no room.
        assert!(t
            .insert(base + 4 * BLOCK_SIZE, 0x200, 0, &mut spare)
            .is_err());
        // Over again: same count, new page.
        t.insert(a, 0x300, 0, &mut spare).unwrap();
        assert_eq!(t.get(a).map(|p| p & PFN_MASK), Some(0x300));
        // The middle page only.
        t.remove(a + PAGE_SIZE, a + 2 * PAGE_SIZE);
        assert!(t.get(a + PAGE_SIZE).is_none());
        assert!(t.get(a).is_some() && t.get(a + 2 * PAGE_SIZE).is_some());
        // The next block's page: its leaf goes.
        t.remove(a + 2 * PAGE_SIZE, a + 3 * PAGE_SIZE);
        assert_eq!(leaves(&t), 1);
        t.remove(0, usize::MAX);
        assert_eq!(leaves(&t), 0);
    }
}
