// SPDX-License-Identifier: GPL-2.0

//! The migration planner: moves a range of a process's address space to a
//! device's VRAM or back, one page table (2 MiB, [`MAX_PAGES`]) at a time,
//! with one VRAM allocation and one copy pass per step; and brings a page
//! home when the CPU touches it (`migrate_to_ram`).
//!
//! Fault-back window: the 64 KiB block around the faulting address (within
//! its VMA), 16 pages per fault: a CPU walking device data sequentially
//! takes one fault per block instead of one per page, and a stray access
//! moves at most 64 KiB. The explicit MIGRATE remains the fast path.
//!
//! A request works in steps of at most one page table: each step takes the
//! mmap read lock and lets it go, so the process's mmap writers (and
//! `/proc` readers) wait one step at most; between steps a fatal signal or
//! the device going away stops the request ([`Cancel`]).
//!
//! A step towards a device may run twice: the pool grows (creates a chunk)
//! only between two tries, with no mmap lock held (see [`device_step`]).
//!
//! # Lock order
//!
//! Each step holds the mmap read lock (the write lock for a whole 2 MiB
//! block); the VRAM pool's table and free maps nest inside, its growth
//! never does (see `src/vram.rs`).

use kernel::{
    mm::{
        virt::{flags, VmaRef},
        MmWithUser, MmapReadGuard,
    },
    prelude::*,
    sync::atomic::Relaxed,
};

use crate::mm::hmm::{HmmPfn, Mirror};
use crate::mm::{
    cancel::Cancel,
    fault::{Fault, FaultError, FaultRelock, Relock},
    migrate::{device_folio_mapcount, vma_is_secretmem, Select, VmaMigration, MAX_PAGES},
    mmap::{ExclusiveVma, MmapWriteGuard},
    page::{large_order, NewPage, PageRef},
    pagemap::PAGE_SIZE,
};
use crate::placement::{Access, Location, Span};
use crate::registry::{self, PoolRef};
use crate::sysmem::large_home;
use crate::topology::MAX_DEVICES;
use crate::vram::{Batch, PoolOps, VramPool};

/// What one MIGRATE did.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Pages that now live where they were asked to.
    pub(crate) moved: u64,
    /// Pages that were already there.
    pub(crate) already: u64,
    /// Pages that could not move: the core would not isolate them (pinned,
    /// shared, file-backed, under writeback, ...).
    pub(crate) busy: u64,
    /// Pages that could not move for lack of VRAM.
    pub(crate) no_vram: u64,
}

impl Outcome {
    /// The outcome of a second pass over a range after `first`: the pages
    /// `first` moved (which the second found there already) count as
    /// moved; every page still has one counter.
    fn after(self, first: &Self) -> Self {
        let again = first.moved.min(self.already);
        Self {
            moved: self.moved + again,
            already: self.already - again,
            busy: self.busy,
            no_vram: self.no_vram,
        }
    }

    /// `n` pages of a VMA the core does not migrate: busy towards a device,
    /// already home towards system RAM (none of them can be on a device).
    fn stayed(dir: Direction, n: u64) -> Self {
        match dir {
            Direction::ToDevice => Self {
                busy: n,
                ..Self::default()
            },
            Direction::ToSystem => Self {
                already: n,
                ..Self::default()
            },
        }
    }
}

/// Where to move.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    ToDevice,
    ToSystem,
}

/// Moves `[start, start + len)` of `mm` (page aligned, checked by the caller)
/// to `pool`'s VRAM or back to system RAM, one step at a time, until done or
/// `cancel` says stop.
pub(crate) fn migrate_range(
    pool: &VramPool<'_>,
    mm: &MmWithUser,
    start: usize,
    len: usize,
    dir: Direction,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let end = start.checked_add(len).ok_or(EINVAL)?;
    // Check the whole range first: a range with a hole or without access
    // moves nothing. (A mapping changed between steps fails the step.)
    check_vmas(&mm.mmap_read_lock(), start, end, false)?;
    steps(pool, mm, start, end, dir, cancel)
}

/// The pools' way up to the migrations ([`PoolOps`]), installed by
/// `crate::device` when it makes a pool.
pub(crate) struct Migrations;

impl PoolOps for Migrations {
    fn fault_to_ram(&self, pool: &VramPool<'_>, fault: Fault<'_>) -> Result<(), FaultError> {
        fault_to_ram(pool, fault)
    }

    fn evict_range(
        &self,
        pool: &VramPool<'_>,
        mm: &MmWithUser,
        start: usize,
        len: usize,
        cancel: &Cancel<'_>,
    ) -> Result {
        evict_range(pool, mm, start, len, cancel).map(drop)
    }
}

/// Brings the pages of `pool`'s owner group in `[start, start + len)` of
/// `mm` home as [`migrate_range`] does, without checking access first (a
/// device going away takes back even what `PROT_NONE` hides), stopping at
/// the first hole.
fn evict_range(
    pool: &VramPool<'_>,
    mm: &MmWithUser,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let end = start.checked_add(len).ok_or(EINVAL)?;
    steps(pool, mm, start, end, Direction::ToSystem, cancel)
}

/// The steps of [`migrate_range`].
fn steps(
    pool: &VramPool<'_>,
    mm: &MmWithUser,
    start: usize,
    end: usize,
    dir: Direction,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let mut out = Outcome::default();
    let mut addr = start;
    while addr < end {
        cancel.check()?;
        let (step, step_end) = if dir == Direction::ToDevice {
            device_step(pool, mm, addr, end)?
        } else {
            let (step, step_end) = locked_step(pool, mm, addr, end, dir, false)?;
            (step.ok_or(EAGAIN)?, step_end)
        };
        out.moved += step.moved;
        out.already += step.already;
        out.busy += step.busy;
        out.no_vram += step.no_vram;
        addr = step_end;
    }
    Ok(out)
}

/// A step towards the device ([`locked_step`]), with the chunks it needs:
/// the pool grows ([`VramPool::grow`]) only between two tries of the step,
/// with no mmap lock held. Before the first try, if the pool has no free
/// page at all; after it, if it found no free 2 MiB block for a whole folio
/// (it moved nothing then) or no VRAM for some pages: the step runs once
/// more, over the same range.
fn device_step(
    pool: &VramPool<'_>,
    mm: &MmWithUser,
    addr: usize,
    end: usize,
) -> Result<(Outcome, usize)> {
    let dir = Direction::ToDevice;
    pool.grow(1, false);
    let (step, step_end) = match locked_step(pool, mm, addr, end, dir, true)? {
        (None, _) => {
            pool.grow(LARGE_SIZE / PAGE_SIZE, true);
            let (again, again_end) = locked_step(pool, mm, addr, end, dir, false)?;
            (again.ok_or(EAGAIN)?, again_end)
        }
        (Some(first), first_end)
            if first.no_vram > 0 && pool.grow(first.no_vram as usize, false) =>
        {
            let (again, again_end) = locked_step(pool, mm, addr, first_end, dir, false)?;
            (again.ok_or(EAGAIN)?.after(&first), again_end)
        }
        (Some(first), first_end) => (first, first_end),
    };
    pool.stats.no_vram.add(step.no_vram, Relaxed);
    Ok((step, step_end))
}

/// The step of `[addr, end)` of `mm` ([`one_step`]) under the mmap lock it
/// needs: held for writing for a whole 2 MiB block, for reading otherwise.
/// `None` (nothing moved) if `may_grow` and a whole 2 MiB folio found no
/// free block in a pool that can grow one.
fn locked_step(
    pool: &VramPool<'_>,
    mm: &MmWithUser,
    addr: usize,
    end: usize,
    dir: Direction,
    may_grow: bool,
) -> Result<(Option<Outcome>, usize)> {
    let guard = mm.mmap_read_lock();
    let vma = guard.vma_lookup(addr).ok_or(EFAULT)?;
    if whole_block(vma, addr, end) {
        // A step that may collect a folio whole may meet a device-private
        // one (or one that becomes so meanwhile): only with every zap of
        // this mm excluded (see `device_folio_mapcount`).
        drop(guard);
        let excl = MmapWriteGuard::lock_killable(mm)?;
        let vma = excl.vma_lookup(addr).ok_or(EFAULT)?;
        one_step(pool, &vma, addr, end, dir, Some(&vma), may_grow)
    } else {
        one_step(pool, vma, addr, end, dir, None, may_grow)
    }
}

/// The step of `[addr, end)` in `vma` (with its mm's mmap lock held; `excl`
/// is `vma` held exclusively, if it is): up to the end of the page table of
/// `addr`, of the VMA or of the range. Only an exclusive step collects
/// folios whole. Returns what it did (`None`: see [`locked_step`]) and
/// where it ended.
fn one_step(
    pool: &VramPool<'_>,
    vma: &VmaRef,
    addr: usize,
    end: usize,
    dir: Direction,
    excl: Option<&ExclusiveVma<'_>>,
    may_grow: bool,
) -> Result<(Option<Outcome>, usize)> {
    let step_end = end.min(vma.end()).min((addr / LARGE_SIZE + 1) * LARGE_SIZE);
    let n = ((step_end - addr) / PAGE_SIZE) as u64;
    if vma.flags() & UNMIGRATABLE != 0 || vma_is_secretmem(vma) {
        // hugetlb and special (I/O, PFN, mixed) mappings: the core
        // migrates none of their pages; none of them is on a device.
        // secretmem: the kernel must not even read its pages.
        return Ok((Some(Outcome::stayed(dir, n)), step_end));
    }
    let large = excl.filter(|_| large_step(vma, addr, step_end));
    // Only a move to a device waits for the pool to grow a block.
    let grow = may_grow && dir == Direction::ToDevice;
    let r = match dir {
        Direction::ToDevice => step(pool, vma, addr, step_end, large, grow, fill_to_device),
        Direction::ToSystem => step(pool, vma, addr, step_end, large, grow, fill_to_system),
    };
    match r {
        // `migrate_vma_setup` refused the VMA for a reason of its own
        // (DAX, say): its pages stay, like those above.
        Err(e) if e == EINVAL => Ok((Some(Outcome::stayed(dir, n)), step_end)),
        r => Ok((r?, step_end)),
    }
}

/// Whether the step from `addr` (towards `end`) in `vma` covers a whole
/// 2 MiB block that may move whole (see [`large_step`], which checks the
/// rest under the lock the step runs with): such a step runs with the mmap
/// lock held for writing.
fn whole_block(vma: &VmaRef, addr: usize, end: usize) -> bool {
    large_order() != 0
        && addr % LARGE_SIZE == 0
        && end.min(vma.end()) >= addr + LARGE_SIZE
        && vma.flags() & flags::NOHUGEPAGE == 0
}

/// Where a prefetch or a job moves pages, resolved for the device that
/// asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// System RAM.
    System,
    /// The device that asks.
    Here,
    /// The peer of this index, in the asking device's owner group (checked
    /// again each time its memory is taken, see [`PoolRef::get_in_group`]).
    Peer(usize),
}

impl Target {
    /// Resolves `loc` for device `here` strictly, as PREFETCH and SET_ATTR
    /// do: `ENOENT` if no device has the index (or it is going away),
    /// `ENOLINK` if `here` does not work on its memory in place (another
    /// owner group).
    pub(crate) fn resolve(here: &VramPool<'_>, loc: Location) -> Result<Self> {
        match loc {
            Location::Default => Ok(Self::Here),
            Location::System => Ok(Self::System),
            Location::Device(i) if i == here.index() => Ok(Self::Here),
            Location::Device(i) => {
                PoolRef::get_in_group(i, here.index())?;
                Ok(Self::Peer(i))
            }
        }
    }

    /// Resolves `loc` for a job: a preferred peer that went away or is out
    /// of reach now means system RAM.
    fn for_job(here: &VramPool<'_>, loc: Location) -> Self {
        Self::resolve(here, loc).unwrap_or(Self::System)
    }
}

/// A device's memory held for a migration into it: the asking device's own
/// (alive for its ioctl), or a peer's, counted.
enum Held<'p, 'a> {
    Here(&'p VramPool<'a>),
    Peer(PoolRef),
}

impl<'a> core::ops::Deref for Held<'_, 'a> {
    type Target = VramPool<'a>;

    fn deref(&self) -> &VramPool<'a> {
        match self {
            Held::Here(p) => p,
            Held::Peer(r) => r,
        }
    }
}

/// Moves `[start, start + len)` of `mm` (page aligned, checked by the
/// caller) to `target`, for device `here`, whose VM mirrors `mm` through
/// `mirror`.
///
/// To a device: pages in RAM, pages of the device's owner group (straight
/// over P2P) and, once faulted home through the mirror, pages of devices out
/// of its reach. To system RAM: the pages of every device, group by group.
/// A peer's memory is held only while pages move into it, never while
/// pages are faulted (a fault may wait on user space: userfaultfd).
pub(crate) fn prefetch(
    here: &VramPool<'_>,
    mm: &MmWithUser,
    mirror: &Mirror,
    target: &Target,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    match *target {
        Target::System => home(mm, start, len, cancel),
        Target::Here => to_device(|| Ok(Held::Here(here)), mm, mirror, start, len, cancel),
        Target::Peer(i) => to_device(
            || PoolRef::get_in_group(i, here.index()).map(Held::Peer),
            mm,
            mirror,
            start,
            len,
            cancel,
        ),
    }
}

fn to_device<'p, 'a: 'p>(
    hold: impl Fn() -> Result<Held<'p, 'a>>,
    mm: &MmWithUser,
    mirror: &Mirror,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let (out, owner) = {
        let pool = hold()?;
        (
            migrate_range(&pool, mm, start, len, Direction::ToDevice, cancel)?,
            pool.owner(),
        )
    };
    if out.busy == 0 {
        return Ok(out);
    }
    // Pages on a device out of this one's P2P reach are not collected:
    // fault them home through the VM's mirror (their device migrates them
    // to RAM), then move what is now movable. The owner is a static group
    // token: it outlives the pool.
    fault_in(mm, mirror, owner, start, len, cancel)?;
    let again = migrate_range(&*hold()?, mm, start, len, Direction::ToDevice, cancel)?;
    Ok(again.after(&out))
}

/// Faults `[start, start + len)` of `mm` in for reading through `mirror`
/// with device-private owner `owner`: pages on devices outside the owner's
/// group are migrated home by their device. Best effort: an error (the
/// mapping changed meanwhile) leaves the rest to the caller's next step;
/// only `cancel` stops it. `mm` is the mirrored mm.
fn fault_in(
    mm: &MmWithUser,
    mirror: &Mirror,
    owner: *const core::ffi::c_void,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result {
    let mut pfns = KVec::from_elem(HmmPfn::NONE, MAX_PAGES, GFP_KERNEL)?;
    let end = start + len;
    let mut addr = start;
    while addr < end {
        cancel.check()?;
        let n = ((end - addr) / PAGE_SIZE).min(MAX_PAGES);
        let _ = mirror.fault(mm, addr, &mut pfns[..n], false, owner);
        addr += n * PAGE_SIZE;
    }
    Ok(())
}

/// Brings the pages of every device home, one owner group at a time (a
/// migration collects only the device pages of one owner), through the
/// first member of each group that is not going away; groups holding no
/// page are skipped.
pub(crate) fn home(
    mm: &MmWithUser,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let mut pools: [Option<PoolRef>; MAX_DEVICES] = [const { None }; MAX_DEVICES];
    {
        let topo = registry::devices();
        // The first member of each group that is not going away (a device
        // going away sends its pages home itself) goes through the range,
        // unless no member of its group holds a page: that pass would
        // collect nothing, at the cost of a walk and an invalidation per
        // step.
        let mut first = [false; MAX_DEVICES];
        let mut holds = [false; MAX_DEVICES];
        for (i, slot) in pools.iter_mut().enumerate() {
            let (Some(g), Ok(p)) = (topo.group(i), PoolRef::get_locked(&topo, i)) else {
                continue;
            };
            let g = g % MAX_DEVICES;
            holds[g] |= p.resident() > 0;
            if !first[g] {
                first[g] = true;
                *slot = Some(p);
            }
        }
        for (i, slot) in pools.iter_mut().enumerate() {
            if topo.group(i).is_some_and(|g| !holds[g % MAX_DEVICES]) {
                *slot = None;
            }
        }
    }
    let total = (len / PAGE_SIZE) as u64;
    let (mut moved, mut busy) = (0, 0);
    let mut any = false;
    for pool in pools.iter().flatten() {
        let o = migrate_range(pool, mm, start, len, Direction::ToSystem, cancel)?;
        moved += o.moved;
        busy += o.busy;
        any = true;
    }
    if !any {
        // No device: nothing can be anywhere but in RAM; still check the
        // range as a migration would.
        check_vmas(&mm.mmap_read_lock(), start, start + len, false)?;
    }
    Ok(Outcome {
        moved,
        already: total.saturating_sub(moved + busy),
        busy,
        no_vram: 0,
    })
}

/// The placement pass of a job on device `here`: moves each piece of the
/// job's ranges whose access policy is "migrate" to its preferred location
/// (unless the job asked to run in place). Returns the pages moved.
pub(crate) fn place(
    here: &VramPool<'_>,
    mm: &MmWithUser,
    mirror: &Mirror,
    pieces: &[Span],
    in_place: bool,
    cancel: &Cancel<'_>,
) -> Result<u64> {
    let mut moved = 0;
    for p in pieces {
        if in_place || p.placement.access == Access::InPlace {
            continue;
        }
        let start = p.start & !(PAGE_SIZE - 1);
        let end = p.end.next_multiple_of(PAGE_SIZE);
        let target = Target::for_job(here, p.placement.preferred);
        let out = match prefetch(here, mm, mirror, &target, start, end - start, cancel) {
            // The preferred peer went away meanwhile: system RAM.
            Err(e) if target != Target::System && (e == ENOENT || e == ENOLINK) => prefetch(
                here,
                mm,
                mirror,
                &Target::System,
                start,
                end - start,
                cancel,
            ),
            r => r,
        }?;
        moved += out.moved;
    }
    Ok(moved)
}

/// VMAs `migrate_vma_setup` refuses: hugetlb and `VM_SPECIAL` mappings.
const UNMIGRATABLE: kernel::mm::virt::vm_flags_t =
    flags::HUGETLB | flags::IO | flags::PFNMAP | flags::MIXEDMAP | flags::DONTEXPAND;

/// Checks that `[start, end)` is mapped without holes (`EFAULT`) and
/// readable, and writable if `write` (`EACCES`). Migrations count the pages
/// of VMAs they cannot move as busy; the engine refuses them instead (see
/// [`check_job_vmas`]).
pub(crate) fn check_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
) -> Result {
    walk_vmas(guard, start, end, write, false)
}

/// [`check_vmas`] for a job, which also refuses (`EFAULT`) the VMAs that
/// GUP refuses: I/O and PFN mappings, and secretmem, whose pages the
/// kernel must never touch.
pub(crate) fn check_job_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
) -> Result {
    walk_vmas(guard, start, end, write, true)
}

/// The walk of [`check_vmas`]; `device` refuses what no device may reach.
fn walk_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
    device: bool,
) -> Result {
    let mut addr = start;
    while addr < end {
        let vma = guard.vma_lookup(addr).ok_or(EFAULT)?;
        let need = if write {
            flags::READ | flags::WRITE
        } else {
            flags::READ
        };
        if vma.flags() & need != need {
            return Err(EACCES);
        }
        if device && (vma.flags() & (flags::IO | flags::PFNMAP) != 0 || vma_is_secretmem(vma)) {
            return Err(EFAULT);
        }
        addr = vma.end();
    }
    Ok(())
}

/// Installs the destinations given for the entries marked in `filled` (the
/// pages each entry stands for; 0: not filled), and counts their pages as
/// moved or, if the core backed out, busy.
fn install(mig: &mut VmaMigration<'_>, filled: &[u16], out: &mut Outcome) {
    mig.pages();
    for (i, &nr) in filled.iter().enumerate().filter(|(_, nr)| **nr > 0) {
        if mig.src(i).migrate() {
            out.moved += u64::from(nr);
        } else {
            out.busy += u64::from(nr);
        }
    }
}

/// Bytes of a large folio (2 MiB: one PMD).
const LARGE_SIZE: usize = MAX_PAGES * PAGE_SIZE;

/// Whether `[start, end)` of `vma` is one whole 2 MiB block whose folio (or
/// hole) a migration may move whole: not in a VMA the process asked to keep
/// free of huge pages (`MADV_NOHUGEPAGE`), and not a device folio that a
/// fork relative maps too (see [`device_folio_mapcount`]: such a folio
/// moves in small pages, the core splitting it first). Callers hold the
/// mmap lock for writing: a folio collected whole may be device-private
/// (see [`migrate_range`]).
fn large_step(vma: &VmaRef, start: usize, end: usize) -> bool {
    end - start == LARGE_SIZE
        && whole_block(vma, start, end)
        && device_folio_mapcount(vma, start) <= 1
}

/// Whether source page `page` of a migration towards `pool` may be copied
/// there: private anonymous memory in RAM, or a device page of `pool`'s
/// owner group. The core collects file and shmem pages too, then refuses
/// to move them to device-private memory after the copy; secretmem pages
/// must not even be read.
fn movable(pool: &VramPool<'_>, page: PageRef<'_>) -> bool {
    page.is_anon() || pool.locate(page).is_some()
}

/// Copies the `nr` pages of the source folio from `src` (a system folio,
/// a peer's device folio, or nothing: a hole) to BAR offset `offset` of
/// `pool`. Returns whether they came from a peer's VRAM (over P2P).
fn copy_in(
    pool: &VramPool<'_>,
    src: Option<PageRef<'_>>,
    nr: usize,
    offset: usize,
) -> Result<bool> {
    let mut peer = false;
    let mut stage = None;
    for k in 0..nr {
        let off = offset + k * PAGE_SIZE;
        let Some(spage) = src else {
            // An untouched (or zero-page) address.
            pool.bar().clear_page(off)?;
            continue;
        };
        let spage = spage.nth(k).ok_or(EINVAL)?;
        match pool.locate(spage) {
            // A page of a peer of our owner group: device to device, BAR
            // to BAR over P2P, no system page involved.
            Some((p, poff)) => {
                if stage.is_none() {
                    stage = Some(KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?);
                }
                if let Some(buf) = stage.as_mut() {
                    pool.bar().copy_from_bar(off, p.bar(), poff, buf)?;
                }
                peer = true;
            }
            None => pool.bar().copy_from_page(off, spage)?,
        }
    }
    Ok(peer)
}

/// One migration step by `fill`: a whole 2 MiB folio (or hole) moves
/// whole where the step allows; if `fill` finds no 2 MiB destination for
/// it, the step returns `None` if `grow` and the pool can grow a block (see
/// [`device_step`]), and otherwise runs again in small pages (the core
/// splits the folio when it collects it).
#[allow(clippy::too_many_arguments)]
fn step(
    pool: &VramPool<'_>,
    vma: &VmaRef,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
    grow: bool,
    fill: impl Fn(
        &VramPool<'_>,
        &VmaRef,
        usize,
        usize,
        Option<&ExclusiveVma<'_>>,
    ) -> Result<Option<Outcome>>,
) -> Result<Option<Outcome>> {
    if let Some(out) = fill(pool, vma, start, end, large)? {
        return Ok(Some(out));
    }
    if grow && pool.can_grow() {
        return Ok(None);
    }
    pool.stats.large_fallback.add(1, Relaxed);
    Ok(Some(fill(pool, vma, start, end, None)?.ok_or(EAGAIN)?))
}

/// One step towards the device. With `large`, a whole 2 MiB folio (or hole)
/// moves into a whole free 2 MiB block; if there is none, nothing moves and
/// this returns `None`.
fn fill_to_device(
    pool: &VramPool<'_>,
    vma: &VmaRef,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
) -> Result<Option<Outcome>> {
    let mut mig = VmaMigration::setup(vma, start, end, Select::System, large, pool.owner(), None)?;
    let mut out = Outcome::default();
    let n = mig.npages();
    // Collected pages are in RAM (or unpopulated), or ours already; the
    // rest could not be isolated. A large entry stands for `MAX_PAGES`
    // pages, and the entries after it are empty.
    // Entries that get no destination: already ours, or busy.
    let mut skip = [false; MAX_PAGES];
    let (mut want, mut block) = (0, None);
    let mut i = 0;
    while i < n {
        let src = mig.src(i);
        let nr = src.nr_pages().min(n - i);
        if !src.migrate() || mig.src_page(i).is_some_and(|p| !movable(pool, p)) {
            // Not collected, or not memory a device takes: the core has
            // not agreed to move it, so nothing of it is read.
            out.busy += nr as u64;
            skip[i] = true;
        } else if mig.src_page(i).is_some_and(|p| pool.offset_of(p).is_some()) {
            skip[i] = true;
            out.already += nr as u64;
        } else if src.compound() {
            match pool.alloc_large()? {
                Some(b) => block = Some(b),
                // Dropping `mig` restores the source.
                None => return Ok(None),
            }
        } else {
            want += 1;
        }
        i += nr;
    }
    // Pages of the batch not handed to the migration go back on drop.
    let mut batch = pool.alloc(want)?;
    let mut filled = [0u16; MAX_PAGES];
    let mut from_peer = [false; MAX_PAGES];
    // The destination of the whole folio, if any (the step's first entry).
    let mut large_dst = None;
    let mut i = 0;
    while i < n {
        let (at, src) = (i, mig.src(i));
        let nr = src.nr_pages().min(n - i);
        i += nr;
        if skip[at] {
            continue;
        }
        let dst = if src.compound() {
            block.as_mut()
        } else {
            Some(&mut batch)
        };
        let Some((dpage, offset)) = dst.and_then(Batch::take) else {
            out.no_vram += nr as u64;
            continue;
        };
        from_peer[at] = copy_in(pool, mig.src_page(at), nr, offset)?;
        mig.set_dst(at, dpage, src.write())?;
        filled[at] = nr as u16;
        if src.compound() {
            large_dst = Some(at);
        }
    }
    install(&mut mig, &filled[..n], &mut out);
    let moved = |i: usize| filled[i] > 0 && mig.src(i).migrate();
    if let Some(at) = large_dst.filter(|&at| moved(at)) {
        if let Some(page) = mig.dst_page(at) {
            // Where eviction will find it (see `VramPool::home_large_folios`).
            pool.note_large_home(page, vma.mm(), start + at * PAGE_SIZE);
        }
    }
    let peers: u64 = (0..n)
        .filter(|&i| from_peer[i] && moved(i))
        .map(|i| u64::from(filled[i]))
        .sum();
    let large_moved = (0..n).filter(|&i| filled[i] > 1 && moved(i)).count() as u64;
    pool.stats.from_peer.add(peers, Relaxed);
    pool.stats.large_to_device.add(large_moved, Relaxed);
    pool.stats.to_device.add(out.moved, Relaxed);
    Ok(Some(out))
}

/// One step towards system RAM. With `large`, a whole 2 MiB device folio
/// moves into a 2 MiB system folio; if none can be had, nothing moves and
/// this returns `None`.
fn fill_to_system(
    pool: &VramPool<'_>,
    vma: &VmaRef,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
) -> Result<Option<Outcome>> {
    let mut mig = VmaMigration::setup(
        vma,
        start,
        end,
        Select::DevicePrivate,
        large,
        pool.owner(),
        None,
    )?;
    let mut out = Outcome::default();
    let n = mig.npages();
    let mut filled = [0u16; MAX_PAGES];
    let mut i = 0;
    while i < n {
        let (at, src) = (i, mig.src(i));
        let nr = src.nr_pages().min(n - i);
        i += nr;
        // The pages of this device and of its owner group's peers are
        // collected; the rest is in RAM (or on a device we do not reach).
        let Some((owner, offset)) = mig
            .src_page(at)
            .filter(|_| src.migrate())
            .and_then(|p| pool.locate(p))
        else {
            out.already += nr as u64;
            continue;
        };
        let addr = start + at * PAGE_SIZE;
        let dst = if src.compound() {
            match large_home(vma, addr) {
                Some(d) => d,
                // Dropping `mig` restores the sources.
                None => return Ok(None),
            }
        } else {
            let Some(d) = NewPage::for_vma(vma, addr) else {
                out.busy += 1;
                continue;
            };
            d
        };
        owner.bar().copy_to_folio(offset, dst.page(), nr)?;
        mig.set_dst(at, dst, src.write())?;
        filled[at] = nr as u16;
    }
    install(&mut mig, &filled[..n], &mut out);
    // Credit each page to the device it left (this one or a group peer).
    for i in (0..n).filter(|&i| filled[i] > 0 && mig.src(i).migrate()) {
        if let Some((owner, _)) = mig.src_page(i).and_then(|p| pool.locate(p)) {
            owner.stats.to_system.add(u64::from(filled[i]), Relaxed);
            if filled[i] > 1 {
                owner.stats.large_to_system.add(1, Relaxed);
            }
        }
    }
    Ok(Some(out))
}

/// Bytes the CPU fault path brings home at once: the 64 KiB block around
/// the faulting address (within its VMA); a 2 MiB device folio mapped
/// whole comes home whole.
const FAULT_WINDOW: usize = 64 * 1024;

/// `migrate_to_ram` of a device page of `pool`: brings home this device's
/// pages in the [`FAULT_WINDOW`] around the fault.
///
/// A fault on a 2 MiB folio mapped whole (a PMD fault) must exclude every
/// zap of the mm while the folio is collected whole or split (see
/// [`device_folio_mapcount`]), so it trades the fault's lock for the mmap
/// lock held for writing, brings the folio home whole into a 2 MiB system
/// folio, and makes the CPU fault again. If no 2 MiB folio is free, or if
/// a fork relative maps the folio too, it splits the folio and its
/// mappings instead, moving nothing: the CPU's retry of the access then
/// faults on a small page, whose window comes home in 4 KiB pages. A fault
/// that may not let go of its lock (no `FAULT_FLAG_ALLOW_RETRY`: some
/// kernel callers of `hmm_range_fault` or GUP) gets `SIGBUS` on such a
/// folio.
fn fault_to_ram(pool: &VramPool<'_>, fault: Fault<'_>) -> Result<(), FaultError> {
    if fault.is_pmd() {
        return pmd_fault_to_ram(pool, fault);
    }
    let vma = fault.vma();
    let start = (fault.address() & !(FAULT_WINDOW - 1)).max(vma.start());
    let end = (start + FAULT_WINDOW).min(vma.end());
    fault_range(pool, vma, fault.page(), fault.address(), start, end, None).map(|_| ())
}

/// [`fault_to_ram`] of a PMD fault.
fn pmd_fault_to_ram(pool: &VramPool<'_>, fault: Fault<'_>) -> Result<(), FaultError> {
    let address = fault.address();
    // The core maps a large folio whole only where its 2 MiB block lies
    // inside the VMA.
    let large_start = address & !(LARGE_SIZE - 1);
    let excl = match fault.relock_exclusive() {
        Relock::Exclusive(x) => x,
        Relock::Retry => return Err(FaultError::Retry),
        Relock::Unsupported => {
            kernel::pr_warn_once!(
                "msvm: a fault that cannot retry hit a 2 MiB device folio: SIGBUS\n"
            );
            return Err(FaultError::Sigbus);
        }
    };
    match pmd_fault_exclusive(pool, &excl, address, large_start) {
        // Done, or nothing to do: the retry finds what is there now.
        Ok(()) | Err(FaultError::Retry) => Err(FaultError::Retry),
        Err(e) => Err(excl.fail(e)),
    }
}

/// The work of [`pmd_fault_to_ram`] under `excl`: brings the 2 MiB folio at
/// `large_start` home whole, or splits it.
fn pmd_fault_exclusive(
    pool: &VramPool<'_>,
    excl: &FaultRelock<'_>,
    address: usize,
    large_start: usize,
) -> Result<(), FaultError> {
    // The VMA and the PMD may have changed while the fault waited: look
    // again (the fault's folio stays referenced meanwhile).
    let Some(vma) = excl.vma_lookup(large_start) else {
        return Err(FaultError::Retry);
    };
    if large_start < vma.start() || large_start + LARGE_SIZE > vma.end() {
        return Err(FaultError::Retry);
    }
    match device_folio_mapcount(&vma, large_start) {
        // No device folio mapped whole there any more.
        0 => return Err(FaultError::Retry),
        1 => {
            let end = large_start + LARGE_SIZE;
            if fault_range(
                pool,
                &vma,
                excl.page(),
                address,
                large_start,
                end,
                Some(&vma),
            )? {
                return Ok(());
            }
        }
        _ => {}
    }
    pool.stats.large_fallback.add(1, Relaxed);
    excl.split_whole_folio(large_start, pool.owner());
    Ok(())
}

/// Brings this device's pages of `[start, end)` of `vma` home for the
/// fault on `fault_page` at `address`; with `large`, a 2 MiB device folio
/// comes home whole in a 2 MiB folio if one is free (else nothing moves).
/// Returns whether the faulting page came home.
fn fault_range(
    pool: &VramPool<'_>,
    vma: &VmaRef,
    fault_page: PageRef<'_>,
    address: usize,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
) -> Result<bool, FaultError> {
    let mut mig = VmaMigration::setup(
        vma,
        start,
        end,
        Select::DevicePrivate,
        large,
        pool.owner(),
        Some(fault_page),
    )
    .map_err(|_| FaultError::Sigbus)?;
    let fault_at = (address - start) / PAGE_SIZE;
    let n = mig.npages();
    let mut filled = [0u16; MAX_PAGES];
    let mut i = 0;
    while i < n {
        let (at, src) = (i, mig.src(i));
        let nr = src.nr_pages().min(n - i);
        i += nr;
        // Only this device's pages are collected; one not collected is
        // being migrated by someone else (the fault is then retried).
        let Some(offset) = mig
            .src_page(at)
            .filter(|_| src.migrate())
            .and_then(|p| pool.offset_of(p))
        else {
            continue;
        };
        let addr = start + at * PAGE_SIZE;
        let large_dst = if src.compound() {
            large_home(vma, addr)
        } else {
            None
        };
        if let Some(dst) = large_dst {
            pool.bar()
                .copy_to_folio(offset, dst.page(), nr)
                .map_err(|_| FaultError::Sigbus)?;
            mig.set_dst(at, dst, src.write())
                .map_err(|_| FaultError::Sigbus)?;
            filled[at] = nr as u16;
            continue;
        }
        if nr > 1 {
            // No 2 MiB folio: nothing moves (the caller splits the folio).
            continue;
        }
        let Some(dst) = NewPage::for_vma(vma, addr) else {
            // The faulting page must come home; its neighbours may stay.
            if at == fault_at {
                return Err(FaultError::Oom);
            }
            continue;
        };
        pool.bar()
            .copy_to_page(offset, dst.page())
            .map_err(|_| FaultError::Sigbus)?;
        mig.set_dst(at, dst, src.write())
            .map_err(|_| FaultError::Sigbus)?;
        filled[at] = 1;
    }
    mig.pages();
    let (mut moved, mut folios, mut home) = (0, 0, false);
    for j in (0..n).filter(|&j| filled[j] > 0 && mig.src(j).migrate()) {
        moved += u64::from(filled[j]);
        folios += u64::from(filled[j] > 1);
        home |= (j..j + usize::from(filled[j])).contains(&fault_at);
    }
    drop(mig);
    if large.is_some() && !home {
        // The window will count the fault.
        pool.stats.to_system.add(moved, Relaxed);
        return Ok(false);
    }
    pool.stats.cpu_faults.add(1, Relaxed);
    pool.stats.to_system.add(moved, Relaxed);
    pool.stats.large_to_system.add(folios, Relaxed);
    Ok(true)
}
