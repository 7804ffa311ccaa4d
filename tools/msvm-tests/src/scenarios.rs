//! hmm-tests scenarios not covered elsewhere, ported to msvm's uAPI (see
//! `Documentation/hmm-tests.rst`): a fork child's device writing a shared
//! mapping, transparent huge pages, several devices on one read-only range,
//! mixed mappings in one migration, and file-backed mappings.

use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::ptr::NonNull;

use msvm_rt::{Device, Exec, Location};
use nix::errno::Errno;
use nix::sys::mman::{
    madvise, mmap, mmap_anonymous, mprotect, munmap, MapFlags, MmapAdvise, ProtFlags,
};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, verify, PAGE};
use crate::sysfs;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "hmm_anon_write_child_shared",
            run: anon_write_child_shared,
        },
        Test {
            name: "hmm_thp_write_migrate_fault_back",
            run: thp_round_trip,
        },
        Test {
            name: "hmm_thp_empty_zero_and_free",
            run: thp_empty_zero_free,
        },
        Test {
            name: "hmm_double_map_two_devices_read_only",
            run: double_map,
        },
        Test {
            name: "hmm_migrate_mixed_protections_and_holes",
            run: migrate_mixed,
        },
        Test {
            name: "hmm_file_write_by_engine",
            run: file_write,
        },
        Test {
            name: "hmm_migrate_file_private_cow_pages",
            run: migrate_file_private,
        },
        Test {
            name: "hmm_anon_write_hugetlbfs",
            run: hugetlbfs,
        },
        Test {
            name: "hmm_userfaultfd_read",
            run: userfaultfd_read,
        },
    ]
}

fn e(x: msvm_rt::Error) -> String {
    x.to_string()
}

/// A mapping made by hand, unmapped on drop.
pub struct Raw {
    ptr: NonNull<std::ffi::c_void>,
    len: usize,
}

impl Raw {
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: readable (callers make it so before use), `len` bytes,
        // alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`, writable, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.len) }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        let _ = unsafe { munmap(self.ptr, self.len) };
    }
}

fn anon(len: usize, flags: MapFlags) -> Result<Raw, String> {
    // SAFETY: a fresh anonymous mapping aliases nothing.
    let ptr = unsafe {
        mmap_anonymous(
            None,
            NonZeroUsize::new(len).unwrap(),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            flags,
        )
    }
    .map_err(|x| format!("mmap: {x}"))?;
    Ok(Raw { ptr, len })
}

/// A shared anonymous mapping written by the engine of a fork child's own
/// device file: the parent sees the writes; the child's migration of the
/// shared pages is refused page by page (busy).
fn anon_write_child_shared() -> Outcome {
    let n = 16;
    let mut m = anon(n * PAGE, MapFlags::MAP_SHARED)?;
    fill(m.bytes_mut(), 5);
    let node = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?.node;
    // SAFETY: the child only opens a file, issues ioctls and exits.
    match unsafe { fork() }.map_err(|x| x.to_string())? {
        ForkResult::Child => {
            let ok = (|| -> Result<(), String> {
                let d = Device::open(&node).map_err(e)?;
                d.vm_create().map_err(e)?;
                let out = d.migrate(m.addr(), m.len, Location::Device).map_err(e)?;
                check!(
                    out.busy == n as u64 && out.moved == 0,
                    "child migrate: {out:?}"
                );
                d.exec(Exec::Fill(0x1122_3344_5566_7788), m.addr(), m.len, false)
                    .map_err(e)?;
                Ok(())
            })();
            if let Err(w) = &ok {
                println!("child: {w}");
            }
            // SAFETY: leaving the child without running the parent's
            // destructors.
            unsafe { nix::libc::_exit(if ok.is_ok() { 0 } else { 1 }) }
        }
        ForkResult::Parent { child } => {
            let st = waitpid(child, None).map_err(|x| x.to_string())?;
            check!(matches!(st, WaitStatus::Exited(_, 0)), "child: {st:?}");
            let want = 0x1122_3344_5566_7788u64.to_ne_bytes();
            check!(
                m.bytes().chunks(8).all(|w| w == want),
                "the child's device writes are not in the shared mapping"
            );
        }
    }
    Ok(())
}

/// A 2 MiB-aligned, THP-backed region of `len` bytes (the kernel may still
/// give small pages; the tests hold either way).
pub fn huge(len: usize) -> Result<(Raw, usize), String> {
    let big = anon(len + (2 << 20), MapFlags::MAP_PRIVATE)?;
    let start = (big.addr() + (2 << 20) - 1) & !((2 << 20) - 1);
    let p = NonNull::new(start as *mut std::ffi::c_void).unwrap();
    // SAFETY: advising part of our own mapping.
    unsafe { madvise(p, len, MmapAdvise::MADV_HUGEPAGE) }.map_err(|x| x.to_string())?;
    Ok((big, start))
}

/// THP-backed memory: written by the CPU, migrated (the huge page is split
/// into 4 KiB device pages), changed by the engine, faulted back.
fn thp_round_trip() -> Outcome {
    let dev = gpu0()?;
    let len = 4 << 20;
    let (_big, start) = huge(len)?;
    // SAFETY: inside `_big`, readable and writable.
    let b = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    fill(b, 21);
    let out = dev.migrate(start, len, Location::Device).map_err(e)?;
    check!(out.moved == (len / PAGE) as u64, "to device: {out:?}");
    dev.exec(Exec::AtomicAdd(3), start, len, false).map_err(e)?;
    let mut want = vec![0u8; len];
    fill(&mut want, 21);
    for w in want.chunks_mut(8) {
        let x = u64::from_ne_bytes(w.try_into().unwrap()).wrapping_add(3);
        w.copy_from_slice(&x.to_ne_bytes());
    }
    check!(b == &want[..], "data after the round trip");
    Ok(())
}

/// Huge regions never touched (empty) and only read (the huge zero page)
/// migrate and read back as zero; migrated and then unmapped, their device
/// pages are freed.
fn thp_empty_zero_free() -> Outcome {
    let dev = gpu0()?;
    let len = 2 << 20;
    let r0 = dev.stats().map_err(e)?.resident;
    for touch in [false, true] {
        let (big, start) = huge(len)?;
        // SAFETY: inside `big`.
        let b = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
        if touch {
            // Read only: the (huge) zero page.
            check!(b.iter().step_by(PAGE).all(|&x| x == 0), "zero");
        }
        let out = dev.migrate(start, len, Location::Device).map_err(e)?;
        check!(out.moved == (len / PAGE) as u64, "touch {touch}: {out:?}");
        let s = dev.exec(Exec::Checksum, start, len, false).map_err(e)?;
        check!(
            s.result == msvm_rt::checksum(&vec![0u8; len]),
            "device sees non-zero"
        );
        drop(big);
        let r = dev.stats().map_err(e)?.resident;
        check!(r == r0, "resident {r} after munmap, was {r0}");
    }
    Ok(())
}

/// A read-only range read by two devices in place, then migrated to one
/// and read by the other: always the right bytes.
fn double_map() -> Outcome {
    let devs = crate::svm::every_gpu_with_vm()?;
    check!(devs.len() >= 2, "need two GPUs");
    let mut m = anon(6 * PAGE, MapFlags::MAP_PRIVATE)?;
    fill(m.bytes_mut(), 66);
    let want = msvm_rt::checksum(m.bytes());
    let p = NonNull::new(m.addr() as *mut _).unwrap();
    // SAFETY: protecting our own mapping.
    unsafe { mprotect(p, m.len, ProtFlags::PROT_READ) }.map_err(|x| x.to_string())?;
    for d in &devs[..2] {
        let s = d.exec(Exec::Checksum, m.addr(), m.len, true).map_err(e)?;
        check!(s.result == want, "in place read");
    }
    let out = devs[1]
        .migrate(m.addr(), m.len, Location::Device)
        .map_err(e)?;
    check!(out.moved == 6, "read-only pages migrate: {out:?}");
    let s = devs[0]
        .exec(Exec::Checksum, m.addr(), m.len, true)
        .map_err(e)?;
    check!(s.result == want, "device 0 reading device 1's pages");
    // FILL needs write access: refused, nothing changes.
    let r = devs[0].exec(Exec::Fill(1), m.addr(), m.len, false);
    check!(
        r.err().and_then(|x| x.errno()) == Some(Errno::EACCES),
        "write to read-only"
    );
    check!(msvm_rt::checksum(m.bytes()) == want, "data changed");
    Ok(())
}

/// PROT_NONE, a hole, and pages that are the zero page, read-only and
/// read-write in one range: errors where the whole range cannot be taken,
/// every page moved where it can; then another device takes one of them
/// (msvm moves pages between devices; test_hmm refuses with ENOENT).
fn migrate_mixed() -> Outcome {
    let devs = crate::svm::every_gpu_with_vm()?;
    check!(devs.len() >= 2, "need two GPUs");
    let (d0, d1) = (&devs[0], &devs[1]);
    let m = anon(6 * PAGE, MapFlags::MAP_PRIVATE)?;
    let at = |i: usize| NonNull::new((m.addr() + i * PAGE) as *mut std::ffi::c_void).unwrap();
    // SAFETY: protecting our own mapping.
    unsafe { mprotect(at(0), 6 * PAGE, ProtFlags::PROT_NONE) }.map_err(|x| x.to_string())?;
    let r = d1.migrate(m.addr(), 6 * PAGE, Location::Device);
    check!(
        r.err().and_then(|x| x.errno()) == Some(Errno::EACCES),
        "PROT_NONE"
    );
    // SAFETY: unmapping page 1 of our own mapping (a hole).
    unsafe { munmap(at(1), PAGE) }.map_err(|x| x.to_string())?;
    // A range whose start has no VMA (page 0 would answer EACCES first).
    let r = d1.migrate(m.addr() + PAGE, 2 * PAGE, Location::Device);
    check!(
        r.err().and_then(|x| x.errno()) == Some(Errno::EFAULT),
        "hole"
    );
    // SAFETY: changing protections of our own pages, then touching them.
    unsafe {
        mprotect(at(2), PAGE, ProtFlags::PROT_READ).map_err(|x| x.to_string())?;
        check!(*(m.addr() as *const u8).add(2 * PAGE) == 0, "zero page");
        mprotect(
            at(3),
            3 * PAGE,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
        )
        .map_err(|x| x.to_string())?;
        for i in 3..6 {
            *((m.addr() + i * PAGE) as *mut u32) = 3 + i as u32;
        }
        mprotect(at(3), PAGE, ProtFlags::PROT_READ).map_err(|x| x.to_string())?;
    }
    let out = d1
        .migrate(m.addr() + 2 * PAGE, 4 * PAGE, Location::Device)
        .map_err(e)?;
    check!(out.moved == 4, "pages 2-5 to device 1: {out:?}");
    let out = d0
        .migrate(m.addr() + 5 * PAGE, PAGE, Location::Device)
        .map_err(e)?;
    check!(out.moved == 1, "page 5 to device 0: {out:?}");
    // SAFETY: reading our own (readable) pages: faults them back.
    unsafe {
        check!(*(m.addr() as *const u8).add(2 * PAGE) == 0, "page 2");
        for i in 3..6 {
            let v = *((m.addr() + i * PAGE) as *const u32);
            check!(v == 3 + i as u32, "page {i}: {v}");
        }
        // The hole stays one; unmap the rest ourselves (`m` would unmap it
        // again, which is harmless).
    }
    Ok(())
}

/// A memfd of `len` bytes mapped with `flags`.
fn memfd_map(len: usize, flags: MapFlags) -> Result<(std::os::fd::OwnedFd, Raw), String> {
    let fd = nix::sys::memfd::memfd_create(c"msvm-scenario", nix::sys::memfd::MFdFlags::empty())
        .map_err(|x| x.to_string())?;
    nix::unistd::ftruncate(&fd, len as i64).map_err(|x| x.to_string())?;
    // SAFETY: mapping our own memfd.
    let ptr = unsafe {
        mmap(
            None,
            NonZeroUsize::new(len).unwrap(),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            flags,
            fd.as_fd(),
            0,
        )
    }
    .map_err(|x| x.to_string())?;
    Ok((fd, Raw { ptr, len }))
}

/// The engine writes a shared file mapping (its pages stay in the page
/// cache, reached in place): the file holds what it wrote.
fn file_write() -> Outcome {
    let dev = gpu0()?;
    let len = 16 * PAGE;
    let (fd, m) = memfd_map(len, MapFlags::MAP_SHARED)?;
    let out = dev
        .exec(Exec::Fill(0x0102_0304_0506_0708), m.addr(), len, false)
        .map_err(e)?;
    check!(out.migrated == 0, "file pages migrated: {}", out.migrated);
    let mut back = vec![0u8; len];
    let n = std::os::unix::fs::FileExt::read_at(&std::fs::File::from(fd), &mut back, 0)
        .map_err(|x| x.to_string())?;
    check!(n == len, "short read {n}");
    let want = 0x0102_0304_0506_0708u64.to_ne_bytes();
    check!(
        back.chunks(8).all(|w| w == want),
        "the file does not hold the engine's writes"
    );
    Ok(())
}

/// A private file mapping: pages the CPU wrote are anonymous copies and
/// migrate; the others are the file's and stay (busy). After the round
/// trip each page holds what it held.
fn migrate_file_private() -> Outcome {
    let dev = gpu0()?;
    let n = 16;
    let len = n * PAGE;
    let (fd, mut m) = memfd_map(len, MapFlags::MAP_PRIVATE)?;
    let mut file = vec![0u8; len];
    fill(&mut file, 31);
    std::os::unix::fs::FileExt::write_all_at(&std::fs::File::from(fd), &file, 0)
        .map_err(|x| x.to_string())?;
    // Read every page (file pages), write the even ones (private copies).
    check!(
        m.bytes() == &file[..],
        "file contents through the private mapping"
    );
    let b = m.bytes_mut();
    let mut want = file.clone();
    for i in (0..n).step_by(2) {
        fill(&mut b[i * PAGE..(i + 1) * PAGE], 100 + i as u64);
        fill(&mut want[i * PAGE..(i + 1) * PAGE], 100 + i as u64);
    }
    let out = dev.migrate(m.addr(), len, Location::Device).map_err(e)?;
    check!(
        out.moved == (n / 2) as u64 && out.busy == (n / 2) as u64,
        "{out:?}"
    );
    check!(m.bytes() == &want[..], "data after fault-back");
    verify(&file, 31)?;
    Ok(())
}

/// hugetlb pages: the core never migrates them (``busy``); the engine
/// reads and writes them in place, by DMA.
fn hugetlbfs() -> Outcome {
    let dev = gpu0()?;
    let nr = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    std::fs::write(nr, "2").map_err(|x| format!("{nr}: {x}"))?;
    let len = 2 << 20;
    let mut m = anon(len, MapFlags::MAP_PRIVATE | MapFlags::MAP_HUGETLB)?;
    fill(m.bytes_mut(), 17);
    let want = msvm_rt::checksum(m.bytes());
    let out = dev.migrate(m.addr(), len, Location::Device).map_err(e)?;
    check!(out.busy == (len / PAGE) as u64, "hugetlb migrate: {out:?}");
    let s0 = dev.stats().map_err(e)?;
    let r = dev.exec(Exec::Checksum, m.addr(), len, false).map_err(e)?;
    check!(r.result == want && r.migrated == 0, "read: {r:?}");
    dev.exec(Exec::Fill(0xabcd), m.addr(), len, false)
        .map_err(e)?;
    let s1 = dev.stats().map_err(e)?;
    check!(
        s1.engine_sys_read - s0.engine_sys_read == len as u64
            && s1.engine_sys_written - s0.engine_sys_written == len as u64,
        "not by DMA"
    );
    let w = 0xabcdu64.to_ne_bytes();
    check!(m.bytes().chunks(8).all(|x| x == w), "the engine's writes");
    drop(m);
    std::fs::write(nr, "0").map_err(|x| format!("{nr}: {x}"))?;
    Ok(())
}

/// The userfaultfd ABI, as `linux/userfaultfd.h` defines it.
mod uffd {
    #[repr(C)]
    pub struct Api {
        pub api: u64,
        pub features: u64,
        pub ioctls: u64,
    }
    #[repr(C)]
    pub struct Register {
        pub start: u64,
        pub len: u64,
        pub mode: u64,
        pub ioctls: u64,
    }
    #[repr(C)]
    pub struct Copy {
        pub dst: u64,
        pub src: u64,
        pub len: u64,
        pub mode: u64,
        pub copy: i64,
    }
    pub const API: u64 = 0xaa;
    pub const REGISTER_MODE_MISSING: u64 = 1;
    nix::ioctl_readwrite!(api, 0xaa, 0x3f, Api);
    nix::ioctl_readwrite!(register, 0xaa, 0x00, Register);
    nix::ioctl_readwrite!(copy, 0xaa, 0x03, Copy);
}

/// The engine faults a userfaultfd-registered range: every missing page is
/// resolved by the process's handler thread (UFFDIO_COPY), and the job sees
/// what the handler put there.
fn userfaultfd_read() -> Outcome {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let dev = gpu0()?;
    let n = 16;
    let m = anon(n * PAGE, MapFlags::MAP_PRIVATE)?;
    // SAFETY: a plain system call; the result is checked.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_userfaultfd, nix::libc::O_CLOEXEC) };
    check!(fd >= 0, "userfaultfd: {}", Errno::last());
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let raw = fd.as_raw_fd();
    let mut a = uffd::Api {
        api: uffd::API,
        features: 0,
        ioctls: 0,
    };
    // SAFETY: valid argument for the ioctl.
    unsafe { uffd::api(raw, &mut a) }.map_err(|x| format!("UFFDIO_API: {x}"))?;
    let mut r = uffd::Register {
        start: m.addr() as u64,
        len: (n * PAGE) as u64,
        mode: uffd::REGISTER_MODE_MISSING,
        ioctls: 0,
    };
    // SAFETY: valid argument; the range is our own mapping.
    unsafe { uffd::register(raw, &mut r) }.map_err(|x| format!("UFFDIO_REGISTER: {x}"))?;
    let mut page = vec![0u8; PAGE];
    let (addr, len) = (m.addr(), n * PAGE);
    let served = std::thread::scope(|s| -> Result<usize, String> {
        let handler = s.spawn(|| -> Result<usize, String> {
            let mut served = 0;
            while served < n {
                // struct uffd_msg: event (u8), then the pagefault's address
                // at offset 16.
                let mut msg = [0u8; 32];
                let k = nix::unistd::read(&fd, &mut msg).map_err(|x| format!("read: {x}"))?;
                if k != 32 || msg[0] != 0x12 {
                    return Err(format!("unexpected message {:?}", &msg[..k]));
                }
                let at = u64::from_ne_bytes(msg[16..24].try_into().unwrap()) as usize & !(PAGE - 1);
                let idx = (at - addr) / PAGE;
                fill(&mut page, 500 + idx as u64);
                let mut c = uffd::Copy {
                    dst: at as u64,
                    src: page.as_ptr() as u64,
                    len: PAGE as u64,
                    mode: 0,
                    copy: 0,
                };
                // SAFETY: valid argument; `page` is readable.
                unsafe { uffd::copy(raw, &mut c) }.map_err(|x| format!("UFFDIO_COPY: {x}"))?;
                served += 1;
            }
            Ok(served)
        });
        let r = dev.exec(Exec::Checksum, addr, len, true).map_err(e);
        let served = handler
            .join()
            .map_err(|_| "handler panicked".to_string())??;
        let mut want = vec![0u8; len];
        for i in 0..n {
            fill(&mut want[i * PAGE..(i + 1) * PAGE], 500 + i as u64);
        }
        check!(
            r?.result == msvm_rt::checksum(&want),
            "the job saw other bytes"
        );
        check!(m.bytes() == &want[..], "the process sees other bytes");
        Ok(served)
    })?;
    check!(served == n, "served {served} faults");
    Ok(())
}
