//! Device tests: QUERY against the sysfs oracle, and bad input.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};

use msvm_rt::abi::{self, DrmMsvmPeer, DrmMsvmQuery};
use msvm_rt::{Device, DeviceInfo, Error, P2pPath};
use nix::errno::Errno;

use crate::check;
use crate::harness::{Outcome, Test};
use crate::sysfs::{self, SysGpu};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "every_emulated_gpu_is_bound",
            run: every_emulated_gpu_is_bound,
        },
        Test {
            name: "query_matches_sysfs",
            run: query_matches_sysfs,
        },
        Test {
            name: "indices_are_unique_and_dense",
            run: indices_are_unique_and_dense,
        },
        Test {
            name: "p2p_matrix_matches_pci_topology",
            run: p2p_matrix_matches_pci_topology,
        },
        Test {
            name: "harness_topology_two_peers_one_isolated",
            run: harness_topology,
        },
        Test {
            name: "query_by_index_matches_self",
            run: query_by_index_matches_self,
        },
        Test {
            name: "short_peer_array_is_filled_to_capacity",
            run: short_peer_array,
        },
        Test {
            name: "bad_index_errno",
            run: bad_index_errno,
        },
        Test {
            name: "null_and_kernel_peer_pointers_efault",
            run: bad_pointers_efault,
        },
        Test {
            name: "bad_peer_size_einval",
            run: bad_peer_size_einval,
        },
        Test {
            name: "non_zero_reserved_fields_einval",
            run: reserved_fields_einval,
        },
        Test {
            name: "unknown_ioctl_einval",
            run: unknown_ioctl_einval,
        },
    ]
}

/// Every msvm GPU: sysfs view and QUERY answer, in PCI address order.
fn gpus() -> Result<Vec<(SysGpu, Device, DeviceInfo)>, String> {
    let mut out = Vec::new();
    for g in sysfs::msvm_gpus()? {
        let dev = Device::open(&g.node).map_err(|e| e.to_string())?;
        let info = dev.query().map_err(|e| e.to_string())?;
        out.push((g, dev, info));
    }
    check!(!out.is_empty(), "no msvm devices");
    Ok(out)
}

fn errno_of(r: msvm_rt::Result<()>) -> Option<Errno> {
    r.err().as_ref().and_then(Error::errno)
}

fn expect_errno(what: &str, r: msvm_rt::Result<()>, want: Errno) -> Outcome {
    match errno_of(r) {
        Some(e) if e == want => Ok(()),
        got => Err(format!("{what}: want {want}, got {got:?}")),
    }
}

/// Every ivshmem-plain and msvm-gpu device is bound (an msvm-gpu only
/// once the driver has checked its registers: a device that answers
/// otherwise is refused).
fn every_emulated_gpu_is_bound() -> Outcome {
    let counts = sysfs::emulated_gpu_counts();
    let n: usize = counts.iter().sum();
    let kinds: Vec<String> = sysfs::EMULATED_GPUS
        .iter()
        .zip(counts)
        .map(|((_, _, name), k)| format!("{k} {name}"))
        .collect();
    let bound = sysfs::msvm_gpus()?.len();
    let nodes = Device::render_nodes().map_err(|e| e.to_string())?.len();
    check!(n > 0, "no emulated GPUs in the guest");
    check!(
        bound == n,
        "{bound} of {n} devices ({}) bound to msvm",
        kinds.join(", ")
    );
    check!(nodes == n, "{nodes} msvm render nodes for {n} devices");
    Ok(())
}

fn query_matches_sysfs() -> Outcome {
    let all = gpus()?;
    for (g, _, i) in &all {
        check!(i.version == abi::MSVM_UAPI_VERSION, "version {}", i.version);
        check!(
            i.pci.to_string() == g.addr,
            "pci {} != sysfs {}",
            i.pci,
            g.addr
        );
        check!(
            i.vram_size == g.bar2_size,
            "{}: vram {} != BAR2 {}",
            g.addr,
            i.vram_size,
            g.bar2_size
        );
        check!(
            i.num_devices as usize == all.len(),
            "num_devices {} != {}",
            i.num_devices,
            all.len()
        );
        check!(
            i.peers.len() == all.len() - 1,
            "{} peers for {} devices",
            i.peers.len(),
            all.len()
        );
    }
    Ok(())
}

fn indices_are_unique_and_dense() -> Outcome {
    let all = gpus()?;
    let mut idx: Vec<u32> = all.iter().map(|(_, _, i)| i.index).collect();
    idx.sort();
    let want: Vec<u32> = (0..all.len() as u32).collect();
    check!(idx == want, "indices {idx:?}, want {want:?}");
    Ok(())
}

fn p2p_matrix_matches_pci_topology() -> Outcome {
    let all = gpus()?;
    let by_index: BTreeMap<u32, &SysGpu> = all.iter().map(|(g, _, i)| (i.index, g)).collect();
    let cpu_p2p = sysfs::cpu_passes_p2p();
    for (g, _, i) in &all {
        for p in &i.peers {
            let other = by_index
                .get(&p.index)
                .ok_or(format!("unknown peer {}", p.index))?;
            let want = sysfs::expected_link(other, g, sysfs::acs_redirects, cpu_p2p);
            let path = match want.path {
                sysfs::ExpectedPath::Bus => P2pPath::BusAddr,
                sysfs::ExpectedPath::HostBridge => P2pPath::HostBridge,
                sysfs::ExpectedPath::None => P2pPath::None,
            };
            check!(
                p.distance == want.distance
                    && p.p2p == want.distance.is_some()
                    && p.path == path
                    && p.common_switch == want.common_switch
                    && p.acs_redirect == want.acs_redirect,
                "gpu{} ({}) -> gpu{} ({}): got p2p={} distance={:?} path {} ({}), want {want:?}",
                i.index,
                g.addr,
                p.index,
                other.addr,
                p.p2p,
                p.distance,
                p.path,
                p.why()
            );
        }
    }
    Ok(())
}

/// The harness's default topology (`--gpus sw,sw,rp`): the two GPUs behind
/// the switch reach each other at distance 4, the third reaches nobody.
fn harness_topology() -> Outcome {
    let all = gpus()?;
    check!(all.len() == 3, "want 3 GPUs, have {}", all.len());
    let p2p_pairs: Vec<(u32, u32, Option<u32>)> = all
        .iter()
        .flat_map(|(_, _, i)| {
            i.peers
                .iter()
                .filter(|p| p.p2p)
                .map(|p| (i.index, p.index, p.distance))
        })
        .collect();
    check!(
        p2p_pairs.len() == 2,
        "P2P links {p2p_pairs:?}, want exactly one pair"
    );
    let (a, b, d) = p2p_pairs[0];
    check!(
        p2p_pairs.contains(&(b, a, d)),
        "P2P not symmetric: {p2p_pairs:?}"
    );
    check!(d == Some(4), "distance {d:?} behind one switch, want 4");
    let isolated: Vec<u32> = all
        .iter()
        .map(|(_, _, i)| i.index)
        .filter(|x| *x != a && *x != b)
        .collect();
    check!(isolated.len() == 1, "isolated {isolated:?}");
    // The pair shares an owner group; the isolated device has its own.
    let group = |x: u32| {
        all.iter()
            .find(|(_, _, i)| i.index == x)
            .map(|(_, _, i)| i.owner_group)
    };
    check!(
        group(a) == group(b),
        "P2P pair in groups {:?} and {:?}",
        group(a),
        group(b)
    );
    check!(
        group(isolated[0]) != group(a),
        "isolated device shares the pair's group"
    );
    Ok(())
}

fn query_by_index_matches_self() -> Outcome {
    let all = gpus()?;
    for (_, dev, _) in &all {
        for (_, _, want) in &all {
            let got = dev
                .query_device(Some(want.index))
                .map_err(|e| e.to_string())?;
            check!(
                &got == want,
                "asked gpu{} through {}: {got:?} != {want:?}",
                want.index,
                dev.path().display()
            );
        }
    }
    Ok(())
}

fn short_peer_array() -> Outcome {
    let all = gpus()?;
    let (_, dev, info) = &all[0];
    check!(info.peers.len() >= 2, "need at least 3 devices");
    let canary = DrmMsvmPeer {
        index: 0xdead,
        distance: 77,
        flags: 0xbeef,
        pad: 0x5a5a,
    };
    let mut peers = [canary; 2];
    let mut q = DrmMsvmQuery {
        device: abi::MSVM_QUERY_SELF,
        peer_size: size_of::<DrmMsvmPeer>() as u32,
        num_peers: 1,
        peers_ptr: peers.as_mut_ptr() as u64,
        ..Default::default()
    };
    dev.query_raw(&mut q).map_err(|e| e.to_string())?;
    check!(
        q.num_peers as usize == info.peers.len(),
        "num_peers {} out",
        q.num_peers
    );
    check!(
        peers[0] != canary && peers[0].index == info.peers[0].index,
        "first entry {:?}",
        peers[0]
    );
    check!(peers[0].pad == 0, "padding not zeroed: {:?}", peers[0]);
    check!(
        peers[1] == canary,
        "wrote past the capacity: {:?}",
        peers[1]
    );
    Ok(())
}

fn bad_index_errno() -> Outcome {
    let all = gpus()?;
    let dev = &all[0].1;
    let q = |device| {
        let mut q = DrmMsvmQuery {
            device,
            ..Default::default()
        };
        dev.query_raw(&mut q)
    };
    expect_errno(
        "index MSVM_MAX_DEVICES",
        q(abi::MSVM_MAX_DEVICES),
        Errno::EINVAL,
    )?;
    expect_errno("index 0x7fffffff", q(0x7fff_ffff), Errno::EINVAL)?;
    expect_errno("unbound index", q(abi::MSVM_MAX_DEVICES - 1), Errno::ENOENT)?;
    Ok(())
}

fn bad_pointers_efault() -> Outcome {
    let all = gpus()?;
    let dev = &all[0].1;
    for ptr in [0u64, 0xffff_8880_0000_0000, 0xffff_ffff_ffff_f000, 8] {
        let mut q = DrmMsvmQuery {
            device: abi::MSVM_QUERY_SELF,
            peer_size: size_of::<DrmMsvmPeer>() as u32,
            num_peers: 4,
            peers_ptr: ptr,
            ..Default::default()
        };
        expect_errno(
            &format!("peers_ptr {ptr:#x}"),
            dev.query_raw(&mut q),
            Errno::EFAULT,
        )?;
    }
    Ok(())
}

fn bad_peer_size_einval() -> Outcome {
    let all = gpus()?;
    let dev = &all[0].1;
    let mut peers = [DrmMsvmPeer::default(); 4];
    for size in [0u32, 8, 15, 17, 32, u32::MAX] {
        let mut q = DrmMsvmQuery {
            device: abi::MSVM_QUERY_SELF,
            peer_size: size,
            num_peers: 4,
            peers_ptr: peers.as_mut_ptr() as u64,
            ..Default::default()
        };
        expect_errno(
            &format!("peer_size {size}"),
            dev.query_raw(&mut q),
            Errno::EINVAL,
        )?;
    }
    Ok(())
}

fn reserved_fields_einval() -> Outcome {
    let all = gpus()?;
    let dev = &all[0].1;
    let base = DrmMsvmQuery {
        device: abi::MSVM_QUERY_SELF,
        ..Default::default()
    };
    let mut cases = vec![
        ("flags", DrmMsvmQuery { flags: 1, ..base }),
        (
            "pad",
            DrmMsvmQuery {
                pad: 0x8000_0000,
                ..base
            },
        ),
        (
            "owner_group (output only)",
            DrmMsvmQuery {
                owner_group: 1,
                ..base
            },
        ),
        ("pad2", DrmMsvmQuery { pad2: 1, ..base }),
    ];
    for i in 0..3 {
        let mut q = base;
        q.reserved[i] = 1 << i;
        cases.push(("reserved", q));
    }
    for (what, mut q) in cases {
        expect_errno(what, dev.query_raw(&mut q), Errno::EINVAL)?;
    }
    Ok(())
}

nix::ioctl_readwrite!(
    unknown_ioctl,
    abi::DRM_IOCTL_BASE,
    abi::DRM_COMMAND_BASE + 0x3f,
    DrmMsvmQuery
);

fn unknown_ioctl_einval() -> Outcome {
    let all = gpus()?;
    let dev = &all[0].1;
    let mut q = DrmMsvmQuery::default();
    // SAFETY: `q` is a valid argument of the size encoded in the request.
    let r = unsafe { unknown_ioctl(dev.as_fd().as_raw_fd(), &mut q) };
    check!(r == Err(Errno::EINVAL), "unknown msvm ioctl: {r:?}");
    Ok(())
}
