// SPDX-License-Identifier: GPL-2.0

//! Generations of a process's 2 MiB blocks: what tells a read-only replica
//! of a page (`crate::vram::Replicas`) that the page may have changed since
//! it was copied.
//!
//! Every invalidation a VM's mirror sees gives the blocks it covers a new
//! generation (`crate::svm`, from the notifier, under the mirror's lock,
//! before it publishes the mirror's new sequence and before the mm core
//! changes the page tables: [`crate::process::Process::invalidated`]); a
//! replica records the generation read before the walk that found its
//! page ([`current`]), made and used under the mirror's lock only while
//! the generation is unchanged and the walk still valid: an invalidation
//! either came before the generation was read, and then the walk waited
//! for the page tables to change or is found stale, or it comes after,
//! and makes the replica stale.
//!
//! A generation is kept in the block's placement state
//! (`crate::process`), taken from one global sequence: it changes with
//! every invalidation of the block and never takes a value it had before
//! one, even when the state is freed (an unmap, the shrinker) and made
//! again, and no other process's block ever had it. A block whose state
//! could not be made has the sequence's current value, which any
//! invalidation anywhere changes: its replica is then dropped for
//! nothing, never kept when it should go.

use kernel::sync::Arc;

use crate::process::{self, Process};

/// The generation of the block of `addr` of process `p`, for a replica
/// about to be made or used.
pub(crate) fn current(p: &Process, addr: usize) -> u64 {
    p.generation(addr, true)
}

/// Checks of replicas' freshness, one after another: the process of the
/// last mm asked about is kept (one registry lookup per run of replicas
/// of one process).
#[derive(Default)]
pub(crate) struct Checker {
    last: Option<(usize, Option<Arc<Process>>)>,
}

impl Checker {
    /// Whether a replica of the block of `addr` of the mm at `mm` (a key
    /// only) recorded with `generation` is still fresh: the process has a
    /// VM and the block's generation is unchanged. Changes nothing.
    pub(crate) fn fresh(&mut self, mm: usize, addr: usize, generation: u64) -> bool {
        let p = match &self.last {
            Some((m, p)) if *m == mm => p,
            _ => &self.last.insert((mm, process::lookup(mm))).1,
        };
        p.as_ref()
            .is_some_and(|p| p.generation(addr, false) == generation)
    }
}
