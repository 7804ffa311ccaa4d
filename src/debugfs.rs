// SPDX-License-Identifier: GPL-2.0

//! msvm's debugfs directory, `/sys/kernel/debug/msvm/`:
//!
//! - `topology`: every device, the P2P distance matrix (as QUERY reports
//!   it) and the owner groups.
//! - `shrink`: writing `idle` removes the pagemaps of every device's idle
//!   chunks, `all` also empties lightly used chunks into fuller ones and
//!   removes theirs, synchronously (what the shrinker's work does under
//!   memory pressure); reading gives the pagemaps the last write removed.
//! - `fail_large_home`: writing `N` makes the next `N` allocations of a
//!   2 MiB system folio for a device folio coming home fail (fault
//!   injection: tests reach the 4 KiB fallbacks and eviction's retries);
//!   reading gives how many are left.

use kernel::{
    debugfs, fmt,
    num::casts::FromSafeCast,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    uaccess::UserSliceReader,
};

use crate::reclaim::{shrink_all, CONSOLIDATE, IDLE};
use crate::sysmem::FAIL_LARGE_HOME;

use crate::registry;
use crate::topology::MAX_DEVICES;

/// The directory and its files; removed when dropped (module exit). A file
/// keeps its directory's entry alive, so the drop order does not matter.
#[pin_data]
pub(crate) struct Debugfs {
    dir: debugfs::Dir,
    #[pin]
    topology: debugfs::File<()>,
    #[pin]
    shrink: debugfs::File<Atomic<u64>>,
    #[pin]
    fail_large_home: debugfs::File<()>,
}

impl Debugfs {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            dir: debugfs::Dir::new(c"msvm"),
            topology <- dir.read_callback_file(c"topology", (), &show_topology),
            shrink <- dir.read_write_callback_file(
                c"shrink",
                Atomic::new(0),
                &|n: &Atomic<u64>, f: &mut fmt::Formatter<'_>| writeln!(f, "{}", n.load(Relaxed)),
                &write_shrink,
            ),
            fail_large_home <- dir.read_write_callback_file(
                c"fail_large_home",
                (),
                &|(): &(), f: &mut fmt::Formatter<'_>| {
                    writeln!(f, "{}", FAIL_LARGE_HOME.load(Relaxed))
                },
                &write_fail_large_home,
            ),
        })
    }
}

/// `shrink`: runs a shrink pass over every device.
fn write_shrink(removed: &Atomic<u64>, r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 8];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let level = match buf[..n].trim_ascii() {
        b"idle" => IDLE,
        b"all" => CONSOLIDATE,
        _ => return Err(EINVAL),
    };
    removed.store(u64::from_safe_cast(shrink_all(level)), Relaxed);
    Ok(())
}

/// `fail_large_home`: sets the number of 2 MiB system folio allocations
/// to fail.
fn write_fail_large_home(_: &(), r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 20];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let text = core::str::from_utf8(buf[..n].trim_ascii()).map_err(|_| EINVAL)?;
    let count: u64 = text.parse().map_err(|_| EINVAL)?;
    FAIL_LARGE_HOME.store(count, Relaxed);
    Ok(())
}

/// `topology`: one line per device, the matrix, the groups.
fn show_topology(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let topo = registry::devices();
    let present = |i: usize| topo.get(i).is_some();
    writeln!(f, "devices: {}", topo.len())?;
    for i in (0..MAX_DEVICES).filter(|&i| present(i)) {
        if let Some(n) = topo.get(i) {
            let (d, b) = (n.pci.domain, n.pci.bdf);
            writeln!(
                f,
                "gpu{i}: {d:04x}:{:02x}:{:02x}.{} {} MiB group {}",
                b >> 8,
                (b >> 3) & 0x1f,
                b & 7,
                n.vram_size >> 20,
                topo.group(i).unwrap_or(i)
            )?;
        }
    }
    writeln!(f, "p2p (row reads column's memory: distance, '-' none):")?;
    write!(f, "     ")?;
    for j in (0..MAX_DEVICES).filter(|&j| present(j)) {
        write!(f, " gpu{j:<2}")?;
    }
    writeln!(f)?;
    for i in (0..MAX_DEVICES).filter(|&i| present(i)) {
        write!(f, "gpu{i:<2}")?;
        for j in (0..MAX_DEVICES).filter(|&j| present(j)) {
            if i == j {
                write!(f, "     .")?;
                continue;
            }
            match topo
                .peers(i)
                .find(|p| p.index == j)
                .and_then(|p| p.distance)
            {
                Some(d) => write!(f, " {d:>5}")?,
                None => write!(f, "     -")?,
            }
        }
        writeln!(f)?;
    }
    for l in topo.group_leaders() {
        let g = topo.group(l).unwrap_or(l);
        write!(f, "group {g}:")?;
        for i in (0..MAX_DEVICES).filter(|&i| topo.group(i) == Some(g)) {
            write!(f, " gpu{i}")?;
        }
        writeln!(f)?;
    }
    Ok(())
}
