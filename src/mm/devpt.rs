// SPDX-License-Identifier: GPL-2.0

//! A device page table: what one device maps of one mirrored address
//! space, kept across jobs, as a GPU keeps its page tables for a VM (Xe's
//! PPGTT, UVM's GPU page tables).
//!
//! An entry maps one 4 KiB page of the process to where the device reaches
//! it: a page of the device's own memory, a system page by a DMA address,
//! or a page of a peer's memory by a P2P bus address, with its write
//! permission. The table is a sparse radix of one level: a leaf of 512
//! entries per 2 MiB block of the address space that has any, in a red-black
//! tree keyed by the block's index.
//!
//! The table lives in the lock of its [`Mirror`](super::hmm::Mirror): it is
//! filled only from a walk that is still valid under that lock
//! ([`MirrorGuard::bind`](super::hmm::MirrorGuard::bind)), read only under
//! it, and every invalidation of the mirror zaps the entries of its range
//! under it before the mm core changes the process's page tables (and
//! unmaps their DMA and P2P mappings). So an entry that is in the table
//! names a page that is still mapped at its address, with at least the
//! entry's permission: the page stays valid while the lock is held, which
//! is what lets the device use it without walking the process's page
//! tables again.
//!
//! The emulated device looks an entry up in its TLB ([`Tlb`]) before the
//! leaves; whatever changes or drops an entry drops its translation there
//! too, under the same lock, before the page it named may go: a zap is
//! also the device's TLB invalidation (counted in [`Counters`]).
//!
//! Nothing here allocates under the lock: a leaf is allocated before the
//! lock is taken ([`Spare`]) and only moved in; zapping frees.

use kernel::{
    device::{Bound, Device},
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
    },
};

use super::dma::{self, SysPage};
use super::p2p;
use super::p2p::PeerRoute;
use super::page::{PageRef, BLOCK_PAGES, BLOCK_SIZE, PAGE_SIZE};
use super::tlb::Tlb;

/// What the device reaches an entry's page through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bind<'a> {
    /// A page of the table's device's own memory.
    Own,
    /// A system page, by a DMA mapping made for the device.
    Dma,
    /// A page of a peer's memory, by the P2P route `pci_p2pdma` gives the
    /// device to it, made of the bus-side address the page stands for:
    /// the page's own (the table refuses one of another page).
    Peer(PeerRoute<'a>),
}

/// Whether an entry spares a job its placement pass. Either stays until
/// the mm changes its page (an invalidation zaps it, as every entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Life {
    /// Where the range's attributes keep the page: a job that the table
    /// maps runs without a placement pass.
    Kept,
    /// A page used where it is, which the placement policies may move at a
    /// later job (see `crate::engine`): only a job that runs in place
    /// counts it as mapped ([`DevPt::covers`]); any other job's placement
    /// pass looks at the page first, and a move zaps the entry.
    Job,
}

/// The device's own side of a table, where the device walks page tables of
/// its own (msvm-gpu: `crate::gpu::mmu::Context`): its TLB, invalidated
/// for every change of the table, and its tables, written from this one.
/// Used under the mirror's lock only, as the table: no job of the table's
/// runs on the device between a change and [`DeviceTable::flush`].
pub(crate) trait DeviceTable: Send + Sync {
    /// Records that the device's translations of `[start, end)` must go
    /// before its next job of this table. May not sleep nor allocate.
    fn invalidate(&self, start: usize, end: usize);
    /// Drops the translations recorded, and returns once no access of the
    /// device can use them: before a job of this table runs. Sleeps. An
    /// error: the device did not answer, and no job of this table may run
    /// on it.
    fn flush(&self) -> Result;
    /// The context a job on the device names.
    fn id(&self) -> u32;
    /// Writes entries `from..` of the device's last-level table of 2 MiB
    /// block `block`, in the device's format. May not sleep nor allocate.
    fn write_entries(&self, block: usize, from: usize, entries: &[u64]) -> Result;
}

/// The page an entry maps, as the engine's address decoder finds it (the
/// emulated device reaches a page by CPU: see `crate::engine`).
#[derive(Clone, Copy)]
pub(crate) enum Mapping<'t> {
    /// A page of the device's own memory.
    Own(PageRef<'t>),
    /// A system page, mapped for DMA.
    Dma(SysPage<'t>),
    /// A page of a peer's memory, mapped for P2P.
    Peer(PageRef<'t>),
}

// An entry: word 0 holds the kind (bits 61..63: 0 is no entry), the write
// bit (60), the job bit (59: `Life::Job`) and the page frame; word 1 the
// DMA or bus address.
const KIND_SHIFT: u32 = 61;
const KIND_OWN: u64 = 1;
const KIND_DMA: u64 = 2;
const KIND_PEER: u64 = 3;
/// A peer's page the device reaches inside a switch, at its bus address
/// (nothing mapped).
const KIND_PEER_BUS: u64 = 4;
const WRITABLE: u64 = 1 << 60;
const JOB: u64 = 1 << 59;
const PFN_MASK: u64 = JOB - 1;

#[derive(Clone, Copy, Default, Zeroable)]
struct Pte {
    word: u64,
    addr: u64,
}

impl Pte {
    fn kind(self) -> u64 {
        self.word >> KIND_SHIFT
    }

    fn pfn(self) -> usize {
        // CAST: a page frame number fits a `usize`.
        (self.word & PFN_MASK) as usize
    }
}

/// The entries of one 2 MiB block (8 KiB: one `kmalloc-8k` object), and
/// how many are in use.
struct Leaf {
    ptes: KBox<[Pte; BLOCK_PAGES]>,
    live: usize,
}

/// Bytes one leaf takes: its entries and count, and its tree node (a
/// `kmalloc-64` object).
pub(crate) const LEAF_BYTES: usize = core::mem::size_of::<[Pte; BLOCK_PAGES]>() + 64;

/// Counters of the tables of one device.
pub(crate) struct Counters {
    /// The device's msvm index.
    pub(crate) index: usize,
    /// Bytes the device's tables take now.
    pub(crate) bytes: Atomic<u64>,
    /// Invalidations that zapped entries.
    pub(crate) invalidations: Atomic<u64>,
    /// Entries they zapped.
    pub(crate) zapped: Atomic<u64>,
    /// Nanoseconds the zapping took (TLB invalidation included).
    pub(crate) zap_ns: Atomic<u64>,
    /// TLB invalidations: one per zap that removed entries, and one per
    /// entry written over a live one.
    pub(crate) tlb_invalidations: Atomic<u64>,
}

impl Counters {
    /// New counters, for device `index`.
    pub(crate) fn new(index: usize) -> Self {
        Self {
            index,
            bytes: Atomic::new(0),
            invalidations: Atomic::new(0),
            zapped: Atomic::new(0),
            zap_ns: Atomic::new(0),
            tlb_invalidations: Atomic::new(0),
        }
    }

    fn count_bytes(&self, n: usize, add: bool) {
        // CAST: a byte count fits a `u64`.
        let n = n as u64;
        self.bytes
            .add(if add { n } else { n.wrapping_neg() }, Relaxed);
    }
}

/// A leaf and its tree node, allocated.
type SpareLeaf = (RBTreeNodeReservation<usize, Leaf>, Leaf);

/// Leaves allocated before the lock is taken, for a bind to move in.
pub(crate) struct Spare {
    leaves: KVec<SpareLeaf>,
}

impl Spare {
    /// Room for `n` new leaves (charged to the caller's memory cgroup, as
    /// page tables are).
    pub(crate) fn new(n: usize) -> Result<Self> {
        let mut leaves = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            let node = RBTreeNodeReservation::new(GFP_KERNEL_ACCOUNT)?;
            let ptes = KBox::init(pin_init::init_zeroed(), GFP_KERNEL_ACCOUNT)?;
            leaves.push((node, Leaf { ptes, live: 0 }), GFP_KERNEL)?;
        }
        Ok(Self { leaves })
    }
}

/// One device's page table of one mirrored mm.
///
/// # Invariants
///
/// - Every entry of kind own, DMA or peer names a page that the mirrored mm
///   maps at the entry's address with at least its permission, and no
///   invalidation of that address has ended since it was made (the mirror
///   zaps first): the page is valid while the mirror's lock is held.
/// - A DMA entry's address is a live mapping of its page for `dev`
///   ([`dma::map_page`]), a peer entry's what [`p2p::map_peer`] made for
///   `dev` of the page's own route ([`PeerRoute`]): a live mapping of the
///   bus-side address the page stands for (kind peer), or the page's bus
///   address inside a switch (kind peer-bus, nothing mapped); such entries exist only while `dev` is set,
///   and `dev` is set only while the device is bound (it is detached, and
///   the table emptied, before the device's DMA is torn down: see
///   `Tables::gone` in `hmm.rs`).
/// - `leaves` counts each leaf's live entries, and holds no empty leaf.
/// - Every translation in `tlb` is the entry of its page in `leaves`.
pub(crate) struct DevPt {
    dev: Option<ARef<Device>>,
    leaves: RBTree<usize, Leaf>,
    tlb: Tlb<Pte>,
    /// The device's side, if it walks tables of its own: every
    /// translation of its TLB is of an entry in `leaves` too.
    hw: Option<KBox<dyn DeviceTable>>,
}

impl DevPt {
    /// An empty table of device `dev` (`None`: a table that binds
    /// nothing).
    ///
    /// # Safety
    ///
    /// `dev` is bound, and the table is detached ([`Self::detach`]) before
    /// it is unbound.
    pub(super) unsafe fn new(dev: Option<ARef<Device>>) -> Self {
        // INVARIANT: no entries, no translations; the caller's promise for
        // `dev`.
        Self {
            dev,
            leaves: RBTree::new(),
            tlb: Tlb::new(),
            hw: None,
        }
    }

    /// Gives the (empty) table its device's side.
    pub(super) fn set_device_table(&mut self, hw: KBox<dyn DeviceTable>) {
        // INVARIANT: the table is new: nothing is translated yet.
        self.hw = Some(hw);
    }

    /// The device's side, if it has one.
    pub(crate) fn device_table(&self) -> Option<&dyn DeviceTable> {
        self.hw.as_deref()
    }

    /// What the entry of the page at `addr` maps, as [`Self::get`], without
    /// a lookup of the emulated TLB (for counting what a job on the
    /// device reached).
    pub(crate) fn mapping(&self, addr: usize) -> Option<Mapping<'_>> {
        let leaf = self.leaves.get(&(addr / BLOCK_SIZE))?;
        let pte = leaf.ptes[addr % BLOCK_SIZE / PAGE_SIZE];
        // SAFETY: an entry's page is valid while the table is borrowed
        // (invariant).
        let page = unsafe { PageRef::from_pfn(pte.pfn()) };
        Some(match pte.kind() {
            KIND_OWN => Mapping::Own(page),
            KIND_DMA => Mapping::Dma(SysPage::new(page)?),
            KIND_PEER | KIND_PEER_BUS => Mapping::Peer(page),
            _ => return None,
        })
    }

    /// Calls `f` with the index, mapping, device address (a DMA or bus
    /// address; 0 for the device's own memory) and write permission of
    /// each entry of pages `pages` of 2 MiB block `block`.
    pub(crate) fn for_each_entry(
        &self,
        block: usize,
        pages: core::ops::Range<usize>,
        mut f: impl FnMut(usize, Mapping<'_>, u64, bool),
    ) {
        let Some(leaf) = self.leaves.get(&block) else {
            return;
        };
        let Some(ptes) = leaf.ptes.get(pages.clone()) else {
            return;
        };
        for (i, pte) in (pages.start..).zip(ptes.iter()) {
            // SAFETY: an entry's page is valid while the table is
            // borrowed (invariant).
            let page = || unsafe { PageRef::from_pfn(pte.pfn()) };
            let m = match pte.kind() {
                KIND_OWN => Mapping::Own(page()),
                KIND_DMA => match SysPage::new(page()) {
                    Some(p) => Mapping::Dma(p),
                    None => continue,
                },
                KIND_PEER | KIND_PEER_BUS => Mapping::Peer(page()),
                _ => continue,
            };
            f(i, m, pte.addr, pte.word & WRITABLE != 0);
        }
    }

    /// The entry of the page at `addr`, as the device finds it: in its
    /// TLB, else in the leaves (then kept in the TLB).
    fn translate(&self, addr: usize) -> Option<Pte> {
        // INVARIANT: the TLB keeps what the leaves hold now.
        self.tlb.lookup(addr / PAGE_SIZE, || {
            let leaf = self.leaves.get(&(addr / BLOCK_SIZE))?;
            let pte = leaf.ptes[addr % BLOCK_SIZE / PAGE_SIZE];
            (pte.kind() != 0).then_some(pte)
        })
    }

    /// The TLB lookups that hit and missed since the last call.
    pub(crate) fn tlb_counts(&self) -> (u64, u64) {
        self.tlb.take_counts()
    }

    /// What the entry of the page at `addr` maps, if there is one. Its
    /// page is valid for as long as the table is borrowed (the mirror's
    /// lock is held).
    pub(crate) fn get(&self, addr: usize) -> Option<Mapping<'_>> {
        let pte = self.translate(addr)?;
        Some(match pte.kind() {
            // SAFETY: an entry's page is valid while the table is borrowed,
            // and a translation of the TLB's is an entry (invariants), so
            // for the returned lifetime.
            KIND_OWN => Mapping::Own(unsafe { PageRef::from_pfn(pte.pfn()) }),
            KIND_DMA => {
                // SAFETY: as above.
                let page = unsafe { PageRef::from_pfn(pte.pfn()) };
                Mapping::Dma(SysPage::new(page)?)
            }
            // SAFETY: as above.
            KIND_PEER | KIND_PEER_BUS => Mapping::Peer(unsafe { PageRef::from_pfn(pte.pfn()) }),
            _ => return None,
        })
    }

    /// Whether every page of `[first, first + pages * PAGE_SIZE)` has an
    /// entry, writable if `write`, counting [`Life::Job`] entries only if
    /// `job`.
    pub(crate) fn covers(&self, first: usize, pages: usize, write: bool, job: bool) -> bool {
        let mut at = first & !(PAGE_SIZE - 1);
        let Some(end) = pages.checked_mul(PAGE_SIZE).and_then(|l| at.checked_add(l)) else {
            return false;
        };
        while at < end {
            let Some(leaf) = self.leaves.get(&(at / BLOCK_SIZE)) else {
                return false;
            };
            let stop = ((at / BLOCK_SIZE + 1) * BLOCK_SIZE).min(end);
            let from = at % BLOCK_SIZE / PAGE_SIZE;
            let to = from + (stop - at) / PAGE_SIZE;
            let ok = leaf.ptes[from..to].iter().all(|p| {
                p.kind() != 0 && (!write || p.word & WRITABLE != 0) && (job || p.word & JOB == 0)
            });
            if !ok {
                return false;
            }
            at = stop;
        }
        true
    }

    /// The pages of `[first, first + pages * PAGE_SIZE)` (within one 2 MiB
    /// block) from its first page without an entry (writable if `write`) to
    /// its last: the address and the number of pages; `None` if it is
    /// covered.
    pub(crate) fn uncovered(
        &self,
        first: usize,
        pages: usize,
        write: bool,
    ) -> Option<(usize, usize)> {
        if pages == 0 {
            return None;
        }
        let ok = |p: &Pte| p.kind() != 0 && (!write || p.word & WRITABLE != 0);
        let from = first % BLOCK_SIZE / PAGE_SIZE;
        let to = (from + pages).min(BLOCK_PAGES);
        let Some(leaf) = self.leaves.get(&(first / BLOCK_SIZE)) else {
            return Some((first, to - from));
        };
        let ptes = &leaf.ptes[from..to];
        let a = ptes.iter().position(|p| !ok(p))?;
        let b = ptes.iter().rposition(|p| !ok(p))?;
        Some((first + a * PAGE_SIZE, b - a + 1))
    }

    /// The leaves `[first, first + pages * PAGE_SIZE)` lacks.
    pub(crate) fn missing_leaves(&self, first: usize, pages: usize) -> usize {
        if pages == 0 {
            return 0;
        }
        let last = (first + pages * PAGE_SIZE - 1) / BLOCK_SIZE;
        (first / BLOCK_SIZE..=last)
            .filter(|b| self.leaves.get(b).is_none())
            .count()
    }

    /// Bytes the table takes.
    pub(crate) fn bytes(&self) -> usize {
        self.leaves.iter().count() * LEAF_BYTES
    }

    /// Writes the entry of the page at `addr`: `page`, reached as `how`,
    /// writable if `writable`, for `life`; a leaf it needs comes from
    /// `spare`. An entry kept for the same page stays kept. Returns whether
    /// it made the entry: not for another device than the table's (or a
    /// detached table), nor a peer entry whose address is another page's,
    /// nor without a leaf, nor a DMA entry when the device's mappings
    /// bounce (they would hold the bounce pool all devices share), nor if
    /// the mapping failed: the table is a cache, a missing entry only
    /// faults again.
    ///
    /// # Safety
    ///
    /// The caller holds the mirror's lock, and `page` is mapped at `addr`
    /// by the mirrored mm (writable if `writable`), as a walk found that is
    /// still valid under the lock.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn set(
        &mut self,
        dev: &Device<Bound>,
        counters: &Counters,
        addr: usize,
        page: PageRef<'_>,
        how: Bind<'_>,
        (writable, life): (bool, Life),
        spare: &mut Spare,
    ) -> Result<bool> {
        let own: &Device = dev;
        if !self.dev.as_deref().is_some_and(|d| core::ptr::eq(d, own)) {
            return Ok(false);
        }
        // The device reaches what the address maps, the CPU engine the
        // entry's page (`Mapping::Peer`): only the page's own address.
        if let Bind::Peer(route) = how {
            if !route.is_of(page) {
                return Ok(false);
            }
        }
        if how == Bind::Dma && dma::force_bounce(dev) {
            return Ok(false);
        }
        let block = addr / BLOCK_SIZE;
        if self.leaves.get(&block).is_none() {
            let Some((node, leaf)) = spare.leaves.pop() else {
                return Ok(false);
            };
            self.leaves.insert(node.into_node(block, leaf));
            counters.count_bytes(LEAF_BYTES, true);
        }
        let Some(leaf) = self.leaves.get_mut(&block) else {
            // Not reached: the leaf is there, under the same lock.
            return Ok(false);
        };
        let i = addr % BLOCK_SIZE / PAGE_SIZE;
        // Drop what the entry held first (a refault of a mapped page); a
        // kept entry of the same page stays kept (a job's fault over a
        // page PREFETCH bound, say).
        let old = core::mem::take(&mut leaf.ptes[i]);
        let kept = old.kind() != 0 && old.pfn() == page.pfn() && old.word & JOB == 0;
        let life = if kept { Life::Kept } else { life };
        if old.kind() != 0 {
            leaf.live -= 1;
            // INVARIANT: its translation goes with it, before its mapping.
            let vpn = addr / PAGE_SIZE;
            self.tlb.invalidate(vpn, vpn + 1);
            if let Some(hw) = &self.hw {
                hw.invalidate(addr, addr + PAGE_SIZE);
            }
            counters.tlb_invalidations.add(1, Relaxed);
            unmap(Some(own), old);
        }
        let (kind, a) = match how {
            Bind::Own => (KIND_OWN, 0),
            Bind::Dma => match dma::map_page(dev, page) {
                Some(a) => (KIND_DMA, a),
                None => return Ok(self.unneeded(block, counters)),
            },
            Bind::Peer(route) => match p2p::map_peer(dev, route) {
                Some(m) if m.mapped => (KIND_PEER, m.addr),
                Some(m) => (KIND_PEER_BUS, m.addr),
                None => return Ok(self.unneeded(block, counters)),
            },
        };
        // CAST: a page frame number fits 59 bits.
        let word = kind << KIND_SHIFT
            | if writable { WRITABLE } else { 0 }
            | if life == Life::Job { JOB } else { 0 }
            | page.pfn() as u64;
        // INVARIANT: the caller's promise for the page; the mapping was
        // just made for `dev`, the table's (bound) device, of the page's
        // own `PeerRoute` if it is a peer's (checked above); the leaf counts
        // it.
        leaf.ptes[i] = Pte { word, addr: a };
        leaf.live += 1;
        Ok(true)
    }

    /// After a failed mapping: drops the block's leaf if it is empty.
    fn unneeded(&mut self, block: usize, counters: &Counters) -> bool {
        if self.leaves.get(&block).is_some_and(|l| l.live == 0) {
            self.leaves.remove(&block);
            counters.count_bytes(LEAF_BYTES, false);
        }
        false
    }

    /// Zaps the entries of `[start, end)` (`end` 0: to the top of the
    /// address space), unmapping what they map, and frees the leaves left
    /// empty (counted in `counters`, if given); reschedules between leaves
    /// if `resched`. Returns the entries removed.
    pub(crate) fn zap(
        &mut self,
        start: usize,
        end: usize,
        counters: Option<&Counters>,
        resched: bool,
    ) -> u64 {
        let end = if end == 0 { usize::MAX } else { end };
        if start >= end || self.leaves.iter().next().is_none() {
            return 0;
        }
        let dev = self.dev.clone();
        let (first, last) = (start / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
        // The device's TLB invalidation, of the range, before any mapping
        // goes (the device's own, if a leaf lies in the range: recorded,
        // done before the table's next job on the device).
        // INVARIANT: no translation of an entry zapped below is left.
        self.tlb
            .invalidate(start / PAGE_SIZE, end.div_ceil(PAGE_SIZE));
        let meets = self
            .leaves
            .cursor_lower_bound(&first)
            .is_some_and(|c| *c.current().0 <= last);
        if let (true, Some(hw)) = (meets, &self.hw) {
            hw.invalidate(start, end);
        }
        let mut zapped = 0;
        let mut freed = 0;
        let mut cursor = self.leaves.cursor_lower_bound_mut(&first);
        // The last block zapped: removing a tree's last node leaves the
        // cursor on the one before, which is done.
        let mut done = None;
        while let Some(mut c) = cursor {
            let (&block, leaf) = c.current_mut();
            if block > last || done.is_some_and(|d| block <= d) {
                break;
            }
            done = Some(block);
            let base = block * BLOCK_SIZE;
            let from = start.max(base) - base;
            let to = end.min(base.saturating_add(BLOCK_SIZE)) - base;
            let first_pte = from / PAGE_SIZE;
            for pte in leaf.ptes[first_pte..to.div_ceil(PAGE_SIZE)].iter_mut() {
                let p = core::mem::take(pte);
                if p.kind() != 0 {
                    leaf.live -= 1;
                    zapped += 1;
                    unmap(dev.as_deref(), p);
                }
            }
            cursor = if leaf.live == 0 {
                freed += 1;
                let (next, _node) = c.remove_current();
                next
            } else {
                c.move_next()
            };
            if resched {
                super::cancel::cond_resched();
            }
        }
        if let Some(c) = counters {
            c.count_bytes(freed * LEAF_BYTES, false);
            if zapped > 0 {
                c.tlb_invalidations.add(1, Relaxed);
            }
        }
        zapped
    }

    /// Makes the table `dev`'s (an empty one, or one that was detached).
    ///
    /// # Safety
    ///
    /// As for [`Self::new`]: `dev` is bound, and the table is detached
    /// before it is unbound.
    pub(super) unsafe fn attach(&mut self, dev: ARef<Device>) {
        // A detached table is empty (`detach` emptied it, or it is new):
        // a table holds one device's mappings only.
        debug_assert!(self.leaves.iter().next().is_none());
        self.zap(0, usize::MAX, None, false);
        // INVARIANT: no entries; the caller's promise for `dev`.
        self.dev = Some(dev);
    }

    /// Empties the table and forgets its device, which goes: it binds
    /// nothing after this.
    pub(crate) fn detach(&mut self, counters: &Counters) {
        self.zap(0, usize::MAX, Some(counters), true);
        // INVARIANT: no entries left, and none made without a device.
        self.dev = None;
        // Its context goes with the device (its translations dropped).
        self.hw = None;
    }
}

impl Drop for DevPt {
    fn drop(&mut self) {
        self.zap(0, usize::MAX, None, false);
    }
}

/// Unmaps what entry `pte`, just removed from a table of `dev`, mapped.
fn unmap(dev: Option<&Device>, pte: Pte) {
    let Some(dev) = dev else { return };
    match pte.kind() {
        // SAFETY: a DMA entry's address is a live mapping of `dev`'s, which
        // is bound (`DevPt` invariant); removed from the table, it is
        // unmapped once.
        KIND_DMA => unsafe { dma::unmap_page(dev, pte.addr) },
        // SAFETY: as above, for a peer entry mapped through the host
        // bridge (a bus-address entry, `KIND_PEER_BUS`, maps nothing).
        KIND_PEER => unsafe { p2p::unmap_peer(dev, p2p::PeerMapping::dma(pte.addr)) },
        _ => {}
    }
}

mod kunit;
