//! Generic devices: a device kind msvm has no id-table entry for, bound at
//! run time, by module parameter `generic_id` or by `driver_override`
//! (`tests/guest/generic.sh`: QEMU's NVMe
//! controller, whose controller memory buffer is a prefetchable BAR2, with
//! no nvme driver in the guest). A device whose largest prefetchable BAR
//! holds a chunk is bound and used as a GPU; one whose BAR is too small, or
//! that has no prefetchable BAR, is refused with a log line that says why.

use std::fs;
use std::path::Path;
use std::process::Command;

use msvm_rt::Device;

use crate::check;
use crate::harness::{Outcome, Test};

pub fn tests() -> Vec<Test> {
    vec![Test {
        name: "generic_devices_bound_or_refused_by_their_bars",
        run: bound_or_refused,
    }]
}

/// QEMU's NVMe controller.
const NVME: (&str, &str) = ("0x1b36", "0x0010");
/// The most of a BAR msvm uses (`src/device.rs`).
const MAX_VRAM: u64 = 64 << 30;
/// `IORESOURCE_MEM` and `IORESOURCE_PREFETCH` in a sysfs `resource` line.
const MEM: u64 = 0x200;
const PREFETCH: u64 = 0x2000;

/// A memory BAR of a device, from its sysfs `resource` file.
#[derive(Debug, Clone, Copy)]
struct Bar {
    n: usize,
    size: u64,
    prefetchable: bool,
}

fn read(p: &Path) -> Result<String, String> {
    fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("{}: {e}", p.display()))
}

fn mem_bars(dev: &Path) -> Result<Vec<Bar>, String> {
    let text = read(&dev.join("resource"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().take(6).enumerate() {
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{line:?}: {e}"))?;
        let [start, end, flags] = f[..] else {
            return Err(format!("bad resource line {line:?}"));
        };
        if flags & MEM != 0 && end > start {
            out.push(Bar {
                n,
                size: end - start + 1,
                prefetchable: flags & PREFETCH != 0,
            });
        }
    }
    Ok(out)
}

/// Whether `dev` is enabled (its `enable_cnt` is not zero).
fn enabled(dev: &Path) -> Result<bool, String> {
    Ok(read(&dev.join("enable"))? != "0")
}

fn bound_or_refused() -> Outcome {
    let devices = Device::all().map_err(|e| e.to_string())?;
    let chunk = devices
        .first()
        .ok_or("no msvm device")?
        .stats()
        .map_err(|e| e.to_string())?
        .chunk_size;
    let log = Command::new("dmesg")
        .output()
        .map_err(|e| format!("dmesg: {e}"))?;
    let log = String::from_utf8_lossy(&log.stdout);
    let (mut bound, mut small, mut no_prefetch) = (0, 0, 0);
    let root = Path::new("/sys/bus/pci/devices");
    for e in fs::read_dir(root).map_err(|e| e.to_string())?.flatten() {
        let dev = e.path();
        if (
            read(&dev.join("vendor"))?.as_str(),
            read(&dev.join("device"))?.as_str(),
        ) != NVME
        {
            continue;
        }
        let addr = e.file_name().to_string_lossy().into_owned();
        let driver = fs::read_link(dev.join("driver"))
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
        let bars = mem_bars(&dev)?;
        let best = bars
            .iter()
            .filter(|b| b.prefetchable)
            .max_by_key(|b| (b.size, std::cmp::Reverse(b.n)));
        let said = |what: &str| {
            log.lines()
                .any(|l| l.contains(&addr) && l.contains("generic device") && l.contains(what))
        };
        let on = enabled(&dev)?;
        match best {
            Some(b) if b.size >= chunk => {
                check!(on, "{addr}: bound, but not enabled");
                check!(
                    driver.as_deref() == Some("msvm"),
                    "{addr}: BAR{} of {} MiB, driver {driver:?}",
                    b.n,
                    b.size >> 20
                );
                let mut found = false;
                for d in &devices {
                    let q = d.query().map_err(|e| e.to_string())?;
                    if q.pci.to_string() == addr {
                        check!(
                            q.vram_size == b.size.min(MAX_VRAM),
                            "{addr}: QUERY vram {} != BAR{} {}",
                            q.vram_size,
                            b.n,
                            b.size
                        );
                        found = true;
                    }
                }
                check!(found, "{addr}: bound, but no render node answers for it");
                check!(
                    said(&format!(
                        "{} MiB VRAM (BAR{}",
                        b.size.min(MAX_VRAM) >> 20,
                        b.n
                    )),
                    "{addr}: no probe line naming BAR{}",
                    b.n
                );
                bound += 1;
            }
            Some(b) => {
                check!(
                    driver.is_none(),
                    "{addr}: bound to {driver:?} with a {} KiB BAR",
                    b.size >> 10
                );
                check!(!on, "{addr}: refused, but left enabled");
                check!(
                    said(&format!(
                        "BAR{} ({} KiB) is smaller than one chunk",
                        b.n,
                        b.size >> 10
                    )),
                    "{addr}: no log line saying BAR{} is too small",
                    b.n
                );
                small += 1;
            }
            None => {
                check!(
                    driver.is_none(),
                    "{addr}: bound to {driver:?} with no prefetchable BAR"
                );
                check!(!on, "{addr}: refused, but left enabled");
                check!(
                    said("no prefetchable memory BAR"),
                    "{addr}: no log line saying it has no prefetchable BAR: {bars:?}"
                );
                no_prefetch += 1;
            }
        }
    }
    check!(
        bound > 0 && small > 0 && no_prefetch > 0,
        "NVMe controllers: {bound} bound, {small} too small, {no_prefetch} without a prefetchable BAR (the boot has one of each)"
    );
    Ok(())
}
