//! Shared virtual memory on one device: migration both ways, CPU fault-back,
//! partial success, and every documented error.

use std::num::NonZeroUsize;
use std::ptr::NonNull;

use msvm_rt::abi::{DrmMsvmMigrate, DrmMsvmVmCreate};
use msvm_rt::{Device, Location, MigrateOutcome, Stats};
use nix::errno::Errno;
use nix::sys::mman::{madvise, mmap_anonymous, mprotect, munmap, MapFlags, MmapAdvise, ProtFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::sysfs;

pub const PAGE: usize = 4096;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "svm_round_trip_by_cpu_fault",
            run: round_trip_by_cpu_fault,
        },
        Test {
            name: "svm_round_trip_explicit_sizes",
            run: round_trip_explicit_sizes,
        },
        Test {
            name: "svm_phase_counters_by_size_class",
            run: phase_counters,
        },
        Test {
            name: "svm_untouched_pages_read_as_zero",
            run: untouched_pages_read_as_zero,
        },
        Test {
            name: "svm_second_migrate_reports_already",
            run: second_migrate_reports_already,
        },
        Test {
            name: "svm_write_after_fault_back",
            run: write_after_fault_back,
        },
        Test {
            name: "svm_errors",
            run: errors,
        },
        Test {
            name: "svm_vm_used_from_fork_child_eperm",
            run: fork_child_eperm,
        },
        Test {
            name: "svm_munmap_frees_device_pages",
            run: munmap_frees_device_pages,
        },
        Test {
            name: "svm_process_exit_frees_device_pages",
            run: exit_frees_device_pages,
        },
        Test {
            name: "svm_vram_exhausted_partial_nothing_lost",
            run: vram_exhausted,
        },
        Test {
            name: "svm_fork_cow_with_pages_on_device",
            run: fork_cow,
        },
        Test {
            name: "svm_madvise_dontneed_on_device",
            run: madvise_dontneed,
        },
        Test {
            name: "svm_mprotect_read_only_on_device",
            run: mprotect_read_only,
        },
        Test {
            name: "svm_partial_munmap_on_device",
            run: partial_munmap,
        },
        Test {
            name: "svm_shared_and_file_backed_pages_are_busy",
            run: shared_and_file_backed,
        },
        Test {
            name: "svm_cpu_faults_race_migration",
            run: cpu_faults_race_migration,
        },
        Test {
            name: "svm_mremap_with_pages_on_device",
            run: mremap_on_device,
        },
        Test {
            name: "svm_gup_on_device_pages",
            run: gup_on_device_pages,
        },
    ]
}

/// An anonymous private mapping, unmapped on drop.
pub struct Map {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Map` owns its mapping, as a `Box<[u8]>` owns its memory:
// moving it or sharing it between threads is sound, and its byte accessors
// borrow it as a slice would be.
unsafe impl Send for Map {}
// SAFETY: as for `Send`.
unsafe impl Sync for Map {}

impl Map {
    pub fn new(len: usize) -> Result<Self, String> {
        // SAFETY: a fresh anonymous mapping aliases nothing.
        let ptr = unsafe {
            mmap_anonymous(
                None,
                NonZeroUsize::new(len).ok_or("empty map")?,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(|e| format!("mmap {len}: {e}"))?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    /// A fresh shared anonymous (shmem) read-write mapping of `len` bytes.
    pub fn shared(len: usize) -> Result<Self, String> {
        // SAFETY: a fresh anonymous mapping aliases nothing.
        let ptr = unsafe {
            mmap_anonymous(
                None,
                NonZeroUsize::new(len).ok_or("empty map")?,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
            )
        }
        .map_err(|e| format!("mmap shared {len}: {e}"))?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    /// A fresh read-write mapping over `[addr, addr + len)`, which becomes
    /// the returned map's (it unmaps it when dropped).
    ///
    /// # Safety
    ///
    /// The range is a part of a mapping of the caller's that nothing else
    /// uses or refers to: whatever was there is replaced.
    pub unsafe fn over(addr: usize, len: usize) -> Result<Self, String> {
        // SAFETY: the caller gives us the range; MAP_FIXED replaces it.
        let ptr = unsafe {
            mmap_anonymous(
                NonZeroUsize::new(addr),
                NonZeroUsize::new(len).ok_or("empty map")?,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED,
            )
        }
        .map_err(|e| format!("mmap {len} at {addr:#x}: {e}"))?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    /// A mapping the kernel backs with 4 KiB pages only (no THP): for
    /// tests of the 4 KiB paths (2 MiB folios have tests of their own).
    pub fn small(len: usize) -> Result<Self, String> {
        let m = Self::new(len)?;
        // SAFETY: advice on our own mapping.
        unsafe { madvise(m.ptr.cast(), len, MmapAdvise::MADV_NOHUGEPAGE) }
            .map_err(|e| format!("madvise: {e}"))?;
        Ok(m)
    }

    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is readable and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is writable, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; no borrow of it outlives `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// Fills `buf` with a pseudo-random pattern from `seed` (xorshift64*).
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Compares `buf` with the pattern of `seed`; describes the first mismatch.
pub fn verify(buf: &[u8], seed: u64) -> Result<(), String> {
    let mut want = vec![0u8; buf.len()];
    fill(&mut want, seed);
    match buf.iter().zip(want.iter()).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "byte {i} (page {}) is {:#04x}, want {:#04x}; {} bytes differ",
            i / PAGE,
            buf[i],
            want[i],
            buf.iter().zip(want.iter()).filter(|(a, b)| a != b).count()
        )),
    }
}

/// The first GPU, with a VM on this process.
pub fn gpu0() -> Result<Device, String> {
    let g = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let dev = Device::open(&g.node).map_err(|e| e.to_string())?;
    dev.vm_create().map_err(|e| e.to_string())?;
    Ok(dev)
}

/// CPU faults a sequential walk of `[addr, addr + len)` on the device takes:
/// one per 64 KiB window touched.
pub fn fault_blocks(addr: usize, len: usize) -> u64 {
    const W: usize = 64 * 1024;
    ((addr + len).div_ceil(W) - addr / W) as u64
}

/// Every GPU, each through a file of its own with a VM on this process.
pub fn every_gpu_with_vm() -> Result<Vec<Device>, String> {
    sysfs::msvm_gpus()?
        .iter()
        .map(|g| {
            let d = Device::open(&g.node).map_err(|e| e.to_string())?;
            d.vm_create().map_err(|e| e.to_string())?;
            Ok(d)
        })
        .collect()
}

pub fn stats(dev: &Device) -> Result<Stats, String> {
    dev.stats().map_err(|e| e.to_string())
}

fn migrate(dev: &Device, m: &Map, to: Location) -> Result<MigrateOutcome, String> {
    dev.migrate(m.addr(), m.len(), to)
        .map_err(|e| e.to_string())
}

fn errno(r: msvm_rt::Result<()>) -> Option<Errno> {
    r.err().and_then(|e| e.errno())
}

fn round_trip_by_cpu_fault() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::small(4 << 20)?;
    fill(m.bytes_mut(), 1);
    let n = (m.len() / PAGE) as u64;
    let s0 = stats(&dev)?;
    let out = migrate(&dev, &m, Location::Device)?;
    check!(out.moved == n && out.total() == n, "to device: {out:?}");
    let s1 = stats(&dev)?;
    check!(
        s1.to_device - s0.to_device == n,
        "to_device +{}",
        s1.to_device - s0.to_device
    );
    check!(
        s1.resident - s0.resident == n,
        "resident +{}",
        s1.resident - s0.resident
    );
    // The CPU reads every byte: the pages fault back with their contents,
    // one fault per 64 KiB window.
    verify(m.bytes(), 1)?;
    let s2 = stats(&dev)?;
    let blocks = fault_blocks(m.addr(), m.len());
    check!(
        s2.cpu_faults - s1.cpu_faults == blocks,
        "cpu_faults +{}, want {blocks}",
        s2.cpu_faults - s1.cpu_faults
    );
    check!(
        s2.resident == s0.resident,
        "resident {} after fault-back, was {}",
        s2.resident,
        s0.resident
    );
    Ok(())
}

fn round_trip_explicit_sizes() -> Outcome {
    let dev = gpu0()?;
    for (k, len) in [PAGE, 16 * PAGE, (2 << 20) + 3 * PAGE, 16 << 20]
        .into_iter()
        .enumerate()
    {
        let mut m = Map::new(len)?;
        let seed = 100 + k as u64;
        fill(m.bytes_mut(), seed);
        let n = (len / PAGE) as u64;
        let s0 = stats(&dev)?;
        let out = migrate(&dev, &m, Location::Device)?;
        check!(out.moved == n, "{len} B to device: {out:?}");
        let back = migrate(&dev, &m, Location::System)?;
        check!(back.moved == n, "{len} B to system: {back:?}");
        let s1 = stats(&dev)?;
        check!(
            s1.cpu_faults == s0.cpu_faults,
            "explicit return took CPU faults"
        );
        check!(
            s1.to_system - s0.to_system == n,
            "to_system +{}",
            s1.to_system - s0.to_system
        );
        verify(m.bytes(), seed).map_err(|e| format!("{len} B: {e}"))?;
    }
    Ok(())
}

fn untouched_pages_read_as_zero() -> Outcome {
    let dev = gpu0()?;
    let m = Map::new(64 * PAGE)?;
    let out = migrate(&dev, &m, Location::Device)?;
    check!(out.moved == 64, "{out:?}");
    check!(
        m.bytes().iter().all(|&b| b == 0),
        "untouched memory is not zero after migration"
    );
    Ok(())
}

fn second_migrate_reports_already() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(32 * PAGE)?;
    fill(m.bytes_mut(), 7);
    migrate(&dev, &m, Location::Device)?;
    let again = migrate(&dev, &m, Location::Device)?;
    check!(again.already == 32 && again.moved == 0, "{again:?}");
    let back = migrate(&dev, &m, Location::System)?;
    let back2 = migrate(&dev, &m, Location::System)?;
    check!(
        back.moved == 32 && back2.already == 32 && back2.moved == 0,
        "{back:?} {back2:?}"
    );
    verify(m.bytes(), 7)
}

fn write_after_fault_back() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(8 * PAGE)?;
    fill(m.bytes_mut(), 9);
    migrate(&dev, &m, Location::Device)?;
    // A write faults the page back to system RAM, then lands.
    m.bytes_mut()[5 * PAGE + 17] ^= 0xff;
    m.bytes_mut()[5 * PAGE + 17] ^= 0xff;
    verify(m.bytes(), 9)?;
    migrate(&dev, &m, Location::Device)?;
    fill(m.bytes_mut(), 10);
    migrate(&dev, &m, Location::Device)?;
    migrate(&dev, &m, Location::System)?;
    verify(m.bytes(), 10)
}

fn errors() -> Outcome {
    let g = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let dev = Device::open(&g.node).map_err(|e| e.to_string())?;
    let m = Map::new(8 * PAGE)?;
    let e = |r: msvm_rt::Result<MigrateOutcome>| r.err().and_then(|e| e.errno());
    check!(
        e(dev.migrate(m.addr(), PAGE, Location::Device)) == Some(Errno::ENOENT),
        "no VM"
    );
    check!(
        errno(dev.vm_destroy()) == Some(Errno::ENOENT),
        "destroy without VM"
    );
    let mut bad = DrmMsvmVmCreate {
        flags: 1,
        ..Default::default()
    };
    check!(
        errno(dev.vm_create_raw(&mut bad)) == Some(Errno::EINVAL),
        "VM_CREATE flags"
    );
    dev.vm_create().map_err(|e| e.to_string())?;
    check!(
        errno(dev.vm_create()) == Some(Errno::EBUSY),
        "second VM_CREATE"
    );
    let cases: [(&str, u64, u64, u32, Errno); 7] = [
        (
            "unaligned address",
            m.addr() as u64 + 8,
            PAGE as u64,
            1,
            Errno::EINVAL,
        ),
        ("unaligned length", m.addr() as u64, 100, 1, Errno::EINVAL),
        ("zero length", m.addr() as u64, 0, 1, Errno::EINVAL),
        ("wrapping range", !0xfff, 2 * PAGE as u64, 1, Errno::EINVAL),
        (
            "bad destination",
            m.addr() as u64,
            PAGE as u64,
            7,
            Errno::EINVAL,
        ),
        (
            "kernel address",
            0xffff_8880_0000_0000,
            PAGE as u64,
            1,
            Errno::EFAULT,
        ),
        (
            "unmapped address",
            PAGE as u64,
            PAGE as u64,
            1,
            Errno::EFAULT,
        ),
    ];
    for (what, addr, length, to, want) in cases {
        let mut a = DrmMsvmMigrate {
            addr,
            length,
            to,
            ..Default::default()
        };
        let got = errno(dev.migrate_raw(&mut a));
        check!(got == Some(want), "{what}: got {got:?}, want {want}");
    }
    let mut a = DrmMsvmMigrate {
        addr: m.addr() as u64,
        length: PAGE as u64,
        to: 1,
        ..Default::default()
    };
    a.reserved[0] = 1;
    check!(
        errno(dev.migrate_raw(&mut a)) == Some(Errno::EINVAL),
        "reserved"
    );
    // A hole in the middle: nothing moves, EFAULT.
    let mut h = Map::new(8 * PAGE)?;
    fill(h.bytes_mut(), 3);
    // SAFETY: unmapping one page of our own mapping; it is not touched again.
    unsafe { munmap(NonNull::new((h.addr() + 4 * PAGE) as *mut _).unwrap(), PAGE) }
        .map_err(|e| e.to_string())?;
    let s0 = stats(&dev)?;
    check!(
        e(dev.migrate(h.addr(), 8 * PAGE, Location::Device)) == Some(Errno::EFAULT),
        "hole"
    );
    check!(
        stats(&dev)?.to_device == s0.to_device,
        "pages moved despite the hole"
    );
    verify(&h.bytes()[..4 * PAGE], 3)?;
    // `h` unmaps the rest on drop (munmap accepts a range with a hole).
    drop(h);
    // PROT_NONE: EACCES.
    let p = Map::new(4 * PAGE)?;
    // SAFETY: changing the protection of our own mapping, not borrowed now.
    unsafe {
        mprotect(
            NonNull::new(p.addr() as *mut _).unwrap(),
            4 * PAGE,
            ProtFlags::PROT_NONE,
        )
    }
    .map_err(|e| e.to_string())?;
    check!(
        e(dev.migrate(p.addr(), 4 * PAGE, Location::Device)) == Some(Errno::EACCES),
        "PROT_NONE"
    );
    dev.vm_destroy().map_err(|e| e.to_string())?;
    check!(
        e(dev.migrate(m.addr(), PAGE, Location::Device)) == Some(Errno::ENOENT),
        "after destroy"
    );
    Ok(())
}

fn fork_child_eperm() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(4 * PAGE)?;
    fill(m.bytes_mut(), 5);
    // SAFETY: the child only makes an ioctl and exits.
    match unsafe { fork() }.map_err(|e| e.to_string())? {
        ForkResult::Child => {
            let r = dev.migrate(m.addr(), m.len(), Location::Device);
            let code = match r.err().and_then(|e| e.errno()) {
                Some(Errno::EPERM) => 0,
                _ => 1,
            };
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { nix::libc::_exit(code) };
        }
        ForkResult::Parent { child } => {
            let st = waitpid(child, None).map_err(|e| e.to_string())?;
            check!(
                st == WaitStatus::Exited(child, 0),
                "child: {st:?} (0 means it got EPERM)"
            );
        }
    }
    let out = migrate(&dev, &m, Location::Device)?;
    check!(out.moved == 4, "parent still can: {out:?}");
    verify(m.bytes(), 5)
}

fn munmap_frees_device_pages() -> Outcome {
    let dev = gpu0()?;
    let s0 = stats(&dev)?;
    {
        let m = Map::new(256 * PAGE)?;
        migrate(&dev, &m, Location::Device)?;
        check!(stats(&dev)?.resident == s0.resident + 256, "not resident");
    }
    let s1 = stats(&dev)?;
    check!(
        s1.resident == s0.resident,
        "resident {} after munmap, was {}",
        s1.resident,
        s0.resident
    );
    Ok(())
}

fn exit_frees_device_pages() -> Outcome {
    let g = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let dev = Device::open(&g.node).map_err(|e| e.to_string())?;
    let s0 = stats(&dev)?;
    // SAFETY: the child opens its own file, migrates and exits.
    match unsafe { fork() }.map_err(|e| e.to_string())? {
        ForkResult::Child => {
            let ok = (|| -> Result<(), String> {
                let d = gpu0()?;
                let mut m = Map::new(128 * PAGE)?;
                fill(m.bytes_mut(), 11);
                let out = migrate(&d, &m, Location::Device)?;
                check!(out.moved == 128, "{out:?}");
                std::mem::forget(m);
                Ok(())
            })();
            // SAFETY: leaving the child with its pages still on the device.
            unsafe { nix::libc::_exit(if ok.is_ok() { 0 } else { 1 }) };
        }
        ForkResult::Parent { child } => {
            let st = waitpid(child, None).map_err(|e| e.to_string())?;
            check!(st == WaitStatus::Exited(child, 0), "child: {st:?}");
        }
    }
    let s1 = stats(&dev)?;
    check!(
        s1.to_device - s0.to_device == 128,
        "child moved {}",
        s1.to_device - s0.to_device
    );
    check!(
        s1.resident == s0.resident,
        "resident {} after the child exited, was {}",
        s1.resident,
        s0.resident
    );
    Ok(())
}

fn vram_exhausted() -> Outcome {
    let dev = gpu0()?;
    let s0 = stats(&dev)?;
    let free = s0.vram_size / PAGE as u64 - s0.resident;
    let extra = 512u64;
    let len = ((free + extra) as usize) * PAGE;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 21);
    let out = migrate(&dev, &m, Location::Device)?;
    check!(
        out.moved == free && out.no_vram == extra,
        "{out:?} with {free} pages free"
    );
    check!(
        out.total() == (len / PAGE) as u64,
        "{out:?} does not add up"
    );
    let s1 = stats(&dev)?;
    check!(
        s1.no_vram - s0.no_vram == extra,
        "no_vram +{}",
        s1.no_vram - s0.no_vram
    );
    check!(
        s1.chunks_live * s1.chunk_size == s1.vram_size,
        "chunks live {}",
        s1.chunks_live
    );
    // Every byte is intact, wherever it lives.
    verify(m.bytes(), 21)?;
    drop(m);
    check!(stats(&dev)?.resident == s0.resident, "pages left behind");
    Ok(())
}

/// Pages on the device when the process forks: parent and child each see
/// the data, and each sees only its own writes afterwards (copy-on-write).
fn fork_cow() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(32 * PAGE)?;
    fill(m.bytes_mut(), 71);
    let out = migrate(&dev, &m, Location::Device)?;
    check!(out.moved == 32, "{out:?}");
    // SAFETY: the child only touches its copy of the mapping and exits.
    match unsafe { fork() }.map_err(|e| e.to_string())? {
        ForkResult::Child => {
            let ok = verify(m.bytes(), 71).is_ok();
            fill(&mut m.bytes_mut()[..8 * PAGE], 72);
            let ok = ok && verify(&m.bytes()[..8 * PAGE], 72).is_ok();
            // SAFETY: leaving the child at once.
            unsafe { nix::libc::_exit(if ok { 0 } else { 1 }) };
        }
        ForkResult::Parent { child } => {
            let st = waitpid(child, None).map_err(|e| e.to_string())?;
            check!(
                st == WaitStatus::Exited(child, 0),
                "child saw wrong data: {st:?}"
            );
        }
    }
    // The parent's copy is untouched by the child's writes.
    verify(m.bytes(), 71)?;
    // And the parent can move it again.
    fill(m.bytes_mut(), 73);
    migrate(&dev, &m, Location::Device)?;
    verify(m.bytes(), 73)
}

/// MADV_DONTNEED on pages that live on the device frees them; the range
/// reads as zero afterwards.
fn madvise_dontneed() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(16 * PAGE)?;
    fill(m.bytes_mut(), 81);
    let s0 = stats(&dev)?;
    migrate(&dev, &m, Location::Device)?;
    // SAFETY: discarding the first half of our own mapping.
    unsafe {
        madvise(
            NonNull::new(m.addr() as *mut _).unwrap(),
            8 * PAGE,
            MmapAdvise::MADV_DONTNEED,
        )
    }
    .map_err(|e| e.to_string())?;
    let s1 = stats(&dev)?;
    check!(
        s1.resident == s0.resident + 8,
        "resident {} (was {})",
        s1.resident,
        s0.resident
    );
    check!(
        m.bytes()[..8 * PAGE].iter().all(|&b| b == 0),
        "discarded pages not zero"
    );
    let mut want = vec![0u8; 16 * PAGE];
    fill(&mut want, 81);
    check!(
        m.bytes()[8 * PAGE..] == want[8 * PAGE..],
        "kept pages changed"
    );
    Ok(())
}

/// Making pages read-only while they are on the device: the CPU still reads
/// them (they come back to system RAM), and MIGRATE still moves them.
fn mprotect_read_only() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(8 * PAGE)?;
    fill(m.bytes_mut(), 91);
    migrate(&dev, &m, Location::Device)?;
    // SAFETY: changing the protection of our own mapping (only read below).
    unsafe {
        mprotect(
            NonNull::new(m.addr() as *mut _).unwrap(),
            m.len(),
            ProtFlags::PROT_READ,
        )
    }
    .map_err(|e| e.to_string())?;
    verify(m.bytes(), 91)?;
    let out = migrate(&dev, &m, Location::Device)?;
    check!(out.moved == 8, "read-only pages to device: {out:?}");
    let back = migrate(&dev, &m, Location::System)?;
    check!(back.moved == 8, "read-only pages back: {back:?}");
    verify(m.bytes(), 91)
}

/// Unmapping part of a range that lives on the device frees exactly those
/// pages; the rest stays correct.
fn partial_munmap() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(32 * PAGE)?;
    fill(m.bytes_mut(), 95);
    let s0 = stats(&dev)?;
    migrate(&dev, &m, Location::Device)?;
    // SAFETY: unmapping pages 8..24 of our own mapping, not touched again.
    unsafe {
        munmap(
            NonNull::new((m.addr() + 8 * PAGE) as *mut _).unwrap(),
            16 * PAGE,
        )
    }
    .map_err(|e| e.to_string())?;
    let s1 = stats(&dev)?;
    check!(
        s1.resident == s0.resident + 16,
        "resident {} (was {})",
        s1.resident,
        s0.resident
    );
    let mut want = vec![0u8; 32 * PAGE];
    fill(&mut want, 95);
    check!(m.bytes()[..8 * PAGE] == want[..8 * PAGE], "head changed");
    check!(m.bytes()[24 * PAGE..] == want[24 * PAGE..], "tail changed");
    check!(
        stats(&dev)?.resident == s0.resident,
        "pages left on the device"
    );
    Ok(())
}

/// Shared anonymous and file-backed (memfd) mappings: their pages stay in
/// RAM (reported `busy`, not an error), the engine reaches them in place, and
/// nothing changes.
fn shared_and_file_backed() -> Outcome {
    use std::os::fd::AsFd;
    let dev = gpu0()?;
    let len = 16 * PAGE;
    // SAFETY: a fresh shared anonymous mapping.
    let shared = unsafe {
        mmap_anonymous(
            None,
            NonZeroUsize::new(len).unwrap(),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
        )
    }
    .map_err(|e| e.to_string())?;
    let memfd = nix::sys::memfd::memfd_create(c"msvm-test", nix::sys::memfd::MFdFlags::empty())
        .map_err(|e| e.to_string())?;
    nix::unistd::ftruncate(&memfd, len as i64).map_err(|e| e.to_string())?;
    // SAFETY: mapping our own memfd.
    let file = unsafe {
        nix::sys::mman::mmap(
            None,
            NonZeroUsize::new(len).unwrap(),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            memfd.as_fd(),
            0,
        )
    }
    .map_err(|e| e.to_string())?;
    for (what, p) in [("shared anonymous", shared), ("memfd", file)] {
        // SAFETY: the mapping is ours, `len` bytes, readable and writable.
        let b = unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), len) };
        fill(b, 97);
        let out = dev
            .migrate(p.as_ptr() as usize, len, Location::Device)
            .map_err(|e| e.to_string())?;
        check!(out.moved == 0 && out.busy == 16, "{what}: {out:?}");
        verify(b, 97).map_err(|e| format!("{what}: {e}"))?;
        let h = msvm_rt::checksum(b);
        let sum = dev
            .exec(msvm_rt::Exec::Checksum, p.as_ptr() as usize, len, true)
            .map_err(|e| format!("{what}: {e}"))?;
        check!(sum.result == h, "{what}: engine checksum differs");
        // SAFETY: unmapping our own mapping, not borrowed any more.
        unsafe { munmap(p, len) }.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Two threads read the same range, page by page, over and over (faulting
/// it back whenever it is on the device), while a third migrates it back
/// and forth: every read sees the right bytes.
fn cpu_faults_race_migration() -> Outcome {
    let mut m = Map::new(256 * PAGE)?;
    fill(m.bytes_mut(), 99);
    let mut want = vec![0u8; m.len()];
    fill(&mut want, 99);
    let (addr, len) = (m.addr(), m.len());
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| -> Outcome {
        let want = &want;
        let stop = &stop;
        let readers: Vec<_> = (0..2)
            .map(|t| {
                s.spawn(move || -> Result<u64, String> {
                    let mut rounds = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        for pg in
                            (0..len / PAGE).map(|i| if t == 0 { i } else { len / PAGE - 1 - i })
                        {
                            // SAFETY: reading our own mapping.
                            let b = unsafe {
                                std::slice::from_raw_parts((addr + pg * PAGE) as *const u8, PAGE)
                            };
                            if b != &want[pg * PAGE..(pg + 1) * PAGE] {
                                return Err(format!("reader {t}: page {pg} wrong"));
                            }
                        }
                        rounds += 1;
                    }
                    Ok(rounds)
                })
            })
            .collect();
        let dev = gpu0()?;
        for i in 0..20 {
            let to = if i % 2 == 0 {
                Location::Device
            } else {
                Location::System
            };
            dev.migrate(addr, len, to).map_err(|e| e.to_string())?;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            let rounds = r.join().map_err(|_| "reader panicked".to_string())??;
            check!(rounds > 0, "a reader never finished a round");
        }
        Ok(())
    })?;
    verify(m.bytes(), 99)
}

/// Pages on the device move with their mapping (mremap to a new address):
/// the CPU faults them back at the new address with their contents, and the
/// device works on them there.
fn mremap_on_device() -> Outcome {
    let dev = gpu0()?;
    let mut m = Map::new(16 * PAGE)?;
    fill(m.bytes_mut(), 111);
    let out = migrate(&dev, &m, Location::Device)?;
    check!(out.moved == 16, "{out:?}");
    let old = m.addr();
    // SAFETY: moving our own mapping; `m` is forgotten and the new one
    // unmapped below.
    let new =
        unsafe { nix::libc::mremap(old as *mut _, m.len(), 32 * PAGE, nix::libc::MREMAP_MAYMOVE) };
    check!(new != nix::libc::MAP_FAILED, "mremap failed");
    std::mem::forget(m);
    let new = new as usize;
    // SAFETY: the moved mapping is ours, 32 pages, the first 16 with data.
    let b = unsafe { std::slice::from_raw_parts(new as *const u8, 32 * PAGE) };
    let sum = dev
        .exec(msvm_rt::Exec::Checksum, new, 16 * PAGE, false)
        .map_err(|e| e.to_string())?;
    let mut want = vec![0u8; 16 * PAGE];
    fill(&mut want, 111);
    let h = msvm_rt::checksum(&want);
    check!(
        sum.result == h,
        "engine checksum at the new address differs"
    );
    verify(&b[..16 * PAGE], 111)?;
    check!(
        b[16 * PAGE..].iter().all(|&x| x == 0),
        "grown part not zero"
    );
    // SAFETY: unmapping the moved mapping.
    unsafe { munmap(NonNull::new(new as *mut _).unwrap(), 32 * PAGE) }
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// get_user_pages on pages that live on the device (vmsplice pins the pages
/// it splices into a pipe): they come back to system RAM and the pipe carries
/// the right bytes.
fn gup_on_device_pages() -> Outcome {
    use std::io::Read;
    let dev = gpu0()?;
    let mut m = Map::new(16 * PAGE)?;
    fill(m.bytes_mut(), 121);
    let out = migrate(&dev, &m, Location::Device)?;
    check!(out.moved == 16, "{out:?}");
    let (rd, wr) = nix::unistd::pipe().map_err(|e| e.to_string())?;
    let iov = [nix::libc::iovec {
        iov_base: m.addr() as *mut _,
        iov_len: m.len(),
    }];
    // SAFETY: the iovec describes our own mapping, valid for the call; the
    // pipe holds 16 pages by default.
    let n =
        unsafe { nix::libc::vmsplice(std::os::fd::AsRawFd::as_raw_fd(&wr), iov.as_ptr(), 1, 0) };
    check!(
        n == m.len() as isize,
        "vmsplice returned {n} ({})",
        Errno::last()
    );
    drop(wr);
    let mut copy = Vec::new();
    std::fs::File::from(rd)
        .read_to_end(&mut copy)
        .map_err(|e| e.to_string())?;
    verify(&copy, 121)?;
    verify(m.bytes(), 121)
}

/// STATS' phase split counts each step in its size class: a migration of
/// 4 KiB pages, a CPU fault's window, a 2 MiB block moved whole; and an
/// engine job. Each counted step took time in some phase.
fn phase_counters() -> Outcome {
    use msvm_rt::abi::{MSVM_SIZE_2M, MSVM_SIZE_4K, MSVM_SIZE_64K};
    let dev = gpu0()?;
    let e = |x: msvm_rt::Error| x.to_string();
    let steps = |s: &Stats, c: usize| s.phase_steps[c];
    let spent = |s: &Stats, c: usize| {
        s.phase_collect_us[c] + s.phase_alloc_us[c] + s.phase_copy_us[c] + s.phase_install_us[c]
    };
    let mut m = Map::small(64 << 10)?;
    fill(m.bytes_mut(), 77);
    let s0 = stats(&dev)?;
    dev.migrate(m.addr(), m.len(), Location::Device)
        .map_err(e)?;
    let s1 = stats(&dev)?;
    check!(
        steps(&s1, MSVM_SIZE_4K) > steps(&s0, MSVM_SIZE_4K),
        "4k: {s1:?}"
    );
    check!(
        spent(&s1, MSVM_SIZE_4K) >= spent(&s0, MSVM_SIZE_4K),
        "4k time went back"
    );
    // The CPU reads it back: a fault per 64 KiB window it spans (two at
    // most), its data intact.
    verify(m.bytes(), 77)?;
    let s2 = stats(&dev)?;
    let faults = s2.cpu_faults - s1.cpu_faults;
    check!(
        (1..=2).contains(&faults)
            && steps(&s2, MSVM_SIZE_64K) == steps(&s1, MSVM_SIZE_64K) + faults,
        "64k: {} -> {}",
        steps(&s1, MSVM_SIZE_64K),
        steps(&s2, MSVM_SIZE_64K)
    );
    // A job.
    dev.exec(msvm_rt::Exec::Checksum, m.addr(), m.len(), true)
        .map_err(e)?;
    let s3 = stats(&dev)?;
    check!(
        s3.job_count == s2.job_count + 1,
        "jobs {} -> {}",
        s2.job_count,
        s3.job_count
    );
    // 2 MiB never touched, 2 MiB aligned: a whole 2 MiB device folio.
    let big = Map::new(4 << 20)?;
    let a = big.addr().next_multiple_of(2 << 20);
    dev.migrate(a, 2 << 20, Location::Device).map_err(e)?;
    let s4 = stats(&dev)?;
    if s4.large_to_device > s3.large_to_device {
        check!(
            steps(&s4, MSVM_SIZE_2M) > steps(&s3, MSVM_SIZE_2M),
            "2m: {} -> {}",
            steps(&s3, MSVM_SIZE_2M),
            steps(&s4, MSVM_SIZE_2M)
        );
    }
    Ok(())
}
