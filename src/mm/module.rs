// SPDX-License-Identifier: GPL-2.0

//! A reference on a module (`__module_get`/`module_put`): while one is
//! held, `delete_module` (rmmod) refuses to unload it (`EBUSY`).

use kernel::{bindings, ThisModule};

/// One reference on a module, let go when dropped.
///
/// # Invariants
///
/// `raw` is the running module's (NULL for code built into the kernel), on
/// which this value holds one reference.
pub(crate) struct ModuleRef {
    raw: *mut bindings::module,
}

// SAFETY: module references are counted atomically, taken and let go from
// any task.
unsafe impl Send for ModuleRef {}
// SAFETY: see `Send`; a shared `ModuleRef` does nothing.
unsafe impl Sync for ModuleRef {}

impl ModuleRef {
    /// Takes a reference on `module`, the running module (its code runs).
    pub(crate) fn get(module: &ThisModule) -> Self {
        let raw = module.as_ptr();
        // SAFETY: `raw` is the running module's (or NULL, which the call
        // ignores): live while its code runs; a reference may be taken
        // whatever its state.
        unsafe { bindings::__module_get(raw) };
        // INVARIANT: one reference taken just above.
        Self { raw }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: the reference this value holds (invariant), let go once;
        // the module is live while it is held.
        unsafe { bindings::module_put(self.raw) };
    }
}
