// SPDX-License-Identifier: GPL-2.0

//! Decoding and checking the ioctl arguments, and encoding what goes back:
//! pure functions of the uAPI structs, KUnit-tested.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;

use crate::engine::{Job, Op, Pattern};
use crate::migrate::Direction;
use crate::mm::abi::{
    drm_msvm_exec, drm_msvm_migrate, drm_msvm_peer, drm_msvm_query, drm_msvm_set_attr,
    MSVM_ACCESS_DEFAULT, MSVM_ACCESS_IN_PLACE, MSVM_ACCESS_MIGRATE, MSVM_ATTR_ACCESS_OFF,
    MSVM_ATTR_READ_MOSTLY, MSVM_ATTR_THRASH_OFF, MSVM_EXEC_ATOMIC_ADD, MSVM_EXEC_CHECKSUM,
    MSVM_EXEC_COPY, MSVM_EXEC_FILL, MSVM_EXEC_IN_PLACE, MSVM_LOC_DEFAULT, MSVM_LOC_DEVICE,
    MSVM_LOC_SYSTEM, MSVM_MIGRATE_TO_DEVICE, MSVM_MIGRATE_TO_SYSTEM, MSVM_PEER_ACS_REDIRECT,
    MSVM_PEER_BUS_ADDR, MSVM_PEER_COMMON_SWITCH, MSVM_PEER_HOST_BRIDGE, MSVM_PEER_P2P,
    MSVM_QUERY_SELF,
};
use crate::mm::pagemap::PAGE_SIZE;
use crate::mm::pci::P2pPath;
use crate::placement::{Access, Location, Placement};
use crate::svm::USER_END;
use crate::topology::{Peer, MAX_DEVICES};

/// Size of one `drm_msvm_peer`.
pub(super) const PEER_SIZE: usize = core::mem::size_of::<drm_msvm_peer>();

/// A checked QUERY request.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct QueryRequest {
    /// Device to describe; `None` for the one the ioctl came through.
    pub(super) device: Option<usize>,
    /// Capacity of the user's peer array, in elements.
    pub(super) capacity: usize,
    /// Address of the user's peer array.
    pub(super) peers_ptr: usize,
}

impl QueryRequest {
    pub(super) fn decode(arg: &drm_msvm_query) -> Result<Self> {
        all_zero(
            &[
                arg.flags.into(),
                arg.pad.into(),
                arg.owner_group.into(),
                arg.pad2.into(),
            ],
            &arg.reserved,
        )?;
        let device = match arg.device {
            MSVM_QUERY_SELF => None,
            d if usize::from_safe_cast(d) < MAX_DEVICES => Some(usize::from_safe_cast(d)),
            _ => return Err(EINVAL),
        };
        let capacity = usize::from_safe_cast(arg.num_peers);
        if capacity != 0 && usize::from_safe_cast(arg.peer_size) != PEER_SIZE {
            return Err(EINVAL);
        }
        Ok(Self {
            device,
            capacity,
            peers_ptr: usize::try_from(arg.peers_ptr).map_err(|_| EFAULT)?,
        })
    }
}

/// The user-space record of one peer.
pub(super) fn encode_peer(p: &Peer) -> [u8; PEER_SIZE] {
    let (distance, p2p) = match p.link.distance {
        Some(d) => (i32::try_from(d).unwrap_or(i32::MAX), MSVM_PEER_P2P),
        None => (-1, 0),
    };
    let path = match p.link.path {
        P2pPath::Bus => MSVM_PEER_BUS_ADDR,
        P2pPath::HostBridge => MSVM_PEER_HOST_BRIDGE,
        P2pPath::None => 0,
    };
    let why = if p.link.why.common_bridge {
        MSVM_PEER_COMMON_SWITCH
    } else {
        0
    } | if p.link.why.acs_redirect {
        MSVM_PEER_ACS_REDIRECT
    } else {
        0
    };
    let flags = p2p | path | why;
    // CAST: a topology index, below `MAX_DEVICES` (a `u32`).
    let index = p.index as u32;
    let mut out = [0u8; PEER_SIZE];
    out[0..4].copy_from_slice(&index.to_ne_bytes());
    out[4..8].copy_from_slice(&distance.to_ne_bytes());
    out[8..12].copy_from_slice(&flags.to_ne_bytes());
    out
}

/// Fails with `EINVAL` unless every flag, padding and reserved field given
/// is zero.
pub(super) fn all_zero(fields: &[u64], reserved: &[u64]) -> Result {
    if fields.iter().any(|&v| v != 0) || reserved.iter().any(|&v| v != 0) {
        return Err(EINVAL);
    }
    Ok(())
}

/// A checked MIGRATE request.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct MigrateRequest {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) dir: Direction,
}

impl MigrateRequest {
    pub(super) fn decode(arg: &drm_msvm_migrate) -> Result<Self> {
        all_zero(&[arg.flags.into()], &arg.reserved)?;
        let (start, len) = page_range(arg.addr, arg.length)?;
        let dir = match arg.to {
            MSVM_MIGRATE_TO_DEVICE => Direction::ToDevice,
            MSVM_MIGRATE_TO_SYSTEM => Direction::ToSystem,
            _ => return Err(EINVAL),
        };
        Ok(Self { start, len, dir })
    }
}

/// Checks a page-aligned, non-empty range within user space: `EINVAL` for
/// misalignment, zero length or wrap-around, `EFAULT` beyond user space.
/// Returns `(start, len)`.
pub(super) fn page_range(addr: u64, length: u64) -> Result<(usize, usize)> {
    let page = u64::from_safe_cast(PAGE_SIZE);
    if addr % page != 0 || length % page != 0 || length == 0 {
        return Err(EINVAL);
    }
    let end = addr.checked_add(length).ok_or(EINVAL)?;
    if end > USER_END {
        return Err(EFAULT);
    }
    Ok((user_usize(addr)?, user_usize(length)?))
}

/// An address or length already checked to be within user space, as a
/// `usize`: `EFAULT`, as for one beyond user space, should it not fit
/// (never on a 64-bit kernel, where user space ends at `USER_END`, 2^47).
fn user_usize(v: u64) -> Result<usize> {
    usize::try_from(v).map_err(|_| EFAULT)
}

/// Decodes a uAPI location: `EINVAL` for an unknown kind, or a device
/// index given with a kind that takes none. `here` stands for
/// `MSVM_QUERY_SELF`.
pub(super) fn decode_location(location: u32, device: u32, here: usize) -> Result<Location> {
    match location {
        MSVM_LOC_DEFAULT | MSVM_LOC_SYSTEM if device != 0 => Err(EINVAL),
        MSVM_LOC_DEFAULT => Ok(Location::Default),
        MSVM_LOC_SYSTEM => Ok(Location::System),
        MSVM_LOC_DEVICE if device == MSVM_QUERY_SELF => Ok(Location::Device(here)),
        MSVM_LOC_DEVICE if usize::from_safe_cast(device) >= MAX_DEVICES => Err(ENOENT),
        MSVM_LOC_DEVICE => Ok(Location::Device(usize::from_safe_cast(device))),
        _ => Err(EINVAL),
    }
}

/// Encodes a location as `(location, device)`.
pub(super) fn encode_location(loc: Location) -> (u32, u32) {
    match loc {
        Location::Default => (MSVM_LOC_DEFAULT, 0),
        Location::System => (MSVM_LOC_SYSTEM, 0),
        // CAST: a device index, below `MAX_DEVICES` (a `u32`; see `decode_location`).
        Location::Device(i) => (MSVM_LOC_DEVICE, i as u32),
    }
}

/// A checked SET_ATTR request.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct AttrRequest {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) placement: Placement,
}

impl AttrRequest {
    pub(super) fn decode(arg: &drm_msvm_set_attr, here: usize) -> Result<Self> {
        if arg.flags & !(MSVM_ATTR_THRASH_OFF | MSVM_ATTR_ACCESS_OFF | MSVM_ATTR_READ_MOSTLY) != 0 {
            return Err(EINVAL);
        }
        all_zero(&[], &arg.reserved)?;
        let (start, len) = page_range(arg.addr, arg.length)?;
        let preferred = decode_location(arg.location, arg.device, here)?;
        let access = match arg.access {
            MSVM_ACCESS_DEFAULT | MSVM_ACCESS_MIGRATE => Access::Migrate,
            MSVM_ACCESS_IN_PLACE => Access::InPlace,
            _ => return Err(EINVAL),
        };
        Ok(Self {
            start,
            len,
            placement: Placement {
                preferred,
                access,
                thrash: arg.flags & MSVM_ATTR_THRASH_OFF == 0,
                counters: arg.flags & MSVM_ATTR_ACCESS_OFF == 0,
                read_mostly: arg.flags & MSVM_ATTR_READ_MOSTLY != 0,
            },
        })
    }
}

/// Decodes and checks an EXEC request; `read` reads a FILL's pattern of
/// `n` bytes at user address `src` into the slice it is given.
pub(super) fn decode_exec(
    arg: &drm_msvm_exec,
    read: impl FnOnce(usize, &mut [u8]) -> Result,
) -> Result<Job> {
    if arg.flags & !MSVM_EXEC_IN_PLACE != 0 || arg.pad != 0 || arg.reserved.iter().any(|&r| r != 0)
    {
        return Err(EINVAL);
    }
    if arg.length == 0 {
        return Err(EINVAL);
    }
    if arg.op == MSVM_EXEC_ATOMIC_ADD && (arg.addr % 8 != 0 || arg.length % 8 != 0) {
        return Err(EINVAL);
    }
    if arg.pattern_size != 0 && arg.op != MSVM_EXEC_FILL {
        return Err(EINVAL);
    }
    let end = arg.addr.checked_add(arg.length).ok_or(EINVAL)?;
    if end > USER_END {
        return Err(EFAULT);
    }
    let op = match arg.op {
        MSVM_EXEC_FILL if arg.pattern_size == 0 => Op::Fill(Pattern::word(arg.value)),
        MSVM_EXEC_FILL => {
            if arg.value != 0 {
                return Err(EINVAL);
            }
            let src = user_usize(arg.src)?;
            Op::Fill(Pattern::read(
                usize::from_safe_cast(arg.pattern_size),
                |buf| read(src, buf),
            )?)
        }
        MSVM_EXEC_ATOMIC_ADD => Op::AtomicAdd(arg.value),
        MSVM_EXEC_CHECKSUM => Op::Checksum,
        MSVM_EXEC_COPY => {
            let send = arg.src.checked_add(arg.length).ok_or(EINVAL)?;
            if send > USER_END {
                return Err(EFAULT);
            }
            if arg.src < end && arg.addr < send {
                return Err(EINVAL);
            }
            Op::Copy {
                src: user_usize(arg.src)?,
            }
        }
        _ => return Err(EINVAL),
    };
    if !matches!(op, Op::Copy { .. }) && arg.pattern_size == 0 && arg.src != 0 {
        return Err(EINVAL);
    }
    if matches!(op, Op::Checksum | Op::Copy { .. }) && arg.value != 0 {
        return Err(EINVAL);
    }
    Ok(Job {
        op,
        addr: user_usize(arg.addr)?,
        len: user_usize(arg.length)?,
        in_place: arg.flags & MSVM_EXEC_IN_PLACE != 0,
    })
}

mod kunit;
