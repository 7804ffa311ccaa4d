//! msvm's DRM clients, as `/proc/<pid>/fdinfo` shows them
//! (`Documentation/gpu/drm-usage-stats.rst`): which process holds which
//! device's memory and how long its jobs ran.

use std::fs;
use std::path::Path;

/// One open msvm render node of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// The process.
    pub pid: u32,
    /// Its name (`/proc/<pid>/comm`).
    pub comm: String,
    /// The DRM core's client id (unique per open file).
    pub client_id: u64,
    /// The device's PCI address, as `drm-pdev` gives it.
    pub pdev: String,
    /// `drm-engine-compute`: nanoseconds its jobs took.
    pub engine_ns: u64,
    /// `drm-resident-vram`: bytes of the device's memory its process holds
    /// (`None` without a VM or while the device is going away).
    pub resident: Option<u64>,
}

/// A size as `drm_fdinfo_print_size` writes it (`<n>` then ` KiB`, ` MiB`
/// or nothing).
fn size(v: &str) -> Option<u64> {
    let mut f = v.split_whitespace();
    let n: u64 = f.next()?.parse().ok()?;
    let unit = match f.next() {
        None => 1,
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some("GiB") => 1 << 30,
        Some(_) => return None,
    };
    n.checked_mul(unit)
}

/// Parses one fdinfo file's text: a client if it is an msvm render node.
pub fn parse_fdinfo(pid: u32, comm: &str, text: &str) -> Option<Client> {
    let mut c = Client {
        pid,
        comm: comm.to_string(),
        client_id: 0,
        pdev: String::new(),
        engine_ns: 0,
        resident: None,
    };
    let mut ours = false;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k {
            "drm-driver" => ours = v == "msvm",
            "drm-client-id" => c.client_id = v.parse().ok()?,
            "drm-pdev" => c.pdev = v.to_string(),
            "drm-engine-compute" => c.engine_ns = v.trim_end_matches(" ns").trim().parse().ok()?,
            "drm-resident-vram" => c.resident = size(v),
            _ => {}
        }
    }
    ours.then_some(c)
}

/// Every msvm client of every process this one may read the fdinfo of.
pub fn clients() -> Vec<Client> {
    let mut out = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = Path::new("/proc").join(pid.to_string());
        let comm = fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let Ok(fds) = fs::read_dir(dir.join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            // A file closed meanwhile is skipped.
            if let Ok(text) = fs::read_to_string(fd.path()) {
                out.extend(parse_fdinfo(pid, comm.trim(), &text));
            }
        }
    }
    out.sort_by_key(|c| (c.pid, c.client_id));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_msvm_client_and_skips_others() {
        let text = "pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t8\n\
                    drm-driver:\tmsvm\ndrm-client-id:\t7\ndrm-pdev:\t0000:03:00.0\n\
                    drm-engine-compute:\t123456 ns\ndrm-total-vram:\t4096 KiB\n\
                    drm-resident-vram:\t4 MiB\n";
        let c = parse_fdinfo(42, "app", text).unwrap();
        assert_eq!(c.client_id, 7);
        assert_eq!(c.pdev, "0000:03:00.0");
        assert_eq!(c.engine_ns, 123_456);
        assert_eq!(c.resident, Some(4 << 20));
        assert!(parse_fdinfo(42, "app", "drm-driver:\ti915\n").is_none());
        assert!(parse_fdinfo(42, "app", "pos:\t0\n").is_none());
        // No VM: no memory line.
        let c = parse_fdinfo(1, "x", "drm-driver:\tmsvm\ndrm-client-id:\t1\n").unwrap();
        assert_eq!(c.resident, None);
        assert_eq!(size("512"), Some(512));
        assert_eq!(size("3 GiB"), Some(3 << 30));
        assert_eq!(size("3 TiB"), None);
    }
}
