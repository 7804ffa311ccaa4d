//! msvm-gpu's engines at work (issue 45): migrations copy with the device's
//! copy engine, which debugfs `copy_engine` counts, on the driver's side
//! and on the device's (`CE_DONE`).

use std::fs;
use std::path::Path;

use msvm_rt::{Device, Location};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, verify, Map, PAGE};
use crate::sysfs;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "hw_migrations_copy_with_the_copy_engine",
            run: migrations_copy_with_the_engine,
        },
        Test {
            name: "hw_peer_pages_move_over_p2p_by_the_copy_engine",
            run: peer_pages_move_over_p2p,
        },
    ]
}

const COPY_ENGINE: &str = "/sys/kernel/debug/msvm/copy_engine";
const LEN: usize = 4 << 20;
const SEED: u64 = 0xce00;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// One device's line of debugfs `copy_engine`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub(crate) usable: u64,
    pub(crate) runs: u64,
    pub(crate) commands: u64,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    pub(crate) bytes_zeroed: u64,
    pub(crate) bytes_p2p: u64,
    pub(crate) bytes_within: u64,
    pub(crate) failed: u64,
    pub(crate) device_done: u64,
}

/// The numbers of device `index`'s row of the debugfs table at `path`
/// (rows of `fields` numbers, the device's index first), `None` if it has
/// none.
pub(crate) fn debugfs_row(
    path: &str,
    index: u32,
    fields: usize,
) -> Result<Option<Vec<u64>>, String> {
    let text = fs::read_to_string(path).map_err(|x| format!("{path}: {x}"))?;
    Ok(text.lines().find_map(|line| {
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|w| w.parse::<u64>())
            .collect::<Result<_, _>>()
            .ok()?;
        (f.len() == fields && f[0] == u64::from(index)).then_some(f)
    }))
}

/// The counters of device `index`, `None` if it has no copy engine.
pub(crate) fn counters(index: u32) -> Result<Option<Counters>, String> {
    Ok(debugfs_row(COPY_ENGINE, index, 12)?.map(|f| Counters {
        usable: f[1],
        runs: f[2],
        commands: f[3],
        bytes_in: f[4],
        bytes_out: f[5],
        bytes_zeroed: f[6],
        bytes_p2p: f[7],
        bytes_within: f[8],
        failed: f[10],
        device_done: f[11],
    }))
}

/// Whether the PCI device at `addr` is msvm-gpu.
fn is_model(addr: &str) -> bool {
    let id = |f: &str| fs::read_to_string(Path::new("/sys/bus/pci/devices").join(addr).join(f));
    matches!((id("vendor"), id("device")), (Ok(v), Ok(d)) if v.trim() == "0x1b36" && d.trim() == "0x00f0")
}

/// Turns the engines' use on or off.
pub(crate) fn use_engine(on: bool) -> Result<(), String> {
    fs::write(COPY_ENGINE, if on { "1" } else { "0" }).map_err(|x| format!("{COPY_ENGINE}: {x}"))
}

/// On msvm-gpu, 4 MiB of written pages go to the device and back, then to
/// the device and back by CPU faults: the copy engine moves every byte each
/// way (its counters rise by at least the size; the device's own count of
/// commands agrees with the driver's), nothing fails, and the data is
/// intact. With `copy_engine` 0 the same moves leave the engine's counters
/// alone (the CPU copies) and the data is intact too. With `fail 1`, one
/// run halts on a malformed command: one failure counted, the engine still
/// usable and serving the next runs, the data intact. On a device without
/// an engine (ivshmem, generic devices) the test checks there is no engine
/// line and the data.
fn migrations_copy_with_the_engine() -> Outcome {
    let gpu = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let dev = Device::open(&gpu.node).map_err(e)?;
    dev.vm_create().map_err(e)?;
    let index = dev.query().map_err(e)?.index;
    let before = counters(index)?;
    if !is_model(&gpu.addr) {
        check!(
            before.is_none(),
            "{}: not msvm-gpu, yet a copy engine: {before:?}",
            gpu.addr
        );
        return round_trips(&dev);
    }
    let before = before.ok_or(format!("{}: msvm-gpu without a copy engine line", gpu.addr))?;
    check!(
        before.usable == 1,
        "the copy engine is not usable: {before:?}"
    );
    round_trips(&dev)?;
    let after = counters(index)?.ok_or("the copy engine line went")?;
    // Twice each way: by MIGRATE, then by MIGRATE in and CPU faults out.
    check!(
        after.bytes_in - before.bytes_in >= 2 * LEN as u64,
        "{} bytes into VRAM by the copy engine for 2 x {LEN}: {before:?} -> {after:?}",
        after.bytes_in - before.bytes_in
    );
    check!(
        after.bytes_out - before.bytes_out >= 2 * LEN as u64,
        "{} bytes out of VRAM by the copy engine for 2 x {LEN}: {before:?} -> {after:?}",
        after.bytes_out - before.bytes_out
    );
    check!(
        after.failed == before.failed,
        "submissions failed: {before:?} -> {after:?}"
    );
    check!(
        after.runs > before.runs,
        "no submission ran: {before:?} -> {after:?}"
    );
    // CE_DONE counts from the engine's last reset, which only a failure
    // makes (none above).
    check!(
        after.device_done - before.device_done == after.commands - before.commands,
        "the device completed {} commands, the driver counted {}",
        after.device_done - before.device_done,
        after.commands - before.commands
    );
    use_engine(false)?;
    let cpu = round_trips(&dev);
    let off = counters(index);
    use_engine(true)?;
    cpu?;
    let off = off?.ok_or("the copy engine line went")?;
    check!(
        (off.bytes_in, off.bytes_out, off.bytes_zeroed)
            == (after.bytes_in, after.bytes_out, after.bytes_zeroed),
        "copy_engine 0, yet the engine copied: {after:?} -> {off:?}"
    );
    // A run the engine halts on (a malformed command first: debugfs
    // `copy_engine` `fail 1`) is reset and copied by the CPU; the data
    // stays intact and the engine serves the next runs.
    fs::write(COPY_ENGINE, "fail 1").map_err(|x| format!("{COPY_ENGINE}: {x}"))?;
    let r = round_trips(&dev);
    let _ = fs::write(COPY_ENGINE, "fail 0");
    r?;
    let last = counters(index)?.ok_or("the copy engine line went")?;
    check!(
        last.failed == off.failed + 1 && last.usable == 1,
        "one run made to fail: {off:?} -> {last:?}"
    );
    check!(
        last.bytes_in - off.bytes_in >= LEN as u64,
        "the engine did not serve the runs after the failed one: {off:?} -> {last:?}"
    );
    Ok(())
}

/// 4 MiB of written pages to the device and back by MIGRATE, then to the
/// device and back by CPU faults (a read of every page), checked each time.
fn round_trips(dev: &Device) -> Outcome {
    let mut m = Map::new(LEN)?;
    fill(m.bytes_mut(), SEED);
    for by_fault in [false, true] {
        let out = dev
            .migrate(m.addr(), m.len(), Location::Device)
            .map_err(e)?;
        check!(out.moved == (LEN / PAGE) as u64, "to the device: {out:?}");
        if by_fault {
            verify(m.bytes(), SEED)?;
        } else {
            let out = dev
                .migrate(m.addr(), m.len(), Location::System)
                .map_err(e)?;
            check!(out.moved == (LEN / PAGE) as u64, "back: {out:?}");
            verify(m.bytes(), SEED)?;
        }
    }
    Ok(())
}

/// 4 MiB of written pages on the second GPU of the P2P pair move to the
/// first: on msvm-gpu its copy engine reads them from the peer's BAR along
/// the path `pci_p2pdma` decides (behind one switch, its bus address,
/// which the switch routes: the device log's "through the switch"), at
/// least every byte counted as P2P, no failure; then
/// the pages come home intact.
fn peer_pages_move_over_p2p() -> Outcome {
    let (a, b, _) = crate::multi::devices()?;
    let index = a.query().map_err(e)?.index;
    let mut m = Map::new(LEN)?;
    fill(m.bytes_mut(), SEED + 1);
    let out = b.migrate(m.addr(), m.len(), Location::Device).map_err(e)?;
    check!(out.moved == (LEN / PAGE) as u64, "to the peer: {out:?}");
    let before = counters(index)?;
    let out = a.migrate(m.addr(), m.len(), Location::Device).map_err(e)?;
    check!(out.moved == (LEN / PAGE) as u64, "peer to device: {out:?}");
    let after = counters(index)?;
    if let (Some(x), Some(y)) = (before, after) {
        check!(
            y.bytes_p2p - x.bytes_p2p >= LEN as u64 && y.failed == x.failed,
            "{} bytes over P2P by the copy engine for {LEN}: {x:?} -> {y:?}",
            y.bytes_p2p - x.bytes_p2p
        );
    }
    let out = a.migrate(m.addr(), m.len(), Location::System).map_err(e)?;
    check!(out.moved == (LEN / PAGE) as u64, "home: {out:?}");
    verify(m.bytes(), SEED + 1)
}
