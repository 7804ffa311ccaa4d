// SPDX-License-Identifier: GPL-2.0

//! The emulated GPU engine: runs a job over a process's virtual addresses as
//! a device would.
//!
//! A job runs in windows of up to 2 MiB (a block of its destination). A
//! window whose every page has an entry in the VM's device page table
//! (`crate::mm::devpt`, kept across jobs and zapped by the mirror's
//! invalidations) with the access the job needs runs straight from it:
//! no walk, no mapping (`pt_hits`). Any other window faults
//! (`pt_faults`): it raises faults for the spans it lacks, and for those
//! of the windows after it, on the device's fault queue
//! (`crate::mm::faultq`), waits while the device's fault handler
//! (`crate::fault`) services them through [`JobService`] (a walk of what
//! the process maps, every page bound), and replays from the table
//! (`pt_replays`). The entries stay until the mm changes them where the
//! job's ranges keep their pages ([`Engine::binding`]: its own memory's
//! pages, and the pages of ranges whose access policy is "in place", not
//! read-mostly ones: their jobs read replicas) and elsewhere (a page used
//! in place because migrating it failed, or because the job asked to run
//! in place; not a read-mostly range's page outside this device's memory,
//! which gets no entry: a window that meets one is serviced in the job's
//! context). Those elsewhere are [`Life::Job`] entries: a later job that
//! runs in place uses them as they are, with no placement pass (unless the
//! access counters have a block of its range due to move here), but any
//! other job's placement pass looks at their pages first, as if they were
//! not mapped, and a move zaps them (see `crate::drm::ioctl`'s `mapped`).
//!
//! What the handler leaves to the job (a page not present or without the
//! access, a busy mmap lock, a page it could not bind), a window that
//! reads replicas, and one that keeps being zapped before its replay, is
//! serviced in the job's own context: [`DevMirror::fault`] (`hmm_range_fault`
//! with the device's owner, so that its own device pages come back as
//! they are, faulting the others in) under the VM's mirror sequence, a
//! table of the window's own of device-visible addresses (a VRAM offset
//! for a page in this device's memory, a DMA address for a page in system
//! RAM, a bus address for a peer's page), run, and the kept entries bound.
//!
//! The executor sees device addresses only; the address decoder turns a
//! device address into a CPU access (the BAR mapping for VRAM; for a DMA
//! address, the page that the mapping maps, like an IOMMU walk). Counters
//! record the bytes read and written per memory kind.
//!
//! Before the job runs, its placement pass (`crate::migrate::place`) moves
//! the pages of its ranges as their attributes say: by default to this
//! device, like a GPU page fault (migrate-on-access); pages that cannot move
//! are used in place. With [`Job::in_place`] or the range's "in place"
//! access policy, pages are used where they are: system RAM by DMA, a peer
//! of the owner group over P2P; pages of a device out of reach are faulted
//! to system RAM by `hmm_range_fault`. (With [`Job::in_place`] only, the
//! 2 MiB blocks whose access counters are due move here first:
//! `crate::access`.)
//!
//! # Lock order
//!
//! A job waits for its raised faults holding its file's VM lock only (no
//! mmap or mirror lock); the handler takes the job's leaf spare, then the
//! mirror's lock, and only tries the mmap lock.
//! `mmap_lock` (read, only around `hmm_range_fault` and migration) is never
//! held together with the mirror's lock ([`DevMirror::lock`]); invalidations
//! take it from under the mm core's locks, so the job holds it only while
//! it touches pages, and takes nothing inside it but the pool's `atomics`
//! mutex, its replica store (`crate::vram::ReplicaWindow`), and, for a
//! window msvm-gpu runs (`device.rs`), its MMU's locks (`crate::gpu::mmu`)
//! and its job engine's ring, then `atomics`. A job that
//! reads replicas enters their SRCU read-side section under the lock and
//! leaves it after; what waits for their grace period
//! (`VramPool::replica_room`) is called with nothing held.

use kernel::{
    mm::MmWithUser,
    new_mutex,
    num::casts::FromSafeCast,
    prelude::*,
    sync::{atomic::Relaxed, Arc, Mutex},
    time::{Instant, Monotonic},
};

use crate::access;
use crate::fault::FaultHandler;
use crate::generation;
use crate::migrate::{check_job_vmas, read_only_anon};
use crate::mm::{
    abi::MSVM_EXEC_PATTERN_MAX,
    cancel::Cancel,
    devpt::{Bind, DevPt, Life, Mapping, Spare},
    devtables::DevMirror,
    dma::{DmaPage, PeerMap, SysPage},
    faultq::{Access, Fault, Served, Service, MAX_RAISE},
    hmm::{HmmPfn, Pages},
    page::{PageRef, BLOCK_PAGES, BLOCK_SIZE},
    pagemap::PAGE_SIZE,
    trace,
};
use crate::process::Process;
use crate::vram::{Clock, Epoch, JobPhase, ReplicaWindow, VramPool};

mod device;
mod keep;

pub(crate) use keep::{Keep, Replicate};

/// Checks that the job's ranges are mapped (`EFAULT`) with the access it
/// needs (`EACCES`), in VMAs a device may reach (`EFAULT` otherwise: I/O,
/// PFN and secretmem mappings).
pub(crate) fn check(mm: &MmWithUser, job: &Job) -> Result {
    let write = !matches!(job.op, Op::Checksum);
    let guard = mm.mmap_read_lock();
    check_job_vmas(&guard, job.addr, job.addr + job.len, write)?;
    if let Op::Copy { src } = job.op {
        check_job_vmas(&guard, src, src + job.len, false)?;
    }
    Ok(())
}

/// Binds the pages of `[start, start + len)` that are in `pool`'s memory
/// into the VM's device page table ("bind ahead", after a PREFETCH to the
/// device: Xe's prefetch `VM_BIND`, UVM's `cudaMemPrefetchAsync`), so that
/// the jobs then take no fault. Walks without faulting anything in; a block
/// an invalidation keeps changing is left to fault. Returns the entries
/// written.
pub(crate) fn bind_ahead(
    pool: &VramPool,
    dev: &kernel::device::Device<kernel::device::Bound>,
    mm: &MmWithUser,
    mirror: &DevMirror,
    (start, len): (usize, usize),
    cancel: &Cancel<'_>,
) -> Result<u64> {
    let mut pfns = KVec::from_elem(HmmPfn::NONE, BLOCK_PAGES, GFP_KERNEL)?;
    let own = |_: usize, page: PageRef<'_>| pool.offset_of(page).map(|_| (Bind::Own, Life::Kept));
    let mut bound = 0;
    let mut walk_all = || -> Result {
        let end = start + len;
        let mut at = start;
        while at < end {
            let next = ((at / BLOCK_SIZE + 1) * BLOCK_SIZE).min(end);
            let n = (next - at) / PAGE_SIZE;
            for _ in 0..8 {
                cancel.check()?;
                let missing = mirror.lock().table().missing_leaves(at, n);
                let mut spare = Spare::new(missing)?;
                let walk = match mirror.snapshot(mm, at, &mut pfns[..n], pool.owner(), cancel) {
                    Err(e) if e == EBUSY => continue,
                    r => r?,
                };
                match mirror.lock().bind(&walk, dev, &mut spare, own) {
                    Err(e) if e == EAGAIN => continue,
                    r => bound += r?,
                }
                break;
            }
            at = next;
        }
        Ok(())
    };
    let r = walk_all();
    // Counted whatever ended it: what it bound stays bound.
    pool.stats.pt_bound.add(bound, Relaxed);
    r.map(|()| bound)
}

/// The bytes a FILL repeats over its range.
///
/// # Invariants
///
/// `1 <= len <= PATTERN_MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pattern {
    bytes: [u8; PATTERN_MAX],
    len: usize,
}

/// The longest pattern.
// CAST: 128 fits a `usize`.
pub(crate) const PATTERN_MAX: usize = MSVM_EXEC_PATTERN_MAX as usize;

impl Pattern {
    /// The 8 bytes of `v`, in memory order.
    pub(crate) fn word(v: u64) -> Self {
        let mut bytes = [0; PATTERN_MAX];
        bytes[..8].copy_from_slice(&v.to_ne_bytes());
        // INVARIANT: 8 bytes.
        Self { bytes, len: 8 }
    }

    /// A pattern of `len` bytes, which `read` writes into the slice it is
    /// given; `EINVAL` for a length of 0 or above [`PATTERN_MAX`].
    pub(crate) fn read(len: usize, read: impl FnOnce(&mut [u8]) -> Result) -> Result<Self> {
        if !(1..=PATTERN_MAX).contains(&len) {
            return Err(EINVAL);
        }
        let mut bytes = [0; PATTERN_MAX];
        read(&mut bytes[..len])?;
        // INVARIANT: checked above.
        Ok(Self { bytes, len })
    }

    /// Writes the pattern over `buf` as it goes on from byte `at` (without
    /// a panicking path: the executor's inner loop).
    fn write(&self, at: usize, buf: &mut [u8]) {
        let pat = self.bytes.get(..self.len).unwrap_or_default();
        let skip = at.checked_rem(self.len).unwrap_or(0);
        for (b, &x) in buf.iter_mut().zip(pat.iter().cycle().skip(skip)) {
            *b = x;
        }
    }
}

/// What a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Repeats the pattern over the range, from its first byte.
    Fill(Pattern),
    /// Copies the range at `src` over the range.
    Copy { src: usize },
    /// Adds `value` to every 64-bit word of the range.
    AtomicAdd(u64),
    /// Computes the 64-bit FNV-1a hash of the range.
    Checksum,
}

/// One job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Job {
    pub(crate) op: Op,
    pub(crate) addr: usize,
    pub(crate) len: usize,
    /// Use every page where it is (`MSVM_EXEC_IN_PLACE`), whatever the
    /// range's access policy, except the blocks the access counters move
    /// here (`crate::access`).
    pub(crate) in_place: bool,
}

/// What a job returns.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct Done {
    pub(crate) result: u64,
    pub(crate) migrated: u64,
    /// Pages the engine used, by path: its own VRAM (replicas included), a
    /// peer's VRAM over P2P, system RAM by DMA (for the `msvm_exec` trace
    /// event).
    pub(crate) vram: u64,
    pub(crate) p2p: u64,
    pub(crate) dma: u64,
}

/// A device-visible address.
#[derive(Clone, Copy)]
enum DevAddr {
    /// Offset in this device's VRAM.
    Vram(usize),
    /// DMA address of a system page.
    Dma(u64),
    /// Bus address of a page of a peer's VRAM (P2P).
    Peer(u64),
}

/// The pages of one window of a job: the destination's, and COPY's
/// source's (none for other operations).
#[derive(Clone, Copy)]
struct WindowPages {
    /// The window's first destination byte.
    dst: usize,
    /// Its page, and the pages from it the window touches.
    dst_first: usize,
    dst_pages: usize,
    /// The same of the source.
    src: Option<usize>,
    src_first: usize,
    src_pages: usize,
}

impl WindowPages {
    /// Bytes `[off, off + n)` of `job`.
    fn new(job: &Job, (off, n): (usize, usize)) -> Self {
        let dst = job.addr + off;
        let dst_first = dst & !(PAGE_SIZE - 1);
        let src = match job.op {
            Op::Copy { src } => Some(src + off),
            _ => None,
        };
        let src_first = src.map_or(0, |s| s & !(PAGE_SIZE - 1));
        Self {
            dst,
            dst_first,
            dst_pages: (dst + n - dst_first).div_ceil(PAGE_SIZE),
            src,
            src_first,
            src_pages: src.map_or(0, |s| (s + n - src_first).div_ceil(PAGE_SIZE)),
        }
    }
}

/// Where the decoder found a device address: what the engine accesses.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// This device's VRAM at the offset.
    Vram(usize),
    /// A system page (by DMA).
    Sys(SysPage<'a>),
    /// A peer's VRAM at the offset (over P2P).
    Peer(&'a VramPool, usize),
}

/// A device page table as the executor walks it: the target of each page
/// of a window.
trait Decode {
    /// Where the window's page `i` is.
    fn at(&self, i: usize) -> Result<Target<'_>>;
}

/// A P2P mapping of a peer page, with what the decoder needs to reach it.
struct PeerPage<'a> {
    map: PeerMap<'a>,
    pool: &'a VramPool,
    offset: usize,
}

/// The device page table of one window, and the mappings behind it.
struct PageTable<'a> {
    entries: KVec<DevAddr>,
    /// Sorted by address: the decoder's view of the DMA mappings.
    dma: KVec<DmaPage<'a>>,
    /// Sorted by address: the decoder's view of the P2P mappings.
    p2p: KVec<PeerPage<'a>>,
}

impl Decode for PageTable<'_> {
    fn at(&self, i: usize) -> Result<Target<'_>> {
        Ok(match *self.entries.get(i).ok_or(EFAULT)? {
            DevAddr::Vram(off) => Target::Vram(off),
            DevAddr::Dma(d) => Target::Sys(decode_dma(self, d)?.sys()),
            DevAddr::Peer(d) => {
                let (pool, off) = decode_peer(self, d)?;
                Target::Peer(pool, off)
            }
        })
    }
}

/// The VM's device page table from address `first`, as a window's table.
struct TableView<'t> {
    table: &'t DevPt,
    /// This device's pool.
    pool: &'t VramPool,
    first: usize,
}

impl Decode for TableView<'_> {
    fn at(&self, i: usize) -> Result<Target<'_>> {
        Ok(
            match self.table.get(self.first + i * PAGE_SIZE).ok_or(EFAULT)? {
                Mapping::Own(page) => Target::Vram(self.pool.offset_of(page).ok_or(EFAULT)?),
                Mapping::Dma(page) => Target::Sys(page),
                Mapping::Peer(page) => {
                    let (pool, off) = self.pool.locate(page).ok_or(EFAULT)?;
                    Target::Peer(pool, off)
                }
            },
        )
    }
}

impl PageTable<'_> {
    /// Adds the table's pages to `done`'s counts by path.
    fn tally(&self, done: &mut Done) {
        for e in self.entries.iter() {
            match e {
                DevAddr::Vram(_) => done.vram += 1,
                DevAddr::Peer(_) => done.p2p += 1,
                DevAddr::Dma(_) => done.dma += 1,
            }
        }
    }

    fn with_capacity(n: usize) -> Result<Self> {
        Ok(Self {
            entries: KVec::with_capacity(n, GFP_KERNEL)?,
            dma: KVec::with_capacity(n, GFP_KERNEL)?,
            p2p: KVec::with_capacity(n, GFP_KERNEL)?,
        })
    }
}

/// FNV-1a, 64-bit.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The executor of one device.
pub(crate) struct Engine<'p> {
    pool: &'p VramPool,
    dev: &'p kernel::device::Device<kernel::device::Bound>,
    /// The device's fault handler.
    faults: &'p FaultHandler,
    buf: KBox<[u8; PAGE_SIZE]>,
    /// A last-level table in the device's format, for a window the device
    /// runs (`device.rs`).
    leaf: KBox<[u64; device::LEAF_ENTRIES]>,
    /// The request the jobs run for: the uses of device memory they record
    /// for the eviction policy.
    epoch: Epoch,
    /// Which of the job's ranges it reads through replicas.
    replicate: Replicate,
    /// The placement policies' state of the job's process.
    process: Arc<Process>,
    /// What a fault binds into the VM's device page table.
    keep: Keep,
    /// The job offsets of the windows after the missing one whose faults
    /// its last raise serviced ahead: each counts as a fault, and a replay,
    /// when its turn comes.
    ahead: [Option<usize>; LOOKAHEAD],
    /// The job offsets of the windows whose faults the last raise did not
    /// service: they are serviced in the job's context at their turn.
    unserved: [Option<usize>; LOOKAHEAD],
    /// The window runs on the CPU: the rest of one whose fault the device
    /// was not given.
    cpu_only: bool,
}

/// Times a window raises its faults before it is serviced in the job's
/// context instead (an invalidation kept zapping its entries before the
/// replay).
const MAX_REPLAYS: usize = 4;

/// Windows of a job whose faults a miss raises together: this one and up
/// to 7 after it (a GPU's threads fault at once), as [`MAX_RAISE`] allows
/// (a COPY's window may raise three).
const LOOKAHEAD: usize = 8;

/// The job offsets after `off` among `offsets`, each once. They all lie
/// among the [`LOOKAHEAD`] windows from `off`'s: a raise looks no further.
fn later(off: usize, offsets: impl Iterator<Item = usize>) -> [Option<usize>; LOOKAHEAD] {
    let mut set = [None; LOOKAHEAD];
    let mut k = 0;
    for o in offsets.filter(|&o| o > off) {
        if k < LOOKAHEAD && !set[..k].contains(&Some(o)) {
            set[k] = Some(o);
            k += 1;
        }
    }
    set
}

/// The faults one miss raises: those of the missing window first.
struct Raised {
    list: [Fault; MAX_RAISE],
    n: usize,
    /// Faults of the missing window itself.
    current: usize,
    /// Each window's job offset and its faults' indices in `list`.
    windows: [Option<(usize, usize, usize)>; LOOKAHEAD],
    /// The missing window's job offset.
    off: usize,
    /// The table's leaves the faults' spans lack.
    leaves: usize,
}

/// A job's context, servicing the faults it raised (on the device's fault
/// handler: `crate::fault`).
struct JobService<'a, 'p> {
    engine: &'a Engine<'p>,
    mm: &'a MmWithUser,
    mirror: &'a DevMirror,
    /// The leaves the faults may need, allocated by the job (charged to
    /// its memory cgroup, not the handler's).
    spare: &'a Mutex<Spare>,
}

impl Service for JobService<'_, '_> {
    fn vm(&self) -> usize {
        core::ptr::from_ref(self.mirror) as usize
    }

    /// Binds every page of the fault's span as the process maps it now:
    /// kept entries where the job's ranges keep them (see
    /// [`Engine::binding`]), entries the placement policies look behind
    /// ([`Life::Job`]) elsewhere. It never waits on the process: the walk
    /// faults nothing in, begins only while no invalidation of the mirror
    /// is in flight and only tries the mmap lock. Whatever needs more (a
    /// page not present, or not with the access asked: a first touch, a
    /// copy-on-write break, another owner's device page; an invalidation
    /// in flight; a busy mmap lock; a page it could not bind) the job
    /// services itself
    /// ([`Served::InContext`]), in its own killable context.
    fn service(&self, f: &Fault) -> Result<Served> {
        let e = self.engine;
        let t0 = Instant::<Monotonic>::now();
        let write = f.access != Access::Read;
        let mut pfns = KVec::from_elem(HmmPfn::NONE, f.pages, GFP_KERNEL)?;
        for _ in 0..8 {
            let owner = e.pool.owner();
            let walk = match self
                .mirror
                .snapshot_nowait(self.mm, f.addr, &mut pfns, owner)
            {
                Err(err) if err == EBUSY => continue,
                Err(err) if err == EAGAIN => return Ok(Served::InContext),
                r => r?,
            };
            let mut spare = self.spare.lock();
            let mut guard = self.mirror.lock();
            {
                let pages = match guard.pages(&walk) {
                    Err(err) if err == EAGAIN => continue,
                    r => r?,
                };
                if !pages.all_mapped(write) {
                    return Ok(Served::InContext);
                }
                // A page the kernel must not touch (secretmem): no access,
                // as GUP refuses it.
                if pages.iter().flatten().any(|p| p.is_secretmem()) {
                    return Err(EFAULT);
                }
                // Met under a valid sequence: eviction follows them here.
                e.pool.renew(self.mm, &pages);
            }
            // Entries asked for, and their kinds: own, DMA, P2P.
            let mut asked = [0u64; 3];
            let how = |a: usize, p: PageRef<'_>| {
                let b = e.entry(a, p);
                if let Some((how, _)) = b {
                    asked[match how {
                        Bind::Own => 0,
                        Bind::Dma => 1,
                        Bind::Peer { .. } => 2,
                    }] += 1;
                }
                b
            };
            let bound = match guard.bind(&walk, e.dev, &mut spare, how) {
                Err(err) if err == EAGAIN => continue,
                r => r?,
            };
            // Every entry written counts, whatever comes of the fault.
            e.pool.stats.pt_bound.add(bound, Relaxed);
            // A page it could not bind (no leaf, a mapping that failed, a
            // DMA entry under bounce buffering) would only fault again.
            let total: u64 = asked.iter().sum();
            if bound < total || total < f.pages as u64 {
                return Ok(Served::InContext);
            }
            // The span's resolution: a peer's page makes it P2P, else a
            // system page DMA, else the device's own.
            let kind = if asked[2] > 0 {
                2
            } else {
                usize::from(asked[1] > 0)
            };
            let s = &e.pool.stats;
            s.fault_spans[kind].add(1, Relaxed);
            // CAST: an elapsed time is not negative.
            s.fault_ns[kind].add(t0.elapsed().as_nanos() as u64, Relaxed);
            return Ok(Served::Bound(bound));
        }
        // An invalidation kept changing the pages.
        Ok(Served::InContext)
    }
}

impl<'p> Engine<'p> {
    pub(crate) fn new(
        (pool, dev, faults): (
            &'p VramPool,
            &'p kernel::device::Device<kernel::device::Bound>,
            &'p FaultHandler,
        ),
        epoch: Epoch,
        (replicate, process): (Replicate, Arc<Process>),
        keep: Keep,
    ) -> Result<Self> {
        Ok(Self {
            pool,
            dev,
            faults,
            buf: KBox::new([0; PAGE_SIZE], GFP_KERNEL)?,
            leaf: KBox::new([0; device::LEAF_ENTRIES], GFP_KERNEL)?,
            epoch,
            replicate,
            process,
            keep,
            ahead: [None; LOOKAHEAD],
            unserved: [None; LOOKAHEAD],
            cpu_only: false,
        })
    }

    /// How a fault binds the page at `addr` into the VM's table, if it
    /// does (see the module's documentation).
    fn binding(&self, addr: usize, page: PageRef<'_>) -> Option<Bind> {
        let kept = || Keep::has(&self.keep.remote, addr);
        match self.pool.locate(page) {
            Some((pool, _)) if self.pool.is(pool) => {
                Keep::has(&self.keep.own, addr).then_some(Bind::Own)
            }
            Some((pool, off)) if kept() => {
                let phys = pool.bar().ok()?.phys(off);
                Some(Bind::Peer { phys })
            }
            Some(_) => None,
            None if kept() && !page.is_device_private() => Some(Bind::Dma),
            None => None,
        }
    }

    /// The kept entry of the page at `addr`, if [`Self::binding`] keeps
    /// it.
    fn kept(&self, addr: usize, page: PageRef<'_>) -> Option<(Bind, Life)> {
        self.binding(addr, page).map(|b| (b, Life::Kept))
    }

    /// The entry a fault the handler services writes for the page at
    /// `addr`: kept where [`Self::binding`] keeps it, a [`Life::Job`] one
    /// otherwise (a job's placement pass looks at its page first).
    fn entry(&self, addr: usize, page: PageRef<'_>) -> Option<(Bind, Life)> {
        if let Some(b) = self.binding(addr, page) {
            return Some((b, Life::Kept));
        }
        if Keep::has(&self.keep.replicated, addr) {
            return None;
        }
        let how = match self.pool.locate(page) {
            Some((pool, _)) if self.pool.is(pool) => Bind::Own,
            Some((pool, off)) => Bind::Peer {
                phys: pool.bar().ok()?.phys(off),
            },
            None if page.is_device_private() || page.is_secretmem() => return None,
            None => Bind::Dma,
        };
        Some((how, Life::Job))
    }

    /// The faults a miss at bytes `off` of `job` raises: the spans of
    /// this window and of the next [`LOOKAHEAD`] ones that `table` does not
    /// map with the access the job needs, each within one 2 MiB block.
    fn faults_from(&self, table: &DevPt, job: &Job, off: usize) -> Raised {
        let dst_access = match job.op {
            Op::Checksum => Access::Read,
            Op::AtomicAdd(_) => Access::Atomic,
            _ => Access::Write,
        };
        let mut r = Raised {
            list: [Fault {
                addr: 0,
                pages: 0,
                access: Access::Read,
                engine: 0,
            }; MAX_RAISE],
            n: 0,
            current: 0,
            windows: [None; LOOKAHEAD],
            off,
            leaves: 0,
        };
        let push = |r: &mut Raised, first: usize, pages: usize, access: Access| {
            // Split at block boundaries (a source may straddle two).
            let (mut at, end) = (first, first + pages * PAGE_SIZE);
            while at < end && r.n < MAX_RAISE {
                let stop = ((at / BLOCK_SIZE + 1) * BLOCK_SIZE).min(end);
                let n = (stop - at) / PAGE_SIZE;
                // From its first page lacking an entry to its last: the
                // entries around stay as they are.
                if let Some((addr, pages)) = table.uncovered(at, n, access != Access::Read) {
                    r.leaves += table.missing_leaves(addr, pages);
                    r.list[r.n] = Fault {
                        addr,
                        pages,
                        access,
                        engine: 0,
                    };
                    r.n += 1;
                }
                at = stop;
            }
        };
        let mut o = off;
        for k in 0..LOOKAHEAD {
            // Room for a window's three spans at most.
            if o >= job.len || r.n + 3 > MAX_RAISE {
                break;
            }
            let a = job.addr + o;
            let m = ((a / BLOCK_SIZE + 1) * BLOCK_SIZE - a).min(job.len - o);
            // A later window whose faults came back to the job is left to
            // its turn: raised again, they would only come back again.
            if k > 0 && self.unserved.contains(&Some(o)) {
                o += m;
                continue;
            }
            let w = WindowPages::new(job, (o, m));
            let before = r.n;
            push(&mut r, w.dst_first, w.dst_pages, dst_access);
            if w.src.is_some() {
                push(&mut r, w.src_first, w.src_pages, Access::Read);
            }
            if k == 0 {
                r.current = r.n;
            }
            if r.n > before {
                r.windows[k] = Some((o, before, r.n));
            }
            o += m;
        }
        r
    }

    /// Raises `faults` on the device's fault handler and waits for them.
    /// `true` if those of the missing window were serviced (replay it),
    /// `false` if the job must service them itself; `EFAULT` if one of
    /// them touches a page no device may (the job ends with it). The
    /// windows whose faults came back unserviced are remembered
    /// ([`Self::unserved`]).
    fn raise(&mut self, mm: &MmWithUser, mirror: &DevMirror, faults: &Raised) -> Result<bool> {
        let leaves = Spare::new(faults.leaves)?;
        pin_init::stack_pin_init!(let spare = new_mutex!(leaves));
        let svc = JobService {
            engine: self,
            mm,
            mirror,
            spare: &spare,
        };
        let mut out = [None; MAX_RAISE];
        self.faults.raise(&svc, &faults.list[..faults.n], &mut out);
        let served = |r: &Option<Result<Served>>| matches!(r, Some(Ok(Served::Bound(_))));
        // The windows left unserved: this raise's, and those of earlier
        // ones still ahead.
        let fresh = faults
            .windows
            .iter()
            .flatten()
            .filter(|&&(_, from, to)| !out[from..to].iter().all(served))
            .map(|&(o, ..)| o);
        let earlier = self.unserved.iter().flatten().copied();
        self.unserved = later(faults.off, Iterator::chain(fresh, earlier));
        for r in &out[..faults.current] {
            match r {
                Some(Ok(Served::Bound(_))) => {}
                // A page no device may touch; any other failure of the
                // handler's (no memory for its walk, say) the job's own
                // service meets again, or not.
                Some(Err(e)) if *e == EFAULT => return Err(EFAULT),
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Runs the `n` bytes of window `w` of `job` from the VM's device page
    /// table `table` (the mirror's lock is held), if every page they use
    /// has an entry with the access the job needs; `None` if one does not
    /// (the window faults).
    fn warm(
        &mut self,
        table: &DevPt,
        (job, w, n): (&Job, WindowPages, usize),
        write: bool,
        done: &mut Done,
    ) -> Option<Result> {
        let WindowPages {
            dst,
            dst_first,
            dst_pages,
            src,
            src_first,
            src_pages,
        } = w;
        // After the placement pass, every entry counts.
        if !table.covers(dst_first, dst_pages, write, true)
            || !table.covers(src_first, src_pages, false, true)
        {
            return None;
        }
        let pool = self.pool;
        let dst_v = TableView {
            table,
            pool,
            first: dst_first,
        };
        let src_v = TableView {
            table,
            pool,
            first: src_first,
        };
        // What a fault's bind would count: uses for the eviction policy,
        // accesses to memory not this device's for the access counters,
        // pages by path; and the pages the job may write by DMA marked so
        // (see the faulting path).
        let r = self
            .account(&dst_v, dst_pages, write, done)
            .and_then(|()| self.account(&src_v, src_pages, false, done))
            .and_then(|()| {
                self.execute(
                    job.op,
                    dst - job.addr,
                    &dst_v,
                    dst - dst_first,
                    &src_v,
                    src.map_or(0, |s| s - src_first),
                    n,
                    done,
                )
            });
        // The emulated TLB's hits and misses (the accounting's lookups too).
        let (hits, misses) = table.tlb_counts();
        self.pool.stats.tlb_hits.add(hits, Relaxed);
        self.pool.stats.tlb_misses.add(misses, Relaxed);
        Some(r)
    }

    /// Counts the use of `pages` pages of `view`, a window of the VM's
    /// table, as [`Self::page_table`] counts a faulting window's; if the
    /// job writes them (`written`), marks the system pages written (under
    /// the mirror's lock, while the entries hold: before or after the
    /// write, reclaim sees the mark only once the lock is free).
    fn account(
        &self,
        view: &TableView<'_>,
        pages: usize,
        written: bool,
        done: &mut Done,
    ) -> Result {
        let on = access::enabled();
        let mut remote = (view.first, 0u64);
        let count = |(at, n): (usize, u64)| {
            if on && n > 0 {
                access::add(&self.process, self.pool.index(), at, n);
                self.pool.stats.access_counted.add(n, Relaxed);
            }
        };
        for i in 0..pages {
            let at = view.first + i * PAGE_SIZE;
            if at % BLOCK_SIZE == 0 {
                count(remote);
                remote = (at, 0);
            }
            match view.at(i)? {
                Target::Vram(off) => {
                    self.pool.note_used(off, self.epoch);
                    done.vram += 1;
                }
                Target::Peer(pool, off) => {
                    pool.note_used(off, self.epoch);
                    done.p2p += 1;
                    remote.1 += 1;
                }
                Target::Sys(p) => {
                    if written {
                        p.written();
                    }
                    done.dma += 1;
                    remote.1 += 1;
                }
            }
        }
        count(remote);
        Ok(())
    }

    /// Runs `job` on the process behind `mm`, mirrored by `mirror`. The
    /// caller has [`check`]ed its ranges (before its placement pass); a
    /// mapping changed since then makes the walk fail with `EFAULT` or
    /// `EACCES`.
    pub(crate) fn run(
        &mut self,
        mm: &MmWithUser,
        mirror: &DevMirror,
        job: &Job,
        clock: &mut Clock,
        cancel: &Cancel<'_>,
    ) -> Result<Done> {
        let write = !matches!(job.op, Op::Checksum);
        let mut done = Done::default();
        if let Op::Checksum = job.op {
            done.result = FNV_OFFSET;
        }
        self.ahead = [None; LOOKAHEAD];
        self.unserved = [None; LOOKAHEAD];
        let mut off = 0;
        while off < job.len {
            // Between windows (a warm one checks nothing else).
            cancel.check()?;
            // A window ends at a 2 MiB block boundary of the destination.
            let a = job.addr + off;
            let wend = (a / BLOCK_SIZE + 1) * BLOCK_SIZE;
            let n = (wend - a).min(job.len - off);
            self.window(mm, mirror, job, (off, n), write, &mut done, clock, cancel)?;
            off += n;
        }
        Ok(done)
    }

    /// Runs bytes `[off, off + n)` of the job, which lie in one window of
    /// the destination (a source may straddle two).
    #[allow(clippy::too_many_arguments)]
    fn window(
        &mut self,
        // The mirrored mm, with users while the job faults.
        mm: &MmWithUser,
        mirror: &DevMirror,
        job: &Job,
        (off, n): (usize, usize),
        write: bool,
        done: &mut Done,
        clock: &mut Clock,
        cancel: &Cancel<'_>,
    ) -> Result {
        let w = WindowPages::new(job, (off, n));
        let WindowPages {
            dst,
            dst_first,
            dst_pages,
            src,
            src_first,
            src_pages,
        } = w;
        let owner = self.pool.owner();
        // CAST: an address, used as a key only.
        let key = mm.as_raw() as usize;
        // The table that may read replicas (the destination's or the
        // source's), if its pages lie in one 2 MiB block.
        let read_only = match job.op {
            Op::Checksum => self.replicate.dst.then_some((dst_first, dst_pages, true)),
            Op::Copy { .. } => self.replicate.src.then_some((src_first, src_pages, false)),
            _ => None,
        };
        let replica_block = read_only
            .filter(|&(first, pages, _)| {
                first / BLOCK_SIZE == (first + pages * PAGE_SIZE - 1) / BLOCK_SIZE
            })
            .map(|(first, pages, dst)| (first, first + pages * PAGE_SIZE, dst));
        // Whether `[first, end)` lies in mappings no one writes without an
        // invalidation first (checked before the walk, to take no room for
        // a writable range, and after it, to make replicas).
        let sealed = |first: usize, end: usize| read_only_anon(&mm.mmap_read_lock(), first, end);
        // Without a fault, if the VM's table maps the window; else the
        // leaves the fault's binding needs, allocated before the lock.
        // A window that reads replicas (the device's own copies, not the
        // process's pages) is serviced here, in the job's context, as is
        // one whose raised faults did not make it run (a copy-on-write
        // break, an invalidation that kept zapping it), and one that meets
        // a read-mostly range (whose pages elsewhere a fault does not bind:
        // the handler would only give it back).
        let inline = self.replicate.dst
            || self.replicate.src
            || self.keep.meets_replicated(dst_first, dst_pages)
            || self.keep.meets_replicated(src_first, src_pages);
        // Where the device runs jobs, it runs the window, faulting as it
        // goes; what it leaves (a fault it was not given) the CPU runs, as
        // it runs a window whose faults a raise before gave back.
        if !inline && !self.cpu_only && !self.unserved.contains(&Some(off)) {
            let on = self.on_device((mm, mirror), (job, w, off, n), write, done)?;
            clock.lap_job(JobPhase::Exec);
            match on {
                device::OnDevice::Ran => return Ok(()),
                device::OnDevice::Part(k) => {
                    self.cpu_only = true;
                    let r = if k < n {
                        self.window(
                            mm,
                            mirror,
                            job,
                            (off + k, n - k),
                            write,
                            done,
                            clock,
                            cancel,
                        )
                    } else {
                        Ok(())
                    };
                    self.cpu_only = false;
                    return r;
                }
                device::OnDevice::NotHere => {}
            }
        }
        let mut rounds = 0;
        let missing = loop {
            let faults = {
                let guard = mirror.lock();
                let table = guard.table();
                if let Some(r) = self.warm(table, (job, w, n), write, done) {
                    drop(guard);
                    let s = &self.pool.stats;
                    // (The rest of a window the device faulted on: its
                    // fault is counted, this is its replay.)
                    let ahead = rounds == 0 && self.ahead.contains(&Some(off));
                    if ahead && !self.cpu_only {
                        s.pt_faults.add(1, Relaxed);
                    }
                    if rounds == 0 && !ahead && !self.cpu_only {
                        s.pt_hits.add(1, Relaxed);
                    } else {
                        s.pt_replays.add(1, Relaxed);
                    }
                    clock.lap_job(JobPhase::Exec);
                    return r;
                }
                // (The rest of a window the device faulted on: counted.)
                if rounds == 0 && !self.cpu_only {
                    self.pool.stats.pt_faults.add(1, Relaxed);
                }
                // The device's cancelled fault was the handler's already.
                if inline
                    || self.cpu_only
                    || rounds >= MAX_REPLAYS
                    || self.unserved.contains(&Some(off))
                {
                    break table.missing_leaves(dst_first, dst_pages)
                        + table.missing_leaves(src_first, src_pages);
                }
                self.faults_from(table, job, off)
            };
            rounds += 1;
            // The later windows this raise services ahead, and those an
            // earlier one did.
            let raised = faults.windows.iter().flatten().map(|&(o, ..)| o);
            self.ahead = later(
                off,
                Iterator::chain(raised, self.ahead.iter().flatten().copied()),
            );
            let replay = self.raise(mm, mirror, &faults)?;
            clock.lap_job(JobPhase::Walk);
            if !replay {
                rounds = MAX_REPLAYS;
            }
            cancel.check()?;
        };
        let mut spare = Spare::new(missing)?;
        let mut dst_pfns = KVec::from_elem(HmmPfn::NONE, dst_pages, GFP_KERNEL)?;
        let mut src_pfns = KVec::from_elem(HmmPfn::NONE, src_pages, GFP_KERNEL)?;
        let mut cow_breaks = 0;
        loop {
            cancel.check()?;
            // Read before the walk: an invalidation after it makes a
            // replica recorded with it stale (see `crate::generation`).
            let mut charge = None;
            let replicas = replica_block
                .filter(|&(first, end, _)| sealed(first, end))
                .map(|(first, end, dst)| {
                    let block = first & !(BLOCK_SIZE - 1);
                    (
                        block,
                        (first, end),
                        dst,
                        generation::current(&self.process, block),
                    )
                })
                .filter(|&(block, ..)| {
                    charge = self.pool.replica_room(key, block);
                    charge.is_some()
                });
            // The block's charge, for the window that takes it.
            let charge = core::cell::Cell::new(charge);
            let dst_walk = match mirror.fault(mm, dst_first, &mut dst_pfns, write, owner, cancel) {
                Err(e) if e == EBUSY => continue,
                // The mapping changed since the check: no access.
                Err(e) if e == EPERM => return Err(EACCES),
                r => r?,
            };
            let src_walk = if src.is_some() {
                match mirror.fault(mm, src_first, &mut src_pfns, false, owner, cancel) {
                    Err(e) if e == EBUSY => continue,
                    r => Some(r?),
                }
            } else {
                None
            };
            // Replicas only of pages no one writes without an invalidation
            // first: a change of the VMAs after the walk makes it stale.
            let replicas = replicas.filter(|&(_, (first, end), ..)| sealed(first, end));
            clock.lap_job(JobPhase::Walk);
            // The tables' room, made before the lock (nothing below
            // allocates under it: see `page_table`); they go (unmapping
            // their pages) before the guard does.
            let mut guard;
            let mut dst_pt = PageTable::with_capacity(dst_pages)?;
            let mut src_pt = PageTable::with_capacity(src_pages)?;
            guard = mirror.lock();
            let dst_found = match guard.pages(&dst_walk) {
                Err(e) if e == EAGAIN => continue,
                r => r?,
            };
            let src_found = match src_walk.as_ref().map(|w| guard.pages(w)) {
                None => Pages::empty(),
                Some(Err(e)) if e == EAGAIN => continue,
                Some(r) => r?,
            };
            // A device page mapped read-only (shared copy-on-write after a
            // fork) comes back as it is even when writing: `hmm_range_fault`
            // reports its owner's device pages without faulting them. Move
            // the window's pages to system RAM, where the write fault copies
            // them (only the job's own range: next to it may be anything).
            // The pages are looked at under the lock, while the sequence
            // holds them: unlocked, a page could move and its chunk's memmap
            // be removed meanwhile.
            if write && dst_found.any_device_read_only() {
                drop((dst_pt, src_pt));
                drop(guard);
                cow_breaks += 1;
                if cow_breaks > 8 {
                    return Err(EAGAIN);
                }
                crate::migrate::to_system(mm, dst_first, dst_pages * PAGE_SIZE, cancel)?;
                clock.lap_job(JobPhase::Place);
                continue;
            }
            // Met under a valid sequence: eviction follows them here.
            self.pool.renew(mm, &dst_found);
            self.pool.renew(mm, &src_found);
            // The pages stay as found while `guard` is held. Replicas are
            // used (and made) only if the block's generation is still the
            // one read before the walk.
            let replicas = replicas
                .filter(|&(block, .., g)| generation::current(&self.process, block) == g)
                .map(|(block, _, dst, g)| (block, dst, g));
            // Replicas the job reads are not given to another process's
            // block before this ends (after the tables and the lock).
            let _reader = replicas.map(|_| self.pool.replica_reader());
            // The store is held while the replicated table is made.
            let window = |dst: bool| {
                replicas.filter(|r| r.1 == dst).and_then(|(block, _, g)| {
                    let c = charge.take()?;
                    self.pool.replica_window(key, block, g, c)
                })
            };
            let bound = self
                .page_table(&dst_found, dst_first, &mut dst_pt, window(true).as_mut())
                .and_then(|()| {
                    let mut w = window(false);
                    self.page_table(&src_found, src_first, &mut src_pt, w.as_mut())
                });
            clock.lap_job(JobPhase::Bind);
            let res = bound.and_then(|()| {
                self.execute(
                    job.op,
                    dst - job.addr,
                    &dst_pt,
                    dst - dst_first,
                    &src_pt,
                    src.map_or(0, |s| s - src_first),
                    n,
                    done,
                )
            });
            clock.lap_job(JobPhase::Exec);
            if res.is_ok() {
                dst_pt.tally(done);
                src_pt.tally(done);
            }
            // What the job may have written by DMA is marked so (a clean
            // writable page is dropped by reclaim); then the DMA and P2P
            // mappings go, while the pages are still valid.
            if write {
                dst_pt.dma.iter().for_each(|m| m.sys().written());
            }
            drop((dst_pt, src_pt));
            // The fault's entries that stay valid until the mm changes
            // them go into the VM's table (the walks are still valid: the
            // lock was held throughout).
            // (A bind that fails only binds less: the job's result stands.)
            let dev = self.dev;
            let mut bound = guard
                .bind(&dst_walk, dev, &mut spare, |a, p| self.kept(a, p))
                .unwrap_or(0);
            if let Some(w) = &src_walk {
                bound += guard
                    .bind(w, dev, &mut spare, |a, p| self.kept(a, p))
                    .unwrap_or(0);
            }
            self.pool.stats.pt_bound.add(bound, Relaxed);
            drop(guard);
            clock.lap_job(JobPhase::Bind);
            trace::pt_fault(self.pool.index(), dst_first, dst_pages, bound, &res);
            return res;
        }
    }

    /// Fills `pt` with device addresses for the pages `hmm_range_fault`
    /// found from address `first`, and counts the pages it uses in place
    /// that are not in this device's memory ([`access::add`]). Runs under
    /// the mirror lock, which reclaim can wait for (an invalidation takes
    /// it): it must not allocate what can wait, so `pt` comes with room
    /// for every page (a block's policy state is `GFP_NOWAIT`).
    fn page_table<'g>(
        &self,
        pages: &Pages<'g>,
        first: usize,
        pt: &mut PageTable<'g>,
        mut replicas: Option<&mut ReplicaWindow<'_>>,
    ) -> Result
    where
        'p: 'g,
    {
        pt.entries.clear();
        pt.dma.clear();
        pt.p2p.clear();
        // Pages not in this device's memory, counted per 2 MiB block: the
        // block's first page index in the table and the count.
        let mut remote = (0, 0);
        let on = access::enabled();
        let count = |(at, n): (usize, u64)| {
            if on && n > 0 {
                access::add(&self.process, self.pool.index(), first + at * PAGE_SIZE, n);
                self.pool.stats.access_counted.add(n, Relaxed);
            }
        };
        for (i, page) in pages.iter().enumerate() {
            let page = page.ok_or(EFAULT)?;
            let found = self.pool.locate(page);
            if let Some((pool, off)) = found {
                pool.note_used(off, self.epoch);
            }
            let at = first + i * PAGE_SIZE;
            if at % BLOCK_SIZE == 0 {
                count(remote);
                remote = (i, 0);
            }
            let addr = match found {
                Some((pool, off)) if self.pool.is(pool) => DevAddr::Vram(off),
                // A peer's page: `hmm_range_fault` left it where it is
                // because the peer shares our owner group, i.e. we reach it
                // over P2P.
                Some((pool, off)) => {
                    let map = PeerMap::map(self.dev, pool.bar()?.phys(off)).ok_or(ENOMEM)?;
                    let a = map.addr();
                    pt.p2p
                        .push_within_capacity(PeerPage {
                            map,
                            pool,
                            offset: off,
                        })
                        .map_err(|_| ENOMEM)?;
                    DevAddr::Peer(a)
                }
                // Another owner's device page, or a page the kernel must
                // not touch (secretmem): no access, as GUP refuses them.
                None if page.is_device_private() || page.is_secretmem() => return Err(EFAULT),
                // A system page of a read-mostly range: its replica here,
                // unless something may write it through a DMA pin.
                None if replicas.is_some() && !page.maybe_dma_pinned() => {
                    let w = replicas.as_deref_mut().ok_or(EINVAL)?;
                    DevAddr::Vram(w.replica(at / PAGE_SIZE % BLOCK_PAGES, page)?)
                }
                None => {
                    let m = DmaPage::map(self.dev, page).ok_or(ENOMEM)?;
                    let a = m.addr();
                    pt.dma.push_within_capacity(m).map_err(|_| ENOMEM)?;
                    DevAddr::Dma(a)
                }
            };
            if !matches!(addr, DevAddr::Vram(_)) {
                remote.1 += 1;
            }
            pt.entries.push_within_capacity(addr).map_err(|_| ENOMEM)?;
        }
        count(remote);
        pt.dma.sort_unstable_by_key(|m| m.addr());
        pt.p2p.sort_unstable_by_key(|m| m.map.addr());
        Ok(())
    }

    /// Runs `op` over `n` bytes from `doff` of the `dst` table (and `soff`
    /// of the `src` table), the job's bytes from `joff` on (where a FILL's
    /// pattern goes on from).
    #[allow(clippy::too_many_arguments)]
    fn execute<D: Decode>(
        &mut self,
        op: Op,
        joff: usize,
        dst: &D,
        doff: usize,
        src: &D,
        soff: usize,
        n: usize,
        done: &mut Done,
    ) -> Result {
        let pool = self.pool;
        let buf = &mut self.buf[..];
        let mut k = 0;
        while k < n {
            let d = doff + k;
            let (dp, dpo) = (dst.at(d / PAGE_SIZE)?, d % PAGE_SIZE);
            let mut step = (PAGE_SIZE - dpo).min(n - k);
            match op {
                Op::Fill(p) => {
                    p.write(joff + k, &mut buf[..step]);
                    dev_write(pool, dp, dpo, &buf[..step])?;
                }
                Op::Checksum => {
                    dev_read(pool, dp, dpo, &mut buf[..step])?;
                    done.result = fnv1a(done.result, &buf[..step]);
                }
                Op::Copy { .. } => {
                    let s = soff + k;
                    let (sp, spo) = (src.at(s / PAGE_SIZE)?, s % PAGE_SIZE);
                    step = step.min(PAGE_SIZE - spo);
                    dev_read(pool, sp, spo, &mut buf[..step])?;
                    dev_write(pool, dp, dpo, &buf[..step])?;
                }
                Op::AtomicAdd(v) => dev_add(pool, dp, dpo, step, v)?,
            }
            k += step;
        }
        Ok(())
    }
}

/// The address decoder's access: reads `buf.len()` bytes at `off` of the
/// page at `a`.
fn dev_read(pool: &VramPool, a: Target<'_>, off: usize, buf: &mut [u8]) -> Result {
    let s = &pool.stats;
    match a {
        Target::Vram(base) => {
            pool.bar()?.read(base + off, buf)?;
            s.engine_vram_read
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Sys(page) => {
            page.read(off, buf);
            s.engine_sys_read
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Peer(peer, base) => {
            peer.bar()?.read(base + off, buf)?;
            s.count_p2p(peer.index(), buf.len(), 0);
        }
    }
    Ok(())
}

/// The address decoder, for writes.
fn dev_write(pool: &VramPool, a: Target<'_>, off: usize, buf: &[u8]) -> Result {
    let s = &pool.stats;
    match a {
        Target::Vram(base) => {
            pool.bar()?.write(base + off, buf)?;
            s.engine_vram_written
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Sys(page) => {
            page.write(off, buf);
            s.engine_sys_written
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Peer(peer, base) => {
            peer.bar()?.write(base + off, buf)?;
            s.count_p2p(peer.index(), 0, buf.len());
        }
    }
    Ok(())
}

/// Adds `v` to each `u64` of `[off, off + len)` of the page at `a`.
fn dev_add(pool: &VramPool, a: Target<'_>, off: usize, len: usize, v: u64) -> Result {
    let s = &pool.stats;
    match a {
        Target::Vram(base) => {
            vram_add(pool, base + off, len, v)?;
            let len = u64::from_safe_cast(len);
            s.engine_vram_read.add(len, Relaxed);
            s.engine_vram_written.add(len, Relaxed);
        }
        Target::Peer(peer, base) => {
            vram_add(peer, base + off, len, v)?;
            s.count_p2p(peer.index(), len, len);
        }
        Target::Sys(page) => {
            for w in (off..off + len).step_by(8) {
                page.add_u64(w, v);
            }
            let len = u64::from_safe_cast(len);
            s.engine_sys_read.add(len, Relaxed);
            s.engine_sys_written.add(len, Relaxed);
        }
    }
    Ok(())
}

/// Read-modify-write of VRAM words through `owner`'s BAR, serialised by the
/// owning device's mutex (the engines of all devices take it).
fn vram_add(owner: &VramPool, at: usize, len: usize, v: u64) -> Result {
    let _g = owner.atomics.lock();
    for w in (at..at + len).step_by(8) {
        let mut x = [0u8; 8];
        owner.bar()?.read(w, &mut x)?;
        let y = u64::from_ne_bytes(x).wrapping_add(v);
        owner.bar()?.write(w, &y.to_ne_bytes())?;
    }
    Ok(())
}

/// The peer pool and BAR offset the job mapped at bus address `d`.
fn decode_peer<'a>(pt: &'a PageTable<'_>, d: u64) -> Result<(&'a VramPool, usize)> {
    let i = pt
        .p2p
        .binary_search_by_key(&d, |m| m.map.addr())
        .map_err(|_| EFAULT)?;
    Ok((pt.p2p[i].pool, pt.p2p[i].offset))
}

/// The DMA mapping of the system page the job mapped at DMA address `d`.
fn decode_dma<'a, 'p>(pt: &'a PageTable<'p>, d: u64) -> Result<&'a DmaPage<'p>> {
    let i = pt
        .dma
        .binary_search_by_key(&d, |m| m.addr())
        .map_err(|_| EFAULT)?;
    Ok(&pt.dma[i])
}

#[kunit_tests(msvm_engine)]
mod tests {
    use super::*;

    /// A pattern of `n` bytes: 1, 2, ..., n.
    fn counting(n: usize) -> Result<Pattern> {
        Pattern::read(n, |buf| {
            for (i, b) in buf.iter_mut().enumerate() {
                // CAST: `i` < 128.
                *b = i as u8 + 1;
            }
            Ok(())
        })
    }

    #[test]
    fn pattern_repeats_from_the_first_byte() -> Result {
        for n in [1, 2, 3, 8, 100, 128] {
            let p = counting(n)?;
            // A job of 700 bytes cut into windows at several places, each
            // written from its offset in the job: each byte gets the
            // pattern's byte of its offset.
            for cut in [0, 1, 5, 129, 333] {
                let mut buf = [0u8; 700];
                let (a, b) = buf.split_at_mut(cut);
                p.write(0, a);
                let (b0, b1) = b.split_at_mut(200.min(b.len()));
                p.write(cut, b0);
                p.write(cut + 200, b1);
                for (i, &x) in buf.iter().enumerate() {
                    // CAST: below 129.
                    assert_eq!(x, (i % n) as u8 + 1);
                }
            }
        }
        Ok(())
    }

    #[test]
    fn pattern_word_is_memory_order() {
        let mut buf = [0u8; 11];
        Pattern::word(0x0807_0605_0403_0201).write(0, &mut buf);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]);
    }

    #[test]
    fn pattern_lengths() {
        assert_eq!(counting(0), Err(EINVAL));
        assert_eq!(counting(PATTERN_MAX + 1), Err(EINVAL));
        assert_eq!(Pattern::read(4, |_| Err(EFAULT)), Err(EFAULT));
    }
}
