//! msvm runtime: a safe API over the msvm DRM ioctls.
//!
//! ```no_run
//! for dev in msvm_rt::Device::all()? {
//!     let info = dev.query()?;
//!     println!("gpu{} {} {} bytes", info.index, info.pci, info.vram_size);
//! }
//! # Ok::<(), msvm_rt::Error>(())
//! ```

pub mod abi;
mod clients;
mod device;
mod error;

pub use clients::{clients, parse_fdinfo, Client};
pub use device::{
    checksum, Access, Attributes, Device, DeviceInfo, Exec, ExecOutcome, Location, MigrateOutcome,
    P2pPath, PciAddr, PeerInfo, Place, Residency, Stats,
};
pub use error::{Error, Result};
