// SPDX-License-Identifier: GPL-2.0

//! The VMA checks of a request: holes, access, and the VMAs a migration or
//! a device may not touch.

use kernel::mm::virt::flags;
use kernel::mm::MmapReadGuard;
use kernel::prelude::*;

use crate::mm::migrate::{vma_is_read_only_anon, vma_is_secretmem};

/// VMAs `migrate_vma_setup` refuses: hugetlb and `VM_SPECIAL` mappings.
pub(super) const UNMIGRATABLE: kernel::mm::virt::vm_flags_t =
    flags::HUGETLB | flags::IO | flags::PFNMAP | flags::MIXEDMAP | flags::DONTEXPAND;

/// Checks that `[start, end)` is mapped without holes (`EFAULT`) and
/// readable, and writable if `write` (`EACCES`). Migrations count the pages
/// of VMAs they cannot move as busy; the engine refuses them instead (see
/// [`check_job_vmas`]).
pub(crate) fn check_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
) -> Result {
    walk_vmas(guard, start, end, write, false)
}

/// [`check_vmas`] for a job, which also refuses (`EFAULT`) the VMAs that
/// GUP refuses: I/O and PFN mappings, and secretmem, whose pages the
/// kernel must never touch.
pub(crate) fn check_job_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
) -> Result {
    walk_vmas(guard, start, end, write, true)
}

/// The walk of [`check_vmas`]; `device` refuses what no device may reach.
fn walk_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
    device: bool,
) -> Result {
    let mut addr = start;
    while addr < end {
        let vma = guard.vma_lookup(addr).ok_or(EFAULT)?;
        let need = if write {
            flags::READ | flags::WRITE
        } else {
            flags::READ
        };
        if vma.flags() & need != need {
            return Err(EACCES);
        }
        if device && (vma.flags() & (flags::IO | flags::PFNMAP) != 0 || vma_is_secretmem(vma)) {
            return Err(EFAULT);
        }
        addr = vma.end();
    }
    Ok(())
}

/// Whether `[start, end)` lies in private anonymous VMAs that nothing may
/// write ([`vma_is_read_only_anon`]): pages whose replicas stay true until
/// an invalidation.
pub(crate) fn read_only_anon(guard: &MmapReadGuard<'_>, start: usize, end: usize) -> bool {
    let mut addr = start;
    while addr < end {
        match guard.vma_lookup(addr) {
            Some(vma) if vma_is_read_only_anon(vma) => addr = vma.end(),
            _ => return false,
        }
    }
    true
}
