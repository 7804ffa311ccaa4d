//! What sysfs says about the PCI topology: the oracle the QUERY results are
//! checked against, computed independently of msvm.

use std::fs;
use std::path::{Path, PathBuf};

/// An msvm GPU as sysfs sees it.
#[derive(Debug, Clone)]
pub struct SysGpu {
    /// Render node, e.g. `/dev/dri/renderD128`.
    pub node: PathBuf,
    /// PCI address, e.g. `0000:03:00.0`.
    pub addr: String,
    /// PCI devices from the root port down to the GPU itself.
    pub chain: Vec<String>,
    /// Size of BAR2 (the VRAM).
    pub bar2_size: u64,
}

/// Is `s` a PCI address (`dddd:bb:dd.f`)?
fn is_pci_addr(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// The size of BAR `n` from a `resource` file.
fn bar_size(dev: &Path, n: usize) -> Result<u64, String> {
    let text = fs::read_to_string(dev.join("resource")).map_err(|e| format!("resource: {e}"))?;
    let line = text.lines().nth(n).ok_or("no such BAR")?;
    let mut f = line
        .split_whitespace()
        .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16));
    let (Some(Ok(start)), Some(Ok(end))) = (f.next(), f.next()) else {
        return Err(format!("bad resource line {line:?}"));
    };
    Ok(if end > start { end - start + 1 } else { 0 })
}

/// Every PCI device bound to msvm and registered (with its render node).
pub fn msvm_gpus() -> Result<Vec<SysGpu>, String> {
    let drv = Path::new("/sys/bus/pci/drivers/msvm");
    let mut out = Vec::new();
    let entries = fs::read_dir(drv).map_err(|e| format!("{}: {e}", drv.display()))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !is_pci_addr(&name) {
            continue;
        }
        // A device being bound or unbound right now may lose its entries
        // while we look: skip it, as if we had looked a moment earlier or
        // later.
        let Ok(dev) = fs::canonicalize(e.path()) else {
            continue;
        };
        let chain: Vec<String> = dev
            .components()
            .filter_map(|c| c.as_os_str().to_str().map(String::from))
            .filter(|c| is_pci_addr(c))
            .collect();
        let Ok(drm) = fs::read_dir(dev.join("drm")) else {
            continue;
        };
        let Some(node) = drm
            .flatten()
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("renderD"))
        else {
            continue;
        };
        let Ok(bar2_size) = bar_size(&dev, 2) else {
            continue;
        };
        out.push(SysGpu {
            node: Path::new("/dev/dri").join(node),
            addr: name,
            chain,
            bar2_size,
        });
    }
    out.sort_by(|a, b| a.addr.cmp(&b.addr));
    Ok(out)
}

/// The emulated GPUs msvm's id table names: (vendor, device, name).
pub const EMULATED_GPUS: [(&str, &str, &str); 2] = [
    ("0x1af4", "0x1110", "ivshmem-plain"),
    ("0x1b36", "0x00f0", "msvm-gpu"),
];

/// Number of devices of each kind of [`EMULATED_GPUS`] present, bound or
/// not.
pub fn emulated_gpu_counts() -> [usize; EMULATED_GPUS.len()] {
    let mut n = [0; EMULATED_GPUS.len()];
    let Ok(entries) = fs::read_dir("/sys/bus/pci/devices") else {
        return n;
    };
    for e in entries.flatten() {
        let rd = |f: &str| fs::read_to_string(e.path().join(f)).unwrap_or_default();
        let (v, d) = (rd("vendor"), rd("device"));
        if let Some(k) = EMULATED_GPUS
            .iter()
            .position(|(vv, dd, _)| v.trim() == *vv && d.trim() == *dd)
        {
            n[k] += 1;
        }
    }
    n
}

/// The P2P distance `pci_p2pdma` should report between two devices: hops
/// from each up to their deepest common upstream bridge; `None` if they only
/// meet at the host bridge (QEMU's q35 host bridge is not whitelisted).
pub fn expected_distance(a: &SysGpu, b: &SysGpu) -> Option<u32> {
    let common = a
        .chain
        .iter()
        .zip(b.chain.iter())
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return None;
    }
    let up_a = a.chain.len() - common;
    let up_b = b.chain.len() - common;
    Some((up_a + up_b) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(chain: &[&str]) -> SysGpu {
        SysGpu {
            node: PathBuf::new(),
            addr: chain.last().unwrap().to_string(),
            chain: chain.iter().map(|s| s.to_string()).collect(),
            bar2_size: 0,
        }
    }

    #[test]
    fn distance_behind_one_switch_is_four() {
        let a = gpu(&[
            "0000:00:02.0",
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:03:00.0",
        ]);
        let b = gpu(&[
            "0000:00:02.0",
            "0000:01:00.0",
            "0000:02:01.0",
            "0000:04:00.0",
        ]);
        assert_eq!(expected_distance(&a, &b), Some(4));
        assert_eq!(expected_distance(&b, &a), Some(4));
    }

    #[test]
    fn separate_root_ports_have_no_path() {
        let a = gpu(&[
            "0000:00:02.0",
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:03:00.0",
        ]);
        let c = gpu(&["0000:00:03.0", "0000:05:00.0"]);
        assert_eq!(expected_distance(&a, &c), None);
    }

    #[test]
    fn pci_addr_shape() {
        assert!(is_pci_addr("0000:03:00.0"));
        assert!(!is_pci_addr("pci0000:00"));
        assert!(!is_pci_addr("drm"));
    }
}
