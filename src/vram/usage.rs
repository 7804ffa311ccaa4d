// SPDX-License-Identifier: GPL-2.0

//! What one process holds of a device's memory, for its DRM clients'
//! statistics (fdinfo, `crate::drm::fdinfo`).
//!
//! Pages are counted from the chunks' records (`records.rs`): each page
//! migrated in names the mm it was migrated in at, until it is freed. A
//! record is a hint (a page unmapped, or shared with a fork child since,
//! still names the mm it came in with), so the figure is what the process
//! brought to the device and the device still holds: the DRM convention's
//! "resident" memory, counted the way the driver knows it. Read-only
//! replicas of the process's blocks count too.

use crate::mm::pagemap::PAGE_SIZE;

use super::VramPool;

impl VramPool {
    /// Bytes of this device's memory that hold pages the process of the mm
    /// at `mm` (a key only) brought here, and its replicas; `None` if a
    /// shrink pass or an eviction holds `shrink_lock` now (a reader of
    /// fdinfo never waits for one, nor holds one up for long: it only
    /// tries). Under `shrink_lock`, which every removal of a pagemap holds
    /// (so that the hold taken on each chunk's, under the chunk table, is
    /// never its last: `mod.rs`), the records' own table taken under it
    /// alone; a scan of every page record of the device (some 10 ms for
    /// 64 GiB). Sleeps.
    pub(crate) fn held_by(&self, mm: usize) -> Option<u64> {
        let mut pages = 0usize;
        {
            let _pass = self.shrink_lock.try_lock()?;
            for c in 0..self.nchunks {
                let map = self.chunks.lock().get(c).and_then(|s| s.map().cloned());
                if let Some(map) = map {
                    pages += map.data().records.count_of(mm);
                }
            }
        }
        let replicas = self.replica_bytes(mm, 0, usize::MAX);
        // CAST: a byte count of one device fits a `u64`.
        Some((pages * PAGE_SIZE) as u64 + replicas)
    }
}
