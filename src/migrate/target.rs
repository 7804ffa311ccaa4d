// SPDX-License-Identifier: GPL-2.0

//! Where a request moves pages: to system RAM (every owner group's pages),
//! to this device or a peer (pages of devices out of reach faulted to
//! system RAM first), and the placement pass of a job.

use kernel::mm::MmWithUser;
use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::Relaxed;

use crate::access;
use crate::mm::cancel::Cancel;
use crate::mm::devtables::DevMirror;
use crate::mm::hmm::HmmPfn;
use crate::mm::numa::Home;
use crate::mm::owner::Owner;
use crate::mm::page::{BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::PAGE_SIZE;
use crate::placement::{Access, Location, Span};
use crate::process::Process;
use crate::registry;
use crate::registry::PoolRef;
use crate::thrash::{self, Place};
use crate::topology::MAX_DEVICES;
use crate::vram::{Epoch, Intent, Use, VramPool};

use super::{check_vmas, migrate_range, Dest, Outcome};

/// Where a prefetch or a job moves pages, resolved for the device that
/// asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// System RAM.
    System,
    /// The device that asks.
    Here,
    /// The peer of this index, in the asking device's owner group (checked
    /// again each time its memory is taken, see [`crate::registry::PoolRef::get_in_group`]).
    Peer(usize),
}

impl Target {
    /// Resolves `loc` for device `here` strictly, as PREFETCH and SET_ATTR
    /// do: `ENOENT` if no device has the index (or it is going away),
    /// `ENOLINK` if `here` does not work on its memory in place (another
    /// owner group).
    pub(crate) fn resolve(here: &VramPool, loc: Location) -> Result<Self> {
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

    /// Where thrashing detection records pages sent here by device `here`.
    fn place(&self, here: &VramPool) -> Place {
        match *self {
            Target::System => Place::System,
            Target::Here => Place::Device(here.index()),
            Target::Peer(i) => Place::Device(i),
        }
    }

    /// Resolves `loc` for a job: a preferred peer that went away or is out
    /// of reach now means system RAM.
    fn for_job(here: &VramPool, loc: Location) -> Self {
        Self::resolve(here, loc).unwrap_or(Self::System)
    }
}

/// A device's memory held for a migration into it: the asking device's own
/// (alive for its ioctl), or a peer's, counted.
enum Held<'p> {
    Here(&'p VramPool),
    Peer(PoolRef),
}

impl Held<'_> {
    /// Whether the device is going away (a peer waits for this user then):
    /// the work on its memory stops.
    fn withdrawn(&self) -> bool {
        match self {
            Held::Here(_) => false,
            Held::Peer(r) => r.withdrawn(),
        }
    }

    /// A migration into this memory: stops when the ioctl does, or when
    /// the device is going away (`ENOENT`, as for a peer already gone).
    fn migrate(
        &self,
        mm: &MmWithUser,
        start: usize,
        len: usize,
        u: Use,
        cancel: &Cancel<'_>,
    ) -> Result<Outcome> {
        let gone = || self.withdrawn();
        let cancel = cancel.watching(&gone);
        match migrate_range(self, mm, start, len, Dest::Device(u), &cancel) {
            // The peer is going away: as if it were gone already (see
            // `Target::resolve`; a job's placement then uses system RAM).
            Err(e) if e == ENODEV && self.withdrawn() => Err(ENOENT),
            r => r,
        }
    }
}

impl core::ops::Deref for Held<'_> {
    type Target = VramPool;

    fn deref(&self) -> &VramPool {
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
/// over P2P) and, once faulted to system RAM through the mirror, pages of
/// devices out of its reach. To system RAM: the pages of every device, group
/// by group. A peer's memory is held only while pages move into it, never
/// while pages are faulted (a fault may wait on user space: userfaultfd).
/// `u` is the request the pages move for.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prefetch(
    here: &VramPool,
    mm: &MmWithUser,
    mirror: &DevMirror,
    target: &Target,
    start: usize,
    len: usize,
    u: Use,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let out = match *target {
        Target::System => to_system(mm, start, len, cancel),
        Target::Here => to_device(|| Ok(Held::Here(here)), mm, mirror, start, len, u, cancel),
        Target::Peer(i) => to_device(
            || PoolRef::get_in_group(i, here.index()).map(Held::Peer),
            mm,
            mirror,
            start,
            len,
            u,
            cancel,
        ),
    }?;
    if u.intent == Intent::Explicit {
        if let Some(p) = crate::process::of(mm) {
            thrash::placed_explicitly(&p, start, start + len, target.place(here));
        }
    }
    Ok(out)
}

fn to_device<'p>(
    hold: impl Fn() -> Result<Held<'p>>,
    mm: &MmWithUser,
    mirror: &DevMirror,
    start: usize,
    len: usize,
    u: Use,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let (out, owner) = {
        let pool = hold()?;
        (pool.migrate(mm, start, len, u, cancel)?, pool.owner())
    };
    if out.busy == 0 {
        return Ok(out);
    }
    // Pages on a device out of this one's P2P reach are not collected: fault
    // them through the VM's mirror (their device migrates them to system
    // RAM), then move what is now movable. The owner is a static group token:
    // it outlives the pool.
    fault_in(mm, mirror, owner, start, len, cancel)?;
    let again = hold()?.migrate(mm, start, len, u, cancel)?;
    Ok(again.after(&out))
}

/// Faults `[start, start + len)` of `mm` in for reading through `mirror` with
/// device-private owner `owner`: pages on devices outside the owner's group
/// are migrated to system RAM by their device. Best effort: an error (the
/// mapping changed meanwhile) leaves the rest to the caller's next step; only
/// `cancel` stops it. `mm` is the mirrored mm.
fn fault_in(
    mm: &MmWithUser,
    mirror: &DevMirror,
    owner: Owner,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result {
    let mut pfns = KVec::from_elem(HmmPfn::NONE, BLOCK_PAGES, GFP_KERNEL)?;
    let end = start + len;
    let mut addr = start;
    while addr < end {
        cancel.check()?;
        let n = ((end - addr) / PAGE_SIZE).min(BLOCK_PAGES);
        let _ = mirror.fault(mm, addr, &mut pfns[..n], false, owner, cancel);
        addr += n * PAGE_SIZE;
    }
    Ok(())
}

/// Moves the pages of every device to system RAM, one owner group at a time
/// (a migration collects only the device pages of one owner), through the
/// first member of each group that is not going away (the next one if it
/// goes away meanwhile); groups holding no page are skipped.
pub(crate) fn to_system(
    mm: &MmWithUser,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    // Each device's group, and the groups any member of which holds a page
    // (a pass of a group that holds none would collect nothing, at the cost
    // of a walk and an invalidation per step).
    let mut group_of = [None; MAX_DEVICES];
    let mut holds = [false; MAX_DEVICES];
    {
        let topo = registry::devices();
        for (i, g) in group_of.iter_mut().enumerate() {
            let (Some(grp), Ok(p)) = (topo.group(i), PoolRef::get_locked(&topo, i)) else {
                continue;
            };
            *g = Some(grp % MAX_DEVICES);
            holds[grp % MAX_DEVICES] |= p.resident() > 0;
        }
    }
    let total = u64::from_safe_cast(len / PAGE_SIZE);
    let (mut moved, mut busy, mut folios) = (0, 0, 0);
    let mut any = false;
    for g in (0..MAX_DEVICES).filter(|&g| holds[g]) {
        // One member of the group goes through the range (a migration
        // collects the pages of the whole group): the first that is not
        // going away. One that goes away meanwhile (it waits for this
        // user) is let go at once, and the next member starts again.
        for i in (0..MAX_DEVICES).filter(|&i| group_of[i] == Some(g)) {
            let pool = {
                let topo = registry::devices();
                match PoolRef::get_locked(&topo, i) {
                    Ok(p) if topo.group(i).map(|x| x % MAX_DEVICES) == Some(g) => p,
                    _ => continue,
                }
            };
            let gone = || pool.withdrawn();
            // A MIGRATE: on the calling CPU's node, unless a NUMA policy
            // decides.
            let dest = Dest::System(Home::LOCAL);
            let o = match migrate_range(&pool, mm, start, len, dest, &cancel.watching(&gone)) {
                Err(e) if e == ENODEV && pool.withdrawn() => continue,
                o => o?,
            };
            moved += o.moved;
            busy += o.busy;
            folios += o.folios;
            any = true;
            break;
        }
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
        limited: 0,
        folios,
        refused_block: false,
    })
}

/// What a job's placement pass learnt of the 2 MiB block it looked at last,
/// which the next piece, or the job's other range, may start in: each
/// question is asked once per block and job (taking a due count clears it;
/// asking thrashing detection twice would count a move avoided twice).
#[derive(Default)]
pub(crate) struct Memo {
    block: Option<usize>,
    /// Whether its access count was due (asked for a job in place).
    due: Option<bool>,
    /// Whether thrashing detection keeps it where it is.
    stays: Option<bool>,
}

/// The placement pass of a job on device `here`, in request `epoch`: moves
/// each piece of the job's ranges whose access policy is "migrate" to its
/// preferred location, but leaves where they are the 2 MiB blocks that
/// thrashing detection pins ([`crate::thrash`]; not for a range with the
/// detection off, whose moves it neither asks about nor records). A job
/// that asked to run in place moves only the blocks of such pieces whose
/// access counters say this device keeps using them where they are
/// ([`crate::access`]), to this device, and only where the range prefers no
/// other place and has its counters on. `memo` is the job's, for all its
/// ranges. Returns the pages moved.
#[allow(clippy::too_many_arguments)]
pub(crate) fn place(
    here: &VramPool,
    (mm, process): (&MmWithUser, &Process),
    mirror: &DevMirror,
    pieces: &[Span],
    in_place: bool,
    epoch: Epoch,
    memo: &mut Memo,
    cancel: &Cancel<'_>,
) -> Result<u64> {
    let u = Use {
        epoch,
        intent: Intent::OnAccess,
    };
    let detect = thrash::enabled();
    let counters = access::enabled();
    let mut moved = 0;
    for p in pieces {
        // Read-mostly pages stay where they are: jobs read replicas.
        if p.placement.access == Access::InPlace || p.placement.replicated() {
            continue;
        }
        // In place, unless the access counters move blocks here (where the
        // range prefers no other place).
        let counted = in_place;
        if counted && !(counters && p.placement.counted_for(here.index())) {
            continue;
        }
        let start = p.start & !(PAGE_SIZE - 1);
        let end = p.end.next_multiple_of(PAGE_SIZE);
        let target = if counted {
            Target::Here
        } else {
            Target::for_job(here, p.placement.preferred)
        };
        let ask = detect && p.placement.thrash;
        if !ask && !counted {
            moved += place_range(here, mm, mirror, target, start, end, u, cancel)?.0;
            continue;
        }
        // Each block is asked first; the blocks that may move go in runs,
        // one migration each (one for the whole piece when nothing stays),
        // whose blocks with a history are recorded if it moved pages
        // (`place_run`).
        let mut run = start;
        let mut at = start;
        let mut n = 0;
        while at < end {
            cancel.check()?;
            let next = ((at / BLOCK_SIZE + 1) * BLOCK_SIZE).min(end);
            let record = ask.then_some(process);
            if stays(here, (process, at), target, (counted, ask), memo) {
                n += place_run(here, mm, mirror, target, (run, at), u, record, cancel)?;
                run = next;
            }
            at = next;
        }
        n += place_run(
            here,
            mm,
            mirror,
            target,
            (run, end),
            u,
            ask.then_some(process),
            cancel,
        )?;
        if counted {
            here.stats.access_moved.add(n, Relaxed);
        }
        moved += n;
    }
    Ok(moved)
}

/// Whether the block of `at` of process `p` stays where it is in the
/// placement pass of a job on `here` that would move it to `target`: for a
/// job that runs in place (`counted`), unless its access count is due (the
/// count is taken); then, if `ask`, when thrashing detection refuses the
/// move. Each question is asked once per block and job (`memo`).
fn stays(
    here: &VramPool,
    (p, at): (&Process, usize),
    target: Target,
    (counted, ask): (bool, bool),
    memo: &mut Memo,
) -> bool {
    let block = at / BLOCK_SIZE;
    if memo.block != Some(block) {
        *memo = Memo {
            block: Some(block),
            ..Memo::default()
        };
    }
    if counted {
        let due = *memo.due.get_or_insert_with(|| {
            let due = access::take_due(p, here.index(), at);
            if due {
                here.stats.access_due.add(1, Relaxed);
            }
            due
        });
        if !due {
            return true;
        }
    }
    if !ask {
        return false;
    }
    *memo.stays.get_or_insert_with(|| {
        let v = thrash::before_move(p, at, target.place(here));
        here.stats.count_thrash(v);
        v.stay
    })
}

/// Moves the run `[start, end)` of blocks that may move (none if empty) to
/// `target` for a job's placement pass, and if pages moved and `record`
/// names the process, records a move of each of its blocks that has a
/// history ([`thrash::run_moved`]; a block already there counts no event,
/// one that could not move at most one too many). The pages moved.
#[allow(clippy::too_many_arguments)]
fn place_run(
    here: &VramPool,
    mm: &MmWithUser,
    mirror: &DevMirror,
    target: Target,
    (start, end): (usize, usize),
    u: Use,
    record: Option<&Process>,
    cancel: &Cancel<'_>,
) -> Result<u64> {
    if start >= end {
        return Ok(0);
    }
    let (n, went) = place_range(here, mm, mirror, target, start, end, u, cancel)?;
    if let Some(p) = record.filter(|_| n > 0) {
        thrash::run_moved(p, (start, end), went.place(here), |v| {
            here.stats.count_thrash(v)
        });
    }
    Ok(n)
}

/// Moves `[start, end)` to `target` for a job's placement pass (a preferred
/// peer that went away meanwhile means system RAM): the pages moved, and
/// where to.
#[allow(clippy::too_many_arguments)]
fn place_range(
    here: &VramPool,
    mm: &MmWithUser,
    mirror: &DevMirror,
    target: Target,
    start: usize,
    end: usize,
    u: Use,
    cancel: &Cancel<'_>,
) -> Result<(u64, Target)> {
    match prefetch(here, mm, mirror, &target, start, end - start, u, cancel) {
        Err(e) if target != Target::System && (e == ENOENT || e == ENOLINK) => {
            let out = prefetch(
                here,
                mm,
                mirror,
                &Target::System,
                start,
                end - start,
                u,
                cancel,
            )?;
            Ok((out.moved, Target::System))
        }
        r => Ok((r?.moved, target)),
    }
}
