// SPDX-License-Identifier: GPL-2.0

//! Placement attributes of a VM's ranges: where this device's jobs want
//! the pages (preferred location) and whether they move them there first
//! or use them where they are (access policy).
//!
//! The attributes are kept by address in a sorted list of disjoint ranges;
//! ranges with the default attributes are not stored. Setting a range
//! splits the ranges it cuts and merges equal neighbours, so the list stays
//! as short as the attributes allow.
//!
//! # Lock order
//!
//! The attributes are part of the VM, under the file's VM lock
//! ([`crate::drm::file::File::vm`]); nothing else is locked for them.

use kernel::num::casts::u32_as_usize;
use kernel::prelude::*;

/// At most this many ranges per VM (`MSVM_MAX_ATTR_RANGES`).
pub(crate) const MAX_RANGES: usize = u32_as_usize(crate::mm::abi::MSVM_MAX_ATTR_RANGES);

/// A place for pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    /// The device that runs the job.
    Default,
    /// System RAM.
    System,
    /// The msvm device of this index.
    Device(usize),
}

/// How a device's jobs reach a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Move the pages to the preferred location first.
    Migrate,
    /// Use pages where they are when the device reaches them.
    InPlace,
}

/// The attributes of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) preferred: Location,
    pub(crate) access: Access,
    /// Whether thrashing detection applies to this device's jobs on the
    /// range (`crate::thrash`; off: `MSVM_ATTR_THRASH_OFF`).
    pub(crate) thrash: bool,
    /// Whether the access counters move the range's pages to this device
    /// when its in-place jobs keep using them (`crate::access`; off:
    /// `MSVM_ATTR_ACCESS_OFF`).
    pub(crate) counters: bool,
    /// Whether this device's jobs read the range's system pages through
    /// read-only replicas in its own memory, moving nothing
    /// (`MSVM_ATTR_READ_MOSTLY`; see `crate::vram::ReplicaWindow`).
    pub(crate) read_mostly: bool,
}

impl Placement {
    /// What a range has until told otherwise.
    pub(crate) const DEFAULT: Self = Self {
        preferred: Location::Default,
        access: Access::Migrate,
        thrash: true,
        counters: true,
        read_mostly: false,
    };

    /// Whether the range is read-mostly and replicas are on (module
    /// parameter `read_mostly`): its pages stay where they are, and jobs
    /// that only read them read replicas.
    pub(crate) fn replicated(&self) -> bool {
        self.read_mostly && crate::module_parameters::read_mostly.value() != 0
    }

    /// Whether the range's pages in the memory of the device whose VM has
    /// these attributes stay there: no placement pass of its jobs moves
    /// them elsewhere (the device is the preferred location, or its pages
    /// are used where they are). Its device page table keeps such pages.
    pub(crate) fn keeps_here(&self) -> bool {
        self.preferred == Location::Default || self.access == Access::InPlace || self.replicated()
    }

    /// Whether the range's pages outside that device's memory are used
    /// where they are (access policy "in place", not read-mostly: jobs
    /// read replicas of those). Its device page table keeps such pages.
    pub(crate) fn keeps_remote(&self) -> bool {
        self.access == Access::InPlace && !self.replicated()
    }

    /// Whether the placement pass of a job in place on device `dev` moves
    /// the range's blocks there when their access counts are due
    /// (`crate::access`): the range migrates (not "in place", not
    /// read-mostly), its counters are on, and it prefers no other place.
    /// (The counters' module parameter is the caller's to check.)
    pub(crate) fn counted_for(&self, dev: usize) -> bool {
        let mine = match self.preferred {
            Location::Default => true,
            Location::Device(i) => i == dev,
            Location::System => false,
        };
        self.access == Access::Migrate && !self.replicated() && self.counters && mine
    }
}

/// One stored range: `[start, end)` with its attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) placement: Placement,
}

/// The attributes of a VM.
///
/// # Invariants
///
/// `spans` is sorted by `start`; spans are non-empty, disjoint, none has
/// [`Placement::DEFAULT`], and two adjacent spans (one's `end` is the
/// next's `start`) differ in placement.
pub(crate) struct Attrs {
    spans: KVec<Span>,
}

impl Attrs {
    /// No attributes: every range has the default.
    pub(crate) const fn new() -> Self {
        // INVARIANT: no spans.
        Self { spans: KVec::new() }
    }

    /// Number of stored ranges.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// Gives `[start, end)` the attributes `p`. Fails with `ENOSPC` if the
    /// result would hold more than `limit` ranges (nothing changes then),
    /// `ENOMEM` if memory runs out (nothing changes either).
    pub(crate) fn set(&mut self, start: usize, end: usize, p: Placement, limit: usize) -> Result {
        if start >= end {
            return Err(EINVAL);
        }
        // Build the new list aside: an error leaves the old one intact.
        let mut out = KVec::with_capacity(self.spans.len() + 2, GFP_KERNEL)?;
        let mut placed = false;
        let push = |out: &mut KVec<Span>, s: Span| -> Result {
            if s.start >= s.end || s.placement == Placement::DEFAULT {
                return Ok(());
            }
            if let Some(last) = out.last_mut() {
                if last.end == s.start && last.placement == s.placement {
                    last.end = s.end;
                    return Ok(());
                }
            }
            out.push(s, GFP_KERNEL)?;
            Ok(())
        };
        let new = Span {
            start,
            end,
            placement: p,
        };
        for &s in self.spans.iter() {
            if s.end <= start {
                push(&mut out, s)?;
                continue;
            }
            if !placed && s.start >= start {
                push(&mut out, new)?;
                placed = true;
            }
            if s.start >= end {
                push(&mut out, s)?;
                continue;
            }
            // `s` overlaps the new range: keep the parts outside it.
            push(
                &mut out,
                Span {
                    end: s.end.min(start),
                    ..s
                },
            )?;
            if !placed {
                push(&mut out, new)?;
                placed = true;
            }
            push(
                &mut out,
                Span {
                    start: s.start.max(end),
                    ..s
                },
            )?;
        }
        if !placed {
            push(&mut out, new)?;
        }
        if out.len() > limit {
            return Err(ENOSPC);
        }
        // INVARIANT: `out` holds the old spans cut around the new one, in
        // `start` order and disjoint; `push` left out the empty and default
        // ones and merged equal neighbours.
        self.spans = out;
        Ok(())
    }

    /// The attributes of `[start, end)` as a list of `(start, end,
    /// placement)` pieces covering it exactly, in order (gaps between
    /// stored ranges have the default).
    pub(crate) fn pieces(&self, start: usize, end: usize) -> Result<KVec<Span>> {
        let mut out = KVec::new();
        let mut at = start;
        for s in self.spans.iter().filter(|s| s.end > start && s.start < end) {
            if s.start > at {
                out.push(
                    Span {
                        start: at,
                        end: s.start,
                        placement: Placement::DEFAULT,
                    },
                    GFP_KERNEL,
                )?;
            }
            let piece_end = s.end.min(end);
            out.push(
                Span {
                    start: s.start.max(at),
                    end: piece_end,
                    placement: s.placement,
                },
                GFP_KERNEL,
            )?;
            at = piece_end;
        }
        if at < end {
            out.push(
                Span {
                    start: at,
                    end,
                    placement: Placement::DEFAULT,
                },
                GFP_KERNEL,
            )?;
        }
        Ok(out)
    }
}

#[kunit_tests(msvm_placement)]
mod tests {
    use super::*;

    const SYS: Placement = Placement {
        preferred: Location::System,
        access: Access::Migrate,
        thrash: true,
        counters: true,
        read_mostly: false,
    };
    const PEER: Placement = Placement {
        preferred: Location::Device(1),
        access: Access::InPlace,
        thrash: true,
        counters: true,
        read_mostly: false,
    };

    fn spans(a: &Attrs) -> KVec<(usize, usize)> {
        let mut v = KVec::new();
        for s in a.spans.iter() {
            let _ = v.push((s.start, s.end), GFP_KERNEL);
        }
        v
    }

    #[test]
    fn set_splits_and_merges() -> Result {
        let mut a = Attrs::new();
        a.set(10, 20, SYS, MAX_RANGES)?;
        a.set(20, 30, SYS, MAX_RANGES)?;
        // Equal neighbours merge.
        assert_eq!(&spans(&a)[..], &[(10, 30)]);
        // A different range in the middle splits it in three.
        a.set(15, 25, PEER, MAX_RANGES)?;
        assert_eq!(&spans(&a)[..], &[(10, 15), (15, 25), (25, 30)]);
        assert_eq!(a.spans[1].placement, PEER);
        // Back to the default: the middle goes away, the rest stays.
        a.set(15, 25, Placement::DEFAULT, MAX_RANGES)?;
        assert_eq!(&spans(&a)[..], &[(10, 15), (25, 30)]);
        // Covering everything with SYS merges it into one again.
        a.set(5, 40, SYS, MAX_RANGES)?;
        assert_eq!(&spans(&a)[..], &[(5, 40)]);
        a.set(0, 100, Placement::DEFAULT, MAX_RANGES)?;
        assert_eq!(a.len(), 0);
        Ok(())
    }

    #[test]
    fn set_overlapping_edges() -> Result {
        let mut a = Attrs::new();
        a.set(10, 20, SYS, MAX_RANGES)?;
        a.set(30, 40, SYS, MAX_RANGES)?;
        // Straddles the end of the first and the start of the second.
        a.set(15, 35, PEER, MAX_RANGES)?;
        assert_eq!(&spans(&a)[..], &[(10, 15), (15, 35), (35, 40)]);
        // Before everything, and after everything.
        a.set(0, 5, PEER, MAX_RANGES)?;
        a.set(50, 60, PEER, MAX_RANGES)?;
        assert_eq!(
            &spans(&a)[..],
            &[(0, 5), (10, 15), (15, 35), (35, 40), (50, 60)]
        );
        Ok(())
    }

    #[test]
    fn limit_leaves_list_unchanged() -> Result {
        let mut a = Attrs::new();
        a.set(0, 10, SYS, 2)?;
        a.set(20, 30, SYS, 2)?;
        assert_eq!(a.set(40, 50, SYS, 2), Err(ENOSPC));
        assert_eq!(&spans(&a)[..], &[(0, 10), (20, 30)]);
        // Merging keeps the count: allowed.
        a.set(10, 20, SYS, 2)?;
        assert_eq!(&spans(&a)[..], &[(0, 30)]);
        assert_eq!(a.set(5, 5, SYS, 2), Err(EINVAL));
        Ok(())
    }

    #[test]
    fn pieces_cover_the_range() -> Result {
        let mut a = Attrs::new();
        a.set(10, 20, SYS, MAX_RANGES)?;
        a.set(30, 40, PEER, MAX_RANGES)?;
        let p = a.pieces(5, 35)?;
        assert_eq!(p.len(), 4);
        assert_eq!(
            (p[0].start, p[0].end, p[0].placement),
            (5, 10, Placement::DEFAULT)
        );
        assert_eq!((p[1].start, p[1].end, p[1].placement), (10, 20, SYS));
        assert_eq!(
            (p[2].start, p[2].end, p[2].placement),
            (20, 30, Placement::DEFAULT)
        );
        assert_eq!((p[3].start, p[3].end, p[3].placement), (30, 35, PEER));
        // Inside one range.
        let p = a.pieces(12, 18)?;
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].start, p[0].end, p[0].placement), (12, 18, SYS));
        // Nothing stored there.
        let p = a.pieces(100, 200)?;
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].placement, Placement::DEFAULT);
        Ok(())
    }
}
