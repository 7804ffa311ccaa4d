// SPDX-License-Identifier: GPL-2.0

//! Keys of a process's 2 MiB blocks in direct-mapped tables: the refault
//! shadows of a device (`crate::vram`).

use kernel::prelude::*;

use crate::mm::page::BLOCK_SIZE;

/// A well-mixed 64-bit hash of the block of `addr` of the process keyed
/// `mm` (its id: `crate::process`) and `salt` (what else tells two
/// entries of one block apart, e.g. a device; 0 if nothing). A table takes
/// its slot index from the low bits and a tag from the high ones.
pub(crate) fn hash(mm: usize, addr: usize, salt: u64) -> u64 {
    // CAST: `usize` is 64 bits wide on the architectures msvm builds for.
    let block = (addr / BLOCK_SIZE) as u64;
    let mut h = (mm as u64) ^ block.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= salt.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

#[kunit_tests(msvm_block_key)]
mod tests {
    use super::*;

    #[test]
    fn one_key_per_block_and_salt() {
        let mm = 0xffff_8880_1234_5600;
        let h = hash(mm, 0x7f00_0020_0000, 3);
        // Every address of the block has its key.
        assert_eq!(h, hash(mm, 0x7f00_003f_ffff, 3));
        // The next block, another salt, another mm: other keys.
        assert_ne!(h, hash(mm, 0x7f00_0040_0000, 3));
        assert_ne!(h, hash(mm, 0x7f00_0020_0000, 4));
        assert_ne!(h, hash(mm + 0x400, 0x7f00_0020_0000, 3));
    }
}
