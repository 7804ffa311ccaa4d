//! `msvm-tests bench-hw [MIB] [TAG]`: migrations of MIB MiB between system
//! RAM and msvm-gpu's VRAM with the device's copy engine against the same
//! migrations copied by the CPU (debugfs `copy_engine` 0), alternating in
//! one boot, the best of [`ROUNDS`] each. Prints
//! `BENCH hw_migrate<TAG>_<MIB>M_to_{dev,sys}.{engine,cpu}` (GiB/s) and
//! `.speedup` (the engine's throughput over the CPU's).
//!
//! The copy engine runs natively in the device process; the CPU's copies
//! run in the guest, under TCG: the speedup measures that difference as
//! much as the driver's batching.

use msvm_rt::Location;

use crate::bench::{buffer, gibps, timed_migrate};
use crate::hw::{counters, use_engine, Counters};
use crate::svm::gpu0;

/// Rounds of each mode (the best counts).
const ROUNDS: usize = 5;

pub fn run(mib: usize, tag: &str) -> Result<(), String> {
    let r = measure(mib, tag);
    // Whatever happened, migrations use the engines again.
    use_engine(true)?;
    r
}

fn measure(mib: usize, tag: &str) -> Result<(), String> {
    let len = mib << 20;
    let dev = gpu0()?;
    let index = dev.index().map_err(|e| e.to_string())?;
    let engine = || -> Result<Counters, String> {
        counters(index)?.ok_or_else(|| format!("gpu{index} has no copy engine (not msvm-gpu?)"))
    };
    let p = buffer(len)?;
    for (i, w) in p.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let addr = p.as_ptr() as usize;
    let mv = |to| timed_migrate(&dev, addr, len, to);
    // Best times: [engine, cpu] x [to_dev, to_sys].
    let mut best = [[f64::MAX; 2]; 2];
    for _ in 0..ROUNDS {
        for (mode, on) in [(0, true), (1, false)] {
            use_engine(on)?;
            let before = engine()?;
            let to_dev = mv(Location::Device)?;
            let to_sys = mv(Location::System)?;
            let after = engine()?;
            // The mode took the path it names: the engine moved every byte
            // both ways, or none.
            let (i, o) = (
                after.bytes_in - before.bytes_in,
                after.bytes_out - before.bytes_out,
            );
            let want = if on { len as u64 } else { 0 };
            if (on && (i < want || o < want))
                || (!on && (i, o) != (0, 0))
                || after.failed != before.failed
            {
                return Err(format!(
                    "copy_engine {}: the engine copied {i} bytes in, {o} out, for {len}; {before:?} -> {after:?}",
                    u8::from(on)
                ));
            }
            best[mode][0] = best[mode][0].min(to_dev);
            best[mode][1] = best[mode][1].min(to_sys);
        }
    }
    for (i, w) in p.iter().enumerate() {
        if *w != (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) {
            return Err(format!("word {i} is {w:#x} after the moves"));
        }
    }
    for (d, dir) in ["to_dev", "to_sys"].iter().enumerate() {
        let name = format!("hw_migrate{tag}_{mib}M_{dir}");
        let (e, c) = (best[0][d], best[1][d]);
        println!("BENCH {name}.engine {:.3} GiB/s", gibps(len, e));
        println!("BENCH {name}.cpu {:.3} GiB/s", gibps(len, c));
        println!("BENCH {name}.speedup {:.2} x", c / e);
    }
    Ok(())
}
