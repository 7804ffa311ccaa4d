//! `msvm-tests bench-iommu [MIB]`: in the bench's IOMMU boot (a strict
//! virtual IOMMU, a CPU whose host bridges pass P2P, `--gpus sw,sw,rp`:
//! `tests/guest/bench-iommu.sh`), two figures of issue 46, each within the
//! boot:
//!
//! - `iommu_{strict,lazy}_migrate_<MIB>M.over_pt`: the throughput of MIB
//!   MiB migrated to the GPU on its own root port and back (its copy
//!   engine; every page DMA-mapped, then unmapped) with its IOMMU group in
//!   that mode, over the same in passthrough, the median of [`ROUNDS`]
//!   rounds that each take the three modes in turn. The group's mode
//!   changes with the GPU unbound from msvm (`identity` and `DMA`), or
//!   bound (`DMA` to `DMA-FQ`, a flush queue on the domain: lazy).
//!   Its own root port: the two GPUs behind the switch share a group
//!   (its downstream ports have no ACS), whose mode would change for both.
//! - `p2p_thru_host_bridge_over_bus_<MIB>M`: a CHECKSUM in place by gpu0
//!   of MIB MiB in the memory of the GPU on its own root port (through the
//!   host bridge and the IOMMU) over the same in the memory of gpu0's
//!   sibling behind the switch (inside the switch, by bus address), the
//!   best of [`ROUNDS`] each, alternating.

use std::fs;
use std::time::{Duration, Instant};

use msvm_rt::{checksum, Device, Exec, Location, P2pPath};

use crate::bench::{buffer, counters_off, gibps, timed_migrate};
use crate::sysfs::{self, SysGpu};

/// Rounds of each mode.
const ROUNDS: usize = 3;

const DRIVER: &str = "/sys/bus/pci/drivers/msvm";

pub fn run(mib: usize) -> Result<(), String> {
    let len = mib << 20;
    paths(len, mib)?;
    modes(len, mib)
}

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// The msvm GPUs, each opened with a VM of this process.
fn open_all() -> Result<Vec<(SysGpu, Device, msvm_rt::DeviceInfo)>, String> {
    let mut out = Vec::new();
    for g in sysfs::msvm_gpus()? {
        let d = Device::open(&g.node).map_err(e)?;
        let i = d.query().map_err(e)?;
        d.vm_create().map_err(e)?;
        out.push((g, d, i));
    }
    out.sort_by_key(|(_, _, i)| i.index);
    Ok(out)
}

fn paths(len: usize, mib: usize) -> Result<(), String> {
    let gpus = open_all()?;
    let (_, reader, ri) = gpus.first().ok_or("no GPU")?;
    let peer = |path: P2pPath| {
        ri.peers
            .iter()
            .find(|p| p.path == path)
            .and_then(|p| gpus.iter().find(|(_, _, i)| i.index == p.index))
            .ok_or(format!("gpu{} has no {path} peer", ri.index))
    };
    let (bus, hb) = (peer(P2pPath::BusAddr)?, peer(P2pPath::HostBridge)?);
    let mut best = [f64::MAX; 2];
    let mut bufs = Vec::new();
    for (k, (_, owner, _)) in [bus, hb].into_iter().enumerate() {
        let b = buffer(len)?;
        for (i, w) in b.iter_mut().enumerate() {
            *w = (i as u64) ^ (k as u64) << 60;
        }
        // SAFETY: the words are plain bytes of the same memory.
        let want = checksum(unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), len) });
        let addr = b.as_ptr() as usize;
        // Where it stays: the access counters would move it to the reader.
        reader.set_attr(addr, len, counters_off()).map_err(e)?;
        timed_migrate(owner, addr, len, Location::Device)?;
        bufs.push((addr, want));
    }
    for _ in 0..ROUNDS {
        for (k, (addr, want)) in bufs.iter().enumerate() {
            let t = Instant::now();
            let out = reader.exec(Exec::Checksum, *addr, len, true).map_err(e)?;
            best[k] = best[k].min(t.elapsed().as_secs_f64());
            if out.result != *want || out.migrated != 0 {
                return Err(format!("CHECKSUM over P2P ({k}): {out:?}, want {want:#x}"));
            }
        }
    }
    println!("BENCH p2p_bus_{mib}M {:.3} GiB/s", gibps(len, best[0]));
    println!(
        "BENCH p2p_thru_host_bridge_{mib}M {:.3} GiB/s",
        gibps(len, best[1])
    );
    println!(
        "BENCH p2p_thru_host_bridge_over_bus_{mib}M {:.2} x",
        best[1] / best[0]
    );
    Ok(())
}

/// The IOMMU group type file of PCI device `addr`.
fn group_type(addr: &str) -> String {
    format!("/sys/bus/pci/devices/{addr}/iommu_group/type")
}

/// Puts PCI device `addr`'s group in `mode` (`DMA`, `DMA-FQ`,
/// `identity`), unbinding it from msvm and binding it again where Linux
/// asks, and waits for its render node.
fn set_mode(addr: &str, mode: &str) -> Result<(), String> {
    let path = group_type(addr);
    let now = fs::read_to_string(&path).map_err(e)?;
    if now.trim() == mode {
        return Ok(());
    }
    // Only DMA to DMA-FQ may happen with the driver bound.
    let unbind = !(now.trim() == "DMA" && mode == "DMA-FQ");
    if unbind {
        fs::write(format!("{DRIVER}/unbind"), addr).map_err(|x| format!("unbind {addr}: {x}"))?;
    }
    let set = fs::write(&path, mode).map_err(|x| format!("{path} <- {mode}: {x}"));
    if unbind {
        let bound =
            fs::write(format!("{DRIVER}/bind"), addr).map_err(|x| format!("bind {addr}: {x}"));
        set.and(bound)?;
    } else {
        set?;
    }
    let start = Instant::now();
    while !sysfs::msvm_gpus()?.iter().any(|g| g.addr == addr) {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!("{addr} did not come back within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = fs::read_to_string(&path).map_err(e)?;
    if got.trim() != mode {
        return Err(format!("{addr}'s group is {}, want {mode}", got.trim()));
    }
    Ok(())
}

fn modes(len: usize, mib: usize) -> Result<(), String> {
    // The GPU on its own root port: its group is its own.
    let target = {
        let gpus = open_all()?;
        gpus.iter()
            .find(|(g, _, _)| g.chain.len() == 2)
            .map(|(g, _, _)| g.addr.clone())
            .ok_or("no GPU on its own root port")?
    };
    let b = buffer(len)?;
    for (i, w) in b.iter_mut().enumerate() {
        *w = i as u64;
    }
    let addr = b.as_ptr() as usize;
    const MODES: [(&str, &str); 3] = [("pt", "identity"), ("strict", "DMA"), ("lazy", "DMA-FQ")];
    let mut t: [Vec<f64>; 3] = Default::default();
    for _ in 0..ROUNDS {
        for (k, (_, mode)) in MODES.iter().enumerate() {
            set_mode(&target, mode)?;
            let g = sysfs::msvm_gpus()?
                .into_iter()
                .find(|g| g.addr == target)
                .ok_or("the GPU went")?;
            let d = Device::open(&g.node).map_err(e)?;
            d.vm_create().map_err(e)?;
            // Untimed, first: the device's memory as every mode finds it
            // (a rebound device has no chunk yet; lazy follows strict on
            // the same binding).
            timed_migrate(&d, addr, len, Location::Device)?;
            timed_migrate(&d, addr, len, Location::System)?;
            let secs = timed_migrate(&d, addr, len, Location::Device)?
                + timed_migrate(&d, addr, len, Location::System)?;
            t[k].push(secs);
        }
    }
    for (i, w) in b.iter().enumerate() {
        if *w != i as u64 {
            return Err(format!("word {i} is {w:#x} after the migrations"));
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let m: Vec<f64> = t.iter_mut().map(med).collect();
    for (k, (name, _)) in MODES.iter().enumerate() {
        println!(
            "BENCH iommu_{name}_migrate_{mib}M {:.3} GiB/s",
            gibps(2 * len, m[k])
        );
    }
    // Throughput over passthrough's: time in passthrough over the mode's.
    println!(
        "BENCH iommu_strict_migrate_{mib}M.over_pt {:.2} x",
        m[0] / m[1]
    );
    println!(
        "BENCH iommu_lazy_migrate_{mib}M.over_pt {:.2} x",
        m[0] / m[2]
    );
    Ok(())
}
