// SPDX-License-Identifier: GPL-2.0

//! A window's faults: those a miss raises ([`Raised`], this window's and
//! the next ones'), the job's context that services them on the device's
//! fault handler ([`JobService`]), and what the handler leaves to the job,
//! serviced in the job's own context for the device
//! ([`Engine::serve_window`]).

use kernel::{
    mm::MmWithUser,
    new_mutex,
    prelude::*,
    sync::{atomic::Relaxed, Mutex},
    time::{Instant, Monotonic},
};

use crate::mm::{
    cancel::Cancel,
    devpt::{Bind, DevPt, Spare},
    devtables::DevMirror,
    faultq::{Access, Fault, Served, Service, MAX_RAISE},
    hmm::{HmmPfn, Pages},
    page::BLOCK_SIZE,
    pagemap::PAGE_SIZE,
    trace,
};

use super::{Engine, Job, Op, WindowPages, MAX_REPLAYS};

/// Windows of a job whose faults a miss raises together: this one and up
/// to 7 after it (a GPU's threads fault at once), as [`MAX_RAISE`] allows
/// (a COPY's window may raise three).
pub(super) const LOOKAHEAD: usize = 8;

/// The job offsets after `off` among `offsets`, each once. They all lie
/// among the [`LOOKAHEAD`] windows from `off`'s: a raise looks no further.
pub(super) fn later(
    off: usize,
    offsets: impl Iterator<Item = usize>,
) -> [Option<usize>; LOOKAHEAD] {
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
pub(super) struct Raised {
    pub(super) list: [Fault; MAX_RAISE],
    pub(super) n: usize,
    /// Faults of the missing window itself.
    pub(super) current: usize,
    /// Each window's job offset and its faults' indices in `list`.
    pub(super) windows: [Option<(usize, usize, usize)>; LOOKAHEAD],
    /// The missing window's job offset.
    pub(super) off: usize,
    /// The table's leaves the faults' spans lack.
    pub(super) leaves: usize,
}

/// A job's context, servicing the faults it raised (on the device's fault
/// handler: `crate::fault`).
pub(super) struct JobService<'a, 'p> {
    pub(super) engine: &'a Engine<'p>,
    pub(super) mm: &'a MmWithUser,
    pub(super) mirror: &'a DevMirror,
    /// The leaves the faults may need, allocated by the job (charged to
    /// its memory cgroup, not the handler's).
    pub(super) spare: &'a Mutex<Spare>,
}

impl Service for JobService<'_, '_> {
    fn vm(&self) -> usize {
        core::ptr::from_ref(self.mirror) as usize
    }

    /// Binds every page of the fault's span as the process maps it now:
    /// kept entries where the job's ranges keep them (see
    /// [`Engine::binding`]), entries the placement policies look behind
    /// ([`Life::Job`](crate::mm::devpt::Life::Job)) elsewhere. It never waits on the process: the walk
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
            let bound = guard.bind(&walk, e.dev, &mut spare, |a, p| {
                let b = e.entry(a, p);
                if let Some((how, _)) = b {
                    asked[match how {
                        Bind::Own => 0,
                        Bind::Dma => 1,
                        Bind::Peer(_) => 2,
                    }] += 1;
                }
                b
            });
            let bound = match bound {
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

impl Engine<'_> {
    /// The faults a miss at bytes `off` of `job` raises: the spans of
    /// this window and of the next [`LOOKAHEAD`] ones that `table` does not
    /// map with the access the job needs, each within one 2 MiB block.
    pub(super) fn faults_from(&self, table: &DevPt, job: &Job, off: usize) -> Raised {
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
    pub(super) fn raise(
        &mut self,
        mm: &MmWithUser,
        mirror: &DevMirror,
        faults: &Raised,
    ) -> Result<bool> {
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

    /// Services the faults of bytes `[off, off + n)` of `job` in the job's
    /// own context, for the device to run them (what the fault handler
    /// leaves to the job: a page not present, or not with the access, a
    /// copy-on-write break, another device's page, a busy mmap lock, an
    /// invalidation in flight). As the CPU's execution of a window does
    /// (`super::Engine::window`), it faults the pages in
    /// ([`DevMirror::fault`]: killable, it may wait on the process, with
    /// nothing of the device's held), moves a device's read-only pages
    /// home to write them, then binds every page into the VM's table as
    /// the handler would ([`Self::entry`]). `true` if the window's pages
    /// all have entries with the access it needs; `false` if not (an
    /// invalidation kept changing them, a page that gets no entry: the
    /// window is the CPU's). `EACCES` for a mapping no longer writable,
    /// and what the walk fails with (`EFAULT`, a fatal signal).
    pub(super) fn serve_window(
        &self,
        (mm, mirror, cancel): (&MmWithUser, &DevMirror, &Cancel<'_>),
        job: &Job,
        (off, n): (usize, usize),
        write: bool,
    ) -> Result<bool> {
        let w = WindowPages::new(job, (off, n));
        let owner = self.pool.owner();
        let mut dst_pfns = KVec::from_elem(HmmPfn::NONE, w.dst_pages, GFP_KERNEL)?;
        let mut src_pfns = KVec::from_elem(HmmPfn::NONE, w.src_pages, GFP_KERNEL)?;
        // Bounded: what keeps changing (an invalidation, a copy-on-write
        // break again) is left to the CPU.
        for _ in 0..MAX_REPLAYS {
            cancel.check()?;
            // The leaves the binds need, allocated before the lock.
            let missing = {
                let guard = mirror.lock();
                let t = guard.table();
                t.missing_leaves(w.dst_first, w.dst_pages)
                    + t.missing_leaves(w.src_first, w.src_pages)
            };
            let mut spare = Spare::new(missing)?;
            let dst = match mirror.fault(mm, w.dst_first, &mut dst_pfns, write, owner, cancel) {
                Err(e) if e == EBUSY => continue,
                // The mapping changed since the job's check: no access.
                Err(e) if e == EPERM => return Err(EACCES),
                r => r?,
            };
            let src = match w.src {
                None => None,
                Some(_) => match mirror.fault(mm, w.src_first, &mut src_pfns, false, owner, cancel)
                {
                    Err(e) if e == EBUSY => continue,
                    r => Some(r?),
                },
            };
            let mut guard = mirror.lock();
            let cow = {
                let dst_found = match guard.pages(&dst) {
                    Err(e) if e == EAGAIN => continue,
                    r => r?,
                };
                let src_found = match src.as_ref().map(|s| guard.pages(s)) {
                    None => Pages::empty(),
                    Some(Err(e)) if e == EAGAIN => continue,
                    Some(r) => r?,
                };
                let cow = write && dst_found.any_device_read_only();
                if !cow {
                    // Met under a valid sequence: eviction follows them here.
                    self.pool.renew(mm, &dst_found);
                    self.pool.renew(mm, &src_found);
                }
                cow
            };
            // A device page mapped read-only (shared copy-on-write after a
            // fork) comes back as it is even when writing: moved to system
            // RAM, where the write fault copies it.
            if cow {
                drop(guard);
                crate::migrate::to_system(mm, w.dst_first, w.dst_pages * PAGE_SIZE, cancel)?;
                continue;
            }
            // Every entry written counts, whatever comes of the window.
            let bound = &self.pool.stats.pt_bound;
            // A bind that fails otherwise (no leaf left, a mapping that
            // failed) leaves the window to the CPU, which meets it again,
            // or not.
            let dst_bound = guard.bind(&dst, self.dev, &mut spare, |a, p| self.entry(a, p));
            let mut written = match dst_bound {
                Err(e) if e == EAGAIN => continue,
                Err(_) => return Ok(false),
                Ok(b) => b,
            };
            bound.add(written, Relaxed);
            if let Some(src) = &src {
                let m = match guard.bind(src, self.dev, &mut spare, |a, p| self.entry(a, p)) {
                    Err(e) if e == EAGAIN => continue,
                    Err(_) => return Ok(false),
                    Ok(b) => b,
                };
                bound.add(m, Relaxed);
                written += m;
            }
            trace::pt_fault(
                self.pool.index(),
                w.dst_first,
                w.dst_pages,
                written,
                &Ok(()),
            );
            let t = guard.table();
            return Ok(t.covers(w.dst_first, w.dst_pages, write, true)
                && t.covers(w.src_first, w.src_pages, false, true));
        }
        // An invalidation kept changing the pages.
        Ok(false)
    }
}
