// SPDX-License-Identifier: GPL-2.0

//! A VM: the binding of an open render node to the address space (mm) of
//! the process that created it.
//!
//! # Lock order
//!
//! [`crate::drm::file::File::vm`] is taken first; the mm's locks nest
//! inside it (see `src/drm/file.rs`).

use kernel::{
    mm::Mm,
    mm::MmWithUser,
    prelude::*,
    sync::{aref::ARef, Arc},
};

use crate::mm::devtables::{DevMirror, Tables};
use crate::placement::Attrs;
use crate::process::{Process, Registration};

/// The mirrored part of the address space: all of user space.
const MIRROR_START: usize = 0;
// CAST: 2^47 fits a `usize` of a 64-bit kernel.
const MIRROR_LEN: usize = USER_END as usize;

/// Highest user address + 1 on x86-64 with 4-level page tables: where
/// every address a VM takes must end.
pub(crate) const USER_END: u64 = 1 << 47;

/// What the placement policies hear of an invalidation of `[start, end)`
/// in the mm at `mm` (a key only), from the mirror: its pages may change
/// (replicas of them go stale), and if `unmap`, they are unmapped (their
/// blocks' state is freed). The mirror belongs to a VM of the mm, which is
/// registered (but while the VM goes: then its replicas are gone).
fn invalidated(mm: usize, start: usize, end: usize, unmap: bool) {
    if let Some(p) = crate::process::lookup(mm) {
        p.invalidated(start, end, unmap);
    }
}

/// The VM of an open file.
pub(crate) struct Vm {
    /// The placement policies' state of the process, registered under the
    /// mm's address: dropped first, while `mm` still holds the address
    /// (see `crate::process`).
    process: Registration,
    /// The address space this VM mirrors; a counted reference (`mmgrab`)
    /// that keeps the `mm_struct`, not its pages, alive.
    mm: ARef<Mm>,
    /// The interval notifier over the whole user address space: the
    /// engine's view of the process's page tables.
    mirror: Pin<KBox<DevMirror>>,
    /// Placement attributes of the VM's ranges (guarded by the file's VM
    /// lock, like the rest of the VM).
    attrs: Attrs,
}

impl Vm {
    /// A VM on the calling process's address space, for the device whose
    /// device page tables are `tables`.
    pub(crate) fn for_current(tables: &Arc<Tables>) -> Result<Self> {
        let task = kernel::current!();
        let mm = task.mm().ok_or(EINVAL)?;
        let range = (MIRROR_START, MIRROR_LEN);
        // Registered before the mirror exists: its invalidations find it.
        let process = Registration::new(mm)?;
        let hooks = (
            invalidated as fn(_, _, _, _),
            crate::mm::trace::pt_invalidate as fn(_, _, _, _, _),
        );
        let mirror = DevMirror::new(mm, range, hooks, tables)?;
        Ok(Self {
            process,
            mm: ARef::from(&**mm),
            mirror,
            attrs: Attrs::new(),
        })
    }

    /// The VM's mm with a user reference (`mmget`), if the caller is the
    /// VM's process and it is not exiting.
    ///
    /// Fails with `EPERM` when called from another process (e.g. a fork
    /// child using an inherited file), `ESRCH` when the process is exiting.
    pub(crate) fn mm_for_current(&self) -> Result<ARef<MmWithUser>> {
        let task = kernel::current!();
        let cur = task.mm().ok_or(EPERM)?;
        if cur.as_raw() != self.mm.as_raw() {
            return Err(EPERM);
        }
        self.mm.mmget_not_zero().ok_or(ESRCH)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // Its replicas on every device go before the mm can be freed (this
        // VM holds it) and its address name another one: keyed by that
        // address, they would be taken for the new mm's.
        // CAST: an address, used as a key only.
        let key = self.mm.as_raw() as usize;
        for i in 0..crate::topology::MAX_DEVICES {
            // The topology lock goes with the statement: forgetting waits.
            let Ok(pool) = crate::registry::PoolRef::get_locked(&crate::registry::devices(), i)
            else {
                continue;
            };
            pool.forget_replicas(key);
        }
    }
}

impl Vm {
    /// The address of the VM's `mm_struct`, a key only (it names this mm
    /// while the VM holds it).
    pub(crate) fn mm_key(&self) -> usize {
        // CAST: an address, used as a key only.
        self.mm.as_raw() as usize
    }

    /// The placement policies' state of the VM's process.
    pub(crate) fn process(&self) -> &Arc<Process> {
        self.process.process()
    }

    /// The mirror of the VM's page tables.
    pub(crate) fn mirror(&self) -> &DevMirror {
        &self.mirror
    }

    /// The placement attributes.
    pub(crate) fn attrs(&self) -> &Attrs {
        &self.attrs
    }

    /// The placement attributes, to change them.
    pub(crate) fn attrs_mut(&mut self) -> &mut Attrs {
        &mut self.attrs
    }
}
