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
/// meet at the host bridge (QEMU's q35 host bridge is not whitelisted, and
/// no port of the harness's has ACS redirect on).
pub fn expected_distance(a: &SysGpu, b: &SysGpu) -> Option<u32> {
    expected_link(a, b, |_| false, false).distance
}

/// The P2P path `pci_p2pdma` should decide for a client reading a
/// provider's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedPath {
    /// Inside a switch, by bus address.
    Bus,
    /// Through the host bridge.
    HostBridge,
    /// None.
    None,
}

/// What `pci_p2pdma` should say of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedLink {
    pub path: ExpectedPath,
    pub distance: Option<u32>,
    pub common_switch: bool,
    pub acs_redirect: bool,
}

/// What `pci_p2pdma` (Linux 7.3's `calc_map_type_and_dist`) should decide
/// for `client` reading `provider`'s memory, from their chains of PCI
/// devices, whether a device has ACS redirect on (`acs`), and whether the
/// CPU passes P2P through its host bridges (`cpu_p2p`: AMD Zen; no host
/// bridge of QEMU's q35 is on the whitelist). The ports checked for ACS
/// are the provider and its bridges up to the common one, and the client
/// and its bridges below it (all of both chains when they share none).
pub fn expected_link(
    provider: &SysGpu,
    client: &SysGpu,
    acs: impl Fn(&str) -> bool,
    cpu_p2p: bool,
) -> ExpectedLink {
    let (a, b) = (&provider.chain, &client.chain);
    let common = a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count();
    let acs_redirect = if common == 0 {
        a.iter().any(|d| acs(d))
    } else {
        // From the provider up to the common bridge (which it checks), and
        // from the client up to below it.
        a[common - 1..].iter().any(|d| acs(d)) || b[common..].iter().any(|d| acs(d))
    };
    let hops = if common == 0 {
        a.len() + b.len()
    } else {
        (a.len() - common) + (b.len() - common)
    };
    let path = if common > 0 && !acs_redirect {
        ExpectedPath::Bus
    } else if cpu_p2p {
        ExpectedPath::HostBridge
    } else {
        ExpectedPath::None
    };
    ExpectedLink {
        path,
        distance: (path != ExpectedPath::None).then_some(hops as u32),
        common_switch: common > 0,
        acs_redirect,
    }
}

/// Whether PCI device `bdf` has ACS redirect on (request or completion
/// redirect, or egress control), from its config space in sysfs.
pub fn acs_redirects(bdf: &str) -> bool {
    let Ok(cfg) = fs::read(format!("/sys/bus/pci/devices/{bdf}/config")) else {
        return false;
    };
    let word = |at: usize| {
        cfg.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let mut at = 0x100;
    for _ in 0..64 {
        let Some(h) = word(at) else { return false };
        if h & 0xffff == 0x000d {
            let ctrl = cfg
                .get(at + 6..at + 8)
                .map(|b| u16::from_le_bytes([b[0], b[1]]));
            // PCI_ACS_RR, PCI_ACS_CR, PCI_ACS_EC.
            return ctrl.is_some_and(|c| c & (1 << 2 | 1 << 3 | 1 << 5) != 0);
        }
        at = (h >> 20) as usize;
        if at < 0x100 {
            return false;
        }
    }
    false
}

/// Whether the CPU passes P2P through its host bridges as `pci_p2pdma`
/// sees it: an AMD CPU of family 0x17 (Zen) or later.
pub fn cpu_passes_p2p() -> bool {
    let Ok(info) = fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let field = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.trim().to_string())
    };
    field("vendor_id").as_deref() == Some("AuthenticAMD")
        && field("cpu family").and_then(|f| f.parse::<u32>().ok()) >= Some(0x17)
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
    fn links_follow_switches_acs_and_the_host_bridge() {
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
        let c = gpu(&["0000:00:03.0", "0000:05:00.0"]);
        let none = |_: &str| false;
        let l = expected_link(&a, &b, none, false);
        assert_eq!((l.path, l.distance), (ExpectedPath::Bus, Some(4)));
        assert!(l.common_switch && !l.acs_redirect);
        // ACS redirect on a downstream port: through the host bridge if it
        // passes P2P, else nothing; the root port above the switch's
        // upstream port is not on the path.
        let dsp = |d: &str| d == "0000:02:01.0";
        let l = expected_link(&a, &b, dsp, true);
        assert_eq!((l.path, l.distance), (ExpectedPath::HostBridge, Some(4)));
        assert!(l.acs_redirect);
        assert_eq!(expected_link(&a, &b, dsp, false).path, ExpectedPath::None);
        let rp = |d: &str| d == "0000:00:02.0";
        assert_eq!(expected_link(&a, &b, rp, false).path, ExpectedPath::Bus);
        // No common switch: the host bridge, all hops up to it.
        let l = expected_link(&a, &c, none, true);
        assert_eq!((l.path, l.distance), (ExpectedPath::HostBridge, Some(6)));
        assert!(!l.common_switch);
        assert_eq!(expected_link(&a, &c, none, false).distance, None);
    }

    #[test]
    fn pci_addr_shape() {
        assert!(is_pci_addr("0000:03:00.0"));
        assert!(!is_pci_addr("pci0000:00"));
        assert!(!is_pci_addr("drm"));
    }
}
