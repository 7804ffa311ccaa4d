// SPDX-License-Identifier: GPL-2.0

//! Page migration between system RAM and device-private memory:
//! `migrate_vma_*` (a range of a process's address space, found under its
//! mm's lock). Not `migrate_device_*` (device page frames wherever they
//! are mapped): on Linux 7.3 it holds no reference on a page's `anon_vma`
//! (`Documentation/upstream/migrate_device_anon_vma.rst`), and msvm never
//! moves a page by its frame (a device going away leaves what no mm leads
//! to as orphans: `crate::vram`).
//!
//! A migration follows three steps: collect and isolate the source pages
//! (`setup`), let the caller allocate destination pages and copy, then
//! install the destinations (`pages`) and release everything
//! (`finalize`). [`Entry`] wraps one element of the `src`/`dst` arrays.

use kernel::{
    mm::{virt::VmaRef, MmWithUser},
    num::casts::FromSafeCast,
    prelude::*,
};

use super::bindings as b;
use super::fault::{Fault, FaultPage};
use super::mmap::{ExclusiveVma, LockedVma};
use super::owner::Owner;
use super::page::{NewPage, PageRef, BLOCK_PAGES, PAGE_SIZE};

/// One source entry of a migration: a page frame number and
/// `MIGRATE_PFN_*` flags. Its page, if any, is had from the migration
/// (`src_page`), for as long as the migration holds it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Entry(u64);

impl Entry {
    /// The entry stands for a whole 2 MiB folio (or a 2 MiB hole) and the
    /// [`BLOCK_PAGES`]` - 1` entries after it are empty. Only sources of a
    /// migration set up with `large` (and device-range migrations) have such
    /// entries.
    pub(crate) fn compound(self) -> bool {
        self.0 & u64::from(b::MIGRATE_PFN_COMPOUND) != 0
    }

    /// Pages the entry stands for.
    pub(crate) fn nr_pages(self) -> usize {
        if self.compound() {
            BLOCK_PAGES
        } else {
            1
        }
    }

    /// The page frame the entry names, if any (`None` for holes and the
    /// zero page).
    fn pfn(self) -> Option<usize> {
        if self.0 & u64::from(b::MIGRATE_PFN_VALID) == 0 {
            return None;
        }
        // CAST: `u64` fits in `usize` on 64-bit kernels.
        Some((self.0 >> b::MIGRATE_PFN_SHIFT) as usize)
    }

    /// The core will migrate this page (collected and isolated).
    pub(crate) fn migrate(self) -> bool {
        self.0 & u64::from(b::MIGRATE_PFN_MIGRATE) != 0
    }

    /// The source was mapped writable.
    pub(crate) fn write(self) -> bool {
        self.0 & u64::from(b::MIGRATE_PFN_WRITE) != 0
    }
}

/// The destination entry of `dst` for source `src`, writable if `write`:
/// `EINVAL` if `dst` is a large folio and `src` is not a whole one, or if
/// `src` is a whole 2 MiB hole and `dst` is small (a whole folio source
/// may take a large destination, or a small one, when the core splits it).
fn dst_entry(src: Entry, dst: &NewPage, write: bool) -> Result<u64> {
    let large = dst.page().folio_order() != 0;
    if large && (!src.compound() || dst.page().folio_order() != super::page::large_order()) {
        return Err(EINVAL);
    }
    // A whole 2 MiB hole takes a whole folio: split into small pages, the
    // core would want a destination in each of its 512 slots.
    if !large && src.compound() && src.pfn().is_none() {
        return Err(EINVAL);
    }
    let mut v = (u64::from_safe_cast(dst.page().pfn()) << b::MIGRATE_PFN_SHIFT)
        | u64::from(b::MIGRATE_PFN_VALID);
    if write {
        v |= u64::from(b::MIGRATE_PFN_WRITE);
    }
    if large {
        v |= u64::from(b::MIGRATE_PFN_COMPOUND);
    }
    Ok(v)
}

/// Hands `dst` to destination slot `slot` for source `src`: `EINVAL` out
/// of range or for a mismatched folio ([`dst_entry`]), `EBUSY` if the slot
/// is taken or the destinations were installed already (`done`). On an
/// error `dst` is released.
fn set_dst_in(slot: Option<&mut u64>, src: Entry, dst: NewPage, write: bool, done: bool) -> Result {
    let slot = slot.ok_or(EINVAL)?;
    if done || *slot != 0 {
        return Err(EBUSY);
    }
    *slot = dst_entry(src, &dst, write)?;
    // The migration now owns the page (its entry is in `slot`): finalize
    // unlocks and releases it.
    let _ = dst.into_raw();
    Ok(())
}

/// How many mappings the device-private folio that the PMD of `vma` at
/// `addr` maps whole has; 0 if the PMD maps no device-private folio whole.
///
/// Such a folio may be collected whole (a [`VmaMigration`] set up with
/// `large`) only if it is mapped once, and only with the mmap lock held for
/// writing (`super::mmap`): while that migration runs, its PMD is a
/// migration entry, and Linux 7.3 unmapping one (an exit, munmap,
/// `MADV_DONTNEED`, the OOM reaper) drops a reference and a mapping the
/// entry does not hold, so the folio is freed under the migration.
/// Collected in small pages, the core splits the folio first, and every
/// mm's PMD becomes page-table entries.
pub(crate) fn device_folio_mapcount(vma: LockedVma<'_>, addr: usize) -> usize {
    // SAFETY: `vma` is a valid VMA whose mm's mmap lock is held (the
    // `LockedVma`), as the walk of its page tables needs; any address is
    // accepted.
    let n = unsafe { b::msvm_pmd_device_folio_mapcount(vma.as_ptr(), addr) };
    usize::try_from(n).unwrap_or(0)
}

/// Whether `vma` maps secretmem (`memfd_secret()`): its pages are not in
/// the kernel's direct map, so neither a migration nor the engine may touch
/// them (GUP refuses such VMAs too).
pub(crate) fn vma_is_secretmem(vma: &VmaRef) -> bool {
    // SAFETY: `vma` is a valid VMA whose mm's lock the caller holds (the
    // borrow of the `VmaRef` proves it), so its file stays.
    unsafe { b::msvm_vma_is_secretmem(vma.as_ptr()) }
}

/// Whether `vma` maps private anonymous memory that nothing may write
/// (neither `VM_WRITE` nor `VM_SHARED`, no `vm_ops`): its pages change only
/// through a change of its page tables that an interval notifier sees
/// (`mprotect`, `munmap`, a copy on write), but for a debugger's
/// `FOLL_FORCE` write into a page it already owns.
pub(crate) fn vma_is_read_only_anon(vma: &VmaRef) -> bool {
    // SAFETY: `vma` is a valid VMA whose mm's lock the caller holds (the
    // borrow of the `VmaRef` proves it); `vm_ops` is only read.
    let anon = unsafe { (*vma.as_ptr()).vm_ops.is_null() };
    anon && vma.flags() & (kernel::mm::virt::flags::WRITE | kernel::mm::virt::flags::SHARED) == 0
}

/// Which source pages a [`VmaMigration`] collects.
#[derive(Clone, Copy)]
pub(crate) enum Select {
    /// Pages in system RAM (and unpopulated ones), and the owner's own
    /// device pages (so that the caller can tell them apart from busy
    /// pages; it leaves their destination empty and they stay): towards the
    /// device.
    System,
    /// Device-private pages of the given owner: towards system RAM.
    DevicePrivate,
}

/// A migration of `[start, end)` of one VMA, set up and not yet finalized.
///
/// # Invariants
///
/// `args` was accepted by `migrate_vma_setup` and points at `src` and `dst`
/// (boxed, so they do not move); it is finalized exactly once, in `drop`.
/// The mmap lock of `vma`'s mm is held for `'a` (a [`LockedVma`] gave it).
pub(crate) struct VmaMigration<'a> {
    args: b::migrate_vma,
    src: KBox<[u64; BLOCK_PAGES]>,
    dst: KBox<[u64; BLOCK_PAGES]>,
    npages: usize,
    pages_done: bool,
    vma: &'a VmaRef,
}

impl<'a> VmaMigration<'a> {
    /// [`VmaMigration::setup`] of the faulting page of `fault` alone (a
    /// fault on a page-table entry, in `migrate_to_ram`), the
    /// device-private pages of `owner` collected.
    pub(crate) fn of_faulting_page(fault: &'a Fault<'_>, owner: Owner) -> Result<Self> {
        let addr = fault.address() & !(PAGE_SIZE - 1);
        Self::setup(
            fault.vma(),
            addr,
            addr + PAGE_SIZE,
            Select::DevicePrivate,
            None,
            owner,
            Some(fault.page()),
        )
    }

    /// Collects and unmaps the pages of `[start, end)` in `vma` (page aligned,
    /// at most [`BLOCK_PAGES`] pages, inside the VMA). `owner` is the
    /// device-private owner: the pages to collect for
    /// [`Select::DevicePrivate`], and the owner whose device mappings the
    /// invalidation may skip. `fault_page` is the faulting page when called
    /// from `migrate_to_ram`. With `large`, the same VMA held exclusively
    /// (`EINVAL` for another), a whole 2 MiB folio (or hole) in a 2 MiB
    /// aligned range is collected as one [`Entry::compound`] entry instead
    /// of being split, unless it is a device folio other mms map too: that
    /// may turn a device-private folio's PMD into a migration entry, which
    /// must not meet a zap (see [`device_folio_mapcount`]).
    pub(crate) fn setup(
        vma: LockedVma<'a>,
        start: usize,
        end: usize,
        select: Select,
        large: Option<&ExclusiveVma<'_>>,
        owner: Owner,
        fault_page: Option<FaultPage<'a>>,
    ) -> Result<Self> {
        let npages = end.saturating_sub(start) / PAGE_SIZE;
        if large.is_some_and(|x| !core::ptr::eq(x.as_ptr(), vma.as_ptr())) {
            return Err(EINVAL);
        }
        // A device folio that other mms map too is collected in small
        // pages (the core splits it through page-table entries): whole,
        // their PMDs would become migration entries that no lock of ours
        // keeps zaps from. The write lock keeps the count stable.
        let large = large.is_some() && device_folio_mapcount(vma, start) <= 1;
        if start % PAGE_SIZE != 0
            || end <= start
            || npages > BLOCK_PAGES
            || start < vma.start()
            || end > vma.end()
        {
            return Err(EINVAL);
        }
        let mut src = KBox::new([0u64; BLOCK_PAGES], GFP_KERNEL)?;
        let mut dst = KBox::new([0u64; BLOCK_PAGES], GFP_KERNEL)?;
        let flags = match select {
            Select::System => {
                b::msvm_migrate_select_MSVM_SELECT_SYSTEM
                    | b::msvm_migrate_select_MSVM_SELECT_DEVICE_PRIVATE
            }
            Select::DevicePrivate => b::msvm_migrate_select_MSVM_SELECT_DEVICE_PRIVATE,
        } | if large {
            b::msvm_migrate_select_MSVM_SELECT_COMPOUND
        } else {
            0
        };
        let mut args = b::migrate_vma {
            vma: vma.as_ptr(),
            dst: dst.as_mut_ptr().cast(),
            src: src.as_mut_ptr().cast(),
            cpages: 0,
            npages: 0,
            start,
            end,
            pgmap_owner: owner.as_ptr(),
            flags: usize::from_safe_cast(flags),
            fault_page: fault_page.map_or(core::ptr::null_mut(), |p| p.page().as_ptr()),
        };
        // SAFETY: `args` describes a range inside `vma`, whose mm's mmap
        // lock is held for `'a` (the `LockedVma`, as the collection's page
        // walk asserts), with `src`/`dst` arrays of `npages` entries.
        kernel::error::to_result(unsafe { b::migrate_vma_setup(&mut args) })?;
        // INVARIANT: set up just above; `src`/`dst` are boxed.
        Ok(Self {
            args,
            src,
            dst,
            npages,
            pages_done: false,
            vma: vma.vma(),
        })
    }

    /// The mm of the VMA the range is in.
    pub(crate) fn mm(&self) -> &MmWithUser {
        self.vma.mm()
    }

    /// Number of pages in the range.
    pub(crate) fn npages(&self) -> usize {
        self.npages
    }

    /// The first address of the range.
    #[allow(dead_code)] // msvm_dmirror.ko's (the glue is built into both modules).
    pub(crate) fn start(&self) -> usize {
        self.args.start
    }

    /// Source entry `i`.
    pub(crate) fn src(&self, i: usize) -> Entry {
        Entry(self.src[i])
    }

    /// How many small pages (not parts of a large folio) were collected:
    /// at most the destinations a step allocates one by one.
    pub(crate) fn small_collected(&self) -> usize {
        (0..self.npages)
            .filter(|&i| self.src(i).migrate() && !self.src(i).compound())
            .count()
    }

    /// The page of source entry `i`, if any: locked and referenced by the
    /// migration until it finalizes, which the borrow bounds.
    pub(crate) fn src_page(&self, i: usize) -> Option<PageRef<'_>> {
        let pfn = self.src(i).pfn()?;
        // SAFETY: a valid source entry names a page that the migration
        // holds (locked, referenced: the core clears the entries it lets
        // go) until `drop` finalizes it.
        Some(unsafe { PageRef::from_pfn(pfn) })
    }

    /// The page of destination entry `i`, if one was given: held by the
    /// migration until it finalizes, which the borrow bounds.
    pub(crate) fn dst_page(&self, i: usize) -> Option<PageRef<'_>> {
        let pfn = Entry(*self.dst[..self.npages].get(i)?).pfn()?;
        // SAFETY: a destination the migration owns (locked, referenced:
        // `set_dst`) until `drop` finalizes it.
        Some(unsafe { PageRef::from_pfn(pfn) })
    }

    /// Destination entry `i` (empty if none was given).
    pub(crate) fn dst(&self, i: usize) -> Entry {
        Entry(self.dst[..self.npages].get(i).copied().unwrap_or(0))
    }

    /// Whether the destinations are installed ([`Self::pages`]): each
    /// source still marked [`Entry::migrate`] is then mapped by its
    /// destination, at its address, until the migration finalizes and
    /// after (until the mm changes it).
    pub(crate) fn installed(&self) -> bool {
        self.pages_done
    }

    /// Gives destination entry `i` the page `dst`, writable if `write`: the
    /// migration owns it from now on (see [`set_dst_in`] for the errors).
    pub(crate) fn set_dst(&mut self, i: usize, dst: NewPage, write: bool) -> Result {
        let src = Entry(*self.src.get(i).ok_or(EINVAL)?);
        let slot = self.dst[..self.npages].get_mut(i);
        set_dst_in(slot, src, dst, write, self.pages_done)
    }

    /// Installs the destination pages. Afterwards, [`Self::src`] tells which
    /// pages really moved ([`Entry::migrate`] still set).
    pub(crate) fn pages(&mut self) {
        // Once: the core would charge and map its destinations again.
        if self.pages_done {
            return;
        }
        // SAFETY: set up (invariant), destinations filled in by the caller.
        unsafe { b::migrate_vma_pages(&mut self.args) };
        self.pages_done = true;
    }
}

/// Before finalizing a migration whose destinations were never installed
/// (`pages()` not called: an early return), clears `MIGRATE_PFN_MIGRATE`
/// from every source, so that finalize restores each source and frees each
/// destination instead of treating filled entries as migrated.
fn cancel(src: &mut [u64]) {
    for s in src {
        *s &= !u64::from(b::MIGRATE_PFN_MIGRATE);
    }
}

impl Drop for VmaMigration<'_> {
    fn drop(&mut self) {
        if !self.pages_done {
            cancel(&mut self.src[..]);
        }
        // SAFETY: set up and not finalized yet (invariant); without
        // `pages()`, every source is unmarked above, so finalize restores
        // the sources and frees the destinations.
        unsafe { b::migrate_vma_finalize(&mut self.args) };
    }
}

#[kunit_tests(msvm_migrate)]
mod tests {
    use super::super::dma::SysPage;
    use super::super::kunit_mm::{check, TestMapping};
    use super::super::mmap::{MmapRead, Wait};
    use super::super::numa::Home;
    use super::super::page::How;
    use super::*;

    /// Four pages, the first and third written with their own byte.
    fn four_pages() -> Result<TestMapping> {
        let m = TestMapping::new(4 * PAGE_SIZE)?;
        for i in [0u8, 2] {
            m.fill(usize::from(i) * PAGE_SIZE, PAGE_SIZE, 0x10 + i)?;
        }
        Ok(m)
    }

    /// A migration collects the pages there are and the holes between,
    /// and one never installed puts every page back as it was.
    #[test]
    fn collects_and_cancels() -> Result {
        let m = four_pages()?;
        {
            let mmap = MmapRead::lock(m.mm(), Wait::Always)?;
            let vma = mmap.vma_lookup(m.addr()).ok_or(ENOENT)?;
            let end = m.addr() + 4 * PAGE_SIZE;
            let mig =
                VmaMigration::setup(vma, m.addr(), end, Select::System, None, Owner::NONE, None)?;
            check(mig.npages() == 4)?;
            check(core::ptr::eq(mig.mm(), m.mm()))?;
            for i in 0..4 {
                let e = mig.src(i);
                check(e.migrate() && !e.compound() && e.nr_pages() == 1)?;
                // Holes (never touched) have no page; written pages do.
                let page = mig.src_page(i);
                check(page.is_some() == (i % 2 == 0))?;
                check(page.is_none_or(|p| p.is_anon() && !p.is_device_private()))?;
                check(mig.dst_page(i).is_none())?;
            }
            check(mig.small_collected() == 4)?;
            check(!mig.installed())?;
            // Past the VMA: refused.
            check(
                VmaMigration::setup(
                    vma,
                    m.addr(),
                    end + PAGE_SIZE,
                    Select::System,
                    None,
                    Owner::NONE,
                    None,
                )
                .err()
                    == Some(EINVAL),
            )?;
        }
        for i in 0..4u8 {
            let want = if i % 2 == 0 { 0x10 + i } else { 0 };
            check(m.holds(usize::from(i) * PAGE_SIZE, PAGE_SIZE, want)?)?;
        }
        Ok(())
    }

    /// Destinations given are installed: the process reads what was put
    /// in them (a hole filled, a page replaced), and each slot takes one
    /// page, before `pages` only.
    #[test]
    fn installs_destinations() -> Result {
        let m = four_pages()?;
        {
            let mmap = MmapRead::lock(m.mm(), Wait::Always)?;
            let vma = mmap.vma_lookup(m.addr()).ok_or(ENOENT)?;
            let end = m.addr() + 4 * PAGE_SIZE;
            let mut mig =
                VmaMigration::setup(vma, m.addr(), end, Select::System, None, Owner::NONE, None)?;
            let mut data = KVec::from_elem(0u8, PAGE_SIZE, GFP_KERNEL)?;
            for i in [1u8, 2] {
                let at = Some((vma.vma(), m.addr() + usize::from(i) * PAGE_SIZE));
                let dst = NewPage::home(at, Home::LOCAL, How::Migrate).ok_or(ENOMEM)?;
                data.fill(0xa0 + i);
                SysPage::new(dst.page()).ok_or(EINVAL)?.write(0, &data);
                let i = usize::from(i);
                mig.set_dst(i, dst, true)?;
                check(mig.dst_page(i).is_some())?;
            }
            let again = NewPage::home(None, Home::LOCAL, How::Migrate).ok_or(ENOMEM)?;
            check(mig.set_dst(1, again, true) == Err(EBUSY))?;
            mig.pages();
            check(mig.installed())?;
            check(mig.src(1).migrate() && mig.src(2).migrate())?;
            let late = NewPage::home(None, Home::LOCAL, How::Migrate).ok_or(ENOMEM)?;
            check(mig.set_dst(3, late, true) == Err(EBUSY))?;
        }
        for (i, want) in [(0usize, 0x10u8), (1, 0xa1), (2, 0xa2), (3, 0)] {
            check(m.holds(i * PAGE_SIZE, PAGE_SIZE, want)?)?;
        }
        Ok(())
    }
}
