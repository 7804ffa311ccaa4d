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
//! # Lock order
//!
//! Callers hold the mmap read lock; the VRAM pool's locks nest inside (see
//! `src/vram.rs`).

use kernel::{
    mm::{
        virt::{flags, VmaRef},
        MmWithUser, MmapReadGuard,
    },
    prelude::*,
    sync::atomic::Relaxed,
};

use crate::device::PoolRef;
use crate::engine::{fault_in, VmMirror};
use crate::mm::hmm::Mirror;
use crate::mm::{
    migrate::{Entry, Select, VmaMigration, MAX_PAGES},
    page::NewPage,
    pagemap::{Fault, FaultError, PAGE_SIZE},
};
use crate::placement::{Access, Location, Span};
use crate::topology::{MAX_DEVICES, TOPOLOGY};
use crate::vram::VramPool;

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
/// to `pool`'s VRAM or back to system RAM.
pub(crate) fn migrate_range(
    pool: &VramPool<'_>,
    mm: &MmWithUser,
    start: usize,
    len: usize,
    dir: Direction,
) -> Result<Outcome> {
    let end = start.checked_add(len).ok_or(EINVAL)?;
    let mut out = Outcome::default();
    let guard = mm.mmap_read_lock();
    // Check the whole range first: an error moves nothing.
    check_vmas(&guard, start, end, false)?;
    let mut addr = start;
    while addr < end {
        let vma = guard.vma_lookup(addr).ok_or(EFAULT)?;
        let step_end = end
            .min(vma.end())
            .min((addr / (MAX_PAGES * PAGE_SIZE) + 1) * MAX_PAGES * PAGE_SIZE);
        let n = ((step_end - addr) / PAGE_SIZE) as u64;
        let step = if vma.flags() & UNMIGRATABLE != 0 {
            // hugetlb and special (I/O, PFN, mixed) mappings: the core
            // migrates none of their pages; none of them is on a device.
            Outcome::stayed(dir, n)
        } else {
            let r = match dir {
                Direction::ToDevice => step_to_device(pool, vma, addr, step_end),
                Direction::ToSystem => step_to_system(pool, vma, addr, step_end),
            };
            match r {
                // `migrate_vma_setup` refused the VMA for a reason of its
                // own (DAX, say): its pages stay, like those above.
                Err(e) if e == EINVAL => Outcome::stayed(dir, n),
                r => r?,
            }
        };
        out.moved += step.moved;
        out.already += step.already;
        out.busy += step.busy;
        out.no_vram += step.no_vram;
        addr = step_end;
    }
    Ok(out)
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
    mirror: &Mirror<VmMirror>,
    target: &Target,
    start: usize,
    len: usize,
) -> Result<Outcome> {
    match *target {
        Target::System => home(mm, start, len),
        Target::Here => to_device(|| Ok(Held::Here(here)), mm, mirror, start, len),
        Target::Peer(i) => to_device(
            || PoolRef::get_in_group(i, here.index()).map(Held::Peer),
            mm,
            mirror,
            start,
            len,
        ),
    }
}

fn to_device<'p, 'a: 'p>(
    hold: impl Fn() -> Result<Held<'p, 'a>>,
    mm: &MmWithUser,
    mirror: &Mirror<VmMirror>,
    start: usize,
    len: usize,
) -> Result<Outcome> {
    let (out, owner) = {
        let pool = hold()?;
        (
            migrate_range(&pool, mm, start, len, Direction::ToDevice)?,
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
    fault_in(mm, mirror, owner, start, len);
    let again = migrate_range(&*hold()?, mm, start, len, Direction::ToDevice)?;
    Ok(Outcome {
        moved: out.moved + again.moved,
        already: again.already - out.moved.min(again.already),
        busy: again.busy,
        no_vram: again.no_vram,
    })
}

/// Brings the pages of every device home, one owner group at a time (a
/// migration collects only the device pages of one owner), through the
/// first member of each group that is not going away.
fn home(mm: &MmWithUser, start: usize, len: usize) -> Result<Outcome> {
    let mut pools: [Option<PoolRef>; MAX_DEVICES] = [const { None }; MAX_DEVICES];
    {
        let topo = TOPOLOGY.lock();
        let mut covered = [false; MAX_DEVICES];
        for (i, slot) in pools.iter_mut().enumerate() {
            let Some(g) = topo.group(i) else {
                continue;
            };
            if covered[g % MAX_DEVICES] {
                continue;
            }
            // A device going away sends its pages home itself.
            if let Ok(p) = PoolRef::get_locked(&topo, i) {
                covered[g % MAX_DEVICES] = true;
                *slot = Some(p);
            }
        }
    }
    let total = (len / PAGE_SIZE) as u64;
    let (mut moved, mut busy) = (0, 0);
    let mut any = false;
    for pool in pools.iter().flatten() {
        let o = migrate_range(pool, mm, start, len, Direction::ToSystem)?;
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
    mirror: &Mirror<VmMirror>,
    pieces: &[Span],
    in_place: bool,
) -> Result<u64> {
    let mut moved = 0;
    for p in pieces {
        if in_place || p.placement.access == Access::InPlace {
            continue;
        }
        let start = p.start & !(PAGE_SIZE - 1);
        let end = p.end.next_multiple_of(PAGE_SIZE);
        let target = Target::for_job(here, p.placement.preferred);
        let out = match prefetch(here, mm, mirror, &target, start, end - start) {
            // The preferred peer went away meanwhile: system RAM.
            Err(e) if target != Target::System && (e == ENOENT || e == ENOLINK) => {
                prefetch(here, mm, mirror, &Target::System, start, end - start)
            }
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
/// readable, and writable if `write` (`EACCES`).
pub(crate) fn check_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
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
        addr = vma.end();
    }
    Ok(())
}

/// Installs the destinations given for the entries marked in `filled`, and
/// counts each of them as moved or, if the core backed out, busy.
fn install(mig: &mut VmaMigration<'_>, filled: &[bool], out: &mut Outcome) {
    mig.pages();
    for (i, _) in filled.iter().enumerate().filter(|(_, f)| **f) {
        if mig.src(i).migrate() {
            out.moved += 1;
        } else {
            out.busy += 1;
        }
    }
}

fn step_to_device(pool: &VramPool<'_>, vma: &VmaRef, start: usize, end: usize) -> Result<Outcome> {
    let mut mig = VmaMigration::setup(vma, start, end, Select::System, pool.owner(), None)?;
    let mut out = Outcome::default();
    let n = mig.npages();
    let mut filled = [false; MAX_PAGES];
    let mut want = 0;
    // Collected pages are in RAM (or unpopulated), or ours already; the
    // rest could not be isolated.
    let mut ours = [false; MAX_PAGES];
    for (i, own) in ours.iter_mut().enumerate().take(n) {
        let src = mig.src(i);
        if !src.migrate() {
            out.busy += 1;
        } else if src.page().is_some_and(|p| pool.offset_of(p).is_some()) {
            *own = true;
            out.already += 1;
        } else {
            want += 1;
        }
    }
    // Pages of the batch not handed to the migration go back on drop.
    let mut batch = pool.alloc(want)?;
    let mut stage = KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?;
    let mut from_peer = [false; MAX_PAGES];
    for (i, own) in ours.iter().enumerate().take(n) {
        let src = mig.src(i);
        if !src.migrate() || *own {
            continue;
        }
        let Some((dpage, offset)) = batch.peek() else {
            out.no_vram += 1;
            continue;
        };
        match src.page() {
            Some(spage) => match pool.locate(spage) {
                // A page of a peer of our owner group: device to device,
                // BAR to BAR over P2P, no system page involved.
                Some((peer, poff)) => {
                    pool.bar()
                        .copy_from_bar(offset, peer.bar(), poff, &mut stage)?;
                    from_peer[i] = true;
                }
                None => pool.bar().copy_from_page(offset, spage)?,
            },
            // An untouched (or zero-page) address.
            None => pool.bar().clear_page(offset)?,
        }
        batch.take();
        mig.set_dst(i, Entry::to(dpage, src.write()));
        filled[i] = true;
    }
    install(&mut mig, &filled[..n], &mut out);
    let peers = (0..n)
        .filter(|&i| from_peer[i] && mig.src(i).migrate())
        .count() as u64;
    pool.stats.from_peer.add(peers, Relaxed);
    pool.stats.to_device.add(out.moved, Relaxed);
    pool.stats.no_vram.add(out.no_vram, Relaxed);
    Ok(out)
}

fn step_to_system(pool: &VramPool<'_>, vma: &VmaRef, start: usize, end: usize) -> Result<Outcome> {
    let mut mig = VmaMigration::setup(vma, start, end, Select::DevicePrivate, pool.owner(), None)?;
    let mut out = Outcome::default();
    let n = mig.npages();
    let mut filled = [false; MAX_PAGES];
    for (i, fill) in filled.iter_mut().enumerate().take(n) {
        let src = mig.src(i);
        // The pages of this device and of its owner group's peers are
        // collected; the rest is in RAM (or on a device we do not reach).
        let Some((owner, offset)) = src
            .page()
            .filter(|_| src.migrate())
            .and_then(|p| pool.locate(p))
        else {
            out.already += 1;
            continue;
        };
        let Some(dst) = NewPage::for_vma(vma, start + i * PAGE_SIZE) else {
            out.busy += 1;
            continue;
        };
        owner.bar().copy_to_page(offset, dst.page())?;
        mig.set_dst(i, Entry::to(dst.into_migration(), src.write()));
        *fill = true;
    }
    install(&mut mig, &filled[..n], &mut out);
    // Credit each page to the device it left (this one or a group peer).
    for i in (0..n).filter(|&i| filled[i] && mig.src(i).migrate()) {
        if let Some((owner, _)) = mig.src(i).page().and_then(|p| pool.locate(p)) {
            owner.stats.to_system.add(1, Relaxed);
        }
    }
    Ok(out)
}

/// Bytes the CPU fault path brings home at once: the 64 KiB block around
/// the faulting address (within its VMA).
const FAULT_WINDOW: usize = 64 * 1024;

/// `migrate_to_ram` of a device page of `pool`: brings home this device's
/// pages in the [`FAULT_WINDOW`] around the fault.
pub(crate) fn fault_to_ram(pool: &VramPool<'_>, fault: &Fault<'_>) -> Result<(), FaultError> {
    let vma = fault.vma();
    let start = (fault.address() & !(FAULT_WINDOW - 1)).max(vma.start());
    let end = (start + FAULT_WINDOW).min(vma.end());
    let mut mig = VmaMigration::setup(
        vma,
        start,
        end,
        Select::DevicePrivate,
        pool.owner(),
        Some(fault.page()),
    )
    .map_err(|_| FaultError::Sigbus)?;
    let mut moved = 0;
    for i in 0..mig.npages() {
        let src = mig.src(i);
        // Only this device's pages are collected; one not collected is
        // being migrated by someone else (the fault is then retried).
        let Some(offset) = src
            .page()
            .filter(|_| src.migrate())
            .and_then(|p| pool.offset_of(p))
        else {
            continue;
        };
        let addr = start + i * PAGE_SIZE;
        let Some(dst) = NewPage::for_vma(vma, addr) else {
            // The faulting page must come home; its neighbours may stay.
            if addr == fault.address() & !(PAGE_SIZE - 1) {
                return Err(FaultError::Oom);
            }
            continue;
        };
        pool.bar()
            .copy_to_page(offset, dst.page())
            .map_err(|_| FaultError::Sigbus)?;
        mig.set_dst(i, Entry::to(dst.into_migration(), src.write()));
        moved += 1;
    }
    mig.pages();
    drop(mig);
    pool.stats.cpu_faults.add(1, Relaxed);
    pool.stats.to_system.add(moved, Relaxed);
    Ok(())
}
