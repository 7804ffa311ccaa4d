// SPDX-License-Identifier: GPL-2.0

//! Removing several pagemaps at once. `memunmap_pages` waits for an RCU
//! grace period or two (the pagemap's reference going to zero, the memory
//! hotplug lock): about 30 ms under TCG whatever the chunk's size. One
//! after another, 16 idle chunks took half a second; side by side on a
//! workqueue the waits overlap.
//!
//! The caller does not depend on the workers: it takes every pagemap no
//! worker has taken yet and removes it itself, then waits only for the
//! removals already under way. Workers that start later find nothing left.
//! (The queue is the pool's own `WQ_MEM_RECLAIM` queue, drained when the
//! pool goes, so no late worker outlives the module.)
//!
//! # Lock order
//!
//! [`Teardowns::state`] is a leaf mutex, held only to take an item or to
//! count one done: nothing is dropped under it.

use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};
use kernel::workqueue::Queue;

use crate::mm::reclaim::without_reclaim;

/// Workers of one teardown at most (the pool's queue runs as many at
/// once).
pub(super) const WORKERS: u16 = 16;

/// The items left to drop, and the drops under way.
struct State<T> {
    items: KVec<Option<T>>,
    next: usize,
    running: usize,
}

impl<T> State<T> {
    /// The next item nobody has taken, counted as under way.
    fn take(&mut self) -> Option<T> {
        while self.next < self.items.len() {
            let i = self.next;
            self.next += 1;
            if let Some(item) = self.items[i].take() {
                self.running += 1;
                return Some(item);
            }
        }
        None
    }
}

/// Items to drop side by side.
#[pin_data]
struct Teardowns<T> {
    #[pin]
    state: Mutex<State<T>>,
    /// Signalled when the last drop under way is done.
    #[pin]
    done: CondVar,
}

impl<T> Teardowns<T> {
    /// Takes items and drops them until none is left. Their removal frees
    /// memory for reclaim: it does not enter reclaim itself (it could stall,
    /// bounded, on msvm's own shrinker, whose work waits for it). What it
    /// allocates is little (`memunmap_pages` bookkeeping), so the reserves
    /// `PF_MEMALLOC` opens are not drained.
    fn work(&self) {
        loop {
            let Some(item) = self.state.lock().take() else {
                return;
            };
            without_reclaim(|| drop(item));
            let mut state = self.state.lock();
            state.running -= 1;
            if state.running == 0 {
                self.done.notify_all();
            }
        }
    }
}

/// Drops every item of `items`, up to `workers + 1` at a time: on
/// `workers` work items of `queue` and in the calling task, which returns
/// once every item is dropped. If the workers cannot be had (no memory for
/// a work item, no worker thread), the calling task drops what is left
/// itself.
///
/// What an item's drop needs must outlive the call by other means than the
/// items (a worker may drop the last item after the caller's last look): the
/// pool's teardown items hold the pool, which the caller holds too (a
/// `PoolRef`), so that no worker drops the pool and, with it, `queue`.
pub(super) fn drop_all<T: Send + 'static>(queue: &Queue, items: KVec<Option<T>>, workers: usize) {
    let shared = Arc::pin_init(
        pin_init!(Teardowns {
            state <- new_mutex!(State {
                items,
                next: 0,
                running: 0,
            }),
            done <- new_condvar!(),
        }),
        GFP_NOWAIT,
    );
    let shared = match shared {
        Ok(s) => s,
        // Dropped here, one after another (`items` went with the error).
        Err(_) => return,
    };
    for _ in 0..workers {
        let mine = shared.clone();
        // No reclaim for a work item: without one, this task does the work.
        if queue.try_spawn(GFP_NOWAIT, move || mine.work()).is_err() {
            break;
        }
    }
    shared.work();
    let mut state = shared.state.lock();
    while state.running > 0 {
        shared.done.wait(&mut state);
    }
}

#[kunit_tests(msvm_teardown)]
mod tests {
    use super::*;
    use crate::mm::reclaim::ReclaimQueue;
    use kernel::sync::atomic::{Atomic, Relaxed};

    static DROPPED: Atomic<u64> = Atomic::new(0);

    struct Counted;

    impl Drop for Counted {
        fn drop(&mut self) {
            DROPPED.add(1, Relaxed);
        }
    }

    #[test]
    fn every_item_is_dropped_before_it_returns() -> Result {
        let before = DROPPED.load(Relaxed);
        let mut items = KVec::new();
        for _ in 0..16 {
            items.push(Some(Counted), GFP_KERNEL)?;
        }
        items.push(None, GFP_KERNEL)?;
        // A queue of its own, drained (late workers done) when it goes.
        let queue = ReclaimQueue::with_max_active(c"msvm-kunit", 8)?;
        drop_all(queue.queue(), items, 8);
        // Drained: no late worker outlives the test.
        drop(queue);
        assert_eq!(DROPPED.load(Relaxed) - before, 16);
        Ok(())
    }

    #[test]
    fn no_workers_still_drops_everything() -> Result {
        let before = DROPPED.load(Relaxed);
        let mut items = KVec::new();
        for _ in 0..3 {
            items.push(Some(Counted), GFP_KERNEL)?;
        }
        let queue = ReclaimQueue::new(c"msvm-kunit")?;
        drop_all(queue.queue(), items, 0);
        drop(queue);
        assert_eq!(DROPPED.load(Relaxed) - before, 3);
        Ok(())
    }

    #[test]
    fn a_blocked_queue_does_not_block_it() -> Result {
        use kernel::sync::Completion;
        let before = DROPPED.load(Relaxed);
        let mut items = KVec::new();
        for _ in 0..4 {
            items.push(Some(Counted), GFP_KERNEL)?;
        }
        // The queue's one slot is busy until this test lets it go (nothing
        // below returns early before the gate opens).
        let queue = ReclaimQueue::with_max_active(c"msvm-kunit", 1)?;
        let gate = Arc::pin_init(Completion::new(), GFP_KERNEL)?;
        let held = gate.clone();
        let spawned = queue
            .queue()
            .try_spawn(GFP_KERNEL, move || held.wait_for_completion());
        drop_all(queue.queue(), items, 4);
        let dropped = DROPPED.load(Relaxed) - before;
        gate.complete_all();
        drop(queue);
        assert!(spawned.is_ok());
        assert_eq!(dropped, 4);
        Ok(())
    }
}
