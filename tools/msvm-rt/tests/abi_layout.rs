//! The Rust ABI structs against the C header: sizes, field offsets and the
//! ioctl request code, as a C compiler sees `include/uapi/drm/msvm_drm.h`.

use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use msvm_rt::abi::*;

/// Compiles and runs a C program that prints `name value` lines.
fn c_layout() -> Vec<(String, u64)> {
    let top = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::temp_dir().join(format!("msvm-abi-{}", std::process::id()));
    let src = out.with_extension("c");
    let fields = |s: &str, fs: &[&str]| -> String {
        let mut c = format!("P(\"{s}.size\", sizeof(struct {s}));\n");
        for f in fs {
            c += &format!("P(\"{s}.{f}\", offsetof(struct {s}, {f}));\n");
        }
        c
    };
    let body = fields("drm_msvm_peer", &["index", "distance", "flags", "pad"])
        + &fields("drm_msvm_vm_create", &["flags", "pad", "reserved"])
        + &fields("drm_msvm_vm_destroy", &["flags", "pad", "reserved"])
        + &fields(
            "drm_msvm_migrate",
            &[
                "addr", "length", "to", "flags", "moved", "already", "busy", "no_vram", "reserved",
            ],
        )
        + &fields(
            "drm_msvm_stats",
            &[
                "to_device",
                "to_system",
                "cpu_faults",
                "evicted",
                "resident",
                "no_vram",
                "chunks_live",
                "chunks_created",
                "vram_size",
                "chunk_size",
                "engine_vram_read",
                "engine_vram_written",
                "engine_sys_read",
                "engine_sys_written",
                "engine_p2p_read",
                "engine_p2p_written",
                "from_peer",
                "chunks_cached",
                "memmap_bytes",
                "chunks_destroyed",
                "shrink_scans",
                "shrink_freed",
                "shrink_moved",
                "shrink_home",
                "peer_read",
                "peer_written",
                "large_to_device",
                "large_to_system",
                "large_fallback",
                "phase_steps",
                "phase_collect_us",
                "phase_alloc_us",
                "phase_copy_us",
                "phase_install_us",
                "job_count",
                "job_place_us",
                "job_walk_us",
                "job_bind_us",
                "job_exec_us",
                "evict_blocks",
                "evict_pages",
                "evict_demoted",
                "thrash_detected",
                "thrash_pinned",
                "thrash_unpinned",
                "thrash_avoided",
                "access_counted",
                "access_due",
                "access_moved",
                "replica_copied",
                "replica_hits",
                "replica_blocks",
                "replica_dropped",
                "cgroup_bytes",
                "cgroup_limited",
                "pt_hits",
                "pt_faults",
                "pt_bound",
                "pt_invalidations",
                "pt_zapped",
                "pt_zap_ns",
                "pt_bytes",
                "pt_replays",
                "fault_raised",
                "fault_batches",
                "fault_spans",
                "fault_pages",
                "fault_ns",
                "fault_full",
                "fault_own_spans",
                "fault_own_ns",
                "fault_dma_spans",
                "fault_dma_ns",
                "fault_p2p_spans",
                "fault_p2p_ns",
                "pt_tlb_hits",
                "pt_tlb_misses",
                "pt_tlb_invalidations",
                "evict_refaults",
                "reserved",
            ],
        )
        + &fields(
            "drm_msvm_exec",
            &[
                "op",
                "flags",
                "addr",
                "length",
                "src",
                "value",
                "result",
                "migrated",
                "pattern_size",
                "pad",
                "reserved",
            ],
        )
        + &fields(
            "drm_msvm_set_attr",
            &[
                "addr", "length", "location", "device", "access", "flags", "reserved",
            ],
        )
        + &fields(
            "drm_msvm_prefetch",
            &[
                "addr", "length", "location", "device", "flags", "pad", "moved", "already", "busy",
                "no_vram", "reserved",
            ],
        )
        + &fields(
            "drm_msvm_residency",
            &[
                "addr",
                "length",
                "flags",
                "attr_flags",
                "location",
                "device",
                "access",
                "pad",
                "system",
                "none",
                "devices",
                "pinned",
                "replicas",
                "reserved",
            ],
        )
        + &fields(
            "drm_msvm_query",
            &[
                "device",
                "version",
                "index",
                "num_devices",
                "pci_domain",
                "pci_bdf",
                "vram_size",
                "peer_size",
                "num_peers",
                "peers_ptr",
                "flags",
                "pad",
                "owner_group",
                "pad2",
                "reserved",
            ],
        );
    let prog = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <drm.h>\n#include \"msvm_drm.h\"\n\
         #define P(n, v) printf(\"%s %llu\\n\", n, (unsigned long long)(v))\n\
         int main(void) {{\n{body}\
         P(\"DRM_IOCTL_MSVM_QUERY\", DRM_IOCTL_MSVM_QUERY);\n\
         P(\"DRM_IOCTL_MSVM_VM_CREATE\", DRM_IOCTL_MSVM_VM_CREATE);\n\
         P(\"DRM_IOCTL_MSVM_VM_DESTROY\", DRM_IOCTL_MSVM_VM_DESTROY);\n\
         P(\"DRM_IOCTL_MSVM_MIGRATE\", DRM_IOCTL_MSVM_MIGRATE);\n\
         P(\"DRM_IOCTL_MSVM_STATS\", DRM_IOCTL_MSVM_STATS);\n\
         P(\"DRM_IOCTL_MSVM_EXEC\", DRM_IOCTL_MSVM_EXEC);\n\
         P(\"DRM_IOCTL_MSVM_SET_ATTR\", DRM_IOCTL_MSVM_SET_ATTR);\n\
         P(\"DRM_IOCTL_MSVM_PREFETCH\", DRM_IOCTL_MSVM_PREFETCH);\n\
         P(\"DRM_IOCTL_MSVM_RESIDENCY\", DRM_IOCTL_MSVM_RESIDENCY);\n\
         P(\"MSVM_LOC_DEFAULT\", MSVM_LOC_DEFAULT);\n\
         P(\"MSVM_LOC_SYSTEM\", MSVM_LOC_SYSTEM);\n\
         P(\"MSVM_LOC_DEVICE\", MSVM_LOC_DEVICE);\n\
         P(\"MSVM_ACCESS_DEFAULT\", MSVM_ACCESS_DEFAULT);\n\
         P(\"MSVM_ACCESS_MIGRATE\", MSVM_ACCESS_MIGRATE);\n\
         P(\"MSVM_ACCESS_IN_PLACE\", MSVM_ACCESS_IN_PLACE);\n\
         P(\"MSVM_MAX_ATTR_RANGES\", MSVM_MAX_ATTR_RANGES);\n\
         P(\"MSVM_ATTR_MIXED\", MSVM_ATTR_MIXED);\n\
         P(\"MSVM_EXEC_FILL\", MSVM_EXEC_FILL);\n\
         P(\"MSVM_EXEC_COPY\", MSVM_EXEC_COPY);\n\
         P(\"MSVM_EXEC_ATOMIC_ADD\", MSVM_EXEC_ATOMIC_ADD);\n\
         P(\"MSVM_EXEC_CHECKSUM\", MSVM_EXEC_CHECKSUM);\n\
         P(\"MSVM_EXEC_IN_PLACE\", MSVM_EXEC_IN_PLACE);\n\
         P(\"MSVM_EXEC_PATTERN_MAX\", MSVM_EXEC_PATTERN_MAX);\n\
         P(\"MSVM_MIGRATE_TO_SYSTEM\", MSVM_MIGRATE_TO_SYSTEM);\n\
         P(\"MSVM_MIGRATE_TO_DEVICE\", MSVM_MIGRATE_TO_DEVICE);\n\
         P(\"MSVM_UAPI_VERSION\", MSVM_UAPI_VERSION);\n\
         P(\"MSVM_MAX_DEVICES\", MSVM_MAX_DEVICES);\n\
         P(\"MSVM_SIZE_4K\", MSVM_SIZE_4K);\n\
         P(\"MSVM_SIZE_64K\", MSVM_SIZE_64K);\n\
         P(\"MSVM_SIZE_2M\", MSVM_SIZE_2M);\n\
         P(\"MSVM_SIZE_CLASSES\", MSVM_SIZE_CLASSES);\n\
         P(\"MSVM_QUERY_SELF\", MSVM_QUERY_SELF);\n\
         P(\"MSVM_PEER_P2P\", MSVM_PEER_P2P);\n\
         P(\"MSVM_PEER_BUS_ADDR\", MSVM_PEER_BUS_ADDR);\n\
         P(\"MSVM_PEER_HOST_BRIDGE\", MSVM_PEER_HOST_BRIDGE);\n\
         P(\"MSVM_PEER_COMMON_SWITCH\", MSVM_PEER_COMMON_SWITCH);\n\
         P(\"MSVM_PEER_ACS_REDIRECT\", MSVM_PEER_ACS_REDIRECT);\n\
         return 0; }}\n"
    );
    std::fs::write(&src, prog).unwrap();
    let cc = Command::new("cc")
        .arg("-I")
        .arg(top.join("include/uapi/drm"))
        .args(["-I", "/usr/include/libdrm", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc failed (libdrm-dev provides drm.h): {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&out).output().expect("run layout program");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&src);
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (n, v) = l.split_once(' ').unwrap();
            (n.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn layouts_match_the_c_header() {
    let c = c_layout();
    let get = |n: &str| {
        c.iter()
            .find(|(k, _)| k == n)
            .unwrap_or_else(|| panic!("{n}"))
            .1
    };
    macro_rules! same {
        ($ty:ty, $cname:literal, [$($f:ident),*]) => {
            assert_eq!(size_of::<$ty>() as u64, get(concat!($cname, ".size")), "size of {}", $cname);
            $(assert_eq!(offset_of!($ty, $f) as u64, get(concat!($cname, ".", stringify!($f))),
                "{}.{}", $cname, stringify!($f));)*
        };
    }
    same!(DrmMsvmPeer, "drm_msvm_peer", [index, distance, flags, pad]);
    same!(
        DrmMsvmQuery,
        "drm_msvm_query",
        [
            device,
            version,
            index,
            num_devices,
            pci_domain,
            pci_bdf,
            vram_size,
            peer_size,
            num_peers,
            peers_ptr,
            flags,
            pad,
            owner_group,
            pad2,
            reserved
        ]
    );
    same!(
        DrmMsvmVmCreate,
        "drm_msvm_vm_create",
        [flags, pad, reserved]
    );
    same!(
        DrmMsvmVmDestroy,
        "drm_msvm_vm_destroy",
        [flags, pad, reserved]
    );
    same!(
        DrmMsvmMigrate,
        "drm_msvm_migrate",
        [addr, length, to, flags, moved, already, busy, no_vram, reserved]
    );
    same!(
        DrmMsvmStats,
        "drm_msvm_stats",
        [
            to_device,
            to_system,
            cpu_faults,
            evicted,
            resident,
            no_vram,
            chunks_live,
            chunks_created,
            vram_size,
            chunk_size,
            engine_vram_read,
            engine_vram_written,
            engine_sys_read,
            engine_sys_written,
            engine_p2p_read,
            engine_p2p_written,
            from_peer,
            chunks_cached,
            memmap_bytes,
            chunks_destroyed,
            shrink_scans,
            shrink_freed,
            shrink_moved,
            shrink_home,
            peer_read,
            peer_written,
            large_to_device,
            large_to_system,
            large_fallback,
            phase_steps,
            phase_collect_us,
            phase_alloc_us,
            phase_copy_us,
            phase_install_us,
            job_count,
            job_place_us,
            job_walk_us,
            job_bind_us,
            job_exec_us,
            evict_blocks,
            evict_pages,
            evict_demoted,
            thrash_detected,
            thrash_pinned,
            thrash_unpinned,
            thrash_avoided,
            access_counted,
            access_due,
            access_moved,
            replica_copied,
            replica_hits,
            replica_blocks,
            replica_dropped,
            cgroup_bytes,
            cgroup_limited,
            pt_hits,
            pt_faults,
            pt_bound,
            pt_invalidations,
            pt_zapped,
            pt_zap_ns,
            pt_bytes,
            pt_replays,
            fault_raised,
            fault_batches,
            fault_spans,
            fault_pages,
            fault_ns,
            fault_full,
            fault_own_spans,
            fault_own_ns,
            fault_dma_spans,
            fault_dma_ns,
            fault_p2p_spans,
            fault_p2p_ns,
            pt_tlb_hits,
            pt_tlb_misses,
            pt_tlb_invalidations,
            evict_refaults,
            reserved
        ]
    );
    same!(
        DrmMsvmSetAttr,
        "drm_msvm_set_attr",
        [addr, length, location, device, access, flags, reserved]
    );
    same!(
        DrmMsvmPrefetch,
        "drm_msvm_prefetch",
        [addr, length, location, device, flags, pad, moved, already, busy, no_vram, reserved]
    );
    same!(
        DrmMsvmResidency,
        "drm_msvm_residency",
        [
            addr, length, flags, attr_flags, location, device, access, pad, system, none, devices,
            pinned, replicas, reserved
        ]
    );
    same!(
        DrmMsvmExec,
        "drm_msvm_exec",
        [
            op,
            flags,
            addr,
            length,
            src,
            value,
            result,
            migrated,
            pattern_size,
            pad,
            reserved
        ]
    );
    for (name, v) in [
        ("MSVM_EXEC_FILL", MSVM_EXEC_FILL),
        ("MSVM_EXEC_COPY", MSVM_EXEC_COPY),
        ("MSVM_EXEC_ATOMIC_ADD", MSVM_EXEC_ATOMIC_ADD),
        ("MSVM_EXEC_CHECKSUM", MSVM_EXEC_CHECKSUM),
        ("MSVM_EXEC_IN_PLACE", MSVM_EXEC_IN_PLACE),
        ("MSVM_EXEC_PATTERN_MAX", MSVM_EXEC_PATTERN_MAX),
        ("MSVM_LOC_DEFAULT", MSVM_LOC_DEFAULT),
        ("MSVM_LOC_SYSTEM", MSVM_LOC_SYSTEM),
        ("MSVM_LOC_DEVICE", MSVM_LOC_DEVICE),
        ("MSVM_ACCESS_DEFAULT", MSVM_ACCESS_DEFAULT),
        ("MSVM_ACCESS_MIGRATE", MSVM_ACCESS_MIGRATE),
        ("MSVM_ACCESS_IN_PLACE", MSVM_ACCESS_IN_PLACE),
        ("MSVM_MAX_ATTR_RANGES", MSVM_MAX_ATTR_RANGES),
        ("MSVM_ATTR_MIXED", MSVM_ATTR_MIXED),
    ] {
        assert_eq!(u64::from(v), get(name), "{name}");
    }
    for (name, code) in request_codes() {
        assert_eq!(code, get(name), "{name}");
    }
    assert_eq!(
        u64::from(MSVM_MIGRATE_TO_SYSTEM),
        get("MSVM_MIGRATE_TO_SYSTEM")
    );
    assert_eq!(
        u64::from(MSVM_MIGRATE_TO_DEVICE),
        get("MSVM_MIGRATE_TO_DEVICE")
    );
    assert_eq!(u64::from(MSVM_UAPI_VERSION), get("MSVM_UAPI_VERSION"));
    assert_eq!(u64::from(MSVM_MAX_DEVICES), get("MSVM_MAX_DEVICES"));
    for (name, v) in [
        ("MSVM_SIZE_4K", MSVM_SIZE_4K),
        ("MSVM_SIZE_64K", MSVM_SIZE_64K),
        ("MSVM_SIZE_2M", MSVM_SIZE_2M),
        ("MSVM_SIZE_CLASSES", MSVM_SIZE_CLASSES),
    ] {
        assert_eq!(v as u64, get(name), "{name}");
    }
    assert_eq!(u64::from(MSVM_QUERY_SELF), get("MSVM_QUERY_SELF"));
    assert_eq!(u64::from(MSVM_PEER_P2P), get("MSVM_PEER_P2P"));
    assert_eq!(u64::from(MSVM_PEER_BUS_ADDR), get("MSVM_PEER_BUS_ADDR"));
    assert_eq!(
        u64::from(MSVM_PEER_HOST_BRIDGE),
        get("MSVM_PEER_HOST_BRIDGE")
    );
    assert_eq!(
        u64::from(MSVM_PEER_COMMON_SWITCH),
        get("MSVM_PEER_COMMON_SWITCH")
    );
    assert_eq!(
        u64::from(MSVM_PEER_ACS_REDIRECT),
        get("MSVM_PEER_ACS_REDIRECT")
    );
}
