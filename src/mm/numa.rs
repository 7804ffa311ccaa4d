// SPDX-License-Identifier: GPL-2.0

//! NUMA: the node system pages coming home from a device are taken on, and
//! the node of a device.
//!
//! A NUMA policy decides first: the VMA's own (`mbind`), else the task's
//! (`set_mempolicy`) if the task moving the pages is a thread of the
//! process they belong to (a CPU fault, a MIGRATE, room made among its own
//! pages), not another task's (see `msvm_home_by_policy` in `helpers_alloc.c`
//! for the one exception: a private mapping of a shmem file). Without a
//! policy, the processor that wants the data decides: a CPU fault or a
//! MIGRATE takes pages on the node of the CPU doing it ([`Home::LOCAL`]),
//! as a first touch would; an eviction (making room, a shrink pass, an
//! unplug) takes them on the node of the device they leave
//! ([`Home::device`]), whatever task happens to run it. See
//! `Documentation/design.rst`, "NUMA".

use kernel::device::Device;
use kernel::sync::atomic::{Atomic, Relaxed};

use super::bindings as b;
use super::rawdev::raw;

/// `NUMA_NO_NODE`.
const NO_NODE: i32 = -1;

/// Where system pages coming home are taken when no NUMA policy decides.
///
/// # Invariants
///
/// `nid` is [`NO_NODE`] or the id of a node that was online when the value
/// was made (nodes with a device or memory are not taken offline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Home {
    nid: i32,
}

impl Home {
    /// The node of the CPU that moves the pages (a CPU fault, a MIGRATE).
    // INVARIANT: `NO_NODE`.
    pub(crate) const LOCAL: Home = Home { nid: NO_NODE };

    /// The node of `dev` (an eviction of its memory); the local node if the
    /// firmware gave the device none, or one that is not online.
    pub(crate) fn device(dev: &Device) -> Home {
        // SAFETY: `dev` is a live device (the borrow); the call reads a
        // field and checks the node.
        let nid = unsafe { b::msvm_dev_node(raw(dev)) };
        // INVARIANT: the helper gives an online node or `NUMA_NO_NODE`.
        Home { nid }
    }

    /// The node id (`-1`: the local node), for the C side: valid for
    /// `memremap_pages` and the page allocator (invariant).
    pub(super) fn nid(self) -> i32 {
        self.nid
    }

    /// The node id, `None` for the local node (debugfs).
    pub(crate) fn node(self) -> Option<u32> {
        u32::try_from(self.nid).ok()
    }
}

/// Small pages for data coming home taken in the page allocator's bulk path
/// (a migration through a VMA that no NUMA policy decides) and one at a
/// time (a policy decided, an eviction or unplug, a 2 MiB folio's fallback,
/// or the bulk path came short): debugfs `numa`.
pub(crate) static BULK_PAGES: Atomic<u64> = Atomic::new(0);
/// See [`BULK_PAGES`].
pub(crate) static SINGLE_PAGES: Atomic<u64> = Atomic::new(0);

/// Counts `n` pages of the bulk path.
pub(super) fn count_bulk(n: u64) {
    BULK_PAGES.add(n, Relaxed);
}

/// Counts a page taken on its own.
pub(super) fn count_single() {
    SINGLE_PAGES.add(1, Relaxed);
}

#[kernel::macros::kunit_tests(msvm_numa)]
mod tests {
    use super::*;
    use crate::mm::page::{How, NewPage};

    /// Node `nid` if it is online, else the local node.
    fn on(nid: u32) -> Home {
        let nid = i32::try_from(nid).unwrap_or(NO_NODE);
        // SAFETY: a pure check of the node id.
        let nid = unsafe { b::msvm_node_checked(nid) };
        // INVARIANT: the helper gives an online node or `NUMA_NO_NODE`.
        Home { nid }
    }

    /// The node `page` is on.
    fn nid_of(page: &NewPage) -> i32 {
        // SAFETY: a page we hold (the `NewPage`); reads its flags.
        unsafe { b::msvm_page_nid(page.page().as_ptr()) }
    }

    #[test]
    fn pages_without_a_vma_go_to_the_node_asked_or_the_local_one() {
        // Every online node with memory (one in most test guests; the
        // 8-GPU server's has two).
        let mut seen = 0;
        for n in 0..64u32 {
            let home = on(n);
            // SAFETY: a pure check of the node id.
            if home.node() != Some(n) || !unsafe { b::msvm_node_has_memory(home.nid()) } {
                continue;
            }
            seen += 1;
            for how in [How::Must, How::Migrate, How::Try] {
                let p = NewPage::home(None, home, how).expect("a page");
                assert_eq!(nid_of(&p), home.nid());
            }
        }
        assert!(seen >= 1);
        // A node that does not exist, or none: the local one.
        assert_eq!(on(1 << 20), Home::LOCAL);
        assert_eq!(on(u32::MAX), Home::LOCAL);
        assert_eq!(Home::LOCAL.node(), None);
        let p = NewPage::home(None, Home::LOCAL, How::Must).expect("a page");
        assert!(nid_of(&p) >= 0);
    }
}
