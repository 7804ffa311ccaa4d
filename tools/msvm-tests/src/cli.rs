//! The `msvm` command line as scripts use it: `--json` output that parses
//! and agrees with the ioctls (`info`, `stats`, the residency of `demo`'s
//! buffer), and `msvm top --once` (devices, then clients from fdinfo).

use std::process::Command;

use msvm_rt::Device;

use crate::check;
use crate::harness::{Outcome, Test};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "cli_json_info_and_stats_agree_with_the_ioctls",
            run: json,
        },
        Test {
            name: "cli_top_once_shows_every_device",
            run: top_once,
        },
        Test {
            name: "cli_json_demo_residency_follows_the_buffer",
            run: demo_json,
        },
    ]
}

/// Runs `msvm ARGS` (the tool next to this one in the guest) and returns
/// its standard output; fails on a non-zero exit.
fn msvm(args: &[&str]) -> Result<String, String> {
    let out = Command::new("msvm")
        .args(args)
        .output()
        .map_err(|e| format!("msvm {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "msvm {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| e.to_string())
}

fn json() -> Outcome {
    let devices = Device::all().map_err(|e| e.to_string())?;
    let info: serde_json::Value =
        serde_json::from_str(&msvm(&["--json", "info"])?).map_err(|e| e.to_string())?;
    let stats: serde_json::Value =
        serde_json::from_str(&msvm(&["stats", "--json"])?).map_err(|e| e.to_string())?;
    let (info, stats) = (
        info.as_array().ok_or("info: not an array")?,
        stats.as_array().ok_or("stats: not an array")?,
    );
    check!(
        info.len() == devices.len() && stats.len() == devices.len(),
        "{} devices, {} in info, {} in stats",
        devices.len(),
        info.len(),
        stats.len()
    );
    for d in &devices {
        let q = d.query().map_err(|e| e.to_string())?;
        let s = d.stats().map_err(|e| e.to_string())?;
        let i = info
            .iter()
            .find(|v| v["query"]["index"] == q.index)
            .ok_or("a device missing from info")?;
        check!(
            i["query"]["vram_size"] == q.vram_size
                && i["query"]["owner_group"] == q.owner_group
                && i["query"]["peers"].as_array().map(Vec::len) == Some(q.peers.len())
                && i["pci_address"] == q.pci.to_string(),
            "gpu{}: info {i}",
            q.index
        );
        let st = stats
            .iter()
            .find(|v| v["index"] == q.index)
            .ok_or("a device missing from stats")?;
        // Counters that no test moves meanwhile.
        check!(
            st["stats"]["vram_size"] == s.vram_size && st["stats"]["chunk_size"] == s.chunk_size,
            "gpu{}: stats {st}",
            q.index
        );
        // The fields of ABI version 13 are there (gauges that may move).
        check!(
            st["stats"]["cgroup_bytes"].is_u64() && st["stats"]["cgroup_limited"].is_u64(),
            "gpu{}: no cgroup counters in stats {st}",
            q.index
        );
    }
    Ok(())
}

/// A row a device, then the clients from fdinfo: this process's open
/// devices among them, one row each.
fn top_once() -> Outcome {
    let devs = Device::all().map_err(|e| e.to_string())?;
    let n = devs.len();
    let out = msvm(&["top", "--once"])?;
    let (devices, clients) = out
        .split_once("\n\n")
        .ok_or(format!("no clients part:\n{out}"))?;
    let numbered = |l: &&str| {
        l.split_whitespace()
            .next()
            .is_some_and(|w| w.parse::<u32>().is_ok())
    };
    let rows = devices.lines().filter(numbered).count();
    let me = std::process::id().to_string();
    let mine = clients
        .lines()
        .filter(numbered)
        .filter(|l| l.split_whitespace().next() == Some(me.as_str()))
        .count();
    check!(
        out.starts_with("gpu") && rows == n && mine == n,
        "{rows} device rows and {mine} client rows of this process, of {n}:\n{out}"
    );
    drop(devs);
    Ok(())
}

/// `msvm --json demo`: each step's residency of the 4 MiB buffer says where
/// the step left it: all of it on gpu0 after the MIGRATE, still there
/// after a peer's job in place, and on the device out of reach after its
/// job; the CPU's read finds every byte.
fn demo_json() -> Outcome {
    const LEN: u64 = 4 << 20;
    let out: serde_json::Value = serde_json::from_str(&msvm(&["--json", "demo", "--mib", "4"])?)
        .map_err(|e| e.to_string())?;
    let steps = out["steps"].as_array().ok_or("no steps")?;
    check!(steps.len() >= 3, "{} steps: {out}", steps.len());
    let first = &steps[0]["residency"];
    let gpu0 = first["asked"].as_u64().ok_or("step 1: no residency")? as usize;
    check!(
        first["devices"][gpu0] == LEN && first["system"] == 0,
        "after MIGRATE to gpu{gpu0}: {first}"
    );
    for s in &steps[1..steps.len() - 1] {
        let r = &s["residency"];
        if r.is_null() {
            continue;
        }
        let on: u64 = r["devices"]
            .as_array()
            .ok_or("no devices")?
            .iter()
            .filter_map(|v| v.as_u64())
            .sum();
        check!(
            on + r["system"].as_u64().unwrap_or(0) == LEN,
            "step {s}: residency does not add up to the buffer"
        );
    }
    let last = steps.last().and_then(|s| s["text"].as_str()).unwrap_or("");
    check!(last.contains("every byte intact"), "last step: {last}");
    Ok(())
}
