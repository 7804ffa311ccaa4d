// SPDX-License-Identifier: GPL-2.0

//! A window the VM's device page table covers, run by the CPU engine
//! straight from it, and what its use counts.

use kernel::{prelude::*, sync::atomic::Relaxed};

use crate::access;
use crate::mm::{devpt::DevPt, page::BLOCK_SIZE, pagemap::PAGE_SIZE};

use super::{Decode, Done, Engine, Job, TableView, Target, WindowPages};

impl Engine<'_> {
    /// Runs the `n` bytes of window `w` of `job` from the VM's device page
    /// table `table` (the mirror's lock is held), if every page they use
    /// has an entry with the access the job needs; `None` if one does not
    /// (the window faults).
    pub(super) fn warm(
        &mut self,
        table: &DevPt,
        (job, w, n): (&Job, WindowPages, usize),
        write: bool,
        done: &mut Done,
    ) -> Option<Result> {
        let WindowPages {
            dst,
            dst_first,
            dst_pages,
            src,
            src_first,
            src_pages,
        } = w;
        // After the placement pass, every entry counts.
        if !table.covers(dst_first, dst_pages, write, true)
            || !table.covers(src_first, src_pages, false, true)
        {
            return None;
        }
        let pool = self.pool;
        let dst_v = TableView {
            table,
            pool,
            first: dst_first,
        };
        let src_v = TableView {
            table,
            pool,
            first: src_first,
        };
        // What a fault's bind would count: uses for the eviction policy,
        // accesses to memory not this device's for the access counters,
        // pages by path; and the pages the job may write by DMA marked so
        // (see the faulting path).
        let r = self
            .account(&dst_v, dst_pages, write, done)
            .and_then(|()| self.account(&src_v, src_pages, false, done))
            .and_then(|()| {
                self.execute(
                    job.op,
                    dst - job.addr,
                    &dst_v,
                    dst - dst_first,
                    &src_v,
                    src.map_or(0, |s| s - src_first),
                    n,
                    done,
                )
            });
        // The emulated TLB's hits and misses (the accounting's lookups too).
        let (hits, misses) = table.tlb_counts();
        self.pool.stats.tlb_hits.add(hits, Relaxed);
        self.pool.stats.tlb_misses.add(misses, Relaxed);
        Some(r)
    }

    /// Counts the use of `pages` pages of `view`, a window of the VM's
    /// table, as [`Self::page_table`] counts a faulting window's; if the
    /// job writes them (`written`), marks the system pages written (under
    /// the mirror's lock, while the entries hold: before or after the
    /// write, reclaim sees the mark only once the lock is free).
    pub(super) fn account(
        &self,
        view: &TableView<'_>,
        pages: usize,
        written: bool,
        done: &mut Done,
    ) -> Result {
        let on = access::enabled();
        let mut remote = (view.first, 0u64);
        let count = |(at, n): (usize, u64)| {
            if on && n > 0 {
                access::add(&self.process, self.pool.index(), at, n);
                self.pool.stats.access_counted.add(n, Relaxed);
            }
        };
        for i in 0..pages {
            let at = view.first + i * PAGE_SIZE;
            if at % BLOCK_SIZE == 0 {
                count(remote);
                remote = (at, 0);
            }
            match view.at(i)? {
                Target::Vram(off) => {
                    self.pool.note_used(off, self.epoch);
                    done.vram += 1;
                }
                Target::Peer(pool, off) => {
                    pool.note_used(off, self.epoch);
                    done.p2p += 1;
                    remote.1 += 1;
                }
                Target::Sys(p) => {
                    if written {
                        p.written();
                    }
                    done.dma += 1;
                    remote.1 += 1;
                }
            }
        }
        count(remote);
        Ok(())
    }
}
