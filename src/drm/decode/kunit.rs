// SPDX-License-Identifier: GPL-2.0

//! The uAPI decoders' KUnit tests.

use kernel::prelude::*;

#[kunit_tests(msvm_uapi)]
mod tests {
    use super::super::*;
    use crate::mm::pci::{P2pLink, P2pWhy};
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
        let bus = P2pLink {
            path: P2pPath::Bus,
            distance: Some(4),
            why: P2pWhy {
                common_bridge: true,
                acs_redirect: false,
            },
        };
        let r = encode_peer(&Peer {
            index: 3,
            link: bus,
        });
        assert_eq!(r[0..4], 3u32.to_ne_bytes());
        assert_eq!(r[4..8], 4i32.to_ne_bytes());
        let flags = MSVM_PEER_P2P | MSVM_PEER_BUS_ADDR | MSVM_PEER_COMMON_SWITCH;
        assert_eq!(r[8..12], flags.to_ne_bytes());
        assert_eq!(r[12..16], [0u8; 4]);
        // ACS redirect below the switch, the host bridge passing P2P.
        let r = encode_peer(&Peer {
            index: 2,
            link: P2pLink {
                path: P2pPath::HostBridge,
                distance: Some(6),
                why: P2pWhy {
                    common_bridge: true,
                    acs_redirect: true,
                },
            },
        });
        let flags = MSVM_PEER_P2P
            | MSVM_PEER_HOST_BRIDGE
            | MSVM_PEER_COMMON_SWITCH
            | MSVM_PEER_ACS_REDIRECT;
        assert_eq!(r[8..12], flags.to_ne_bytes());
        let r = encode_peer(&Peer {
            index: 1,
            link: P2pLink::NONE,
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
