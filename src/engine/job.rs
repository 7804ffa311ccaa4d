// SPDX-License-Identifier: GPL-2.0

//! A job, as EXEC gives it: its operation ([`Op`]: a FILL's [`Pattern`],
//! COPY, ATOMIC_ADD, CHECKSUM), its range, and what running it did
//! ([`Done`]).

use kernel::prelude::*;

use crate::mm::abi::MSVM_EXEC_PATTERN_MAX;

/// The bytes a FILL repeats over its range.
///
/// # Invariants
///
/// `1 <= len <= PATTERN_MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pattern {
    pub(super) bytes: [u8; PATTERN_MAX],
    pub(super) len: usize,
}

/// The longest pattern.
// CAST: 128 fits a `usize`.
pub(crate) const PATTERN_MAX: usize = MSVM_EXEC_PATTERN_MAX as usize;

impl Pattern {
    /// The 8 bytes of `v`, in memory order.
    pub(crate) fn word(v: u64) -> Self {
        let mut bytes = [0; PATTERN_MAX];
        bytes[..8].copy_from_slice(&v.to_ne_bytes());
        // INVARIANT: 8 bytes.
        Self { bytes, len: 8 }
    }

    /// A pattern of `len` bytes, which `read` writes into the slice it is
    /// given; `EINVAL` for a length of 0 or above [`PATTERN_MAX`].
    pub(crate) fn read(len: usize, read: impl FnOnce(&mut [u8]) -> Result) -> Result<Self> {
        if !(1..=PATTERN_MAX).contains(&len) {
            return Err(EINVAL);
        }
        let mut bytes = [0; PATTERN_MAX];
        read(&mut bytes[..len])?;
        // INVARIANT: checked above.
        Ok(Self { bytes, len })
    }

    /// Writes the pattern over `buf` as it goes on from byte `at` (without
    /// a panicking path: the executor's inner loop).
    pub(super) fn write(&self, at: usize, buf: &mut [u8]) {
        let pat = self.bytes.get(..self.len).unwrap_or_default();
        let skip = at.checked_rem(self.len).unwrap_or(0);
        for (b, &x) in buf.iter_mut().zip(pat.iter().cycle().skip(skip)) {
            *b = x;
        }
    }
}

/// What a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Repeats the pattern over the range, from its first byte.
    Fill(Pattern),
    /// Copies the range at `src` over the range.
    Copy { src: usize },
    /// Adds `value` to every 64-bit word of the range.
    AtomicAdd(u64),
    /// Computes the 64-bit FNV-1a hash of the range.
    Checksum,
}

/// One job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Job {
    pub(crate) op: Op,
    pub(crate) addr: usize,
    pub(crate) len: usize,
    /// Use every page where it is (`MSVM_EXEC_IN_PLACE`), whatever the
    /// range's access policy, except the blocks the access counters move
    /// here (`crate::access`).
    pub(crate) in_place: bool,
}

/// What a job returns.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct Done {
    pub(crate) result: u64,
    pub(crate) migrated: u64,
    /// Pages the engine used, by path: its own VRAM (replicas included), a
    /// peer's VRAM over P2P, system RAM by DMA (for the `msvm_exec` trace
    /// event).
    pub(crate) vram: u64,
    pub(crate) p2p: u64,
    pub(crate) dma: u64,
}

#[kunit_tests(msvm_engine)]
mod tests {
    use super::*;

    /// A pattern of `n` bytes: 1, 2, ..., n.
    fn counting(n: usize) -> Result<Pattern> {
        Pattern::read(n, |buf| {
            for (i, b) in buf.iter_mut().enumerate() {
                // CAST: `i` < 128.
                *b = i as u8 + 1;
            }
            Ok(())
        })
    }

    #[test]
    fn pattern_repeats_from_the_first_byte() -> Result {
        for n in [1, 2, 3, 8, 100, 128] {
            let p = counting(n)?;
            // A job of 700 bytes cut into windows at several places, each
            // written from its offset in the job: each byte gets the
            // pattern's byte of its offset.
            for cut in [0, 1, 5, 129, 333] {
                let mut buf = [0u8; 700];
                let (a, b) = buf.split_at_mut(cut);
                p.write(0, a);
                let (b0, b1) = b.split_at_mut(200.min(b.len()));
                p.write(cut, b0);
                p.write(cut + 200, b1);
                for (i, &x) in buf.iter().enumerate() {
                    // CAST: below 129.
                    assert_eq!(x, (i % n) as u8 + 1);
                }
            }
        }
        Ok(())
    }

    #[test]
    fn pattern_word_is_memory_order() {
        let mut buf = [0u8; 11];
        Pattern::word(0x0807_0605_0403_0201).write(0, &mut buf);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]);
    }

    #[test]
    fn pattern_lengths() {
        assert_eq!(counting(0), Err(EINVAL));
        assert_eq!(counting(PATTERN_MAX + 1), Err(EINVAL));
        assert_eq!(Pattern::read(4, |_| Err(EFAULT)), Err(EFAULT));
    }
}
