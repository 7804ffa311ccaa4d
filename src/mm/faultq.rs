// SPDX-License-Identifier: GPL-2.0

//! A device's fault queue: the faults its engine raises, serviced by the
//! driver's handler in batches while the faulting jobs wait (the GuC's
//! page-fault messages on Xe, the fault buffer of NVIDIA UVM).
//!
//! A job whose access misses the VM's device page table raises a fault for
//! it, with the faults its other windows would raise next (a GPU's many
//! threads fault at once), and waits ([`FaultQueue::raise`]). The handler
//! (a work item on the device's fault workqueue, `crate::fault`) takes
//! every queued fault as one batch ([`FaultQueue::drain`]), groups them by
//! VM, 2 MiB block and access, merges the overlapping or adjacent spans of
//! a group, services each span once through the faulting job's
//! [`Service`] (fault by fault if the merged span is not bound), and
//! completes every fault of it with the result; the job then replays its
//! access from the table.
//!
//! The queue holds [`DEPTH`] faults, as hardware's fault buffer holds so
//! many entries: the faults a full queue has no room for come back to the
//! job unserviced (it services them itself).
//!
//! Each fault borrows its job's context (the [`Service`]: the VM, its mm,
//! the device, what the job binds). A job does not return from
//! [`FaultQueue::raise`] before every fault it queued is completed, and
//! the handler completes a fault only after its last use of the context:
//! that is this file's one promise to the compiler. The wait cannot be
//! interrupted, so a [`Service`] must be bounded: it must never wait on
//! the process (a page fault stuck in user space: FUSE, userfaultfd) nor
//! on anything a waiting job holds. msvm's walks what is mapped, once no
//! invalidation of the job's mirror is in flight (else it waits for none:
//! `crate::mm::inflight`) and with the mmap lock only tried, and leaves
//! anything more to the job (see `crate::engine`). `kick` runs with faults
//! queued: it must return.
//!
//! # Lock order
//!
//! The queue's lock is innermost: nothing is taken under it but the
//! workqueue's own (queuing the handler), and nothing is serviced under it.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ptr::NonNull;

use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        CondVar, Mutex,
    },
    time::{Instant, Monotonic},
};

use super::page::{BLOCK_SIZE, PAGE_SIZE};

/// Faults the queue holds.
pub(crate) const DEPTH: usize = 64;

/// Faults one job raises at once.
pub(crate) const MAX_RAISE: usize = 16;

/// The access a fault asks for (what the device reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Access {
    Read,
    Write,
    Atomic,
}

/// One fault, as the device reports it: pages `[addr, addr + pages *
/// PAGE_SIZE)` (within one 2 MiB block), the access, the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) addr: usize,
    pub(crate) pages: usize,
    pub(crate) access: Access,
    pub(crate) engine: u16,
}

impl Fault {
    fn end(&self) -> usize {
        self.addr + self.pages * PAGE_SIZE
    }

    fn block(&self) -> usize {
        self.addr / BLOCK_SIZE
    }
}

/// How a fault was serviced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// Its pages have entries: the number written.
    Bound(u64),
    /// It needs the faulting job's own context (a copy-on-write break
    /// moves pages, charged to the process): the job services it.
    InContext,
}

/// The faulting job's context, which services its faults.
pub(crate) trait Service: Sync {
    /// The VM the faults are of: one VM's faults in one 2 MiB block are
    /// serviced together.
    fn vm(&self) -> usize;

    /// Services `fault`: resolves its pages and writes their entries.
    fn service(&self, fault: &Fault) -> Result<Served>;
}

/// What the handler did, for `STATS` (relaxed counters).
pub(crate) struct Counters {
    /// Faults raised and queued (not those a full queue had no room for).
    pub(crate) faults: Atomic<u64>,
    /// Batches the handler took.
    pub(crate) batches: Atomic<u64>,
    /// Spans serviced (after grouping and merging).
    pub(crate) spans: Atomic<u64>,
    /// Pages of the spans serviced.
    pub(crate) pages: Atomic<u64>,
    /// Nanoseconds the handler spent servicing.
    pub(crate) ns: Atomic<u64>,
    /// Raises that found the queue full (their faults that did not fit
    /// went back to their jobs).
    pub(crate) full: Atomic<u64>,
}

/// One job's faults, on its stack while it waits.
///
/// # Invariants
///
/// The borrow `vm.data` was cast from lasts until every fault of this
/// raise is completed (`pending` is 0): the raising job does not return
/// before. `results` and `pending`
/// are accessed with the queue's lock held only.
struct Raise {
    vm: Context,
    faults: [Fault; MAX_RAISE],
    results: UnsafeCell<[Option<Result<Served>>; MAX_RAISE]>,
    pending: UnsafeCell<usize>,
}

/// A job's context as a raise holds it: a pointer to the job's
/// [`Service`], its type erased (the queue outlives every job's borrow),
/// and the functions that call it, made for that type (as a `RawWaker`
/// erases a waker's).
///
/// # Invariants
///
/// `data` was cast from a `&S`, for one `S: Service` (hence `Sync`), and
/// `vm` and `service` are the functions of [`Context::of`] made for that
/// `S`.
#[derive(Clone, Copy)]
struct Context {
    data: NonNull<()>,
    vm: unsafe fn(NonNull<()>) -> usize,
    service: unsafe fn(NonNull<()>, &Fault) -> Result<Served>,
}

impl Context {
    /// The context `job`.
    fn of<S: Service>(job: &S) -> Self {
        /// # Safety
        ///
        /// `p` was cast from a `&S` still valid for the call (which may be
        /// made from another thread: `S: Sync`).
        unsafe fn vm<S: Service>(p: NonNull<()>) -> usize {
            // SAFETY: the caller's promise.
            unsafe { p.cast::<S>().as_ref() }.vm()
        }
        /// # Safety
        ///
        /// As `vm`'s.
        unsafe fn service<S: Service>(p: NonNull<()>, f: &Fault) -> Result<Served> {
            // SAFETY: the caller's promise.
            unsafe { p.cast::<S>().as_ref() }.service(f)
        }
        // INVARIANT: `data` is `job` cast, the functions made for `S`.
        Self {
            data: NonNull::from(job).cast(),
            vm: vm::<S>,
            service: service::<S>,
        }
    }
}

/// A queued job's context, for as long as `'a`.
///
/// # Invariants
///
/// The borrow `ctx.data` was cast from (see [`Context`]'s invariant)
/// lasts at least `'a`.
#[derive(Clone, Copy)]
struct ServiceRef<'a> {
    ctx: Context,
    _live: PhantomData<&'a ()>,
}

impl ServiceRef<'_> {
    /// [`Service::vm`].
    fn vm(&self) -> usize {
        // SAFETY: `data` was cast from a `&S` and `vm` made for that `S`
        // (`Context` invariant), a borrow valid for `'a` (type invariant).
        unsafe { (self.ctx.vm)(self.ctx.data) }
    }

    /// [`Service::service`].
    fn service(&self, fault: &Fault) -> Result<Served> {
        // SAFETY: as in `vm`.
        unsafe { (self.ctx.service)(self.ctx.data, fault) }
    }
}

/// A queued fault: fault `idx` of a raise.
#[derive(Clone, Copy)]
struct Entry {
    raise: NonNull<Raise>,
    idx: usize,
}

/// The queued faults.
struct Ring {
    entries: [Option<Entry>; DEPTH],
    len: usize,
}

// SAFETY: an `Entry` points to a `Raise` whose job waits for it (see
// `Raise`); the handler uses it from its own thread, which `Service: Sync`
// allows (`Context::of` takes only an `S: Service`), and its cells under
// the queue's lock only.
unsafe impl Send for Ring {}

/// A device's fault queue.
#[pin_data]
pub(crate) struct FaultQueue {
    #[pin]
    ring: Mutex<Ring>,
    /// Signalled when faults complete.
    #[pin]
    done: CondVar,
    pub(crate) counters: Counters,
    /// The device's index (for trace events).
    index: usize,
}

impl FaultQueue {
    /// The fault queue of device `index`.
    pub(crate) fn new(index: usize) -> impl PinInit<Self> {
        pin_init!(Self {
            ring <- new_mutex!(Ring {
                entries: [None; DEPTH],
                len: 0,
            }),
            done <- new_condvar!(),
            counters: Counters {
                faults: Atomic::new(0),
                batches: Atomic::new(0),
                spans: Atomic::new(0),
                pages: Atomic::new(0),
                ns: Atomic::new(0),
                full: Atomic::new(0),
            },
            index,
        })
    }

    /// Queues `faults` (at most [`MAX_RAISE`]; the rest are ignored) of the
    /// job whose context is `vm`, calls `kick` to run the handler, and waits
    /// until every one queued is serviced; `out[i]` gets fault `i`'s result,
    /// `None` for a fault the full queue had no room for (the job services
    /// it: a job never waits for room, which another could always take
    /// first). Sleeps; the caller holds no lock the handler's service takes.
    pub(crate) fn raise<S: Service>(
        &self,
        vm: &S,
        faults: &[Fault],
        kick: impl Fn(),
        out: &mut [Option<Result<Served>>],
    ) {
        let n = faults.len().min(MAX_RAISE).min(out.len());
        if n == 0 {
            return;
        }
        let mut list = [faults[0]; MAX_RAISE];
        list[..n].copy_from_slice(&faults[..n]);
        // INVARIANT: this function returns only once `pending` is 0, and
        // `vm` is borrowed until then.
        let raise = Raise {
            vm: Context::of(vm),
            faults: list,
            results: UnsafeCell::new([None; MAX_RAISE]),
            // Set once the faults that fit are known, under the lock.
            pending: UnsafeCell::new(0),
        };
        let c = &self.counters;
        let mut ring = self.ring.lock();
        let queued = n.min(DEPTH - ring.len);
        if queued < n {
            c.full.add(1, Relaxed);
        }
        if queued == 0 {
            out[..n].fill(None);
            return;
        }
        c.faults.add(queued as u64, Relaxed);
        // SAFETY: under the queue's lock (`Raise` invariant); nothing is
        // queued yet.
        unsafe { *raise.pending.get() = queued };
        for idx in 0..queued {
            let len = ring.len;
            ring.entries[len] = Some(Entry {
                raise: NonNull::from(&raise),
                idx,
            });
            ring.len += 1;
        }
        kick();
        // SAFETY: under the queue's lock (`Raise` invariant).
        while unsafe { *raise.pending.get() } != 0 {
            self.done.wait(&mut ring);
        }
        // SAFETY: under the queue's lock; the handler is done with `raise`.
        let results = unsafe { &*raise.results.get() };
        out[..n].copy_from_slice(&results[..n]);
    }

    /// The handler: services the queued faults, a batch at a time, until
    /// the queue is empty. Reschedules between spans.
    pub(crate) fn drain(&self) {
        loop {
            let mut batch = [None; DEPTH];
            let n = {
                let mut ring = self.ring.lock();
                let n = ring.len;
                batch[..n].copy_from_slice(&ring.entries[..n]);
                ring.entries = [None; DEPTH];
                ring.len = 0;
                n
            };
            if n == 0 {
                return;
            }
            let t0 = Instant::<Monotonic>::now();
            let (spans, pages, bound) = self.service_batch(&mut batch[..n]);
            // CAST: an elapsed time is not negative.
            let ns = t0.elapsed().as_nanos() as u64;
            let c = &self.counters;
            c.batches.add(1, Relaxed);
            c.spans.add(spans, Relaxed);
            c.pages.add(pages, Relaxed);
            c.ns.add(ns, Relaxed);
            super::trace::FaultBatch {
                dev: self.index,
                // CAST: at most `DEPTH`.
                faults: n as u64,
                spans,
                pages,
                bound,
                ns,
            }
            .fire();
        }
    }

    /// Services `batch`, grouped by VM, block and access, merging
    /// overlapping or adjacent spans of a group; completes each fault. Returns the spans serviced,
    /// their pages and the entries written.
    fn service_batch(&self, batch: &mut [Option<Entry>]) -> (u64, u64, u64) {
        let (mut spans, mut pages, mut bound) = (0, 0, 0);
        // SAFETY (each `fault` and `vm` below): the entries of `batch`
        // were taken from the ring; each is completed once its span is
        // serviced, after the last use of its fault and context.
        let key = |e: &Option<Entry>| {
            e.map_or((usize::MAX, usize::MAX, Access::Atomic, usize::MAX), |e| {
                // SAFETY: see above.
                let (f, vm) = unsafe { (Self::fault(e), Self::vm(e).vm()) };
                (vm, f.block(), f.access, f.addr)
            })
        };
        batch.sort_unstable_by_key(key);
        let mut i = 0;
        while i < batch.len() {
            let Some(first) = batch[i] else { break };
            // The merged span: overlapping or adjacent faults of one VM
            // in one block with one access (a read merged into a write
            // would ask a read-only mapping for write access).
            // SAFETY: see above.
            let (mut span, service) = unsafe { (Self::fault(first), Self::vm(first)) };
            let vm = service.vm();
            let mut j = i + 1;
            while let Some(e) = batch.get(j).copied().flatten() {
                // SAFETY: see above.
                let (f, other) = unsafe { (Self::fault(e), Self::vm(e).vm()) };
                if other != vm
                    || f.block() != span.block()
                    || f.access != span.access
                    || f.addr > span.end()
                {
                    break;
                }
                let end = span.end().max(f.end());
                span.pages = (end - span.addr) / PAGE_SIZE;
                j += 1;
            }
            let mut results = [None; DEPTH];
            let r = service.service(&span);
            // A merged span not bound is counted by its retries below.
            if j - i == 1 || matches!(r, Ok(Served::Bound(_))) {
                spans += 1;
                // CAST: at most a block's pages.
                pages += span.pages as u64;
            }
            match r {
                Ok(Served::Bound(b)) => {
                    bound += b;
                    // The span's entries are the first fault's to count.
                    results[..j - i].fill(Some(Ok(Served::Bound(0))));
                    results[0] = Some(r);
                }
                // One fault's pages must not fail another's: a merged span
                // that was not bound is serviced fault by fault.
                _ if j - i > 1 => {
                    for (k, e) in batch[i..j].iter().flatten().enumerate() {
                        // SAFETY: see above.
                        let f = unsafe { Self::fault(*e) };
                        let r = service.service(&f);
                        spans += 1;
                        // CAST: at most a block's pages.
                        pages += f.pages as u64;
                        if let Ok(Served::Bound(b)) = r {
                            bound += b;
                        }
                        results[k] = Some(r);
                        super::cancel::cond_resched();
                    }
                }
                r => results[0] = Some(r),
            }
            {
                let _ring = self.ring.lock();
                for (k, e) in batch[i..j].iter().flatten().enumerate() {
                    // SAFETY: the raise waits for this fault (`Raise`
                    // invariant), and the queue's lock is held.
                    unsafe {
                        let raise = e.raise.as_ref();
                        (*raise.results.get())[e.idx] = results[k];
                        *raise.pending.get() -= 1;
                    }
                }
                // The raises of `batch[i..j]` may return from here on:
                // nothing below uses them.
            }
            self.done.notify_all();
            super::cancel::cond_resched();
            i = j;
        }
        (spans, pages, bound)
    }

    /// The fault of a queued entry.
    ///
    /// # Safety
    ///
    /// `e` was taken from the ring and is not completed yet.
    unsafe fn fault(e: Entry) -> Fault {
        // SAFETY: the entry's raise waits for it (`Raise` invariant: the
        // caller's promise); `faults` is not written after queuing.
        unsafe { e.raise.as_ref().faults[e.idx] }
    }

    /// The context of a queued entry.
    ///
    /// # Safety
    ///
    /// `e` was taken from the ring, and is completed only after the last
    /// use of the returned reference.
    unsafe fn vm<'a>(e: Entry) -> ServiceRef<'a> {
        // SAFETY: the raise is valid until the entry is completed (`Raise`
        // invariant), after the last use (the caller's promise).
        let ctx = unsafe { e.raise.as_ref().vm };
        // INVARIANT: the context's borrow lasts until the entry is
        // completed (`Raise` invariant), which the caller promises is after
        // `'a`.
        ServiceRef {
            ctx,
            _live: PhantomData,
        }
    }
}
