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
    MSVM_LOC_SYSTEM, MSVM_MIGRATE_TO_DEVICE, MSVM_MIGRATE_TO_SYSTEM, MSVM_PEER_P2P,
    MSVM_QUERY_SELF,
};
use crate::mm::pagemap::PAGE_SIZE;
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
    let (distance, flags) = match p.distance {
        Some(d) => (i32::try_from(d).unwrap_or(i32::MAX), MSVM_PEER_P2P),
        None => (-1, 0),
    };
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

#[kunit_tests(msvm_uapi)]
mod tests {
    use super::*;
    // `Location` would name the panic location type in test code.
    use crate::placement::Location as Loc;

    fn valid() -> drm_msvm_query {
        drm_msvm_query {
            device: MSVM_QUERY_SELF,
            peer_size: PEER_SIZE as u32,
            num_peers: 4,
            peers_ptr: 0x1000,
            ..Default::default()
        }
    }

    #[test]
    fn decode_accepts_self_and_indices() -> Result {
        assert_eq!(
            QueryRequest::decode(&valid())?,
            QueryRequest {
                device: None,
                capacity: 4,
                peers_ptr: 0x1000
            }
        );
        let q = drm_msvm_query {
            device: (MAX_DEVICES - 1) as u32,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q)?.device, Some(MAX_DEVICES - 1));
        Ok(())
    }

    #[test]
    fn decode_rejects_out_of_range_index() {
        let q = drm_msvm_query {
            device: MAX_DEVICES as u32,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q), Err(EINVAL));
    }

    #[test]
    fn decode_rejects_non_zero_reserved_fields() {
        assert_eq!(
            QueryRequest::decode(&drm_msvm_query {
                flags: 1,
                ..valid()
            }),
            Err(EINVAL)
        );
        assert_eq!(
            QueryRequest::decode(&drm_msvm_query { pad: 1, ..valid() }),
            Err(EINVAL)
        );
        let mut q = valid();
        q.reserved[2] = 1;
        assert_eq!(QueryRequest::decode(&q), Err(EINVAL));
    }

    #[test]
    fn decode_checks_peer_size_only_with_peers() -> Result {
        let q = drm_msvm_query {
            peer_size: 8,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q), Err(EINVAL));
        let q = drm_msvm_query {
            peer_size: 8,
            num_peers: 0,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q)?.capacity, 0);
        Ok(())
    }

    #[test]
    fn peer_record_layout() {
        let r = encode_peer(&Peer {
            index: 3,
            distance: Some(4),
        });
        assert_eq!(r[0..4], 3u32.to_ne_bytes());
        assert_eq!(r[4..8], 4i32.to_ne_bytes());
        assert_eq!(r[8..12], MSVM_PEER_P2P.to_ne_bytes());
        assert_eq!(r[12..16], [0u8; 4]);
        let r = encode_peer(&Peer {
            index: 1,
            distance: None,
        });
        assert_eq!(r[4..8], (-1i32).to_ne_bytes());
        assert_eq!(r[8..12], 0u32.to_ne_bytes());
        // The record is exactly the C struct.
        assert_eq!(PEER_SIZE, 16);
    }

    fn mig(addr: u64, length: u64, to: u32) -> drm_msvm_migrate {
        drm_msvm_migrate {
            addr,
            length,
            to,
            ..Default::default()
        }
    }

    #[test]
    fn migrate_decode_accepts_aligned_ranges() -> Result {
        let r = MigrateRequest::decode(&mig(0x10000, 0x2000, MSVM_MIGRATE_TO_DEVICE))?;
        assert_eq!(
            r,
            MigrateRequest {
                start: 0x10000,
                len: 0x2000,
                dir: Direction::ToDevice
            }
        );
        let r = MigrateRequest::decode(&mig(0x10000, 0x1000, MSVM_MIGRATE_TO_SYSTEM))?;
        assert_eq!(r.dir, Direction::ToSystem);
        Ok(())
    }

    #[test]
    fn migrate_decode_rejects_bad_ranges() {
        assert_eq!(
            MigrateRequest::decode(&mig(0x10001, 0x1000, 1)),
            Err(EINVAL)
        );
        assert_eq!(
            MigrateRequest::decode(&mig(0x10000, 0x1001, 1)),
            Err(EINVAL)
        );
        assert_eq!(MigrateRequest::decode(&mig(0x10000, 0, 1)), Err(EINVAL));
        assert_eq!(MigrateRequest::decode(&mig(!0xfff, 0x2000, 1)), Err(EINVAL));
        assert_eq!(
            MigrateRequest::decode(&mig(USER_END - 0x1000, 0x2000, 1)),
            Err(EFAULT)
        );
        assert_eq!(
            MigrateRequest::decode(&mig(0xffff_8880_0000_0000, 0x1000, 1)),
            Err(EFAULT)
        );
    }

    fn attr(location: u32, device: u32, access: u32) -> drm_msvm_set_attr {
        drm_msvm_set_attr {
            addr: 0x10000,
            length: 0x4000,
            location,
            device,
            access,
            flags: 0,
            reserved: [0; 2],
        }
    }

    #[test]
    fn attr_decode_locations_and_access() -> Result {
        let r = AttrRequest::decode(&attr(MSVM_LOC_SYSTEM, 0, MSVM_ACCESS_IN_PLACE), 3)?;
        assert_eq!((r.start, r.len), (0x10000, 0x4000));
        assert_eq!(
            r.placement,
            Placement {
                preferred: Loc::System,
                access: Access::InPlace,
                thrash: true,
                counters: true,
                read_mostly: false,
            }
        );
        let r = AttrRequest::decode(&attr(MSVM_LOC_DEVICE, MSVM_QUERY_SELF, 0), 3)?;
        assert_eq!(r.placement.preferred, Loc::Device(3));
        assert_eq!(r.placement.access, Access::Migrate);
        let r = AttrRequest::decode(&attr(MSVM_LOC_DEVICE, 1, MSVM_ACCESS_MIGRATE), 3)?;
        assert_eq!(r.placement.preferred, Loc::Device(1));
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_DEFAULT, 0, 0), 0)?.placement,
            Placement::DEFAULT
        );
        // Thrashing detection off: a placement of its own, not the default.
        let mut a = attr(MSVM_LOC_DEFAULT, 0, 0);
        a.flags = MSVM_ATTR_THRASH_OFF;
        let p = AttrRequest::decode(&a, 0)?.placement;
        assert!(!p.thrash && p.counters && p != Placement::DEFAULT);
        // So are the access counters off, and both.
        a.flags = MSVM_ATTR_ACCESS_OFF;
        let p = AttrRequest::decode(&a, 0)?.placement;
        assert!(p.thrash && !p.counters && p != Placement::DEFAULT);
        a.flags = MSVM_ATTR_ACCESS_OFF | MSVM_ATTR_THRASH_OFF;
        let p = AttrRequest::decode(&a, 0)?.placement;
        assert!(!p.thrash && !p.counters);
        a.flags = MSVM_ATTR_READ_MOSTLY;
        let p = AttrRequest::decode(&a, 0)?.placement;
        assert!(p.read_mostly && p.thrash && p.counters && p != Placement::DEFAULT);
        Ok(())
    }

    #[test]
    fn attr_decode_rejects_bad_input() {
        // A device index with a location that takes none.
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_SYSTEM, 1, 0), 0),
            Err(EINVAL)
        );
        assert_eq!(AttrRequest::decode(&attr(7, 0, 0), 0), Err(EINVAL));
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_SYSTEM, 0, 3), 0),
            Err(EINVAL)
        );
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_DEVICE, MAX_DEVICES as u32, 0), 0),
            Err(ENOENT)
        );
        for flags in [1, 16, 1 << 31] {
            let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
            a.flags = flags | MSVM_ATTR_THRASH_OFF;
            assert_eq!(AttrRequest::decode(&a, 0), Err(EINVAL));
        }
        let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
        a.reserved[1] = 1;
        assert_eq!(AttrRequest::decode(&a, 0), Err(EINVAL));
        let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
        a.addr = 0x10800;
        assert_eq!(AttrRequest::decode(&a, 0), Err(EINVAL));
        let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
        a.addr = USER_END;
        assert_eq!(AttrRequest::decode(&a, 0), Err(EFAULT));
    }

    #[test]
    fn location_round_trip() -> Result {
        for loc in [Loc::Default, Loc::System, Loc::Device(5)] {
            let (l, d) = encode_location(loc);
            assert_eq!(decode_location(l, d, 0)?, loc);
        }
        Ok(())
    }

    #[test]
    fn migrate_decode_rejects_bad_fields() {
        assert_eq!(
            MigrateRequest::decode(&mig(0x10000, 0x1000, 2)),
            Err(EINVAL)
        );
        let mut m = mig(0x10000, 0x1000, 1);
        m.flags = 1;
        assert_eq!(MigrateRequest::decode(&m), Err(EINVAL));
        let mut m = mig(0x10000, 0x1000, 1);
        m.reserved[1] = 1;
        assert_eq!(MigrateRequest::decode(&m), Err(EINVAL));
    }

    fn ex(op: u32, addr: u64, length: u64) -> drm_msvm_exec {
        drm_msvm_exec {
            op,
            addr,
            length,
            ..Default::default()
        }
    }

    /// Decodes `arg` where no pattern can be read.
    fn dec(arg: &drm_msvm_exec) -> Result<Job> {
        decode_exec(arg, |_, _| Err(EFAULT))
    }

    #[test]
    fn exec_decode_ops() -> Result {
        let j = dec(&drm_msvm_exec {
            value: 7,
            ..ex(MSVM_EXEC_FILL, 0x1000, 64)
        })?;
        assert_eq!(
            j,
            Job {
                op: Op::Fill(Pattern::word(7)),
                addr: 0x1000,
                len: 64,
                in_place: false
            }
        );
        let j = dec(&drm_msvm_exec {
            src: 0x9000,
            ..ex(MSVM_EXEC_COPY, 0x1000, 0x100)
        })?;
        assert_eq!(j.op, Op::Copy { src: 0x9000 });
        let j = dec(&drm_msvm_exec {
            flags: MSVM_EXEC_IN_PLACE,
            ..ex(MSVM_EXEC_CHECKSUM, 8, 8)
        })?;
        assert!(j.in_place);
        // Any bytes for FILL, COPY and CHECKSUM (ABI version 17).
        let j = dec(&drm_msvm_exec {
            src: 0x9003,
            ..ex(MSVM_EXEC_COPY, 0x1001, 3)
        })?;
        assert_eq!((j.addr, j.len, j.op), (0x1001, 3, Op::Copy { src: 0x9003 }));
        assert_eq!(dec(&ex(MSVM_EXEC_CHECKSUM, 0x1005, 1))?.len, 1);
        assert_eq!(dec(&ex(MSVM_EXEC_FILL, 0x1004, 12))?.addr, 0x1004);
        Ok(())
    }

    #[test]
    fn exec_decode_reads_patterns() -> Result {
        for n in [1u32, 2, 3, 64, 128] {
            let mut asked = (0, 0);
            let j = decode_exec(
                &drm_msvm_exec {
                    src: 0x7000,
                    pattern_size: n,
                    ..ex(MSVM_EXEC_FILL, 0x1001, 300)
                },
                |src, buf| {
                    asked = (src, buf.len());
                    for (i, b) in buf.iter_mut().enumerate() {
                        // CAST: `i` < 128.
                        *b = i as u8 + 1;
                    }
                    Ok(())
                },
            )?;
            // CAST: `n` <= 128.
            assert_eq!(asked, (0x7000, n as usize));
            // CAST: as above.
            let want = Pattern::read(n as usize, |buf| {
                for (i, b) in buf.iter_mut().enumerate() {
                    // CAST: `i` < 128.
                    *b = i as u8 + 1;
                }
                Ok(())
            })?;
            assert_eq!(j.op, Op::Fill(want));
        }
        // Too long, not readable, with a value, for another operation.
        let pat = |n, op| drm_msvm_exec {
            src: 0x7000,
            pattern_size: n,
            ..ex(op, 0x1000, 8)
        };
        assert_eq!(
            decode_exec(&pat(129, MSVM_EXEC_FILL), |_, _| Ok(())),
            Err(EINVAL)
        );
        assert_eq!(dec(&pat(4, MSVM_EXEC_FILL)), Err(EFAULT));
        let with_value = drm_msvm_exec {
            value: 1,
            ..pat(4, MSVM_EXEC_FILL)
        };
        assert_eq!(decode_exec(&with_value, |_, _| Ok(())), Err(EINVAL));
        for op in [MSVM_EXEC_COPY, MSVM_EXEC_CHECKSUM, MSVM_EXEC_ATOMIC_ADD] {
            assert_eq!(decode_exec(&pat(4, op), |_, _| Ok(())), Err(EINVAL));
        }
        Ok(())
    }

    #[test]
    fn exec_decode_rejects_bad_input() {
        assert_eq!(dec(&ex(0, 0x1000, 8)), Err(EINVAL));
        assert_eq!(dec(&ex(9, 0x1000, 8)), Err(EINVAL));
        assert_eq!(dec(&ex(MSVM_EXEC_ATOMIC_ADD, 0x1004, 8)), Err(EINVAL));
        assert_eq!(dec(&ex(MSVM_EXEC_ATOMIC_ADD, 0x1000, 12)), Err(EINVAL));
        assert_eq!(dec(&ex(MSVM_EXEC_FILL, 0x1000, 0)), Err(EINVAL));
        assert_eq!(dec(&ex(MSVM_EXEC_FILL, USER_END - 8, 16)), Err(EFAULT));
        assert_eq!(
            dec(&drm_msvm_exec {
                flags: 2,
                ..ex(MSVM_EXEC_FILL, 8, 8)
            }),
            Err(EINVAL)
        );
        assert_eq!(
            dec(&drm_msvm_exec {
                pad: 1,
                ..ex(MSVM_EXEC_FILL, 8, 8)
            }),
            Err(EINVAL)
        );
        // Overlapping copy, and stray arguments.
        assert_eq!(
            dec(&drm_msvm_exec {
                src: 0x1800,
                ..ex(MSVM_EXEC_COPY, 0x1000, 0x1000)
            }),
            Err(EINVAL)
        );
        assert_eq!(
            dec(&drm_msvm_exec {
                src: 8,
                ..ex(MSVM_EXEC_FILL, 0x1000, 8)
            }),
            Err(EINVAL)
        );
        assert_eq!(
            dec(&drm_msvm_exec {
                value: 1,
                ..ex(MSVM_EXEC_CHECKSUM, 0x1000, 8)
            }),
            Err(EINVAL)
        );
    }
}
