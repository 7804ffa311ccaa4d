// SPDX-License-Identifier: GPL-2.0

//! Which of a device's 2 MiB blocks of memory make room when the device is
//! full (oversubscription): the block use table and the eviction policy.
//!
//! Every request (an EXEC, MIGRATE or PREFETCH) has an [`Epoch`]. Each 2 MiB
//! block of VRAM records the epoch of its last use and a class, *active* or
//! *inactive*, as the kernel's own page LRU has two lists:
//!
//! - pages placed by a job's migrate-on-access leave their block's class as
//!   it was (a new block is inactive); pages an explicit MIGRATE or PREFETCH
//!   placed make it active (the runtime said it wants them there), and so
//!   do pages a job brings back within the device's size of their eviction
//!   (a *refault*, `shadow.rs`: working set that the device keeps turning
//!   over, a new one displacing an old one or a cycle larger than the
//!   device);
//! - a use of a resident block by a later request (the engine reading or
//!   writing it, a placement finding its pages there already) makes it
//!   active: used twice, it is part of the working set;
//! - the victim is the inactive block used longest ago;
//! - a request never evicts what it used itself (its pages would only come
//!   back): when nothing else is left, the device is full for it, and the
//!   rest of its pages are used where they are;
//! - when no inactive block is left, an explicit request evicts the active
//!   block used longest ago (it asked for the room); a job's placement
//!   instead demotes that block to inactive (as if used now: a full trip
//!   through the inactive class) and evicts nothing, running on the pages
//!   that do not fit where they are: a working set used again before its
//!   blocks come up stays, one that is not goes in time.
//!
//! So a stream of data used once (a scan larger than the device) cycles
//! through the inactive blocks and never pushes out the working set, which
//! plain LRU (the [`Policy::Lru`] setting, NVIDIA UVM's policy) does.
//!
//! The table is lock-free (one atomic word per block): the engine records
//! uses under the mirror lock, the placement under the mmap lock.

use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};

/// A request's place in time: later requests have larger epochs. One
/// clock for every device, so that a request that uses several has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Epoch(u64);

/// The epoch clock (0: never used).
static EPOCHS: Atomic<u64> = Atomic::new(0);

impl Epoch {
    /// A new request's epoch.
    pub(crate) fn next() -> Self {
        // Wraps after 2^63 requests: never in practice.
        Self((EPOCHS.fetch_add(1, Relaxed) + 1) & EPOCH)
    }
}

/// Why pages are placed on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intent {
    /// An explicit MIGRATE or PREFETCH: the runtime wants them there.
    Explicit,
    /// A job's migrate-on-access.
    OnAccess,
    /// A job's migrate-on-access of data the device evicted recently
    /// (`shadow.rs`): working set it keeps turning over.
    Refault,
}

/// A request that places or uses pages: its epoch and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Use {
    pub(crate) epoch: Epoch,
    pub(crate) intent: Intent,
}

impl Use {
    /// A new explicit request (MIGRATE, PREFETCH).
    pub(crate) fn explicit() -> Self {
        Self {
            epoch: Epoch::next(),
            intent: Intent::Explicit,
        }
    }
}

/// How a full device makes room (module parameter `evict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// It does not: the pages that do not fit stay where they are.
    Off,
    /// The block used longest ago goes, whatever its class.
    Lru,
    /// Inactive blocks go first (see the module documentation).
    TwoClass,
}

impl Policy {
    /// The module parameter's setting.
    pub(crate) fn current() -> Self {
        match crate::module_parameters::evict.value() {
            0 => Self::Off,
            1 => Self::Lru,
            _ => Self::TwoClass,
        }
    }
}

/// The class bit of a block's word.
const ACTIVE: u64 = 1 << 63;
/// The bit of a block out whole as a 2 MiB folio that its eviction could
/// not move (its record names an mm with no users): skipped until pages
/// are placed in the block again, it is emptied or its folio is recorded
/// anew.
const STUCK: u64 = 1 << 62;
/// The rest of the word: the epoch of the block's last use.
const EPOCH: u64 = STUCK - 1;

/// One block's record, read at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockUse {
    /// The epoch of its last use (0: none since it was last emptied).
    last: u64,
    active: bool,
    stuck: bool,
}

impl BlockUse {
    /// Whether the policy may consider the block for request `e` at all:
    /// not one of the request's own, not stuck.
    pub(crate) fn candidate(self, e: Epoch) -> bool {
        self.last != e.0 && !self.stuck
    }

    const fn from_word(w: u64) -> Self {
        Self {
            last: w & EPOCH,
            active: w & ACTIVE != 0,
            stuck: w & STUCK != 0,
        }
    }

    const fn word(self) -> u64 {
        self.last | if self.active { ACTIVE } else { 0 } | if self.stuck { STUCK } else { 0 }
    }

    /// After pages were placed in the block by `u` (pages placed next to
    /// others do not make the others used again).
    fn placed(self, u: Use) -> Self {
        Self {
            last: u.epoch.0,
            active: self.active || u.intent != Intent::OnAccess,
            stuck: false,
        }
    }

    /// After request `e` used the block's pages where they were.
    fn used(self, e: Epoch) -> Self {
        Self {
            last: e.0,
            active: self.active || self.reused(e),
            ..self
        }
    }

    /// Whether a use by `e` is a use by a later request than the last.
    fn reused(self, e: Epoch) -> bool {
        self.last != 0 && self.last != e.0
    }
}

/// What [`choose`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Evict this candidate.
    Evict(usize),
    /// Demote this candidate to inactive (as used by the request now), and
    /// evict nothing.
    Demote(usize),
}

/// The policy's choice among `blocks` (candidate index and record; only
/// blocks with pages in use) for request `u`: `None` if it may evict
/// nothing (everything left is its own).
pub(crate) fn choose(
    policy: Policy,
    blocks: impl Iterator<Item = (usize, BlockUse)>,
    u: Use,
) -> Option<Choice> {
    let e = u.epoch;
    let mut oldest_inactive: Option<(usize, u64)> = None;
    let mut oldest_active: Option<(usize, u64)> = None;
    for (i, b) in blocks.filter(|(_, b)| b.candidate(e)) {
        let slot = if b.active && policy == Policy::TwoClass {
            &mut oldest_active
        } else {
            &mut oldest_inactive
        };
        if slot.is_none_or(|(_, last)| b.last < last) {
            *slot = Some((i, b.last));
        }
    }
    match (policy, oldest_inactive, oldest_active) {
        (Policy::Off, _, _) => None,
        (_, Some((i, _)), _) => Some(Choice::Evict(i)),
        (_, None, Some((i, _))) if u.intent == Intent::Explicit => Some(Choice::Evict(i)),
        (_, None, Some((i, _))) => Some(Choice::Demote(i)),
        (_, None, None) => None,
    }
}

/// The use records of a device's 2 MiB blocks, by BAR offset.
pub(crate) struct Lru {
    blocks: KVec<Atomic<u64>>,
}

impl Lru {
    /// Records for `nblocks` blocks, none used.
    pub(crate) fn new(nblocks: usize) -> Result<Self> {
        let mut blocks = KVec::with_capacity(nblocks, GFP_KERNEL)?;
        for _ in 0..nblocks {
            blocks.push(Atomic::new(0), GFP_KERNEL)?;
        }
        Ok(Self { blocks })
    }

    /// The record of block `b` (a block past the table reads as unused).
    pub(crate) fn get(&self, b: usize) -> BlockUse {
        BlockUse::from_word(self.blocks.get(b).map_or(0, |w| w.load(Relaxed)))
    }

    fn update(&self, b: usize, f: impl Fn(BlockUse) -> BlockUse) {
        let Some(w) = self.blocks.get(b) else {
            return;
        };
        let mut old = w.load(Relaxed);
        // A lost race is retried: every update is a small change of one
        // word, and a block's users are few.
        while let Err(now) = w.cmpxchg(old, f(BlockUse::from_word(old)).word(), Relaxed) {
            old = now;
        }
    }

    /// Pages were placed in block `b` by `u`.
    pub(crate) fn placed(&self, b: usize, u: Use) {
        self.update(b, |r| r.placed(u));
    }

    /// Request `e` used block `b`'s pages where they were.
    pub(crate) fn used(&self, b: usize, e: Epoch) {
        self.update(b, |r| r.used(e));
    }

    /// Block `b` was demoted for request `e` ([`Choice::Demote`]).
    pub(crate) fn demote(&self, b: usize, e: Epoch) {
        self.update(b, |r| BlockUse {
            last: e.0,
            active: false,
            ..r
        });
    }

    /// Request `e` found block `b` busy: not again for it, its class kept.
    pub(crate) fn busy(&self, b: usize, e: Epoch) {
        self.update(b, |r| BlockUse { last: e.0, ..r });
    }

    /// Block `b`, out whole, could not be evicted (see `STUCK`).
    pub(crate) fn stuck(&self, b: usize) {
        self.update(b, |r| BlockUse { stuck: true, ..r });
    }

    /// Block `b`'s folio is recorded anew (`mapped.rs`): an eviction may
    /// reach it again.
    pub(crate) fn unstick(&self, b: usize) {
        self.update(b, |r| BlockUse { stuck: false, ..r });
    }

    /// Block `b` was emptied: no use since.
    pub(crate) fn forget(&self, b: usize) {
        if let Some(w) = self.blocks.get(b) {
            w.store(0, Relaxed);
        }
    }
}

#[kunit_tests(msvm_lru)]
mod tests {
    use super::*;

    fn blk(last: u64, active: bool) -> BlockUse {
        BlockUse {
            last,
            active,
            stuck: false,
        }
    }

    fn on_access(e: u64) -> Use {
        Use {
            epoch: Epoch(e),
            intent: Intent::OnAccess,
        }
    }

    #[test]
    fn classes_follow_uses() {
        let none = blk(0, false);
        // Placed on access: inactive; used again by the same request: still.
        let b = none.placed(on_access(5));
        assert_eq!(b, blk(5, false));
        assert_eq!(b.used(Epoch(5)), blk(5, false));
        // Used by a later request: active.
        assert_eq!(b.used(Epoch(6)), blk(6, true));
        // Pages placed next to its pages by a later job: not a use of them.
        assert_eq!(b.placed(on_access(7)), blk(7, false));
        // An active block stays active.
        assert_eq!(blk(6, true).placed(on_access(7)), blk(7, true));
        // An explicit MIGRATE places active, and so does a refault.
        let e = Use {
            epoch: Epoch(8),
            intent: Intent::Explicit,
        };
        assert_eq!(none.placed(e), blk(8, true));
        let r = Use {
            epoch: Epoch(8),
            intent: Intent::Refault,
        };
        assert_eq!(none.placed(r), blk(8, true));
    }

    #[test]
    fn two_class_protects_the_working_set() {
        // Block 0: the working set (active, used at 3); 1 and 2: a stream
        // used once at 4 and 5; 3: the request's own.
        let blocks = [blk(3, true), blk(4, false), blk(5, false), blk(9, false)];
        let it = || blocks.iter().copied().enumerate();
        assert_eq!(
            choose(Policy::TwoClass, it(), on_access(9)),
            Some(Choice::Evict(1))
        );
        // Plain LRU takes the working set.
        assert_eq!(
            choose(Policy::Lru, it(), on_access(9)),
            Some(Choice::Evict(0))
        );
        assert_eq!(choose(Policy::Off, it(), on_access(9)), None);
        // With only active blocks and its own left, a job's placement
        // demotes the oldest active, evicting nothing; an explicit request
        // evicts it.
        let blocks = [blk(3, true), blk(2, true), blk(9, false)];
        let it = || blocks.iter().copied().enumerate();
        assert_eq!(
            choose(Policy::TwoClass, it(), on_access(9)),
            Some(Choice::Demote(1))
        );
        let explicit = Use {
            epoch: Epoch(9),
            intent: Intent::Explicit,
        };
        assert_eq!(
            choose(Policy::TwoClass, it(), explicit),
            Some(Choice::Evict(1))
        );
        // A request never evicts its own blocks.
        let blocks = [blk(9, false), blk(9, true)];
        let it = || blocks.iter().copied().enumerate();
        assert_eq!(choose(Policy::TwoClass, it(), on_access(9)), None);
        assert_eq!(choose(Policy::Lru, it(), on_access(9)), None);
    }

    #[test]
    fn table_records_and_forgets() -> Result {
        let t = Lru::new(4)?;
        t.placed(1, on_access(10));
        t.used(1, Epoch(11));
        assert_eq!(t.get(1), blk(11, true));
        t.demote(1, Epoch(12));
        assert_eq!(t.get(1), blk(12, false));
        // Busy: not again for this request, its class kept.
        t.used(1, Epoch(13));
        t.busy(1, Epoch(14));
        assert_eq!(t.get(1), blk(14, true));
        // Stuck: never a candidate, until pages are placed in it again.
        t.stuck(1);
        let cand = [(0, t.get(1))];
        assert_eq!(
            choose(Policy::TwoClass, cand.iter().copied(), on_access(20)),
            None
        );
        t.placed(1, on_access(21));
        assert!(!t.get(1).stuck);
        t.forget(1);
        assert_eq!(t.get(1), blk(0, false));
        // Past the table: nothing, no panic.
        t.used(99, Epoch(1));
        assert_eq!(t.get(99), blk(0, false));
        Ok(())
    }
}
