// SPDX-License-Identifier: GPL-2.0

//! Thrashing detection: 2 MiB blocks of a process that keep changing place.
//!
//! A block *moves* when a job's placement pass migrated pages of it to a
//! device (migrate-on-access) or a CPU fault brought pages of it home. A
//! move within `lapse` of the block's previous one is a *thrashing event*;
//! a first move, or one after a longer gap, is not, and starts the count
//! again (UVM counts the same way: a page leaving soon after it arrived).
//! Before a placement pass moves a block it asks ([`before_move`]): a move
//! that would make the `threshold`th event is refused, and the block is
//! *pinned* instead; for `pin` milliseconds every device's placement passes
//! leave it where it is, and the jobs use it in place (system RAM by DMA, a
//! peer of the owner group over P2P; a device out of reach faults it home
//! first, as for any in-place job). A CPU fault cannot be refused: it
//! brings the pages home whatever the state, and if it makes the
//! `threshold`th event it pins the block in system RAM, where it brought
//! it. A placement pass that finds a block pinned keeps its history alive;
//! a block left alone for `epoch` is forgotten, and a block forgotten after
//! a pin more than `max_resets` times is not pinned again (it thrashes in
//! bursts: UVM's reasoning). An explicit MIGRATE or PREFETCH is the
//! runtime's decision: it ends the block's pin and count
//! ([`placed_explicitly`]); evictions are not recorded. UVM's
//! `uvm_perf_thrashing` is the model; `Documentation/placement.rst` gives
//! the knobs, their UVM anchors and the time scale here.
//!
//! The state is one word per block of the process's placement state
//! (`crate::process`), made by the first recorded move (asking does not),
//! freed when the block is unmapped or the process's last VM goes: a
//! history is the block's own, whatever other blocks and processes do.
//! Times wrap after 70 minutes, so a history untouched that long may look
//! recent again; a block the process could not record (at its
//! `policy_blocks`) is never pinned. Each costs at most a missed or a
//! needless pin, which changes where a job reads its data, never what it
//! reads.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;

use crate::mm::clock::now_ms;
use crate::process::Process;
use crate::topology::MAX_DEVICES;

/// Where a block is: the place a move sends it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    System,
    /// The msvm device of this index.
    Device(usize),
}

impl Place {
    /// The code of the place in a slot (0: not known).
    fn code(self) -> u64 {
        match self {
            Place::System => 1,
            // At most `MAX_DEVICES` (16) devices: codes 2 to 17 fit 5 bits.
            Place::Device(i) => 2 + u64::from_safe_cast(i % MAX_DEVICES),
        }
    }
}

// A device's place code fits its 5 bits.
const _: () = assert!(MAX_DEVICES <= 16);

/// The unit of the slot's times: 4 ms.
const TICK_MS: u64 = 4;

/// The knobs (module parameters `thrash*`), in ticks, clamped to what a
/// slot holds.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    threshold: u64,
    lapse: u64,
    pin: u64,
    epoch: u64,
    max_resets: u64,
}

impl Knobs {
    /// The module's knobs; `None` if thrashing detection is off (`thrash=0`).
    fn get() -> Option<Self> {
        use crate::module_parameters as p;
        if p::thrash.value() == 0 {
            return None;
        }
        Some(Self::new(
            u64::from(p::thrash_threshold.value()),
            u64::from(p::thrash_lapse_ms.value()),
            u64::from(p::thrash_pin_ms.value()),
            u64::from(p::thrash_epoch_ms.value()),
            u64::from(p::thrash_max_resets.value()),
        ))
    }

    /// Knobs from milliseconds, within the slot's fields: the threshold in
    /// its 3-bit count (2 to 7), the periods rounded up to ticks and under
    /// a quarter of the wrapping time fields (17.5 minutes), so that a
    /// wrapped difference is never taken for a short one while a history
    /// is in use.
    fn new(threshold: u64, lapse_ms: u64, pin_ms: u64, epoch_ms: u64, max_resets: u64) -> Self {
        let most = TIME_MASK >> 2;
        let ticks = |ms: u64| ms.div_ceil(TICK_MS).clamp(1, most);
        Self {
            threshold: threshold.clamp(2, COUNT_MASK),
            lapse: ticks(lapse_ms),
            pin: ticks(pin_ms),
            epoch: ticks(epoch_ms),
            max_resets: max_resets.min(RESETS_MASK - 1),
        }
    }
}

// A slot: tag (11 bits) | place (5) | count (3) | resets (3) | had a pin
// (1) | pinned (1) | last (20, ticks, wrapping) | pin end (20, ticks,
// wrapping).
const TAG_MASK: u64 = (1 << 11) - 1;
const PLACE_SHIFT: u32 = 11;
const PLACE_MASK: u64 = 0x1f;
const COUNT_SHIFT: u32 = 16;
const COUNT_MASK: u64 = 0x7;
const RESETS_SHIFT: u32 = 19;
const RESETS_MASK: u64 = 0x7;
const HAD_PIN_SHIFT: u32 = 22;
const PINNED_SHIFT: u32 = 23;
const LAST_SHIFT: u32 = 24;
const PIN_END_SHIFT: u32 = 44;
const TIME_MASK: u64 = (1 << 20) - 1;

/// The history of one block, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Block {
    tag: u64,
    /// [`Place::code`] of where it last went (0: no history).
    place: u64,
    /// Thrashing events in the current run.
    count: u64,
    /// Histories of it that were forgotten after a pin.
    resets: u64,
    /// This history had a pin.
    had_pin: bool,
    /// It has a pin, which ends at `pin_end`.
    pinned: bool,
    /// When it last moved or was found pinned (ticks, wrapping).
    last: u64,
    pin_end: u64,
}

/// How far in ticks a racing writer's clock may be ahead of ours: it read
/// the clock after we did, both before their stores (about one tick).
const SLACK: u64 = 256;

/// `a - b` in wrapping ticks; a difference within [`SLACK`] of the whole
/// range is `b` in `a`'s future (a racing writer read the clock after us):
/// zero.
fn since(a: u64, b: u64) -> u64 {
    let d = a.wrapping_sub(b) & TIME_MASK;
    if d > TIME_MASK - SLACK {
        0
    } else {
        d
    }
}

impl Block {
    fn from_word(w: u64) -> Self {
        Self {
            tag: w & TAG_MASK,
            place: (w >> PLACE_SHIFT) & PLACE_MASK,
            count: (w >> COUNT_SHIFT) & COUNT_MASK,
            resets: (w >> RESETS_SHIFT) & RESETS_MASK,
            had_pin: (w >> HAD_PIN_SHIFT) & 1 != 0,
            pinned: (w >> PINNED_SHIFT) & 1 != 0,
            last: (w >> LAST_SHIFT) & TIME_MASK,
            pin_end: (w >> PIN_END_SHIFT) & TIME_MASK,
        }
    }

    fn word(self) -> u64 {
        (self.tag & TAG_MASK)
            | (self.place & PLACE_MASK) << PLACE_SHIFT
            | (self.count & COUNT_MASK) << COUNT_SHIFT
            | (self.resets & RESETS_MASK) << RESETS_SHIFT
            | u64::from(self.had_pin) << HAD_PIN_SHIFT
            | u64::from(self.pinned) << PINNED_SHIFT
            | (self.last & TIME_MASK) << LAST_SHIFT
            | (self.pin_end & TIME_MASK) << PIN_END_SHIFT
    }

    /// Whether the block is `tag`'s, with a history.
    fn is(&self, tag: u64) -> bool {
        self.tag == tag && self.place != 0
    }

    /// Whether its pin holds at `now`: its end is at most `pin` ticks away
    /// (and [`SLACK`] more: a clock read before the pinner's).
    fn pin_holds(&self, now: u64, k: &Knobs) -> bool {
        let left = self.pin_end.wrapping_sub(now) & TIME_MASK;
        self.pinned && left > 0 && left <= k.pin + SLACK
    }

    /// The block as `tag`'s history at `now`, with an expired pin dropped
    /// (`unpinned`): a fresh one if the slot held another block's or this
    /// one's is older than `epoch` (a reset, counted if it had a pin).
    fn current(self, tag: u64, now: u64, k: &Knobs, v: &mut Verdict) -> Self {
        if self.tag != tag {
            return Self {
                tag,
                ..Self::default()
            };
        }
        if self.place == 0 {
            // Forgotten, its resets kept.
            return self;
        }
        let mut b = self;
        if b.pinned && !b.pin_holds(now, k) {
            b.pinned = false;
            v.unpinned = true;
        }
        if !b.pinned && since(now, b.last) > k.epoch {
            return Self {
                tag,
                resets: (b.resets + u64::from(b.had_pin)).min(RESETS_MASK),
                ..Self::default()
            };
        }
        b
    }

    /// Pins the block at `now`, if it may still be pinned.
    fn pin(&mut self, now: u64, k: &Knobs, v: &mut Verdict) {
        v.detected = true;
        self.count = 0;
        if self.resets <= k.max_resets {
            self.pinned = true;
            self.had_pin = true;
            self.pin_end = (now + k.pin) & TIME_MASK;
            self.last = now & TIME_MASK;
            v.pinned = true;
        }
    }

    /// Whether a move to `to` at `now` is a thrashing event.
    fn is_event(&self, to: u64, now: u64, k: &Knobs) -> bool {
        self.place != 0 && self.place != to && since(now, self.last) <= k.lapse
    }

    /// A placement pass asks to move the block to `to` at `now`: the new
    /// history and whether it stays where it is.
    fn ask(self, to: u64, now: u64, k: &Knobs, v: &mut Verdict) -> Self {
        let mut b = self;
        if b.pinned {
            // Thrashing still: keep the history alive.
            b.last = now & TIME_MASK;
            v.stay = b.place != to;
            v.avoided = v.stay;
            return b;
        }
        if b.is_event(to, now, k) && b.count + 1 >= k.threshold {
            b.pin(now, k, v);
            v.stay = b.pinned;
        }
        b
    }

    /// Pages of the block moved to `to` at `now` (a placement pass's move
    /// that was allowed, or a CPU fault's): the new history.
    fn moved(self, to: u64, now: u64, k: &Knobs, v: &mut Verdict) -> Self {
        let mut b = self;
        if b.place == to {
            if b.pinned {
                b.last = now & TIME_MASK;
            }
            return b;
        }
        if b.is_event(to, now, k) && !b.pinned {
            b.count = (b.count + 1).min(COUNT_MASK);
            if b.count >= k.threshold {
                b.pin(now, k, v);
            }
        } else if !b.pinned {
            b.count = 0;
        }
        b.place = to;
        b.last = now & TIME_MASK;
        b
    }

    /// An explicit request placed the block at `to`: its count and pin end.
    fn placed(self, to: u64, now: u64) -> Self {
        Self {
            place: to,
            count: 0,
            pinned: false,
            last: now & TIME_MASK,
            ..self
        }
    }
}

/// What thrashing detection said of a move.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// The move made the block's count reach the threshold (it is pinned
    /// unless its history was forgotten after pins too often).
    pub(crate) detected: bool,
    /// The block stays where it is: a placement pass's move refused.
    pub(crate) stay: bool,
    /// It was refused because the block was pinned already (a move
    /// avoided).
    pub(crate) avoided: bool,
    /// This move pinned the block.
    pub(crate) pinned: bool,
    /// An expired pin was found and dropped.
    pub(crate) unpinned: bool,
}

/// The tag of every history: a block's state is its own, so the tag only
/// tells a history (1) from none (0).
const TAG: u64 = 1;

/// Whether thrashing detection is on (module parameter `thrash`).
pub(crate) fn enabled() -> bool {
    Knobs::get().is_some()
}

/// Applies `f` to the history in `state` at `now`, read as that block's
/// ([`Block::current`], whose resets and dropped pins are kept even if `f`
/// has nothing to record: `None`). With `existing`, a block without a
/// history is left alone.
fn apply(
    state: &mut crate::process::Block,
    existing: bool,
    (now, k): (u64, &Knobs),
    f: impl FnOnce(Block, u64, &Knobs, &mut Verdict) -> Option<Block>,
) -> Verdict {
    let old = Block::from_word(state.thrash);
    if existing && !old.is(TAG) {
        return Verdict::default();
    }
    let mut v = Verdict::default();
    let cur = old.current(TAG, now, k, &mut v);
    state.thrash = match f(cur, now, k, &mut v) {
        Some(b) => b.word(),
        // Keep a reset or a dropped pin, but start no history.
        None if old.tag == TAG => cur.word(),
        None => return v,
    };
    v
}

/// Applies `f` to the history of the block of `addr` of process `p` at
/// the time of the call (see [`apply`]); with `existing`, no state is
/// made for a block without one.
fn update(
    p: &Process,
    addr: usize,
    existing: bool,
    f: impl FnOnce(Block, u64, &Knobs, &mut Verdict) -> Option<Block>,
) -> Verdict {
    let Some(k) = Knobs::get() else {
        return Verdict::default();
    };
    p.with(addr, !existing, |state| match state {
        Some(state) => apply(state, existing, (now_ms() / TICK_MS, &k), f),
        None => Verdict::default(),
    })
}

/// A job's placement pass of process `p` is about to move the block of
/// `addr` to `to`: whether it stays where it is instead
/// ([`Verdict::stay`]: pinned now or before). Nothing is recorded for a
/// block without a history; the move itself is recorded by [`moved`].
pub(crate) fn before_move(p: &Process, addr: usize, to: Place) -> Verdict {
    update(p, addr, true, |b, now, k, v| {
        b.is(TAG).then(|| b.ask(to.code(), now, k, v))
    })
}

/// Pages of the block of `addr` of process `p` moved to `to`: by a job's
/// placement pass that [`before_move`] allowed, or by a CPU fault (`to` is
/// then [`Place::System`]), which may pin the block there.
pub(crate) fn moved(p: &Process, addr: usize, to: Place) -> Verdict {
    update(p, addr, false, |b, now, k, v| {
        Some(b.moved(to.code(), now, k, v))
    })
}

/// As [`moved`], for the blocks of `[start, end)`, a job's run of which
/// some block moved: only blocks with a history are recorded (no state is
/// made for one that may not have moved at all). `count` hears each
/// verdict.
pub(crate) fn run_moved(
    p: &Process,
    (start, end): (usize, usize),
    to: Place,
    mut count: impl FnMut(Verdict),
) {
    let Some(k) = Knobs::get() else {
        return;
    };
    let now = now_ms() / TICK_MS;
    p.each(start, end, |_, state| {
        count(apply(state, true, (now, &k), |b, now, k, v| {
            Some(b.moved(to.code(), now, k, v))
        }))
    });
}

/// An explicit MIGRATE or PREFETCH moved `[start, end)` of process `p` to
/// `to`: the blocks with a history lose their count and pin.
pub(crate) fn placed_explicitly(p: &Process, start: usize, end: usize, to: Place) {
    let Some(k) = Knobs::get() else {
        return;
    };
    let now = now_ms() / TICK_MS;
    p.each(start, end, |_, state| {
        // Read as the block's history now (an old one forgotten, an
        // expired pin dropped), as a single block's update does.
        apply(state, true, (now, &k), |b, now, _, _| {
            b.is(TAG).then(|| b.placed(to.code(), now))
        });
    });
}

/// Whether `state` has a pin in effect: what the shrinker keeps.
pub(crate) fn holds_pin(state: &crate::process::Block) -> bool {
    let Some(k) = Knobs::get() else {
        return false;
    };
    let b = Block::from_word(state.thrash);
    b.is(TAG) && b.pin_holds(now_ms() / TICK_MS, &k)
}

mod kunit;
