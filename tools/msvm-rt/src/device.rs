//! One msvm device, opened through its render node.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use crate::abi::{
    self, DrmMsvmExec, DrmMsvmMigrate, DrmMsvmPeer, DrmMsvmPrefetch, DrmMsvmQuery,
    DrmMsvmResidency, DrmMsvmSetAttr, DrmMsvmStats, DrmMsvmVmCreate,
};
use crate::{Error, Result};

/// Where DRM nodes live.
const DEV_DRI: &str = "/dev/dri";
/// Where their sysfs entries live.
const SYS_CLASS_DRM: &str = "/sys/class/drm";
/// The PCI driver name of the module.
const DRIVER_NAME: &str = "msvm";

/// A PCI address, `domain:bus:device.function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddr {
    /// Decodes the ABI's `pci_domain` and `pci_bdf` fields.
    pub fn from_abi(domain: u32, bdf: u32) -> Self {
        Self {
            domain,
            bus: (bdf >> 8) as u8,
            device: ((bdf >> 3) & 0x1f) as u8,
            function: (bdf & 0x7) as u8,
        }
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// How one device sees another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PeerInfo {
    /// msvm index of the peer.
    pub index: u32,
    /// PCIe peer-to-peer is possible between the two.
    pub p2p: bool,
    /// `pci_p2pdma` distance, `None` when there is no P2P path.
    pub distance: Option<u32>,
    /// The P2P path, as `pci_p2pdma` decides it for this device reading
    /// the peer's memory.
    pub path: P2pPath,
    /// The two meet at a switch (an upstream bridge below the host bridge).
    pub common_switch: bool,
    /// A port on the path between them has ACS redirect on.
    pub acs_redirect: bool,
}

/// How a device reaches a peer's memory over PCIe (`pci_p2pdma`'s map
/// type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum P2pPath {
    /// Inside a switch, by the peer's PCI bus address, no IOMMU mapping.
    BusAddr,
    /// Through the host bridge, DMA-mapped (through the IOMMU if any).
    HostBridge,
    /// No P2P path: data goes through system memory.
    None,
}

impl P2pPath {
    /// The path `MSVM_PEER_*` flags name.
    pub fn from_flags(flags: u32) -> Self {
        if flags & abi::MSVM_PEER_BUS_ADDR != 0 {
            Self::BusAddr
        } else if flags & abi::MSVM_PEER_HOST_BRIDGE != 0 {
            Self::HostBridge
        } else {
            Self::None
        }
    }
}

impl std::fmt::Display for P2pPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BusAddr => "bus-address",
            Self::HostBridge => "host-bridge",
            Self::None => "none",
        })
    }
}

impl PeerInfo {
    /// Why the path is what it is, as `pci_p2pdma` decides it.
    pub fn why(&self) -> &'static str {
        match (self.path, self.common_switch, self.acs_redirect) {
            (P2pPath::BusAddr, ..) => "one switch, no ACS redirect",
            (P2pPath::HostBridge, true, _) => "ACS redirect in the switch; host bridge passes P2P",
            (P2pPath::HostBridge, false, _) => "no common switch; host bridge passes P2P",
            (P2pPath::None, true, _) => "ACS redirect in the switch; host bridge not whitelisted",
            (P2pPath::None, false, _) => "no common switch; host bridge not whitelisted",
        }
    }
}

/// What QUERY says of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DeviceInfo {
    pub version: u32,
    pub index: u32,
    pub num_devices: u32,
    pub pci: PciAddr,
    pub vram_size: u64,
    /// Owner group: the devices of one group work on each other's memory in
    /// place over P2P.
    pub owner_group: u32,
    /// Every other msvm device, by index.
    pub peers: Vec<PeerInfo>,
}

/// Where MIGRATE moves pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// System RAM.
    System,
    /// The memory of the device the call is made on.
    Device,
}

/// A place for pages, in placement attributes and PREFETCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The device that runs the job (attributes only: the default).
    Default,
    /// System RAM.
    System,
    /// The device the call is made on.
    Here,
    /// The msvm device of this index (see [`Device::index`] to name a
    /// device by its open file).
    Device(u32),
}

impl Place {
    fn to_abi(self) -> (u32, u32) {
        match self {
            Place::Default => (abi::MSVM_LOC_DEFAULT, 0),
            Place::System => (abi::MSVM_LOC_SYSTEM, 0),
            Place::Here => (abi::MSVM_LOC_DEVICE, abi::MSVM_QUERY_SELF),
            Place::Device(i) => (abi::MSVM_LOC_DEVICE, i),
        }
    }
}

/// How a device's jobs reach a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Move the pages to the preferred place first (the default).
    Migrate,
    /// Use pages where they are when the device reaches them.
    InPlace,
}

/// The placement attributes of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attributes {
    /// Where jobs move the pages: [`Place::Default`], [`Place::System`] or
    /// [`Place::Device`].
    pub preferred: Place,
    /// Whether they move them.
    pub access: Access,
    /// Whether thrashing detection is left on for the range (`false`:
    /// `MSVM_ATTR_THRASH_OFF`, the jobs move the pages on access every
    /// time; `true` follows the module parameter `thrash`).
    pub thrash: bool,
    /// Whether the access counters are left on for the range (`false`:
    /// `MSVM_ATTR_ACCESS_OFF`, this device's jobs that run in place never
    /// move its pages; `true` follows the module parameter
    /// `access_counters`).
    pub counters: bool,
    /// Whether the range is read-mostly (`MSVM_ATTR_READ_MOSTLY`): the
    /// device's jobs move none of its pages, and read the system pages of
    /// read-only private mappings through replicas in its own memory.
    pub read_mostly: bool,
}

/// Where the pages of a range live, in bytes, and the range's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residency {
    /// Bytes in system RAM.
    pub system: u64,
    /// Bytes with no page (never touched, swapped out, unmapped).
    pub none: u64,
    /// Bytes in each device's memory, by device index.
    pub devices: [u64; abi::MSVM_MAX_DEVICES as usize],
    /// Bytes in 2 MiB blocks that thrashing detection pins now.
    pub pinned: u64,
    /// Bytes with a read-only replica that is not stale, in each device's
    /// memory, by device index.
    pub replicas: [u64; abi::MSVM_MAX_DEVICES as usize],
    /// Attributes of the range's first byte.
    pub attributes: Attributes,
    /// Whether the range holds more than one set of attributes.
    pub mixed: bool,
}

/// What one MIGRATE did to the pages of its range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigrateOutcome {
    /// Pages moved.
    pub moved: u64,
    /// Pages already at the destination.
    pub already: u64,
    /// Pages the kernel would not move (pinned, shared, file-backed, busy).
    pub busy: u64,
    /// Pages not moved for lack of device memory (or because the caller's
    /// dmem cgroup is at its `dmem.max` for the device).
    pub no_vram: u64,
}

impl MigrateOutcome {
    /// Every page of the range, whatever happened to it.
    pub fn total(&self) -> u64 {
        self.moved + self.already + self.busy + self.no_vram
    }
}

/// An engine job (`DRM_IOCTL_MSVM_EXEC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exec {
    /// Writes the 64-bit value over the range, repeated in memory order
    /// from its first byte ([`Device::fill`] takes other patterns).
    Fill(u64),
    /// Copies the range at `src` over the range.
    Copy { src: usize },
    /// Adds the value to every 64-bit word of the range.
    AtomicAdd(u64),
    /// The 64-bit FNV-1a hash of the range.
    Checksum,
}

/// The 64-bit FNV-1a hash of `bytes`: what `Exec::Checksum` computes, for
/// checking its result on the CPU.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What an engine job returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecOutcome {
    /// The CHECKSUM result.
    pub result: u64,
    /// Pages migrated to the device for the job.
    pub migrated: u64,
}

/// Device counters (`DRM_IOCTL_MSVM_STATS`), in 4 KiB pages unless named
/// otherwise.
pub type Stats = DrmMsvmStats;

/// An open msvm render node.
#[derive(Debug)]
pub struct Device {
    file: File,
    path: PathBuf,
}

impl Device {
    /// Opens the render node at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| Error::Open {
                path: path.clone(),
                source,
            })?;
        Ok(Self { file, path })
    }

    /// Paths of every msvm render node, in node order.
    pub fn render_nodes() -> Result<Vec<PathBuf>> {
        let list_err = |source| Error::List {
            path: SYS_CLASS_DRM.into(),
            source,
        };
        let mut nodes = Vec::new();
        for entry in std::fs::read_dir(SYS_CLASS_DRM).map_err(list_err)? {
            let name = entry.map_err(list_err)?.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("renderD") {
                continue;
            }
            let driver = Path::new(SYS_CLASS_DRM).join(name).join("device/driver");
            let is_msvm = std::fs::read_link(&driver)
                .ok()
                .and_then(|p| p.file_name().map(|n| n == DRIVER_NAME))
                .unwrap_or(false);
            if is_msvm {
                nodes.push(Path::new(DEV_DRI).join(name));
            }
        }
        nodes.sort_by_key(|p| node_minor(p));
        Ok(nodes)
    }

    /// Opens every msvm device.
    pub fn all() -> Result<Vec<Self>> {
        Self::render_nodes()?.iter().map(Self::open).collect()
    }

    /// The render node this device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Issues QUERY with a caller-built argument, exactly as given.
    ///
    /// For tests of the ioctl's argument checking; [`Device::query`] is the
    /// normal way to ask.
    pub fn query_raw(&self, arg: &mut DrmMsvmQuery) -> Result<()> {
        // SAFETY: `arg` is a valid, exclusively borrowed `drm_msvm_query` for
        // the duration of the call; a `peers_ptr` in it is only written by the
        // kernel after access checks, so a bad one gives -EFAULT, not UB here.
        unsafe { abi::drm_ioctl_msvm_query(self.file.as_raw_fd(), arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "QUERY",
                errno,
            })
    }

    /// Describes the device with msvm index `device`, or this one if `None`.
    pub fn query_device(&self, device: Option<u32>) -> Result<DeviceInfo> {
        let device = device.unwrap_or(abi::MSVM_QUERY_SELF);
        let mut arg = DrmMsvmQuery {
            device,
            ..Default::default()
        };
        self.query_raw(&mut arg)?;
        if arg.version != abi::MSVM_UAPI_VERSION {
            return Err(Error::Version {
                module: arg.version,
                runtime: abi::MSVM_UAPI_VERSION,
            });
        }
        let mut peers = vec![DrmMsvmPeer::default(); arg.num_peers as usize];
        if !peers.is_empty() {
            arg = DrmMsvmQuery {
                device,
                peer_size: size_of::<DrmMsvmPeer>() as u32,
                num_peers: peers.len() as u32,
                peers_ptr: peers.as_mut_ptr() as u64,
                ..Default::default()
            };
            self.query_raw(&mut arg)?;
            // Devices may have come or gone between the two calls.
            peers.truncate(arg.num_peers as usize);
        }
        Ok(DeviceInfo {
            version: arg.version,
            index: arg.index,
            num_devices: arg.num_devices,
            pci: PciAddr::from_abi(arg.pci_domain, arg.pci_bdf),
            vram_size: arg.vram_size,
            owner_group: arg.owner_group,
            peers: peers
                .into_iter()
                .map(|p| PeerInfo {
                    index: p.index,
                    p2p: p.flags & abi::MSVM_PEER_P2P != 0,
                    distance: u32::try_from(p.distance).ok(),
                    path: P2pPath::from_flags(p.flags),
                    common_switch: p.flags & abi::MSVM_PEER_COMMON_SWITCH != 0,
                    acs_redirect: p.flags & abi::MSVM_PEER_ACS_REDIRECT != 0,
                })
                .collect(),
        })
    }

    /// Describes this device.
    pub fn query(&self) -> Result<DeviceInfo> {
        self.query_device(None)
    }
}

impl AsFd for Device {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl Device {
    /// Issues VM_CREATE with a caller-built argument (tests).
    pub fn vm_create_raw(&self, arg: &mut DrmMsvmVmCreate) -> Result<()> {
        // SAFETY: `arg` is a valid, exclusively borrowed argument.
        unsafe { abi::drm_ioctl_msvm_vm_create(self.file.as_raw_fd(), arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "VM_CREATE",
                errno,
            })
    }

    /// Creates the VM of this open file on the calling process's address
    /// space.
    pub fn vm_create(&self) -> Result<()> {
        self.vm_create_raw(&mut DrmMsvmVmCreate::default())
    }

    /// Destroys the VM of this open file.
    pub fn vm_destroy(&self) -> Result<()> {
        let mut arg = abi::DrmMsvmVmDestroy::default();
        // SAFETY: `arg` is a valid, exclusively borrowed argument.
        unsafe { abi::drm_ioctl_msvm_vm_destroy(self.file.as_raw_fd(), &mut arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "VM_DESTROY",
                errno,
            })
    }

    /// Issues MIGRATE with a caller-built argument (tests).
    pub fn migrate_raw(&self, arg: &mut DrmMsvmMigrate) -> Result<()> {
        // SAFETY: `arg` is a valid, exclusively borrowed argument; the range
        // it names is only migrated, never dereferenced by this process here.
        unsafe { abi::drm_ioctl_msvm_migrate(self.file.as_raw_fd(), arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "MIGRATE",
                errno,
            })
    }

    /// Moves the pages of `[addr, addr + len)` of this process (page
    /// aligned) to `to`. The contents stay the same; only where they live
    /// changes.
    pub fn migrate(&self, addr: usize, len: usize, to: Location) -> Result<MigrateOutcome> {
        let mut arg = DrmMsvmMigrate {
            addr: addr as u64,
            length: len as u64,
            to: match to {
                Location::System => abi::MSVM_MIGRATE_TO_SYSTEM,
                Location::Device => abi::MSVM_MIGRATE_TO_DEVICE,
            },
            ..Default::default()
        };
        self.migrate_raw(&mut arg)?;
        Ok(MigrateOutcome {
            moved: arg.moved,
            already: arg.already,
            busy: arg.busy,
            no_vram: arg.no_vram,
        })
    }

    /// Moves the pages behind `buf` (page aligned) to `to`.
    pub fn migrate_slice(&self, buf: &[u8], to: Location) -> Result<MigrateOutcome> {
        self.migrate(buf.as_ptr() as usize, buf.len(), to)
    }

    /// Issues EXEC with a caller-built argument (tests).
    pub fn exec_raw(&self, arg: &mut DrmMsvmExec) -> Result<()> {
        // SAFETY: `arg` is a valid, exclusively borrowed argument; the
        // ranges it names are reached by the device, not by this call.
        unsafe { abi::drm_ioctl_msvm_exec(self.file.as_raw_fd(), arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "EXEC",
                errno,
            })
    }

    /// Runs `job` on the device's engine over `[addr, addr + len)` (any
    /// bytes; 8-byte aligned for `AtomicAdd`). With `in_place`, pages are used where they are (system RAM
    /// by DMA, a peer of the owner group over P2P); otherwise the range is
    /// migrated first (to the device, or where its placement attributes say).
    pub fn exec(&self, job: Exec, addr: usize, len: usize, in_place: bool) -> Result<ExecOutcome> {
        let (op, src, value) = match job {
            Exec::Fill(v) => (abi::MSVM_EXEC_FILL, 0, v),
            Exec::Copy { src } => (abi::MSVM_EXEC_COPY, src as u64, 0),
            Exec::AtomicAdd(v) => (abi::MSVM_EXEC_ATOMIC_ADD, 0, v),
            Exec::Checksum => (abi::MSVM_EXEC_CHECKSUM, 0, 0),
        };
        let mut arg = DrmMsvmExec {
            op,
            flags: if in_place { abi::MSVM_EXEC_IN_PLACE } else { 0 },
            addr: addr as u64,
            length: len as u64,
            src,
            value,
            ..Default::default()
        };
        self.exec_raw(&mut arg)?;
        Ok(ExecOutcome {
            result: arg.result,
            migrated: arg.migrated,
        })
    }

    /// Repeats `pattern` (1 to [`abi::MSVM_EXEC_PATTERN_MAX`] bytes) over
    /// `[addr, addr + len)` on the device's engine, from `addr` on (any
    /// bytes; the last repeat may be cut short); `in_place` as for
    /// [`Device::exec`].
    pub fn fill(
        &self,
        pattern: &[u8],
        addr: usize,
        len: usize,
        in_place: bool,
    ) -> Result<ExecOutcome> {
        let mut arg = DrmMsvmExec {
            op: abi::MSVM_EXEC_FILL,
            flags: if in_place { abi::MSVM_EXEC_IN_PLACE } else { 0 },
            addr: addr as u64,
            length: len as u64,
            src: pattern.as_ptr() as u64,
            // A length the kernel refuses (EINVAL) if it does not fit.
            pattern_size: u32::try_from(pattern.len()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        self.exec_raw(&mut arg)?;
        Ok(ExecOutcome {
            result: arg.result,
            migrated: arg.migrated,
        })
    }

    /// This device's msvm index.
    pub fn index(&self) -> Result<u32> {
        Ok(self.query()?.index)
    }

    /// Issues SET_ATTR with a caller-built argument (tests).
    pub fn set_attr_raw(&self, arg: &mut DrmMsvmSetAttr) -> Result<()> {
        // SAFETY: `arg` is a valid, exclusively borrowed argument.
        unsafe { abi::drm_ioctl_msvm_set_attr(self.file.as_raw_fd(), arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "SET_ATTR",
                errno,
            })
    }

    /// Gives `[addr, addr + len)` (page aligned) the attributes `attrs`
    /// for this device's jobs.
    pub fn set_attr(&self, addr: usize, len: usize, attrs: Attributes) -> Result<()> {
        let (location, device) = attrs.preferred.to_abi();
        let mut arg = DrmMsvmSetAttr {
            addr: addr as u64,
            length: len as u64,
            location,
            device,
            access: match attrs.access {
                Access::Migrate => abi::MSVM_ACCESS_MIGRATE,
                Access::InPlace => abi::MSVM_ACCESS_IN_PLACE,
            },
            flags: if attrs.thrash {
                0
            } else {
                abi::MSVM_ATTR_THRASH_OFF
            } | if attrs.counters {
                0
            } else {
                abi::MSVM_ATTR_ACCESS_OFF
            } | if attrs.read_mostly {
                abi::MSVM_ATTR_READ_MOSTLY
            } else {
                0
            },
            ..Default::default()
        };
        self.set_attr_raw(&mut arg)
    }

    /// Issues PREFETCH with a caller-built argument (tests).
    pub fn prefetch_raw(&self, arg: &mut DrmMsvmPrefetch) -> Result<()> {
        // SAFETY: `arg` is a valid, exclusively borrowed argument; the range
        // is only migrated.
        unsafe { abi::drm_ioctl_msvm_prefetch(self.file.as_raw_fd(), arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "PREFETCH",
                errno,
            })
    }

    /// Moves the pages of `[addr, addr + len)` (page aligned) to `to`:
    /// system RAM, this device, or a peer it reaches over P2P.
    pub fn prefetch(&self, addr: usize, len: usize, to: Place) -> Result<MigrateOutcome> {
        let (location, device) = to.to_abi();
        let mut arg = DrmMsvmPrefetch {
            addr: addr as u64,
            length: len as u64,
            location,
            device,
            ..Default::default()
        };
        self.prefetch_raw(&mut arg)?;
        Ok(MigrateOutcome {
            moved: arg.moved,
            already: arg.already,
            busy: arg.busy,
            no_vram: arg.no_vram,
        })
    }

    /// Issues RESIDENCY with a caller-built argument (tests).
    pub fn residency_raw(&self, arg: &mut DrmMsvmResidency) -> Result<()> {
        // SAFETY: `arg` is a valid, exclusively borrowed argument.
        unsafe { abi::drm_ioctl_msvm_residency(self.file.as_raw_fd(), arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "RESIDENCY",
                errno,
            })
    }

    /// Where the pages of `[addr, addr + len)` (page aligned) live now, and
    /// the range's attributes for this device.
    pub fn residency(&self, addr: usize, len: usize) -> Result<Residency> {
        let mut arg = DrmMsvmResidency {
            addr: addr as u64,
            length: len as u64,
            ..Default::default()
        };
        self.residency_raw(&mut arg)?;
        let preferred = match arg.location {
            abi::MSVM_LOC_SYSTEM => Place::System,
            abi::MSVM_LOC_DEVICE => Place::Device(arg.device),
            _ => Place::Default,
        };
        Ok(Residency {
            system: arg.system,
            none: arg.none,
            devices: arg.devices,
            pinned: arg.pinned,
            replicas: arg.replicas,
            attributes: Attributes {
                preferred,
                access: if arg.access == abi::MSVM_ACCESS_IN_PLACE {
                    Access::InPlace
                } else {
                    Access::Migrate
                },
                thrash: arg.attr_flags & abi::MSVM_ATTR_THRASH_OFF == 0,
                counters: arg.attr_flags & abi::MSVM_ATTR_ACCESS_OFF == 0,
                read_mostly: arg.attr_flags & abi::MSVM_ATTR_READ_MOSTLY != 0,
            },
            mixed: arg.attr_flags & abi::MSVM_ATTR_MIXED != 0,
        })
    }

    /// The device's counters.
    pub fn stats(&self) -> Result<Stats> {
        let mut arg = DrmMsvmStats::default();
        // SAFETY: `arg` is a valid, exclusively borrowed argument.
        unsafe { abi::drm_ioctl_msvm_stats(self.file.as_raw_fd(), &mut arg) }
            .map(drop)
            .map_err(|errno| Error::Ioctl {
                node: self.path.clone(),
                op: "STATS",
                errno,
            })?;
        Ok(arg)
    }
}

/// The minor number in `renderD<minor>`, for sorting.
fn node_minor(p: &Path) -> u32 {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("renderD"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addr_round_trip() {
        let a = PciAddr::from_abi(1, (0x3a << 8) | (0x1f << 3) | 7);
        assert_eq!(
            a,
            PciAddr {
                domain: 1,
                bus: 0x3a,
                device: 0x1f,
                function: 7
            }
        );
        assert_eq!(a.to_string(), "0001:3a:1f.7");
    }

    #[test]
    fn node_minor_sorts_numerically() {
        let mut v = [
            PathBuf::from("/dev/dri/renderD130"),
            PathBuf::from("/dev/dri/renderD128"),
            PathBuf::from("/dev/dri/renderD1000"),
        ];
        v.sort_by_key(|p| node_minor(p));
        assert_eq!(v[0], Path::new("/dev/dri/renderD128"));
        assert_eq!(v[2], Path::new("/dev/dri/renderD1000"));
    }

    #[test]
    fn checksum_is_fnv1a_64() {
        // Reference values of FNV-1a 64.
        assert_eq!(checksum(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(checksum(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(checksum(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn open_missing_node_is_typed() {
        let err = Device::open("/nonexistent/renderD999").unwrap_err();
        assert!(matches!(err, Error::Open { .. }), "{err}");
    }
}
