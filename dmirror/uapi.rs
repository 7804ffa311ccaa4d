// SPDX-License-Identifier: GPL-2.0

//! `lib/test_hmm_uapi.h`, the uAPI of `test_hmm` that this module keeps
//! unchanged: the ioctls of `/dev/hmm_dmirror<N>` and their argument.

use kernel::{
    ioctl::_IOWR,
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

/// `struct hmm_dmirror_cmd`: five `__u64`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Cmd {
    /// (in) The first user address the device reads or writes.
    pub(crate) addr: u64,
    /// (in) The user buffer the data goes to or comes from.
    pub(crate) ptr: u64,
    /// (in) Pages.
    pub(crate) npages: u64,
    /// (out) Pages done.
    pub(crate) cpages: u64,
    /// (out) Device page faults seen.
    pub(crate) faults: u64,
}

/// The size of `struct hmm_dmirror_cmd`.
const CMD_SIZE: usize = 5 * 8;

/// `HMM_DMIRROR_*` ioctl numbers.
pub(crate) const READ: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x00);
pub(crate) const WRITE: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x01);
pub(crate) const MIGRATE_TO_DEV: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x02);
pub(crate) const MIGRATE_TO_SYS: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x03);
pub(crate) const SNAPSHOT: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x04);
pub(crate) const EXCLUSIVE: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x05);
pub(crate) const CHECK_EXCLUSIVE: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x06);
pub(crate) const RELEASE: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x07);
pub(crate) const FLAGS: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x08);
pub(crate) const READ_UNLOCKED: u32 = _IOWR::<[u64; 5]>(b'H' as u32, 0x09);

/// `HMM_DMIRROR_FLAG_FAIL_ALLOC`: the next device page allocation fails.
pub(crate) const FLAG_FAIL_ALLOC: u64 = 1;

/// `HMM_DMIRROR_PROT_*`: what SNAPSHOT says of each page.
pub(crate) mod prot {
    pub(crate) const ERROR: u8 = 0xff;
    pub(crate) const NONE: u8 = 0x00;
    pub(crate) const READ: u8 = 0x01;
    pub(crate) const WRITE: u8 = 0x02;
    pub(crate) const PMD: u8 = 0x04;
    pub(crate) const PUD: u8 = 0x08;
    pub(crate) const ZERO: u8 = 0x10;
    pub(crate) const DEV_PRIVATE_LOCAL: u8 = 0x20;
    pub(crate) const DEV_PRIVATE_REMOTE: u8 = 0x30;
}

impl Cmd {
    /// Reads the argument at `arg`.
    pub(crate) fn read(arg: usize) -> Result<Self> {
        let mut r = UserSlice::new(UserPtr::from_addr(arg), CMD_SIZE).reader();
        Ok(Self {
            addr: r.read()?,
            ptr: r.read()?,
            npages: r.read()?,
            cpages: r.read()?,
            faults: r.read()?,
        })
    }

    /// Writes the argument back to `arg`.
    pub(crate) fn write(&self, arg: usize) -> Result {
        let mut w = UserSlice::new(UserPtr::from_addr(arg), CMD_SIZE).writer();
        for v in [self.addr, self.ptr, self.npages, self.cpages, self.faults] {
            w.write(&v)?;
        }
        Ok(())
    }
}
