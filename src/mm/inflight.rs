// SPDX-License-Identifier: GPL-2.0

//! The invalidations of a [`Mirror`](super::hmm::Mirror) in flight: what
//! lets a walk begin without `mmu_interval_read_begin()`, which in Linux
//! 7.3 sleeps uninterruptibly until no invalidation of the notifier's mm
//! is in flight (a few threads of one process looping `MADV_FREE` can keep
//! that from ever happening).
//!
//! An invalidation reaches the mirror's interval callback before the mm
//! core changes the page tables, and every `mmu_notifier`'s
//! `invalidate_range_end` once it has (after the interval tree's own end).
//! The mirror's callback records the invalidation here
//! ([`Inflight::began`], under the mirror's lock); a classic
//! `mmu_notifier` of this type, registered on the same mm, removes the
//! record at its end ([`Inflight::ended`]: the `mmu_notifier_range` is the
//! same object at start and end, so its address matches them); and a
//! counter (the generation) counts every invalidation the mirror was told
//! of. A walk may begin while nothing is recorded ([`State::Quiet`]):
//! every invalidation told before it has finished changing the page
//! tables, and one told after it changes the generation, which the walk is
//! checked against under the mirror's lock, as its sequence is.
//!
//! The notifier is registered before the mirror's interval is inserted,
//! so every invalidation the mirror's callback sees (one that starts after
//! the insertion) ends on a list that holds this notifier.
//!
//! The mm core numbers invalidation periods (`cur_seq`: one number for
//! invalidations that overlap), and a period ends only once every
//! invalidation of it has. So a record whose end never comes (a
//! non-blocking start that failed after the mirror's callback had
//! succeeded: the OOM reaper's; the process's exit, whose unmaps come
//! after the notifier left the list), the records there was no room for, and
//! the invalidations in flight when the interval was inserted (a deferred
//! insertion misses their callbacks: [`Inflight::missed`]) are forgotten
//! once their period is over: when a callback of a later period comes, or
//! when `mmu_interval_read_begin()` returns it ([`Inflight::settled`]).
//! Until then the mirror is not quiet.
//!
//! # Lock order
//!
//! The table's spinlock is innermost: it is taken inside the mirror's
//! lock (the callback) and inside the mm core's invalidations; nothing is
//! taken under it.

use kernel::{bindings, new_spinlock, prelude::*, sync::SpinLock, types::Opaque};

/// Invalidations the table records at once; more are lost (see the
/// module's documentation).
const SLOTS: usize = 32;

/// An invalidation in flight: its `mmu_notifier_range`'s address, its
/// period.
#[derive(Clone, Copy)]
struct Began {
    range: usize,
    period: usize,
}

/// What the spinlock holds.
struct Open {
    slots: [Began; SLOTS],
    len: usize,
    /// Invalidations were missed in this period: not quiet until it is
    /// over.
    lost: Option<usize>,
    /// Invalidations the mirror was told of (wrapping).
    generation: u64,
}

impl Open {
    /// Forgets what came in periods up to `period`, all over.
    fn forget_up_to(&mut self, period: usize) {
        // CAST: periods only grow; compared as a difference, as jiffies are.
        let over = |p: usize| period.wrapping_sub(p) as isize >= 0;
        let mut k = 0;
        for i in 0..self.len {
            if !over(self.slots[i].period) {
                self.slots[k] = self.slots[i];
                k += 1;
            }
        }
        self.len = k;
        if self.lost.is_some_and(over) {
            self.lost = None;
        }
    }
}

/// Whether a mirror's invalidations are in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// None: a walk may begin, checked against this generation.
    Quiet(u64),
    /// Some are, recorded: their ends will come.
    Open,
    /// Some may be, of this period, which only its end tells.
    Lost(usize),
}

/// A mirror's invalidations in flight, and the classic `mmu_notifier`
/// whose end callback removes them.
///
/// # Invariants
///
/// `sub` is the first field (the callback finds the table from it); if
/// `mm` is not null, `sub` is registered with that mm, with [`OPS`], until
/// drop.
#[repr(C)]
#[pin_data(PinnedDrop)]
pub(crate) struct Inflight {
    #[pin]
    sub: Opaque<bindings::mmu_notifier>,
    #[pin]
    open: SpinLock<Open>,
    mm: *mut bindings::mm_struct,
}

// SAFETY: the notifier is driven by the mm core's own locking; `mm` is an
// address the registration keeps (`mmgrab`), used to unregister only.
unsafe impl Send for Inflight {}
// SAFETY: see `Send`; the rest is a spinlock.
unsafe impl Sync for Inflight {}

/// The classic notifier's operations: only the end.
static OPS: bindings::mmu_notifier_ops = bindings::mmu_notifier_ops {
    invalidate_range_end: Some(ended_cb),
    // SAFETY: all-zeroes (no callback) is valid for the other fields.
    ..unsafe { core::mem::zeroed() }
};

/// `mmu_notifier_ops.invalidate_range_end`: forgets the invalidation.
///
/// # Safety
///
/// Called by the mm core for a notifier registered with [`OPS`] (only
/// [`Inflight::notifier`]s are).
unsafe extern "C" fn ended_cb(
    sub: *mut bindings::mmu_notifier,
    range: *const bindings::mmu_notifier_range,
) {
    // SAFETY: `sub` is the first field of a live `Inflight` (invariant;
    // only `Inflight` registers `OPS`): registered, hence alive, until
    // `mmu_notifier_unregister`, which waits for callbacks (SRCU).
    let this = unsafe { &*sub.cast::<Inflight>() };
    this.ended(range as usize);
}

impl Inflight {
    /// A table with nothing recorded, not registered yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            sub <- Opaque::ffi_init(|p: *mut bindings::mmu_notifier| {
                // SAFETY: all-zeroes, then the ops, is what registration
                // expects.
                unsafe {
                    core::ptr::write_bytes(p, 0, 1);
                    (*p).ops = &OPS;
                }
            }),
            open <- new_spinlock!(Open {
                slots: [Began { range: 0, period: 0 }; SLOTS],
                len: 0,
                lost: None,
                generation: 0,
            }),
            // INVARIANT: not registered.
            mm: core::ptr::null_mut(),
        })
    }

    /// Names `mm` as the notifier's (`null`: none): before the notifier
    /// is registered with it (no callback can run yet), or after its
    /// registration failed (unregistered, its callbacks waited for).
    ///
    /// # Safety
    ///
    /// `this` points to a pinned table that no reference points into;
    /// if `mm` is not null, the caller registers the notifier
    /// ([`Inflight::notifier`]) with it right after, and calls this again
    /// with `null` if that fails, with no drop in between.
    pub(crate) unsafe fn set_mm(this: *mut Self, mm: *mut bindings::mm_struct) {
        // SAFETY: a live table no one else references (the caller's
        // promise).
        // INVARIANT: registered with `mm` right after, or unset again (the
        // caller's promise).
        unsafe { (*this).mm = mm };
    }

    /// The classic notifier, to register (with [`OPS`], its ops already).
    ///
    /// # Safety
    ///
    /// `this` points to a live table.
    pub(crate) unsafe fn notifier(this: *mut Self) -> *mut bindings::mmu_notifier {
        // SAFETY: a live table (the caller's promise); only the field's
        // address is taken.
        unsafe { Opaque::cast_into(core::ptr::addr_of!((*this).sub)) }
    }

    /// The invalidations of period `period` may have reached the page
    /// tables unseen (those in flight when the interval was inserted):
    /// not quiet until that period is over.
    pub(crate) fn missed(&self, period: usize) {
        let mut o = self.open.lock();
        // The later of two periods (compared as a difference).
        o.lost = Some(match o.lost {
            // CAST: periods only grow.
            Some(p) if p.wrapping_sub(period) as isize > 0 => p,
            _ => period,
        });
    }

    /// The mirror was told of the invalidation at `range` of `period`
    /// (from its callback, under its lock, before the mm core changes the
    /// page tables).
    pub(crate) fn began(&self, range: usize, period: usize) {
        let mut o = self.open.lock();
        o.generation = o.generation.wrapping_add(1);
        // Earlier periods are over: a new one begins only once every
        // invalidation of the last one ended.
        o.forget_up_to(period.wrapping_sub(2));
        let len = o.len;
        if len < SLOTS {
            o.slots[len] = Began { range, period };
            o.len += 1;
        } else {
            o.lost = Some(period);
        }
    }

    /// The invalidation at `range` ended: the page tables are as it left
    /// them.
    fn ended(&self, range: usize) {
        let mut o = self.open.lock();
        let len = o.len;
        if let Some(i) = o.slots[..len].iter().position(|b| b.range == range) {
            o.slots[i] = o.slots[len - 1];
            o.len -= 1;
        }
    }

    /// `mmu_interval_read_begin()` returned `period`: it and every earlier
    /// one are over.
    pub(crate) fn settled(&self, period: usize) {
        self.open.lock().forget_up_to(period);
    }

    /// Whether invalidations are in flight.
    pub(crate) fn state(&self) -> State {
        let o = self.open.lock();
        match (o.len, o.lost) {
            (0, None) => State::Quiet(o.generation),
            (0, Some(p)) => State::Lost(p),
            _ => State::Open,
        }
    }

    /// The invalidations the mirror was told of so far (wrapping).
    pub(crate) fn generation(&self) -> u64 {
        self.open.lock().generation
    }
}

#[pinned_drop]
impl PinnedDrop for Inflight {
    fn drop(self: Pin<&mut Self>) {
        if !self.mm.is_null() {
            // SAFETY: registered with `mm` (invariant), which the
            // registration keeps (`mmgrab`); unregistered once, here. A
            // drop runs in process context (the owner's: a mirror's), and
            // this waits for the callbacks (SRCU).
            unsafe { bindings::mmu_notifier_unregister(self.sub.get(), self.mm) };
        }
    }
}

#[kunit_tests(msvm_inflight)]
mod tests {
    use super::*;

    fn table() -> Result<Pin<KBox<Inflight>>> {
        KBox::pin_init(Inflight::new(), GFP_KERNEL)
    }

    /// A mirror is quiet only while no invalidation it was told of is
    /// between its callback and its end; each told changes the
    /// generation.
    #[test]
    fn quiet_between_an_end_and_the_next_callback() -> Result {
        let t = table()?;
        let State::Quiet(g0) = t.state() else {
            return Err(EINVAL);
        };
        t.began(0x1000, 3);
        t.began(0x2000, 3);
        assert_eq!(t.state(), State::Open);
        t.ended(0x1000);
        assert_eq!(t.state(), State::Open);
        // An end the mirror was not told of (a range outside it) changes
        // nothing.
        t.ended(0x3000);
        assert_eq!(t.state(), State::Open);
        t.ended(0x2000);
        assert_eq!(t.state(), State::Quiet(g0.wrapping_add(2)));
        Ok(())
    }

    /// An end that never comes is forgotten once its period is over: by a
    /// callback of a later period, or `mmu_interval_read_begin()`
    /// returning it; not by another callback of its own period.
    #[test]
    fn an_orphan_goes_with_its_period() -> Result {
        let t = table()?;
        t.began(0x1000, 5);
        t.began(0x2000, 5);
        t.ended(0x2000);
        assert_eq!(t.state(), State::Open);
        t.began(0x2000, 7);
        t.ended(0x2000);
        assert!(matches!(t.state(), State::Quiet(_)));
        t.began(0x1000, 9);
        t.settled(7);
        assert_eq!(t.state(), State::Open);
        t.settled(9);
        assert!(matches!(t.state(), State::Quiet(_)));
        Ok(())
    }

    /// More invalidations than the table holds: not quiet until their
    /// period is over, even once every recorded one ended.
    #[test]
    fn lost_records_wait_for_their_period() -> Result {
        let t = table()?;
        for i in 0..=SLOTS {
            t.began(0x1000 * (i + 1), 11);
        }
        for i in 0..=SLOTS {
            t.ended(0x1000 * (i + 1));
        }
        assert_eq!(t.state(), State::Lost(11));
        t.settled(11);
        assert!(matches!(t.state(), State::Quiet(_)));
        // The period the mirror was inserted in: missed until over; the
        // later of two is kept.
        t.missed(13);
        t.missed(11);
        assert_eq!(t.state(), State::Lost(13));
        t.began(0x1000, 15);
        assert_eq!(t.state(), State::Open);
        t.ended(0x1000);
        assert!(matches!(t.state(), State::Quiet(_)));
        Ok(())
    }
}
