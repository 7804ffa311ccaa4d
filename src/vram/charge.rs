// SPDX-License-Identifier: GPL-2.0

//! Charging a pool's pages to dmem cgroups (`Documentation/design.rst`,
//! "VRAM limits per cgroup"): charges are taken before the pages (a charge
//! may sleep, so never under the chunk table), one per page, and handed to
//! the pages' slots as an allocation takes them ([`VramPool::alloc`]).

use kernel::prelude::*;

use crate::mm::dmem::{LimitPool, PageCharge, Refusal};
use crate::mm::page::BLOCK_PAGES;

use super::VramPool;

/// Whom the pages of an allocation are charged to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payer {
    /// The cgroup of the calling task: a process's own pages moving in
    /// (from its ioctls: the process whose memory moves).
    Caller,
    /// Nobody: the pool's own pages (the copy floor's, freed at once; a
    /// consolidation's, which take over the charges of the pages they
    /// replace).
    Nobody,
}

/// Page charges taken ahead of an allocation; those no page takes are
/// undone on drop.
pub(crate) struct Charges {
    list: KVec<PageCharge>,
    /// Pages asked for that the payer's cgroup limit refused.
    refused: usize,
    /// The cgroup pool whose limit refused them.
    limit: Option<LimitPool>,
    /// Whether the pages are charged at all: not for [`Payer::Nobody`] or
    /// on a kernel without the controller.
    active: bool,
}

impl Charges {
    /// No charges: the pages go uncharged.
    pub(crate) const fn none() -> Self {
        Self {
            list: KVec::new(),
            refused: 0,
            limit: None,
            active: false,
        }
    }

    /// How many whole groups of `whole` pages the charges cover: `n` if
    /// nothing is charged.
    pub(super) fn cover(&self, n: usize, whole: usize) -> usize {
        if self.active {
            n.min(self.list.len() / whole)
        } else {
            n
        }
    }

    /// Pages the limit refused.
    pub(super) fn refused(&self) -> usize {
        self.refused
    }

    /// The next page's charge, if any.
    pub(super) fn pop(&mut self) -> Option<PageCharge> {
        self.list.pop()
    }
}

impl VramPool {
    /// Charges up to `pages` pages, in whole groups of `whole`, to `payer`.
    /// Nothing is charged for [`Payer::Nobody`] or on a kernel without the
    /// controller. May sleep.
    pub(crate) fn charge(&self, pages: usize, whole: usize, payer: Payer) -> Result<Charges> {
        let mut c = Charges::none();
        if payer == Payer::Nobody || !self.region.is_registered() || whole == 0 {
            return Ok(c);
        }
        c.active = true;
        c.list.reserve(pages, GFP_KERNEL)?;
        for _ in 0..pages {
            match self.region.charge_page() {
                Ok(p) => c.list.push_within_capacity(p).map_err(|_| ENOMEM)?,
                Err(Refusal::Limit(l)) => {
                    c.limit = Some(l);
                    break;
                }
                // Those taken are undone on drop.
                Err(Refusal::Error(e)) => return Err(e),
            }
        }
        // A folio is charged whole or not at all.
        c.list.truncate(c.list.len() / whole * whole);
        c.refused = pages - c.list.len();
        Ok(c)
    }

    /// The charges of one whole 2 MiB folio for `payer`; `None` if the
    /// payer's cgroup limit refuses them.
    pub(super) fn charge_block(&self, payer: Payer) -> Result<Option<Charges>> {
        let c = self.charge(BLOCK_PAGES, BLOCK_PAGES, payer)?;
        Ok((c.refused == 0).then_some(c))
    }

    /// The cgroup pool that keeps the caller from `pages` more pages of this
    /// device, if its limit does (probed with charges, undone at once).
    pub(super) fn limit_for(&self, pages: usize) -> Result<Option<LimitPool>> {
        Ok(self.charge(pages, 1, Payer::Caller)?.limit.take())
    }

    /// Charges for `n` pages to `payer`, but at most `cap` (what the chunks
    /// have free): if the charges stop at `cap`, the rest is probed too
    /// (charged and undone at once), so that [`Charges::refused`] counts
    /// every page the limit keeps out, not only those the device had room
    /// for: room is made on the device only for pages the limit would take.
    pub(super) fn charge_capped(&self, n: usize, cap: usize, payer: Payer) -> Result<Charges> {
        let mut c = self.charge(n.min(cap), 1, payer)?;
        if c.limit.is_some() {
            c.refused = n - c.list.len();
        } else if c.active && n > cap {
            let rest = self.charge(n - cap, 1, payer)?;
            if rest.limit.is_some() {
                c.refused = rest.refused;
                c.limit = rest.limit;
            }
        }
        Ok(c)
    }

    /// Whether the calling task's cgroup could not take one more page of
    /// this device (probed with a charge, undone at once).
    pub(crate) fn at_limit(&self) -> Result<bool> {
        Ok(self.limit_for(1)?.is_some())
    }
}
