// SPDX-License-Identifier: GPL-2.0

//! The probe's self-test of the copy engine: a page from system memory to
//! VRAM and back, and a fill, through the engine's own ring, checked word
//! by word.

use kernel::{
    device::Bound,
    dma::Coherent,
    io::{io_read, io_write},
    pci,
    prelude::*,
};

use super::{Command, CopyEngine, RunError};

/// Bytes of a page of the self-test's buffer: source, destination.
const PAGE: usize = 4096;

/// The word the self-test writes at `i`.
fn pattern(i: usize) -> u64 {
    0x6d73_766d_0000_0000 | (i as u64).wrapping_mul(0x9e37_79b9)
}

/// Copies a page from system memory to VRAM offset 0 and back to another
/// page, then zeroes VRAM's page and copies it back over the first one;
/// checks both. VRAM is not in use yet.
pub(super) fn round_trip(ce: &CopyEngine, pdev: &pci::Device<Bound>) -> Result {
    let buf: Coherent<[u64]> = Coherent::zeroed_slice(pdev.as_ref(), 2 * PAGE / 8, GFP_KERNEL)?;
    let base = buf.dma_address();
    let (src, dst) = (base, base + PAGE as u64);
    for i in 0..PAGE / 8 {
        io_write!(buf, [try: i], pattern(i));
    }
    let mut session = ce.session()?;
    // `run` returns once the engine is done with `buf`, or reset and idle;
    // an engine lost keeps it for good.
    let runs: [&[Command]; 2] = [
        &[
            Command::to_vram(src, 0, PAGE),
            Command::from_vram(0, dst, PAGE),
        ],
        &[
            Command::zero_vram(0, PAGE),
            Command::from_vram(0, src, PAGE),
        ],
    ];
    for (k, cmds) in runs.iter().enumerate() {
        // SAFETY: the commands name `buf`'s pages, a coherent mapping for
        // the session's device, and VRAM's first page (not in use yet),
        // which stay until this returns (`buf` is forgotten on `Lost`).
        match unsafe { session.parts().1.run(cmds) } {
            Ok(()) => {}
            Err(e) => {
                dev_err!(
                    pdev.as_ref(),
                    "msvm-gpu: copy engine: self-test run {k}: {e:?}\n"
                );
                if e == RunError::Lost {
                    core::mem::forget(buf);
                }
                return Err(EIO);
            }
        }
        if k == 0 {
            check(pdev, &buf, PAGE / 8, pattern, "the page back from VRAM")?;
        } else {
            check(pdev, &buf, 0, |_| 0, "the page zeroed in VRAM")?;
        }
    }
    Ok(())
}

/// Checks the page of words at `at` of `buf` against `want`.
fn check(
    pdev: &pci::Device<Bound>,
    buf: &Coherent<[u64]>,
    at: usize,
    want: impl Fn(usize) -> u64,
    what: &str,
) -> Result {
    for i in 0..PAGE / 8 {
        let got: u64 = io_read!(buf, [try: at + i]);
        if got != want(i) {
            dev_err!(
                pdev.as_ref(),
                "msvm-gpu: copy engine: word {i} of {what} is {got:#x}, want {:#x}\n",
                want(i)
            );
            return Err(EIO);
        }
    }
    Ok(())
}
