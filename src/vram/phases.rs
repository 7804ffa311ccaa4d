// SPDX-License-Identifier: GPL-2.0

//! Where the time goes: the phase split of a device's migration steps (by
//! size class) and of its engine jobs, as Xe's GT stats split its SVM
//! faults. A [`Clock`] runs through one step or job, and its laps are
//! added to the device's counters at the end (STATS, debugfs).

use kernel::num::casts::u32_as_usize;
use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::time::{Instant, Monotonic};

use crate::mm::abi;

/// The size class of a migration step (`MSVM_SIZE_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SizeClass {
    /// A step in 4 KiB pages (up to one 2 MiB block of them).
    Small,
    /// A CPU fault's window (64 KiB around the faulting page).
    Fault,
    /// A 2 MiB folio moved whole.
    Large,
}

impl SizeClass {
    /// Its index in the uAPI arrays.
    pub(crate) const fn index(self) -> usize {
        match self {
            SizeClass::Small => 0,
            SizeClass::Fault => 1,
            SizeClass::Large => 2,
        }
    }
}

/// Size classes.
pub(crate) const SIZE_CLASSES: usize = 3;

// The uAPI's numbering (`MSVM_SIZE_*`), which STATS' arrays follow.
const _: () = {
    assert!(SizeClass::Small.index() == u32_as_usize(abi::MSVM_SIZE_4K));
    assert!(SizeClass::Fault.index() == u32_as_usize(abi::MSVM_SIZE_64K));
    assert!(SizeClass::Large.index() == u32_as_usize(abi::MSVM_SIZE_2M));
    assert!(SIZE_CLASSES == u32_as_usize(abi::MSVM_SIZE_CLASSES));
};

/// A phase of a migration step.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Phase {
    /// Collecting the source pages (`migrate_vma_setup`).
    Collect,
    /// Allocating destinations.
    Alloc,
    /// Copying the data.
    Copy,
    /// Installing the destinations and finishing (`migrate_vma_pages`,
    /// `migrate_vma_finalize`).
    Install,
}

/// A phase of an engine job.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum JobPhase {
    /// Moving pages where the job's placement wants them, first.
    Place,
    /// Walking the process's page tables (`hmm_range_fault`).
    Walk,
    /// Building the device page tables (DMA and P2P mappings).
    Bind,
    /// Running the operation.
    Exec,
}

/// Phases of a step or of a job.
const PHASES: usize = 4;

impl Phase {
    const fn index(self) -> usize {
        match self {
            Phase::Collect => 0,
            Phase::Alloc => 1,
            Phase::Copy => 2,
            Phase::Install => 3,
        }
    }
}

impl JobPhase {
    const fn index(self) -> usize {
        match self {
            JobPhase::Place => 0,
            JobPhase::Walk => 1,
            JobPhase::Bind => 2,
            JobPhase::Exec => 3,
        }
    }
}

/// The time of one step or job so far, phase by phase: each lap adds the
/// time since the previous one to a phase.
pub(crate) struct Clock {
    last: Instant<Monotonic>,
    ns: [u64; PHASES],
}

impl Clock {
    /// A clock started now.
    pub(crate) fn start() -> Self {
        Self {
            last: Instant::now(),
            ns: [0; PHASES],
        }
    }

    fn add(&mut self, i: usize) {
        let now = Instant::<Monotonic>::now();
        let ns = (now - self.last).as_nanos();
        self.ns[i] += u64::try_from(ns).unwrap_or(0);
        self.last = now;
    }

    /// The time since the last lap was spent in `phase` of a step.
    pub(crate) fn lap(&mut self, phase: Phase) {
        self.add(phase.index());
    }

    /// The time since the last lap was spent in `phase` of a job.
    pub(crate) fn lap_job(&mut self, phase: JobPhase) {
        self.add(phase.index());
    }

    /// Restarts the lap: the time since the last one counts nowhere.
    pub(crate) fn skip(&mut self) {
        self.last = Instant::now();
    }
}

/// The phase split of one device's migration steps and engine jobs.
pub(crate) struct Phases {
    steps: [Atomic<u64>; SIZE_CLASSES],
    step_ns: [[Atomic<u64>; PHASES]; SIZE_CLASSES],
    jobs: Atomic<u64>,
    job_ns: [Atomic<u64>; PHASES],
}

/// What [`Phases::read`] gives: counts, and microseconds by phase (by size
/// class for steps).
#[derive(Default)]
pub(crate) struct PhaseCounts {
    pub(crate) steps: [u64; SIZE_CLASSES],
    pub(crate) collect_us: [u64; SIZE_CLASSES],
    pub(crate) alloc_us: [u64; SIZE_CLASSES],
    pub(crate) copy_us: [u64; SIZE_CLASSES],
    pub(crate) install_us: [u64; SIZE_CLASSES],
    pub(crate) jobs: u64,
    pub(crate) place_us: u64,
    pub(crate) walk_us: u64,
    pub(crate) bind_us: u64,
    pub(crate) exec_us: u64,
}

impl Phases {
    pub(super) const fn new() -> Self {
        Self {
            steps: [const { Atomic::new(0) }; SIZE_CLASSES],
            step_ns: [const { [const { Atomic::new(0) }; PHASES] }; SIZE_CLASSES],
            jobs: Atomic::new(0),
            job_ns: [const { Atomic::new(0) }; PHASES],
        }
    }

    /// Adds one step of `class`, timed by `clock`.
    pub(crate) fn step(&self, class: SizeClass, clock: &Clock) {
        let c = class.index();
        self.steps[c].add(1, Relaxed);
        for (total, &ns) in self.step_ns[c].iter().zip(clock.ns.iter()) {
            total.add(ns, Relaxed);
        }
    }

    /// Adds one engine job, timed by `clock`.
    pub(crate) fn job(&self, clock: &Clock) {
        self.jobs.add(1, Relaxed);
        for (total, &ns) in self.job_ns.iter().zip(clock.ns.iter()) {
            total.add(ns, Relaxed);
        }
    }

    /// The counts, times in microseconds.
    pub(crate) fn read(&self) -> PhaseCounts {
        let us = |a: &Atomic<u64>| a.load(Relaxed) / 1000;
        let class = |p: Phase| core::array::from_fn(|c| us(&self.step_ns[c][p.index()]));
        let job = |p: JobPhase| us(&self.job_ns[p.index()]);
        PhaseCounts {
            steps: core::array::from_fn(|c| self.steps[c].load(Relaxed)),
            collect_us: class(Phase::Collect),
            alloc_us: class(Phase::Alloc),
            copy_us: class(Phase::Copy),
            install_us: class(Phase::Install),
            jobs: self.jobs.load(Relaxed),
            place_us: job(JobPhase::Place),
            walk_us: job(JobPhase::Walk),
            bind_us: job(JobPhase::Bind),
            exec_us: job(JobPhase::Exec),
        }
    }
}

#[kunit_tests(msvm_phases)]
mod tests {
    use super::*;

    #[test]
    fn laps_add_up_per_phase_and_class() {
        let p = Phases::new();
        let mut c = Clock::start();
        c.ns = [1000, 2000, 3000, 4000];
        p.step(SizeClass::Large, &c);
        p.step(SizeClass::Large, &c);
        p.step(SizeClass::Small, &c);
        c.ns = [500, 0, 0, 1500];
        p.job(&c);
        let r = p.read();
        assert_eq!(r.steps, [1, 0, 2]);
        assert_eq!(r.collect_us, [1, 0, 2]);
        assert_eq!(r.alloc_us, [2, 0, 4]);
        assert_eq!(r.copy_us, [3, 0, 6]);
        assert_eq!(r.install_us, [4, 0, 8]);
        assert_eq!(r.jobs, 1);
        assert_eq!((r.place_us, r.walk_us, r.bind_us, r.exec_us), (0, 0, 0, 1));
    }

    #[test]
    fn a_lap_counts_once() {
        let mut c = Clock::start();
        c.lap(Phase::Copy);
        c.skip();
        c.lap_job(JobPhase::Walk);
        // Monotonic: nothing negative, and every lap went to one phase.
        assert_eq!(c.ns[Phase::Collect.index()], 0);
        assert_eq!(c.ns[Phase::Install.index()], 0);
    }
}
