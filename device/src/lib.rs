// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu: a PCIe GPU model that QEMU attaches over vfio-user
//! (`-device vfio-user-pci,socket=...`). Documentation/hardware.rst is its
//! programming reference.
//!
//! - [`proto`], [`sock`]: the vfio-user protocol and its messages;
//! - [`server`]: one connection, served in both directions at once;
//! - [`device`]: the device QEMU sees: regions and interrupts;
//! - [`pci`], [`regs`]: configuration space and BAR0 registers;
//! - [`ring`]: a command ring, as each engine has;
//! - [`copy`]: the copy engine;
//! - [`job`], [`mmu`]: the job engine, and the MMU it translates with;
//! - [`dma`], [`mem`]: the DMA space and shared memory;
//! - [`switch`]: peer-to-peer routing inside a PCIe switch.

pub mod copy;
pub mod device;
pub mod dma;
pub mod fault;
pub mod job;
pub mod mem;
pub mod mmu;
pub mod pci;
pub mod proto;
pub mod regs;
pub mod ring;
pub mod server;
pub mod sock;
pub mod switch;

/// What can go wrong, with the errno each is reported as.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A message or argument that does not decode.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// An access past the end of a region.
    #[error("offset out of range")]
    OutOfRange,
    /// No such region or interrupt index.
    #[error("no region or interrupt index {0}")]
    NoIndex(u32),
    /// A command the device does not serve.
    #[error("no command {0}")]
    NoCommand(u16),
    /// A DMA address in no range mapped for the device.
    #[error("DMA address {0:#x} is in no range mapped for the device")]
    Unmapped(u64),
    /// A DMA access the range's permissions forbid.
    #[error("DMA address {0:#x}: access not permitted")]
    Denied(u64),
    /// A DMA range that overlaps one already mapped.
    #[error("DMA range overlaps one already mapped")]
    Overlap,
    /// DMA while the command register forbids bus mastering.
    #[error("bus mastering is disabled")]
    NoBusMaster,
    /// The client answered a DMA request with this errno.
    #[error("the client refused a DMA request: errno {0}")]
    Remote(u32),
    /// The client did not answer in time.
    #[error("no reply from the client")]
    Timeout,
    /// The connection is gone.
    #[error("the connection is closed")]
    Closed,
    /// A request made from the thread that serves the client's requests,
    /// which would wait for itself.
    #[error("a DMA request from the serving thread")]
    WouldDeadlock,
    /// A lock whose holder panicked.
    #[error("a lock was poisoned")]
    Poisoned,
    /// An I/O error.
    #[error(transparent)]
    Io(std::io::Error),
    /// A system call's error.
    #[error(transparent)]
    Sys(nix::Error),
}

impl Error {
    /// The errno a reply carries for this error.
    pub fn errno(&self) -> i32 {
        use nix::libc;
        match self {
            Error::Malformed(_) | Error::OutOfRange | Error::NoIndex(_) => libc::EINVAL,
            Error::NoCommand(_) => libc::ENOSYS,
            Error::Unmapped(_) => libc::EFAULT,
            Error::Denied(_) | Error::NoBusMaster => libc::EPERM,
            Error::Overlap => libc::EEXIST,
            Error::Remote(e) => *e as i32,
            Error::Timeout => libc::ETIMEDOUT,
            Error::Closed => libc::ENOTCONN,
            Error::WouldDeadlock => libc::EDEADLK,
            Error::Poisoned | Error::Io(_) => libc::EIO,
            Error::Sys(e) => *e as i32,
        }
    }
}
