// SPDX-License-Identifier: GPL-2.0

//! The DRM front end: the PCI and DRM driver, the open file and its ioctls.
//!
//! `kernel::drm`'s associated types tie [`driver`], [`file`] and `gem`
//! together (the driver names its file and object types, which name the
//! driver back), and the ioctl table in `driver.rs` names the handlers,
//! methods of [`file::File`] in `ioctl.rs`. That knot stays inside this
//! module: the front end imports down the layer map of
//! `Documentation/design.rst`, and only the crate root, which registers the
//! driver, imports the front end.
//!
//! - `ioctl.rs`: the ioctl handlers;
//! - `decode.rs`: decoding and checking their arguments, KUnit-tested;
//! - `driver.rs`: `pci::Driver` and `drm::Driver`, probe, the ioctl table;
//! - `file.rs`: an open render node and its VM;
//! - `fdinfo.rs`: its statistics in `/proc/<pid>/fdinfo`;
//! - `gem.rs`: the (empty) GEM object type DRM requires.

mod decode;
pub(crate) mod driver;
mod fdinfo;
pub(crate) mod file;
mod gem;
mod ioctl;
