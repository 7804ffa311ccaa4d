// SPDX-License-Identifier: GPL-2.0

//! msvm_dmirror: `lib/test_hmm.c` in Rust, on msvm's kernel glue
//! (`src/mm/`) and nothing else of msvm.
//!
//! It keeps `test_hmm`'s uAPI (`lib/test_hmm_uapi.h`) and device nodes
//! (`/dev/hmm_dmirror0`, `/dev/hmm_dmirror1`: two device-private devices,
//! each its own owner), so that the kernel's own selftest,
//! `tools/testing/selftests/mm/hmm-tests`, runs against it unchanged: an
//! oracle for the glue that nobody here wrote. See
//! `Documentation/upstream/rust-mm.rst`.

// The glue serves msvm too: this module uses part of it.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../src/mm/mod.rs"]
mod mm;

mod device;
mod file;
mod memory;
mod uapi;

use kernel::{prelude::*, sync::Arc};

use device::DeviceData;
use file::DmirrorFile;
use mm::misc::Misc;

/// Devices (`test_hmm` has two more, device-coherent, only when given
/// special-purpose memory at load).
pub(crate) const NDEVICES: usize = 2;

const NAMES: [&CStr; NDEVICES] = [c"hmm_dmirror0", c"hmm_dmirror1"];

module! {
    type: DmirrorModule,
    name: "msvm_dmirror",
    authors: ["msvm developers"],
    description: "HMM test module (lib/test_hmm.c) in Rust, on msvm's mm abstractions",
    license: "GPL",
}

struct DmirrorModule {
    _devices: KVec<Pin<KBox<Misc<DmirrorFile>>>>,
}

impl kernel::Module for DmirrorModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let mut devices = KVec::with_capacity(NDEVICES, GFP_KERNEL)?;
        for (id, name) in NAMES.iter().enumerate() {
            let data: Arc<DeviceData> = DeviceData::new(id)?;
            devices.push(
                KBox::pin_init(Misc::register(name, data), GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        pr_info!("HMM test module loaded (Rust). This is only for testing HMM.\n");
        Ok(Self { _devices: devices })
    }
}
