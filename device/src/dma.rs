// SPDX-License-Identifier: GPL-2.0

//! The device's DMA space: the ranges QEMU maps for it (`DMA_MAP`), each
//! either guest RAM with the fd behind it (reached directly) or memory QEMU
//! gives no fd for, such as a peer's BAR (reached through QEMU with
//! `DMA_READ`/`DMA_WRITE`). An address in no range is an error the device
//! reports: it touches nothing it was not given.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, RwLock};

use crate::mem::Mmap;
use crate::Error;

/// `DMA_MAP` flags.
pub mod prot {
    /// The device may read the range.
    pub const READ: u32 = 1 << 0;
    /// The device may write the range.
    pub const WRITE: u32 = 1 << 1;
}

/// `DMA_UNMAP` flag: every range.
pub const UNMAP_ALL: u32 = 1 << 1;

/// How the device reaches a range.
enum Backing {
    /// Through the mapping of the file behind the fd QEMU sent, from
    /// `offset` in it.
    Direct { file: Arc<Mmap>, offset: u64 },
    /// Through QEMU: `DMA_READ`/`DMA_WRITE` messages.
    Remote,
}

/// A file's identity: device and inode.
type FileId = (u64, u64);

struct Range {
    size: u64,
    prot: u32,
    backing: Backing,
}

/// Accesses QEMU serves: the connection implements this.
pub trait Remote {
    /// Reads `buf.len()` bytes at `addr` through QEMU.
    fn dma_read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Error>;
    /// Writes `data` at `addr` through QEMU.
    fn dma_write(&self, addr: u64, data: &[u8]) -> Result<(), Error>;
}

/// No path through QEMU: every access to a range QEMU serves fails
/// (`EFAULT`). What a table walk uses (it reads guest RAM only), and tests.
pub struct NoRemote;

impl Remote for NoRemote {
    fn dma_read(&self, _: u64, _: &mut [u8]) -> Result<(), Error> {
        Err(Error::Remote(nix::libc::EFAULT as u32))
    }

    fn dma_write(&self, _: u64, _: &[u8]) -> Result<(), Error> {
        Err(Error::Remote(nix::libc::EFAULT as u32))
    }
}

/// Counters of the paths accesses took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaCounts {
    /// Bytes read or written directly.
    pub direct_bytes: u64,
    /// Bytes read or written through QEMU.
    pub remote_bytes: u64,
    /// Accesses refused: no range, or no permission.
    pub refused: u64,
    /// Bytes routed to a peer inside the switch (`crate::switch`), which
    /// never reach the DMA space: [`DmaSpace::counts`] leaves them 0, the
    /// device's counts (`Device::dma_counts`) have them.
    pub switch_bytes: u64,
}

/// The DMA space.
///
/// Each file QEMU sends fds of (guest RAM's memfd) is mapped once, whole,
/// and shared by the ranges that reach it: behind a virtual IOMMU, QEMU
/// maps every page the guest maps as a range of its own (`DMA_MAP` per
/// 4 KiB IOVA), and a mapping per range would soon reach the host's limit
/// on a process's mappings (`vm.max_map_count`, 65530).
#[derive(Default)]
pub struct DmaSpace {
    ranges: RwLock<BTreeMap<u64, Range>>,
    /// The files' mappings, while a range reaches them.
    files: Mutex<HashMap<FileId, Arc<Mmap>>>,
    counts: std::sync::Mutex<DmaCounts>,
}

impl DmaSpace {
    /// An empty space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `[iova, iova + size)`, backed by `fd` from `offset` if given.
    /// A range that overlaps one already mapped is refused (`EEXIST`).
    pub fn map(
        &self,
        iova: u64,
        size: u64,
        prot: u32,
        fd: Option<(OwnedFd, u64)>,
    ) -> Result<(), Error> {
        let end = iova
            .checked_add(size)
            .filter(|_| size > 0)
            .ok_or(Error::Malformed("DMA range"))?;
        let backing = match fd {
            Some((fd, offset)) => {
                // A range past the end of the file would fault (SIGBUS)
                // when reached.
                let st = nix::sys::stat::fstat(&fd).map_err(Error::Sys)?;
                let len = u64::try_from(st.st_size).unwrap_or(0);
                if offset.checked_add(size).is_none_or(|e| e > len) {
                    return Err(Error::Malformed("DMA range past the end of its fd"));
                }
                let file = self.file(&fd, (st.st_dev, st.st_ino), len)?;
                Backing::Direct { file, offset }
            }
            None => Backing::Remote,
        };
        let mut ranges = self.ranges.write().map_err(|_| Error::Poisoned)?;
        let overlaps = ranges
            .range(..end)
            .next_back()
            .is_some_and(|(&start, r)| start + r.size > iova);
        if overlaps {
            return Err(Error::Overlap);
        }
        ranges.insert(
            iova,
            Range {
                size,
                prot,
                backing,
            },
        );
        Ok(())
    }

    /// Removes the ranges inside `[iova, iova + size)` (all with
    /// [`UNMAP_ALL`]), which may end at 2^64; a range that reaches across
    /// either end is refused with nothing removed, as VFIO's type1 IOMMU
    /// refuses it. Accesses
    /// under way finish first: they hold the lock this takes for writing
    /// (those through QEMU are QEMU's to order).
    pub fn unmap(&self, iova: u64, size: u64, flags: u32) -> Result<usize, Error> {
        let mut ranges = self.ranges.write().map_err(|_| Error::Poisoned)?;
        if flags & UNMAP_ALL != 0 {
            let n = ranges.len();
            ranges.clear();
            drop(ranges);
            self.forget_files();
            return Ok(n);
        }
        // Its last byte: it may be the address space's (QEMU unmaps up to
        // 2^64 when a virtual IOMMU stops translating), not past it.
        let last = size
            .checked_sub(1)
            .and_then(|n| iova.checked_add(n))
            .ok_or(Error::Malformed("DMA range"))?;
        // Whether a range begins before `at` and covers it (ranges end
        // below 2^64: `map` refuses any other).
        let straddles = |at: u64| {
            ranges
                .range(..at)
                .next_back()
                .is_some_and(|(&s, r)| s + r.size > at)
        };
        if straddles(iova) || last.checked_add(1).is_some_and(straddles) {
            return Err(Error::Malformed("unmap across a mapped range"));
        }
        let gone: Vec<u64> = ranges.range(iova..=last).map(|(&s, _)| s).collect();
        for s in &gone {
            ranges.remove(s);
        }
        drop(ranges);
        self.forget_files();
        Ok(gone.len())
    }

    /// The mapping of the file `fd` (`id`, `len` bytes): the one already
    /// made if a range still reaches it, else a new one.
    fn file(&self, fd: &OwnedFd, id: FileId, len: u64) -> Result<Arc<Mmap>, Error> {
        let mut files = self.files.lock().map_err(|_| Error::Poisoned)?;
        if let Some(m) = files.get(&id).filter(|m| m.len() as u64 >= len) {
            return Ok(m.clone());
        }
        let n = usize::try_from(len).map_err(|_| Error::Malformed("DMA range"))?;
        let m = Arc::new(Mmap::new(fd, 0, n)?);
        files.insert(id, m.clone());
        Ok(m)
    }

    /// Unmaps the files no range reaches any more.
    fn forget_files(&self) {
        if let Ok(mut files) = self.files.lock() {
            files.retain(|_, m| Arc::strong_count(m) > 1);
        }
    }

    /// Files mapped (ranges with an fd share their file's mapping).
    pub fn files(&self) -> usize {
        self.files.lock().map(|f| f.len()).unwrap_or(0)
    }

    /// Number of ranges mapped.
    pub fn len(&self) -> usize {
        self.ranges.read().map(|r| r.len()).unwrap_or(0)
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters.
    pub fn counts(&self) -> DmaCounts {
        self.counts.lock().map(|c| *c).unwrap_or_default()
    }

    fn count(&self, f: impl FnOnce(&mut DmaCounts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c);
        }
    }

    /// Splits `[addr, addr + len)` over the ranges and checks every piece
    /// for `want` permission first, so that an access refused anywhere
    /// touches nothing. Then, still holding the ranges (an unmap waits for
    /// it), it calls `direct(piece start, mapping, offset in it, length)`
    /// for each piece with an fd; and, with the lock let go, `remote(piece
    /// start, length)` for each piece QEMU serves: QEMU answers those only
    /// with its global lock, which it holds while it waits for a DMA_MAP or
    /// DMA_UNMAP reply that would wait for this lock. The first failure
    /// stops it.
    fn walk(
        &self,
        addr: u64,
        len: usize,
        want: u32,
        mut direct: impl FnMut(usize, &Mmap, u64, usize) -> Result<(), Error>,
        mut remote: impl FnMut(usize, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let ranges = self.ranges.read().map_err(|_| Error::Poisoned)?;
        let mut pieces = Vec::new();
        let mut done = 0usize;
        while done < len {
            let at = addr.checked_add(done as u64).ok_or(Error::Unmapped(addr))?;
            let found = ranges
                .range(..=at)
                .next_back()
                .filter(|(&s, r)| at - s < r.size);
            let Some((&start, r)) = found else {
                self.count(|c| c.refused += 1);
                return Err(Error::Unmapped(at));
            };
            if r.prot & want != want {
                self.count(|c| c.refused += 1);
                return Err(Error::Denied(at));
            }
            let off = at - start;
            let n = (len - done).min((r.size - off).min(usize::MAX as u64) as usize);
            pieces.push((done, r, off, n));
            done += n;
        }
        let mut through_qemu = Vec::new();
        for (done, r, off, n) in pieces {
            match &r.backing {
                Backing::Direct { file, offset } => {
                    self.count(|c| c.direct_bytes += n as u64);
                    direct(done, file, offset + off, n)?;
                }
                Backing::Remote => through_qemu.push((done, n)),
            }
        }
        drop(ranges);
        for (done, n) in through_qemu {
            self.count(|c| c.remote_bytes += n as u64);
            remote(done, n)?;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at DMA address `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8], remote: &dyn Remote) -> Result<(), Error> {
        let len = buf.len();
        let cell = std::cell::RefCell::new(buf);
        self.walk(
            addr,
            len,
            prot::READ,
            |done, m, off, n| m.read(off, &mut cell.borrow_mut()[done..done + n]),
            |done, n| remote.dma_read(addr + done as u64, &mut cell.borrow_mut()[done..done + n]),
        )
    }

    /// Writes `data` at DMA address `addr`.
    pub fn write(&self, addr: u64, data: &[u8], remote: &dyn Remote) -> Result<(), Error> {
        self.walk(
            addr,
            data.len(),
            prot::WRITE,
            |done, m, off, n| m.write(off, &data[done..done + n]),
            |done, n| remote.dma_write(addr + done as u64, &data[done..done + n]),
        )
    }

    /// Adds `v` to the 64-bit word at DMA address `addr` (8-byte aligned),
    /// atomically: only where the device reaches the memory directly. At
    /// an address QEMU serves it is refused (`Denied`, touching nothing):
    /// PCIe AtomicOps do not cross QEMU's `DMA_READ`/`DMA_WRITE`, and a
    /// read then a write would lose concurrent updates.
    pub fn fetch_add(&self, addr: u64, v: u64) -> Result<(), Error> {
        let mut through_qemu = false;
        // Checked first: a word QEMU serves is not added to at all.
        self.walk(
            addr,
            8,
            prot::READ | prot::WRITE,
            |_, _, _, _| Ok(()),
            |_, _| {
                through_qemu = true;
                Ok(())
            },
        )?;
        if through_qemu {
            self.count(|c| c.refused += 1);
            return Err(Error::Denied(addr));
        }
        self.walk(
            addr,
            8,
            prot::READ | prot::WRITE,
            |_, m, off, _| m.fetch_add_u64(off, v),
            |_, _| Err(Error::Denied(addr)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::memfd;
    use std::sync::Mutex;

    /// A remote that records what it was asked and serves a byte pattern.
    #[derive(Default)]
    struct Log(Mutex<Vec<(bool, u64, usize)>>);

    impl Remote for Log {
        fn dma_read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
            self.0.lock().unwrap().push((false, addr, buf.len()));
            buf.fill(0x5a);
            Ok(())
        }
        fn dma_write(&self, addr: u64, data: &[u8]) -> Result<(), Error> {
            self.0.lock().unwrap().push((true, addr, data.len()));
            Ok(())
        }
    }

    #[test]
    fn accesses_reach_the_fd_at_its_offset_and_span_ranges() {
        let fd = memfd("ram", 3 << 12).unwrap();
        let view = Mmap::new(&fd, 0, 3 << 12).unwrap();
        let d = DmaSpace::new();
        // IOVA 0x10000 is the fd's second page; 0x11000 goes to QEMU.
        d.map(
            0x10000,
            0x1000,
            prot::READ | prot::WRITE,
            Some((fd.try_clone().unwrap(), 0x1000)),
        )
        .unwrap();
        d.map(0x11000, 0x1000, prot::READ | prot::WRITE, None)
            .unwrap();
        let log = Log::default();
        d.write(0x10ffe, &[1, 2, 3, 4], &log).unwrap();
        let mut got = [0; 2];
        view.read(0x1ffe, &mut got).unwrap();
        assert_eq!(got, [1, 2], "the first two bytes went to the fd's page");
        assert_eq!(*log.0.lock().unwrap(), [(true, 0x11000, 2)]);
        let mut buf = [0; 4];
        d.read(0x10ffe, &mut buf, &log).unwrap();
        assert_eq!(buf, [1, 2, 0x5a, 0x5a]);
        assert_eq!(d.counts().direct_bytes, 4);
        assert_eq!(d.counts().remote_bytes, 4);
    }

    #[test]
    fn atomic_adds_are_direct_or_refused() {
        let fd = memfd("ram", 1 << 12).unwrap();
        let d = DmaSpace::new();
        let m = Mmap::new(&fd, 0, 1 << 12).unwrap();
        d.map(0x2000, 0x1000, prot::READ | prot::WRITE, Some((fd, 0)))
            .unwrap();
        d.map(0x8000, 0x1000, prot::READ | prot::WRITE, None)
            .unwrap();
        d.fetch_add(0x2008, 5).unwrap();
        d.fetch_add(0x2008, u64::MAX).unwrap();
        let mut b = [0; 8];
        m.read(8, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 4);
        // A word QEMU serves: refused, nothing asked of QEMU.
        assert!(matches!(d.fetch_add(0x8000, 1), Err(Error::Denied(0x8000))));
        assert_eq!(d.counts().refused, 1);
    }

    #[test]
    fn addresses_never_given_are_refused_and_touch_nothing() {
        let fd = memfd("ram", 1 << 12).unwrap();
        let d = DmaSpace::new();
        d.map(0x2000, 0x1000, prot::READ, Some((fd, 0))).unwrap();
        let log = Log::default();
        // Past the range's end: refused before any byte is copied.
        assert!(matches!(
            d.read(0x2ffc, &mut [0; 8], &log),
            Err(Error::Unmapped(0x3000))
        ));
        assert!(matches!(
            d.read(0x1000, &mut [0; 1], &log),
            Err(Error::Unmapped(0x1000))
        ));
        // Read-only.
        assert!(matches!(
            d.write(0x2000, &[1], &log),
            Err(Error::Denied(0x2000))
        ));
        assert_eq!(d.counts().refused, 3);
        assert!(log.0.lock().unwrap().is_empty());
        // Overlaps are refused; unmapped ranges go.
        assert!(matches!(
            d.map(0x2800, 0x1000, prot::READ, None),
            Err(Error::Overlap)
        ));
        assert_eq!(d.unmap(0x2000, 0x1000, 0).unwrap(), 1);
        assert!(d.is_empty());
        assert!(d.read(0x2000, &mut [0; 1], &log).is_err());
        // A range past the end of its fd would fault when reached:
        // refused at map.
        let short = memfd("short", 1 << 12).unwrap();
        assert!(d.map(0, 2 << 12, prot::READ, Some((short, 0))).is_err());
    }

    #[test]
    fn an_unmap_may_reach_the_end_of_the_address_space() {
        // QEMU unmaps everything above the interrupt window when a virtual
        // IOMMU turns translation off: [0xfef00000, 2^64), a size whose end
        // does not fit in 64 bits (as VFIO's type1 IOMMU allows it).
        let d = DmaSpace::new();
        d.map(0xfef0_0000, 0x1000, prot::READ, None).unwrap();
        d.map(0x1_0000_0000, 0x1000, prot::READ, None).unwrap();
        d.map(0x8000_0000_0000_0000, 0x1000, prot::READ, None)
            .unwrap();
        d.map(0x1000, 0x1000, prot::READ, None).unwrap();
        assert_eq!(
            d.unmap(0xfef0_0000, 0u64.wrapping_sub(0xfef0_0000), 0)
                .unwrap(),
            3
        );
        assert_eq!(d.len(), 1, "the range below the unmap stays");
        // Still refused: no size, and an end past 2^64.
        assert!(d.unmap(0x1000, 0, 0).is_err());
        assert!(d.unmap(0x1000, u64::MAX, 0).is_err());
        assert_eq!(d.len(), 1);
        // An unmap to 2^64 that starts inside a range, and one (below
        // 2^64) whose end falls inside a range: refused, nothing removed.
        d.map(u64::MAX - 0x1fff, 0x1000, prot::READ, None).unwrap();
        assert!(d.unmap(0x1800, 0u64.wrapping_sub(0x1800), 0).is_err());
        assert!(d.unmap(0x2000, u64::MAX - 0x17ff - 0x2000, 0).is_err());
        assert_eq!(d.len(), 2);
        // One unmap from 0x2000 to 2^64: it removes the one range there.
        assert_eq!(d.unmap(0x2000, 0u64.wrapping_sub(0x2000), 0).unwrap(), 1);
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn pages_of_one_file_share_its_mapping() {
        // As behind a virtual IOMMU: a DMA_MAP per page, IOVAs in reverse
        // order of the file's pages, more of them than a process may have
        // mappings if each were mapped on its own.
        const PAGES: u64 = 70_000;
        let fd = memfd("ram", PAGES << 12).unwrap();
        let view = Mmap::new(&fd, 0, (PAGES << 12) as usize).unwrap();
        let d = DmaSpace::new();
        for p in 0..PAGES {
            let iova = (PAGES - 1 - p) << 12;
            let fd = fd.try_clone().unwrap();
            d.map(iova, 0x1000, prot::READ | prot::WRITE, Some((fd, p << 12)))
                .unwrap();
        }
        assert_eq!((d.len(), d.files()), (PAGES as usize, 1));
        // IOVA 0 is the file's last page; an access across two IOVA pages
        // reaches two pages far apart in the file.
        d.write(0xffe, &[1, 2, 3, 4], &NoRemote).unwrap();
        let mut b = [0u8; 2];
        view.read(((PAGES - 1) << 12) + 0xffe, &mut b).unwrap();
        assert_eq!(b, [1, 2]);
        view.read((PAGES - 2) << 12, &mut b).unwrap();
        assert_eq!(b, [3, 4]);
        // The mapping goes with the last range that reaches it.
        assert_eq!(
            d.unmap(0, (PAGES - 1) << 12, 0).unwrap(),
            PAGES as usize - 1
        );
        assert_eq!(d.files(), 1);
        assert_eq!(d.unmap(0, u64::MAX, 0).unwrap(), 1);
        assert_eq!((d.len(), d.files()), (0, 0));
        assert!(d.read(0, &mut b, &NoRemote).is_err());
    }
}
