//! P2P paths as `pci_p2pdma` decides them, taken: a job reading a peer's
//! memory in place moves its bytes the way the pair's path says, as the
//! reading device itself counts them (msvm-gpu's `DMA_SWITCH` and
//! `DMA_REMOTE`, debugfs `dma_paths`).

use msvm_rt::{Device, DeviceInfo, Exec, Location, P2pPath};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::hw::debugfs_row;
use crate::svm::{fill, Map, PAGE};
use crate::sysfs;

const DMA_PATHS: &str = "/sys/kernel/debug/msvm/dma_paths";

pub fn tests() -> Vec<Test> {
    vec![Test {
        name: "p2p_jobs_take_pci_p2pdma_paths",
        run: jobs_take_the_paths,
    }]
}

/// A device's DMA byte counts: direct, remote, switch.
type Counts = (u64, u64, u64);

/// Device `index`'s DMA byte counts, `None` if it has no counters (not
/// msvm-gpu).
fn dma_paths(index: u32) -> Result<Option<Counts>, String> {
    Ok(debugfs_row(DMA_PATHS, index, 4)?.map(|f| (f[1], f[2], f[3])))
}

/// Whether `len` bytes moved along `path` between the client's counts
/// `before` and `after`: inside the switch and not through the root
/// complex for a bus-address path, the other way round for a host-bridge
/// one.
fn went(what: &str, path: P2pPath, before: Counts, after: Counts, len: u64) -> Outcome {
    let (Some(remote), Some(switch)) =
        (after.1.checked_sub(before.1), after.2.checked_sub(before.2))
    else {
        return Err(format!(
            "{what}: the counters went back: {before:?} -> {after:?}"
        ));
    };
    if path == P2pPath::BusAddr {
        check!(
            switch >= len && remote < len,
            "{what}: {switch} B inside the switch, {remote} B through the root complex"
        );
    } else {
        check!(
            remote >= len && switch == 0,
            "{what}: {remote} B through the root complex, {switch} B inside the switch"
        );
    }
    Ok(())
}

/// Every ordered pair of msvm-gpu devices with a P2P path: the
/// provider's memory holds the data, the client checksums it in place,
/// then migrates it to itself (its copy engine reading the peer), and the
/// CPU faults it home. The sum and the data are right, the job migrates
/// nothing, and the client's counters show the
/// bytes went inside the switch (by bus address, which no IOMMU sees) for
/// a bus-address path, or through the root complex (DMA-mapped, through
/// the IOMMU if any) for a host-bridge path: what `pci_p2pdma` decided,
/// not a stale or a guessed path (a bus address through the root complex
/// faults behind an IOMMU; an IOVA is no peer's window in the switch).
fn jobs_take_the_paths() -> Outcome {
    let mut devs: Vec<(Device, DeviceInfo)> = Vec::new();
    for g in sysfs::msvm_gpus()? {
        let d = Device::open(&g.node).map_err(|e| e.to_string())?;
        let i = d.query().map_err(|e| e.to_string())?;
        d.vm_create().map_err(|e| e.to_string())?;
        devs.push((d, i));
    }
    let len = 64 * PAGE;
    let mut checked = Vec::new();
    for (client, ci) in &devs {
        if dma_paths(ci.index)?.is_none() {
            continue;
        }
        for p in ci.peers.iter().filter(|p| p.path != P2pPath::None) {
            let Some((provider, _)) = devs.iter().find(|(_, i)| i.index == p.index) else {
                continue;
            };
            let mut m = Map::new(len)?;
            fill(m.bytes_mut(), 17 + u64::from(p.index));
            let want_bytes = m.bytes().to_vec();
            let want = msvm_rt::checksum(&want_bytes);
            let out = provider
                .migrate(m.addr(), len, Location::Device)
                .map_err(|e| e.to_string())?;
            check!(
                out.moved == (len / PAGE) as u64,
                "park on gpu{}: {out:?}",
                p.index
            );
            let before = dma_paths(ci.index)?.ok_or("counters went")?;
            let sum = client
                .exec(Exec::Checksum, m.addr(), len, true)
                .map_err(|e| e.to_string())?;
            let after = dma_paths(ci.index)?.ok_or("counters went")?;
            let pair = format!("gpu{} reading gpu{} ({})", ci.index, p.index, p.path);
            check!(sum.result == want, "{pair}: checksum differs");
            check!(sum.migrated == 0, "{pair}: migrated {}", sum.migrated);
            let len = len as u64;
            went(&format!("{pair}: the job"), p.path, before, after, len)?;
            // Then moved to the client over the same path, by its copy
            // engine (which reads the peer's memory along it), and home
            // by CPU faults: every byte as written.
            let copied = crate::hw::counters(ci.index)?.map_or(0, |c| c.bytes_p2p);
            let before = after;
            let out = client
                .migrate(m.addr(), len as usize, Location::Device)
                .map_err(|e| e.to_string())?;
            check!(out.moved == len / PAGE as u64, "{pair}: migration {out:?}");
            let after = dma_paths(ci.index)?.ok_or("counters went")?;
            let engine = crate::hw::counters(ci.index)?.map_or(0, |c| c.bytes_p2p) - copied;
            went(
                &format!("{pair}: the migration"),
                p.path,
                before,
                after,
                len,
            )?;
            check!(
                engine == len,
                "{pair}: the copy engine moved {engine} B over P2P"
            );
            check!(
                m.bytes() == &want_bytes[..],
                "{pair}: data differs after the migration home"
            );
            checked.push(pair);
        }
    }
    // The harness's GPUs (`sw,sw,rp`): the two behind the switch reach
    // each other inside it; with a CPU whose host bridges pass P2P, each
    // reaches the third through the host bridge, both ways.
    let count = |k: &str| {
        checked
            .iter()
            .filter(|p| p.ends_with(&format!("({k})")))
            .count()
    };
    let want_hb = if sysfs::cpu_passes_p2p() { 4 } else { 0 };
    check!(
        count("bus-address") >= 2 && count("host-bridge") >= want_hb,
        "pairs taken: {checked:?}; want 2 inside the switch and {want_hb} through the host bridge"
    );
    println!("    paths taken: {}", checked.join(", "));
    Ok(())
}
