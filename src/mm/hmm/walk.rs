// SPDX-License-Identifier: GPL-2.0

//! The walks of a [`Mirror`]: `hmm_range_fault` under the mirror's
//! sequence and generation, begun once no invalidation of the mirror is in
//! flight ([`Inflight`]), so that no walk sleeps in
//! `mmu_interval_read_begin()` but where said (`Documentation/design.rst`,
//! "Walks that wait for no process"); and what a walk fills.

use core::marker::PhantomData;

use kernel::{bindings, mm::MmWithUser, prelude::*};

use super::super::bindings as b;
use super::super::cancel::Cancel;
use super::super::inflight::State;
use super::super::owner::Owner;
use super::super::page::{BLOCK_PAGES, PAGE_SIZE};
use super::{Mirror, MirrorTable};

/// How long one `hmm_range_fault_unlocked_timeout` call retries a range
/// that invalidations keep changing before the caller checks whether to
/// stop (the kernel restarts the deadline when a fault let go of the mmap
/// lock).
const RETRY_MS: u32 = 100;

/// How long no invalidation must reach a mirror with invalidations only
/// the end of their period tells of ([`State::Lost`]: a new mirror's
/// first walk) before [`Mirror::settle`] asks the mm core whether that
/// period is over.
const LOST_MS: u32 = 10;

/// How long a mirror's recorded invalidations may stay with no new one
/// before [`Mirror::settle`] asks the mm core whether their period is over
/// (an end that never came: a non-blocking start that failed).
const STALE_MS: u32 = 250;

impl<T: MirrorTable> Mirror<T> {
    /// The hmm range of a walk of `pfns` from `start` of `mm`: `EINVAL`
    /// unless `mm` is the mirrored mm and the range lies in the mirrored
    /// one (outside it, invalidations would not reach the walk).
    fn range(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &mut [HmmPfn],
        default_flags: usize,
        owner: Owner,
    ) -> Result<b::hmm_range> {
        let mirrored = self.mm();
        let end = pfns
            .len()
            .checked_mul(PAGE_SIZE)
            .and_then(|l| start.checked_add(l))
            .ok_or(EINVAL)?;
        if !core::ptr::eq(mirrored, mm.as_raw())
            || start % PAGE_SIZE != 0
            || start < self.start
            || end > self.end
        {
            return Err(EINVAL);
        }
        Ok(b::hmm_range {
            notifier: self.sub.get(),
            notifier_seq: 0,
            start,
            end,
            // `HmmPfn` is a transparent `usize`.
            hmm_pfns: pfns.as_mut_ptr().cast(),
            default_flags,
            pfn_flags_mask: 0,
            dev_private_owner: owner.as_ptr(),
        })
    }

    /// Faults `[start, start + pfns.len() pages)` of the mirrored mm `mm`
    /// in and fills `pfns` (one per page) with what maps each page; check
    /// the walk with [`MirrorGuard::pages`]. Device-private pages of
    /// `owner` are returned as they are; others are faulted to RAM. Write
    /// access is requested if `write`. The caller must not hold the mmap
    /// lock (it would deadlock).
    ///
    /// It waits for the mm's invalidations in flight to end
    /// ([`Self::settle`]: killably, stopping for `cancel`), takes the mmap
    /// read lock killably and faults under it (the faults wait as any
    /// fault under a held mmap lock does: a swap-in, a file read). A range
    /// whose faults must be able to let go of the mmap lock (userfaultfd
    /// is armed in it), or that the plain walk failed on with `EFAULT` (a
    /// 2 MiB device folio of another device only moves home from a fault
    /// that may retry), is faulted by `hmm_range_fault_unlocked_timeout`,
    /// which lets fault handlers drop the lock, as the kernel recommends,
    /// and begins with `mmu_interval_read_begin()`, an uninterruptible
    /// wait for the invalidations of the mm.
    ///
    /// Fails with `EINVAL` for another mm or a range outside the mirror,
    /// `EFAULT` if a page cannot be faulted with that access, `EPERM` if
    /// it is not writable, `EINTR` if the task is killed, and what
    /// `cancel` stops with.
    pub(crate) fn fault<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        write: bool,
        owner: Owner,
        cancel: &Cancel<'_>,
    ) -> Result<Walk<'_, 'p>> {
        let (valid, wr) = (HMM_PFN_VALID, HMM_PFN_WRITE);
        let mut range = self.range(mm, start, pfns, valid | if write { wr } else { 0 }, owner)?;
        let mut plain = true;
        let generation = loop {
            if !plain {
                break self.fault_unlocked(&mut range, cancel)?;
            }
            let generation = self.settle(cancel)?;
            // SAFETY: the notifier is inserted (see `mm`).
            range.notifier_seq = unsafe { b::msvm_mmu_interval_seq(self.sub.get()) };
            // SAFETY: `range` describes `pfns`, which is exclusively
            // borrowed, inside the notifier's interval of `mm`, whose users
            // the borrow keeps up; the caller holds no mmap lock.
            match unsafe { b::msvm_hmm_range_fault_killable(&mut range) } {
                0 => break generation,
                r if r == -(bindings::EBUSY as i32) => cancel.check()?,
                r if r == -(bindings::EXDEV as i32) || r == -(bindings::EFAULT as i32) => {
                    plain = false;
                }
                r => return Err(Error::from_errno(r)),
            }
        };
        Ok(self.walked(start, pfns, range.notifier_seq, generation))
    }

    /// `range` faulted by `hmm_range_fault_unlocked_timeout`, for
    /// [`Self::fault`]; the generation the walk is checked against.
    fn fault_unlocked(&self, range: &mut b::hmm_range, cancel: &Cancel<'_>) -> Result<u64> {
        let retry = kernel::time::msecs_to_jiffies(RETRY_MS);
        loop {
            let generation = self.settle(cancel)?;
            // SAFETY: `range` describes pages exclusively borrowed by the
            // caller, inside the notifier's interval of its mm, whose users
            // its borrow keeps up; no mmap lock is held. The timeout bounds
            // the retries of one call: `cancel` is checked between calls.
            let r = unsafe { b::hmm_range_fault_unlocked_timeout(range, retry) };
            if r == -(bindings::EBUSY as i32) {
                cancel.check()?;
                continue;
            }
            kernel::error::to_result(r)?;
            // `mmu_interval_read_begin()` returned this period: over.
            self.inflight.settled(range.notifier_seq);
            return Ok(generation);
        }
    }

    /// Waits, killably and for `cancel`, until no invalidation of the
    /// mirror is in flight; the generation a walk begun now is checked
    /// against. It looks every jiffy. What only the end of a period tells
    /// ([`State::Lost`]: once no callback came for [`LOST_MS`]) and records
    /// that stayed while none came for [`STALE_MS`] (an end that never
    /// came) are asked of `mmu_interval_read_begin()`, which returns at
    /// once if their period is over, and else waits for it,
    /// uninterruptibly: Linux 7.3 has no other way. While callbacks come,
    /// it only looks.
    fn settle(&self, cancel: &Cancel<'_>) -> Result<u64> {
        let (lost, stale) = (
            kernel::time::msecs_to_jiffies(LOST_MS),
            kernel::time::msecs_to_jiffies(STALE_MS),
        );
        let (mut seen, mut naps) = (None, 0);
        loop {
            let wait = match self.inflight.state() {
                State::Quiet(generation) => return Ok(generation),
                State::Lost(_) => lost,
                State::Open => stale,
            };
            cancel.check()?;
            let generation = self.inflight.generation();
            if seen != Some(generation) {
                (seen, naps) = (Some(generation), 0);
            } else if naps >= wait {
                self.inflight.settled(self.read_begin());
                naps = 0;
                continue;
            }
            super::super::cancel::nap();
            naps += 1;
        }
    }

    /// Fills `pfns` with what maps each page from `start` of the mirrored
    /// mm `mm` now, faulting nothing in: a page that is not present (never
    /// touched, swapped out, a device page of another owner, a hole) gives
    /// an entry without a page. Waits for the mm's invalidations in flight
    /// as [`Self::fault`] does, and for the mmap lock killably. Fails with
    /// `EBUSY` if an invalidation came meanwhile, `EINVAL` as
    /// [`Self::fault`] does, `EFAULT` if the mm is going away, `EINTR` if
    /// the task is killed, and what `cancel` stops with. The caller must
    /// not hold the mmap lock.
    pub(crate) fn snapshot<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        owner: Owner,
        cancel: &Cancel<'_>,
    ) -> Result<Walk<'_, 'p>> {
        let generation = self.settle(cancel)?;
        self.look(mm, start, pfns, owner, (generation, true))
    }

    /// [`Self::snapshot`], but waiting for nothing: `EAGAIN` if an
    /// invalidation of the mirror is in flight, or the mmap lock is taken
    /// for writing (or a writer waits). It never waits on the process (its
    /// invalidations, a page fault stuck in user space, a writer queued
    /// behind it): for the device's fault handler, which serves every
    /// process of the device.
    pub(crate) fn snapshot_nowait<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        owner: Owner,
    ) -> Result<Walk<'_, 'p>> {
        let State::Quiet(generation) = self.inflight.state() else {
            return Err(EAGAIN);
        };
        self.look(mm, start, pfns, owner, (generation, false))
    }

    /// A walk faulting nothing, begun once no invalidation was in flight
    /// at `generation`; the mmap lock taken killably if `wait`, else only
    /// tried.
    fn look<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        owner: Owner,
        (generation, wait): (u64, bool),
    ) -> Result<Walk<'_, 'p>> {
        let mut range = self.range(mm, start, pfns, 0, owner)?;
        // SAFETY: the notifier is inserted (see `mm`).
        range.notifier_seq = unsafe { b::msvm_mmu_interval_seq(self.sub.get()) };
        if wait {
            // SAFETY: `range` describes `pfns`, which is exclusively
            // borrowed, inside the notifier's interval of `mm`, whose users
            // the borrow keeps up; the caller holds no mmap lock.
            kernel::error::to_result(unsafe { b::msvm_hmm_range_fault_killable(&mut range) })?;
        } else {
            let _lock = mm.mmap_read_trylock().ok_or(EAGAIN)?;
            // SAFETY: `range` describes `pfns`, which is exclusively
            // borrowed, inside the notifier's interval of `mm`; the mmap
            // lock is held as `hmm_range_fault` requires.
            kernel::error::to_result(unsafe { b::hmm_range_fault(&mut range) })?;
        }
        Ok(self.walked(start, pfns, range.notifier_seq, generation))
    }

    /// The walk that filled `pfns` from `start` under `seq`, begun at
    /// `generation` (its PMD offsets made right).
    fn walked<'p>(
        &self,
        start: usize,
        pfns: &'p mut [HmmPfn],
        seq: usize,
        generation: u64,
    ) -> Walk<'_, 'p> {
        fix_pmd_offsets(start, pfns);
        Walk {
            mirror: self.id(),
            _mirror: PhantomData,
            start,
            pfns,
            seq,
            generation,
        }
    }
}

/// Linux 7.3's `hmm_vma_handle_absent_pmd()` fills the entries of a
/// device-private folio mapped by a PMD from the folio's first page frame,
/// whatever the offset in the PMD the walk starts at: a walk that starts
/// inside such a block gets each page's neighbour `offset` pages back
/// (`Documentation/upstream/hmm_absent_pmd.rst`; the present-PMD case adds
/// the offset). A 2 MiB folio's frames are aligned (the buddy allocator's;
/// [`super::pagemap::Pagemap::holds_large`] for device memory), so each
/// entry of PMD order is set to its folio's first frame plus its address's
/// offset in the block: what the kernel gives when it is right, and what
/// it should have given when it is not. Pure arithmetic: no page is read.
fn fix_pmd_offsets(start: usize, pfns: &mut [HmmPfn]) {
    const PMD_ORDER: u32 = BLOCK_PAGES.trailing_zeros();
    for (i, e) in pfns.iter_mut().enumerate() {
        let Some(pfn) = e.pfn() else { continue };
        if e.map_order() != PMD_ORDER {
            continue;
        }
        let off = (start / PAGE_SIZE + i) % BLOCK_PAGES;
        let right = (pfn & !(BLOCK_PAGES - 1)) + off;
        e.0 = (e.0 & HMM_PFN_FLAGS) | right;
    }
}

// The `hmm_pfn_flags` bit masks (`unsigned long`).
const HMM_PFN_VALID: usize = b::hmm_pfn_flags_HMM_PFN_VALID;
const HMM_PFN_WRITE: usize = b::hmm_pfn_flags_HMM_PFN_WRITE;
const HMM_PFN_ERROR: usize = b::hmm_pfn_flags_HMM_PFN_ERROR;
const HMM_PFN_FLAGS: usize = b::hmm_pfn_flags_HMM_PFN_FLAGS;

/// One entry of a walk (`hmm_range_fault`'s pfn and flags). Only a walk
/// fills them; their pages are had through [`Pages`].
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct HmmPfn(usize);

impl HmmPfn {
    /// An entry naming no page, to fill a walk's array with first.
    pub(crate) const NONE: Self = Self(0);

    /// The page frame, if the entry names a page.
    pub(in crate::mm) fn pfn(self) -> Option<usize> {
        (self.0 & HMM_PFN_VALID != 0 && self.0 & HMM_PFN_ERROR == 0)
            .then_some(self.0 & !HMM_PFN_FLAGS)
    }

    /// Whether the entry is mapped writable.
    pub(crate) fn writable(self) -> bool {
        self.0 & HMM_PFN_WRITE != 0
    }

    /// Whether the walk found something that maps the page (else it is
    /// not present, and was not faulted in).
    #[allow(dead_code)] // msvm_dmirror.ko's (the glue is built into both modules).
    pub(crate) fn is_valid(self) -> bool {
        self.0 & HMM_PFN_VALID != 0
    }

    /// Whether the walk found that the page cannot be mapped (a mapping
    /// the access is not allowed on, a poisoned page).
    #[allow(dead_code)] // msvm_dmirror.ko's (the glue is built into both modules).
    pub(crate) fn is_error(self) -> bool {
        self.0 & HMM_PFN_ERROR != 0
    }

    /// The order of the CPU mapping the page is part of: 9 for a PMD, 18
    /// for a PUD (`hmm_pfn_to_map_order`).
    pub(crate) fn map_order(self) -> u32 {
        // CAST: five bits.
        ((self.0 >> b::hmm_pfn_flags_HMM_PFN_ORDER_SHIFT) & 0x1f) as u32
    }
}

/// The entries a walk of a [`Mirror`] filled, and the sequence they were
/// filled under; the entries cannot change, nor the mirror go, while this
/// lives (a sequence means nothing to another mirror, even one at the same
/// address).
pub(crate) struct Walk<'m, 'p> {
    /// The mirror's identity ([`Mirror::id`]), borrowed for `'m`.
    pub(super) mirror: usize,
    _mirror: PhantomData<&'m ()>,
    /// The address of the first entry.
    start: usize,
    pfns: &'p [HmmPfn],
    pub(super) seq: usize,
    /// The mirror's generation of invalidations when the walk began
    /// ([`Inflight`]): an invalidation since changed it.
    pub(super) generation: u64,
}

impl<'p> Walk<'_, 'p> {
    /// The address of the first entry.
    pub(crate) fn start(&self) -> usize {
        self.start
    }

    /// The entries, as found (a page in them is only had through
    /// [`MirrorGuard::pages`], or under the guard's check).
    pub(in crate::mm) fn pfns(&self) -> &'p [HmmPfn] {
        self.pfns
    }
}

#[kunit_tests(msvm_hmm_walk)]
mod tests {
    use super::*;

    /// An entry as `hmm_range_fault` fills it: `pfn`, valid, of map order
    /// `order`.
    fn entry(pfn: usize, order: u32) -> HmmPfn {
        HmmPfn(pfn | HMM_PFN_VALID | (order as usize) << b::hmm_pfn_flags_HMM_PFN_ORDER_SHIFT)
    }

    /// A walk that starts 64 pages into a device-private block mapped by a
    /// PMD gets each page's frame, not the block's first ones (what Linux
    /// 7.3 fills), and entries of other orders stay as they are.
    #[test]
    fn pmd_offsets_from_the_walks_address() {
        let order = BLOCK_PAGES.trailing_zeros();
        let head = 0x40000; // a block-aligned frame
        let start = 3 * BLOCK_PAGES * PAGE_SIZE + 64 * PAGE_SIZE;
        // The block's first frames, as the kernel gives them; a 4 KiB
        // entry at the end.
        let mut pfns = [HmmPfn::NONE; 5];
        for (i, e) in pfns.iter_mut().take(4).enumerate() {
            *e = entry(head + i, order);
        }
        pfns[4] = entry(0x1234, 0);
        fix_pmd_offsets(start, &mut pfns);
        for (i, e) in pfns.iter().take(4).enumerate() {
            assert_eq!(e.pfn(), Some(head + 64 + i));
            assert_eq!(e.map_order(), order);
        }
        assert_eq!(pfns[4].pfn(), Some(0x1234));
        // Right entries stay right.
        let before = pfns;
        fix_pmd_offsets(start, &mut pfns);
        assert!(pfns.iter().zip(before.iter()).all(|(a, b)| a.0 == b.0));
        // A walk ending in the next block's first pages.
        let start = 4 * BLOCK_PAGES * PAGE_SIZE - 2 * PAGE_SIZE;
        let mut pfns = [
            entry(head, order),
            entry(head + 1, order),
            entry(head + BLOCK_PAGES, order),
        ];
        fix_pmd_offsets(start, &mut pfns);
        assert_eq!(pfns[0].pfn(), Some(head + BLOCK_PAGES - 2));
        assert_eq!(pfns[1].pfn(), Some(head + BLOCK_PAGES - 1));
        assert_eq!(pfns[2].pfn(), Some(head + BLOCK_PAGES));
    }
}
