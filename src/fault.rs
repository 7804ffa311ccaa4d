// SPDX-License-Identifier: GPL-2.0

//! A device's fault handler: its fault queue (`crate::mm::faultq`),
//! drained in batches by a work item on the device's own fault workqueue,
//! as Xe's page-fault worker drains the GuC's fault messages and UVM's
//! bottom half its fault buffer.
//!
//! The handler binds pages as the process maps them, and nothing more: it
//! faults nothing in and never waits on the process (one handler serves
//! every process of the device, and the jobs wait for it without being
//! killable). What needs more, it leaves to the faulting job, in its own
//! context: faulting pages in (which may wait on user space: FUSE,
//! userfaultfd) and moving them (the moves a job's placement asks for are
//! made by its placement pass, where the dmem cgroup charge lands on the
//! process: `dmem_cgroup_try_charge` charges the calling task's cgroup, a
//! kworker's would charge the root). See `Documentation/design.rst`,
//! "Faults".

use kernel::{
    prelude::*,
    sync::Arc,
    workqueue::{impl_has_work, new_work, Work, WorkItem},
};

use crate::mm::faultq::{Fault, FaultQueue, Served, Service};
use crate::mm::reclaim::ReclaimQueue;

/// The fault handler of one device. Its workqueue is destroyed (drained)
/// with the device, after its pool: no fault is queued by then (the jobs
/// that raise them run in EXEC ioctls, which the device's unplug waits
/// for, and EXEC is the only path that raises).
pub(crate) struct FaultHandler {
    queue: ReclaimQueue,
    work: Arc<Handler>,
}

/// The work item, and the queue it drains.
#[pin_data]
struct Handler {
    #[pin]
    work: Work<Handler>,
    #[pin]
    faults: FaultQueue,
}

impl_has_work! {
    impl HasWork<Self> for Handler { self.work }
}

impl WorkItem for Handler {
    type Pointer = Arc<Handler>;

    fn run(this: Arc<Handler>) {
        this.faults.drain();
    }
}

impl FaultHandler {
    /// The fault handler of device `index`.
    pub(crate) fn new(index: usize) -> Result<Self> {
        Ok(Self {
            // One batch at a time, as one fault buffer is drained.
            queue: ReclaimQueue::new(c"msvm-fault")?,
            work: Arc::pin_init(
                pin_init!(Handler {
                    work <- new_work!("msvm::fault"),
                    faults <- FaultQueue::new(index),
                }),
                GFP_KERNEL,
            )?,
        })
    }

    /// Raises `faults` for the job whose context is `job` and waits until
    /// the handler has serviced them; `out[i]` gets fault `i`'s result.
    pub(crate) fn raise<S: Service>(
        &self,
        job: &S,
        faults: &[Fault],
        out: &mut [Option<Result<Served>>],
    ) {
        let kick = || {
            // Already queued: the run to come drains these too.
            let _ = self.queue.queue().enqueue(self.work.clone());
        };
        self.work.faults.raise(job, faults, kick, out);
    }

    /// The queue's counters.
    pub(crate) fn counters(&self) -> &crate::mm::faultq::Counters {
        &self.work.faults.counters
    }
}
