// SPDX-License-Identifier: GPL-2.0

//! The kernel glue of msvm: the only place that calls C directly.
//!
//! The rest of the crate reaches C only through the types here and the
//! `kernel` crate, and has no `unsafe` but the driver edge's calls (see
//! "What the glue guarantees" in `Documentation/design.rst`). The generated
//! bindings (`bindings`) are private to
//! this module, which the compiler enforces; the uAPI structs they include
//! are re-exported by [`abi`]. Each wrapper states the invariants it relies
//! on; each `unsafe` block says why it holds.

pub(crate) mod abi;
// Used by msvm_dmirror.ko only (the glue is built into both modules).
#[allow(dead_code)]
pub(crate) mod backing;
mod bindings;
pub(crate) mod cancel;
pub(crate) mod clock;
pub(crate) mod devpt;
pub(crate) mod devtables;
pub(crate) mod dma;
pub(crate) mod dmem;
// Used by msvm_dmirror.ko only (the glue is built into both modules).
pub(crate) mod drm_ioctl;
#[allow(dead_code)]
pub(crate) mod exclusive;
pub(crate) mod fault;
pub(crate) mod faultq;
pub(crate) mod fdinfo;
pub(crate) mod freemap;
pub(crate) mod hmm;
pub(crate) mod inflight;
pub(crate) mod iomem;
pub(crate) mod kunit_dev;
pub(crate) mod kunit_mm;
pub(crate) mod migrate;
// Used by msvm_dmirror.ko only (the glue is built into both modules).
#[allow(dead_code)]
pub(crate) mod misc;
pub(crate) mod mmap;
// Used by msvm.ko only (the glue is built into both modules).
#[allow(dead_code)]
pub(crate) mod module;
pub(crate) mod numa;
pub(crate) mod owner;
pub(crate) mod p2p;
pub(crate) mod page;
// Used by msvm_dmirror.ko only (the glue is built into both modules).
pub(crate) mod pagemap;
#[allow(dead_code)]
pub(crate) mod pagetable;
pub(crate) mod pci;
mod rawdev;
pub(crate) mod reclaim;
pub(crate) mod tlb;
pub(crate) mod trace;
