// SPDX-License-Identifier: GPL-2.0

//! Shared memory the device reaches directly: its VRAM (a memfd it creates,
//! or behind a switch a file of the switch's directory, which QEMU maps into
//! the guest as BAR2), the guest RAM QEMU gives it by fd (`DMA_MAP`), and
//! behind a switch the switch's table and its peers' VRAM. Every raw access
//! of the crate is here.
//!
//! The guest and QEMU use the same memory at the same time, as a device and
//! a CPU share RAM: accesses are copies through raw pointers, never Rust
//! references to the shared bytes, so no Rust aliasing rule covers them.
//! Ordering between the device and the guest is the protocol's (the device
//! reads a buffer after the doorbell that names it).

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

use crate::Error;

/// A shared mapping of (part of) a file.
///
/// # Invariants
///
/// `ptr` is the start of a live `MAP_SHARED` mapping of `len` bytes, made
/// by [`Mmap::new`] and unmapped only by `Drop`.
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, reached only through copies
// (`read`, `write`), which any thread may make.
unsafe impl Send for Mmap {}
// SAFETY: as for `Send`: `&Mmap` allows only copies in and out.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` from `offset`, for reading and writing.
    pub fn new(fd: impl AsFd, offset: u64, len: usize) -> Result<Self, Error> {
        let n = NonZeroUsize::new(len).ok_or(Error::Malformed("empty mapping"))?;
        let off = i64::try_from(offset).map_err(|_| Error::Malformed("mapping offset"))?;
        // SAFETY: a new mapping at an address the kernel chooses: it
        // overlaps no memory of this process.
        let p = unsafe {
            mmap(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                off,
            )
        }
        .map_err(Error::Sys)?;
        // INVARIANT: `p` is the mapping of `len` bytes just made.
        Ok(Self { ptr: p.cast(), len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: `new` refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: u64, n: usize) -> Result<usize, Error> {
        let off = usize::try_from(off).map_err(|_| Error::OutOfRange)?;
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(off),
            _ => Err(Error::OutOfRange),
        }
    }

    /// Copies `buf.len()` bytes from `off` into `buf`.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        let off = self.check(off, buf.len())?;
        // SAFETY: `off + buf.len() <= len` (checked), so the source lies in
        // the mapping (type invariant); `buf` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), buf.as_mut_ptr(), buf.len())
        };
        Ok(())
    }

    /// Copies `data` to `off`.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), Error> {
        let off = self.check(off, data.len())?;
        // SAFETY: as in `read`, with source and destination swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        };
        Ok(())
    }

    /// The little-endian 64-bit word at `off` (8-byte aligned), as an
    /// atomic: what the device adds to, and what the switch's table
    /// (`crate::switch`) is made of, shared with other processes that map
    /// the same file.
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64, Error> {
        let off = self.check(off, 8)?;
        if off % 8 != 0 {
            return Err(Error::Malformed("unaligned atomic"));
        }
        // SAFETY: `off + 8 <= len` (checked) and the mapping is page
        // aligned, so the word lies in the mapping, 8-byte aligned, and
        // stays mapped while `self` is borrowed, which the reference's
        // lifetime is. An `AtomicU64` is an `UnsafeCell`: a shared reference
        // to it allows the changes of other agents, and this process makes
        // none but through it or raw copies, never through a plain Rust
        // reference to the bytes. The memory is shared with other
        // processes (QEMU, the guest, other devices), which access it
        // concurrently as hardware would, outside Rust's memory model: as
        // for any such memory, a plain copy of this process that races an
        // atomic access reads the word before or after it (x86-64: aligned
        // 8-byte accesses do not tear), and atomics are what make
        // concurrent updates of different agents all count.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast::<u64>()) })
    }

    /// Adds `v` to the little-endian 64-bit word at `off` (8-byte
    /// aligned) atomically: a locked add on the shared memory, atomic
    /// against every other such add of any process that maps it.
    pub fn fetch_add_u64(&self, off: u64, v: u64) -> Result<(), Error> {
        // Little-endian memory on a little-endian host (x86_64 only).
        self.atomic_u64(off)?.fetch_add(v, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours (type invariant) and nothing reaches
        // it after this: every access borrows `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// A new memfd of `len` bytes, named `name`.
pub fn memfd(name: &str, len: u64) -> Result<OwnedFd, Error> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC).map_err(Error::Sys)?;
    let len = i64::try_from(len).map_err(|_| Error::Malformed("memfd size"))?;
    nix::unistd::ftruncate(&fd, len).map_err(Error::Sys)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_of_one_memfd_share_bytes() {
        let fd = memfd("t", 8192).unwrap();
        let a = Mmap::new(&fd, 0, 8192).unwrap();
        let b = Mmap::new(&fd, 4096, 4096).unwrap();
        a.write(4096 + 10, b"hello").unwrap();
        let mut got = [0; 5];
        b.read(10, &mut got).unwrap();
        assert_eq!(&got, b"hello");
        // Past the end, or wrapping: refused, nothing copied.
        assert!(b.read(4092, &mut [0; 8]).is_err());
        assert!(a.write(u64::MAX, b"x").is_err());
    }
}
