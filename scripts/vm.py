#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Boot the msvm test guest under QEMU with emulated PCIe GPUs.

The guest is a kernel plus an initramfs (scripts/mkinitramfs.sh). Its /init
runs the guest command named by ``msvm_cmd=`` on the kernel command line,
prints ``MSVM-EXIT: <status>`` and powers off. This harness:

- builds the PCIe topology: GPUs ("sw") behind one PCIe switch, where
  peer-to-peer works, or each on its own root port ("rp"), where it does not;
  or, for the 8-GPU server ("8gpu"), on two NUMA nodes each with its own
  host bridge (pxb-pcie), switch and root port (a guest with host bridges
  of its own has a server's 46-bit physical addresses: Topology.phys_bits);
  every GPU is, with ``--device model`` (the default), an msvm-gpu device:
  a process of its own (``device/``, Documentation/hardware.rst) that QEMU
  attaches over vfio-user, whose BAR2 is its VRAM, with guest RAM shared
  with it; or, with ``--device ivshmem``, an ``ivshmem-plain`` device whose
  BAR2 is its VRAM, backed by its own shared memfd; each on a hot-pluggable
  port; the msvm-gpu devices behind one switch share a switch directory
  (``--switch DIR --port N``), through which the device model routes their
  peer-to-peer requests inside the switch, as a switch without ACS does;
- with ``--iommu intel``, puts a virtual IOMMU (``intel-iommu`` with
  caching mode, which QEMU's vfio-user client needs to hear of the guest's
  mappings) in front of every device: DMA addresses are then IOVAs, which
  QEMU sends each msvm-gpu as ``DMA_MAP``s; the guest's command line picks
  the mode (``intel_iommu=on`` and ``iommu.strict=1`` or ``iommu=pt``);
- with ``--cpu zen``, gives the guest TCG's CPU as an AMD family 0x17
  (Zen) one, whose host bridges Linux's ``pci_p2pdma`` takes as passing
  P2P: GPUs on different root ports then reach each other through the host
  bridge (DMA-mapped), where QEMU's q35 host bridge, on no whitelist,
  passes nothing;
- streams the console to stdout and to a log file;
- keeps a QMP socket, and serves the guest's requests for host actions: a
  console line ``MSVM-HOST: device_del gpuN`` (or ``device_add gpuN``) makes
  the harness unplug (re-plug) that GPU and report when QEMU confirms it;
  ``MSVM-HOST: kill gpuN`` kills that GPU's msvm-gpu process (SIGKILL: the
  device dies under the guest, which QEMU's vfio-user client reports, and
  goes on running);
- enforces a timeout;
- fails the run on any kernel splat (oops, BUG, WARNING, KASAN, lockdep,
  sleeping in atomic context, RCU stall, hung task, kmemleak) in the console;
- exits with the guest command's status (124: timeout, 125: no status).
"""

import argparse
import atexit
import json
import os
import queue
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SPLATS = [
    r"\bBUG[: ]",
    r"WARNING: ",
    r"Oops",
    r"general protection fault",
    r"Kernel panic",
    r"KASAN: ",
    r"UBSAN: ",
    r"kernel BUG at",
    r"possible circular locking dependency",
    r"possible recursive locking",
    r"inconsistent lock state",
    r"suspicious RCU usage",
    r"sleeping function called from invalid context",
    r"rcu: INFO: .* stall",
    r"INFO: task .* blocked for more than",
    r"kmemleak: .* new suspected memory leaks",
    r"unreferenced object 0x",
    r"Call Trace:",
    r"rust_panic",
    r"panicked at",
]
SPLAT_RE = re.compile("|".join(SPLATS))

# Reports of the kernel itself, not of msvm, that a test run may trigger: each
# is recognised by every pattern of its signature being in the report and by
# no msvm frame being in it. They are shown and do not fail the run.
KNOWN_UPSTREAM = [
    (
        "pciehp: lockdep inversion of ctrl->reset_lock and pci_rescan_remove_lock on "
        "hot-unplug (pciehp_unconfigure_device drops and retakes reset_lock under "
        "pci_rescan_remove_lock)",
        [r"possible circular locking dependency", r"pci_rescan_remove_lock",
         r"ctrl->reset_lock", r"pciehp_unconfigure_device"],
    ),
    (
        "early boot under TCG: KASAN wild-memory-access taking an IRQ descriptor's lock "
        "in an interrupt that arrives while start_kernel identifies the boot CPU "
        "(before any module can be loaded; seen once in a small-RAM debug guest)",
        [r"BUG: KASAN: wild-memory-access in do_raw_spin_lock", r"handle_edge_irq",
         r"identify_boot_cpu", r"start_kernel", r"Not tainted"],
    ),
    (
        "test_hmm.ko (C) on a stock 7.3: its release evicts a chunk with "
        "migrate_device_range(), which holds no anon_vma reference, after the process "
        "exited (Documentation/upstream/migrate_device_anon_vma.rst; make hmm-tests, "
        "when a case is killed by its timeout)",
        [r"KASAN: slab-use-after-free in rmap_walk_anon", r"__migrate_device_finalize",
         r"dmirror_device_evict_chunk\+.*\[test_hmm\]", r"dmirror_fops_release"],
    ),
]
REPORT_END_RE = re.compile(r"</TASK>|---\[ end trace|^\[ *[0-9.]+\] *$")


def classify_splats(lines):
    """Splits the splat reports in `lines` into (msvm-or-unknown, known-upstream)
    lists of (first line index, report lines, label)."""
    bad, known = [], []
    i = 0
    while i < len(lines):
        if not SPLAT_RE.search(lines[i]) or "MSVM-" in lines[i]:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and end - i < 150 and not REPORT_END_RE.search(lines[end]):
            end += 1
        # A lockdep or KASAN report has blank-ish lines inside: extend to the
        # trace end.
        if "circular locking" in lines[i] or "lock" in lines[i] or "KASAN" in lines[i]:
            while end < len(lines) and end - i < 150 and "</TASK>" not in lines[end]:
                end += 1
        block = lines[i:end + 1]
        text = "\n".join(block)
        label = None
        if "msvm" not in text:
            for name, pats in KNOWN_UPSTREAM:
                if all(re.search(p, text) for p in pats):
                    label = name
        (known if label else bad).append((i, block, label))
        i = end + 1
    return bad, known
EXIT_RE = re.compile(r"MSVM-EXIT: (-?\d+)")
HOST_RE = re.compile(r"MSVM-HOST: (device_del|device_add|kill) (gpu\d+)")


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


# The 8-GPU server: two NUMA nodes, each with its own PCIe host bridge
# (pxb-pcie), three GPUs behind a switch and one on its own root port.
PRESETS = {"8gpu": "n0:sw,n0:sw,n0:sw,n0:rp,n1:sw,n1:sw,n1:sw,n1:rp"}


class Topology:
    """QEMU arguments for the GPUs and the ports they sit on.

    An entry "sw" or "rp" sits on the main host bridge (pcie.0); "nN:sw" or
    "nN:rp" on NUMA node N's own host bridge (a pxb-pcie with numa_node=N),
    each with its own switch. With any such entry the guest gets one NUMA
    node per host bridge (RAM and vCPUs split evenly)."""

    def __init__(self, spec, vram, prealloc=False, model=None):
        self.args = []
        self.prealloc = prealloc
        # msvm-gpu devices: the Models that serve them, or None for ivshmem.
        self.model = model
        self.gpus = {}  # id -> device_add arguments, for re-plug
        self.switches = {}  # host bridge -> upstream port id
        self.nodes = sorted({int(e.split(":")[0][1:]) for e in spec if re.match(r"n\d+:", e)})
        self.bridges = {None: "pcie.0"}
        if len(self.nodes) > 3:
            raise SystemExit("vm.py: at most 3 NUMA nodes (host bridges' bus numbers 64 apart)")
        for k, n in enumerate(self.nodes):
            # Bus numbers far apart: each host bridge's buses below it.
            self.bridges[n] = f"msvm_pxb{n}"
            self.args += ["-device", f"pxb-pcie,id=msvm_pxb{n},bus_nr={64 * (k + 1)},numa_node={n},bus=pcie.0"]
        chassis = 1
        for i, entry in enumerate(spec):
            # "sw" / "rp": an ivshmem GPU; "nvme:PLACE:CMB_MIB": an NVMe
            # controller (no driver in the guest) with a controller memory
            # buffer of CMB_MIB MiB (0: none) as its prefetchable BAR2, for
            # msvm's generic devices (bound through new_id).
            kind, nvme, node = entry, None, None
            if entry.startswith("nvme:"):
                try:
                    _, kind, cmb = entry.split(":")
                    nvme = int(cmb)
                except ValueError:
                    raise SystemExit(f"vm.py: bad NVMe entry {entry!r} (want nvme:sw|rp:CMB_MIB)")
            elif re.match(r"n\d+:", entry):
                node_s, kind = entry.split(":", 1)
                node = int(node_s[1:])
            bus = self.bridges[node]
            tag = "" if node is None else f"_n{node}"
            if kind == "sw":
                # The switch's root port is not a hotplug slot: the GPUs'
                # downstream ports are. (Nested pciehp slots make lockdep
                # report pciehp's reset_lock against pci_rescan_remove_lock
                # on unplug, a pciehp matter that is not ours.)
                if node not in self.switches:
                    self.args += ["-device", f"pcie-root-port,id=msvm_rp_sw{tag},bus={bus},chassis={chassis},slot=0,port=16,hotplug=off"]
                    chassis += 1
                    self.args += ["-device", f"x3130-upstream,id=msvm_up{tag},bus=msvm_rp_sw{tag}"]
                    self.switches[node] = f"msvm_up{tag}"
                port = f"msvm_dn{i}"
                self.args += ["-device", f"xio3130-downstream,id={port},bus={self.switches[node]},chassis={chassis},slot=0,port={i}"]
            elif kind == "rp":
                port = f"msvm_rp{i}"
                self.args += ["-device", f"pcie-root-port,id={port},bus={bus},chassis={chassis},slot=0,port={17 + i}"]
            else:
                raise SystemExit(f"vm.py: unknown GPU placement {kind!r} (want sw or rp)")
            chassis += 1
            if nvme is not None:
                cmb = f",cmb_size_mb={nvme}" if nvme else ""
                self.args += ["-device", f"nvme,serial=msvm{i},bus={port},id=nvme{i}{cmb}"]
                continue
            if self.model is not None:
                if kind == "sw":
                    self.model.behind_switch(f"gpu{i}", f"switch{tag}")
                dev = {"driver": "vfio-user-pci", "socket": {"type": "unix", "path": self.model.socket(f"gpu{i}")},
                       "bus": port, "id": f"gpu{i}"}
                self.gpus[f"gpu{i}"] = dev
                self.args += ["-device", json.dumps(dev)]
                continue
            pre = ",prealloc=on" if self.prealloc else ""
            self.args += ["-object", f"memory-backend-memfd,id=vram{i},size={vram},share=on{pre}"]
            dev = {"driver": "ivshmem-plain", "memdev": f"vram{i}", "bus": port, "id": f"gpu{i}"}
            self.gpus[f"gpu{i}"] = dev
            self.args += ["-device", ",".join(f"{k}={v}" if k != "driver" else v for k, v in dev.items())]

    def phys_bits(self):
        """The guest's physical address width: a server's 46 bits (Intel's
        Xeons since Skylake-SP) with host bridges of its own, TCG's
        default (40) otherwise.

        With pxb-pcie host bridges, QEMU 11.1's firmware (SeaBIOS 1.17,
        pciinit.c) puts every 64-bit BAR at the top of the space it allows
        PCI, 1 << phys-bits but at most 16 TiB above 44 bits, and QEMU's
        ACPI tables give the main host bridge a _CRS window from the end
        of RAM up to the first pxb-pcie window, wherever that is, whatever
        pci-hole64-size says (acpi-build.c, crs_replace_with_free_ranges).
        With 40 bits that window and theirs cover everything from 4 GiB to
        1 TiB, the top of the guest's physical address space, and
        request_free_mem_region() finds no free range for a device-private
        pagemap (ENOSPC). With 46 bits they end at 16 TiB and the kernel
        takes the pagemaps from the top of the 16 to 64 TiB no host bridge
        claims (Documentation/testing.rst, the 8-GPU boot)."""
        return 46 if self.nodes else None

    def smp_arg(self, smp):
        """-smp: as given, or, with NUMA nodes and a plain CPU count that
        they divide, one socket per node (a package on two nodes makes
        the guest's topology_sane() warn at boot)."""
        n = max(self.nodes) + 1 if self.nodes else 1
        if n == 1 or not smp.isdigit() or int(smp) % n:
            return smp
        return f"{smp},sockets={n},cores={int(smp) // n},threads=1"

    def numa_args(self, mem, smp):
        """The guest's NUMA nodes, if the GPUs name any: RAM split evenly
        between them (node 0 takes what does not divide), a socket of
        vCPUs each (see smp_arg; else vCPUs dealt out in turn)."""
        if not self.nodes:
            return []
        n = max(self.nodes) + 1
        # QEMU reads a -m without a suffix as MiB.
        total = parse_size(mem if mem[-1:].isalpha() else mem + "M")
        cpus = int(smp.split(",")[0])
        per_socket = cpus // n if self.smp_arg(smp) != smp else 0
        args = []
        for k in range(n):
            size = total // n + (total % n if k == 0 else 0)
            pre = ",prealloc=on" if self.prealloc else ""
            # A device process reaches guest RAM through the fds QEMU
            # sends it: RAM is shared memfds then.
            kind = "memory-backend-memfd" if self.model is not None else "memory-backend-ram"
            share = ",share=on" if self.model is not None else ""
            args += ["-object", f"{kind},id=msvm_ram{k},size={size}{share}{pre}"]
            if per_socket:
                mine = range(k * per_socket, (k + 1) * per_socket)
            else:
                mine = [c for c in range(cpus) if c % n == k]
            cpu = "".join(f",cpus={c}" for c in mine)
            args += ["-numa", f"node,nodeid={k},memdev=msvm_ram{k}{cpu}"]
        return args


_LIBC = None
# pidfd_getfd(2): the same number on every architecture.
_SYS_PIDFD_GETFD = 438


def _connected_sockets(pid):
    """Copies of process pid's connected sockets (pidfd_getfd(2): Linux 5.6,
    ptrace access to it: vm.py is its parent)."""
    global _LIBC
    import ctypes
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    out = []
    try:
        for n in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{n}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = _LIBC.syscall(_SYS_PIDFD_GETFD, pidfd, int(n), 0)
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"pidfd_getfd: {os.strerror(err)}")
            s = socket.socket(fileno=fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                s.close()
                continue
            out.append(s)
    finally:
        os.close(pidfd)
    return out


class Model:
    """The msvm-gpu processes: one per GPU, each serving one vfio-user
    socket, started before QEMU connects and again for a re-plug (a device
    process ends when QEMU closes its socket). Their output goes to
    DIR/gpuN.K.log, appended to the console log at the end. A process that
    exits with an error, or has to be killed, fails the run (but one the
    guest asked the harness to kill); any still running when the harness
    exits, however it exits, is killed.

    The GPUs behind one switch share a switch directory (msvm-gpu's
    ``--switch DIR --port N``: its table of ports and each port's VRAM
    file), each on a port of its own, which a re-plugged GPU takes again.
    The directories are on tmpfs (/dev/shm, if there is one: the VRAM files
    are shared memory, as a root port's device's memfd is, not files a disk
    writes back), and go when the harness exits."""

    def __init__(self, binary, tmp, vram):
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"vm.py: no msvm-gpu binary at {binary} (cargo build --release in device/)")
        self.binary = binary
        self.tmp = tmp
        self.vram = vram
        self.procs = []  # (gpu, log, Popen), every process started
        self.current = {}  # gpu -> its current Popen
        self.failed = []  # (gpu, why)
        self.killed = set()  # the Popens killed on the guest's request
        self.ports = {}  # gpu -> (its switch directory, its port), behind a switch
        self.switch_root = None  # where the switch directories are
        atexit.register(self.kill_all)
        # atexit runs on SIGTERM and SIGHUP too, by way of SystemExit.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: sys.exit(143))

    def socket(self, gpu):
        return os.path.join(self.tmp, f"{gpu}.sock")

    def behind_switch(self, gpu, switch):
        """Puts gpu on the next free port of the switch named switch."""
        if self.switch_root is None:
            shm = "/dev/shm"
            self.switch_root = tempfile.mkdtemp(prefix="msvm-switch-",
                                                dir=shm if os.path.isdir(shm) else self.tmp)
        path = os.path.join(self.switch_root, switch)
        port = sum(1 for d, _ in self.ports.values() if d == path)
        if port >= 16:
            raise SystemExit("vm.py: at most 16 GPUs behind a switch (msvm-gpu's --port)")
        self.ports[gpu] = (path, port)

    def _end(self, gpu, p, timeout):
        """Waits for p to end by itself; kills it after timeout s."""
        if p in self.killed:
            return
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            self.failed.append((gpu, f"still running {timeout} s after QEMU let it go: killed"))
            return
        if p.returncode != 0:
            self.failed.append((gpu, f"exited with status {p.returncode}"))

    def start(self, gpu, timeout=30):
        """Starts gpu's process and waits until its socket accepts."""
        old = self.current.get(gpu)
        if old is not None:
            # A process whose device was unplugged ends when QEMU closes
            # the socket.
            self._end(gpu, old, 10)
        path = self.socket(gpu)
        log = os.path.join(self.tmp, f"{gpu}.{len(self.procs)}.log")
        with open(log, "w") as f:
            switch = []
            if gpu in self.ports:
                switch = ["--switch", self.ports[gpu][0], "--port", str(self.ports[gpu][1])]
            p = subprocess.Popen([self.binary, "--socket", path, "--vram", str(self.vram), *switch],
                                 stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.procs.append((gpu, log, p))
        self.current[gpu] = p
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                p.wait()
                self.failed.append((gpu, "did not start"))
                with open(log) as f:
                    raise RuntimeError(f"msvm-gpu for {gpu} did not start: {f.read().strip()}")
            time.sleep(0.01)

    def kill(self, gpu):
        """Kills gpu's current process (the device dies under the guest);
        whether it was running.

        The process is stopped first, and what QEMU sent it and it had not
        read yet is drained from its vfio-user socket (shut for reading:
        QEMU's sends then fail with EPIPE), so that its death reads as the
        socket's end. A Unix socket closed with unread data makes its peer
        read ECONNRESET, on which QEMU 11.1's vfio_user_recv_hdr() sets its
        error twice and aborts (error_setv's assertion); QEMU's requests
        drained go unanswered, as with a bare SIGKILL."""
        p = self.current.get(gpu)
        if p is None or p.poll() is not None:
            return False
        self.killed.add(p)
        os.kill(p.pid, signal.SIGSTOP)
        socks = []
        try:
            socks = _connected_sockets(p.pid)
            for s in socks:
                s.shutdown(socket.SHUT_RD)
                s.setblocking(False)
                try:
                    while s.recv(1 << 16):
                        pass
                except BlockingIOError:
                    pass
        except OSError as e:
            print(f"[vm] host: {gpu}: its socket not drained ({e}): a bare SIGKILL", flush=True)
        p.kill()
        p.wait()
        for s in socks:
            s.close()
        return True

    def stop(self):
        """Waits for the current processes (QEMU has exited: they end by
        themselves)."""
        for gpu, p in self.current.items():
            if p.returncode is None:
                self._end(gpu, p, 5)

    def kill_all(self):
        for _, _, p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.switch_root is not None:
            shutil.rmtree(self.switch_root, ignore_errors=True)

    def report(self):
        """The processes' output, and their failures, as lines."""
        out = []
        for gpu, log, _ in self.procs:
            with open(log) as f:
                for line in f.read().splitlines():
                    out.append(f"[{gpu}] {line}")
        for gpu, why in self.failed:
            out.append(f"[{gpu}] FAIL: msvm-gpu {why}")
        return out


class Qmp:
    """A minimal QMP client: commands and a queue of events."""

    def __init__(self, path, log):
        self.log = log
        self.sock = None
        for _ in range(100):
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                self.sock = s
                break
            except OSError:
                time.sleep(0.05)
        if self.sock is None:
            raise RuntimeError("cannot connect to QMP")
        self.file = self.sock.makefile("rw")
        self.events = []
        self.cond = threading.Condition()
        self.replies = []
        json.loads(self.file.readline())  # greeting
        threading.Thread(target=self._reader, daemon=True).start()
        self.command("qmp_capabilities")

    def _reader(self):
        for line in self.file:
            msg = json.loads(line)
            with self.cond:
                if "event" in msg:
                    self.events.append(msg)
                else:
                    self.replies.append(msg)
                self.cond.notify_all()

    def command(self, name, **args):
        with self.cond:
            self.file.write(json.dumps({"execute": name, "arguments": args}) + "\n")
            self.file.flush()
            self.cond.wait_for(lambda: self.replies, timeout=30)
            if not self.replies:
                raise RuntimeError(f"QMP {name}: no reply")
            reply = self.replies.pop(0)
        if "error" in reply:
            raise RuntimeError(f"QMP {name}: {reply['error'].get('desc')}")
        return reply.get("return")

    def wait_event(self, name, pred, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i, ev in enumerate(self.events):
                    if ev["event"] == name and pred(ev.get("data", {})):
                        return self.events.pop(i)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)


def accel_args(want_kvm, icount=False, phys_bits=None, zen=False):
    """QEMU's accelerator and CPU arguments; phys_bits, if given, is the
    guest's physical address width under TCG (under KVM, -cpu host has the
    host's). zen: under TCG, the CPU says it is an AMD family 0x17 (Zen)
    one (TCG's max CPU is AuthenticAMD, family 6): what Linux's pci_p2pdma
    takes as a CPU whose host bridges pass P2P (cpu_supports_p2pdma())."""
    if want_kvm:
        if zen:
            raise SystemExit("vm.py: --cpu zen needs TCG (under KVM the guest has the host's CPU)")
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            raise SystemExit("vm.py: MSVM_KVM=1 but /dev/kvm is not usable")
        return ["-accel", "kvm", "-cpu", "host"], "kvm"
    cpu = "max" + (f",phys-bits={phys_bits}" if phys_bits else "") + (",family=23" if zen else "")
    if icount:
        # Deterministic: one host thread runs every vCPU, and guest time
        # follows the instructions executed (8 ns each), not the host's
        # clock, so timings repeat from boot to boot.
        return ["-accel", "tcg,thread=single", "-cpu", cpu,
                "-icount", "shift=3,sleep=off"], "tcg-icount"
    return ["-accel", "tcg,thread=multi", "-cpu", cpu], "tcg"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--gpus", default="sw,sw,rp", help="comma-separated placements: sw (behind the shared switch) or rp (own root port), on the main host bridge, or nN:sw / nN:rp on NUMA node N's own host bridge (a pxb-pcie; the guest then has NUMA nodes); nvme:sw|rp:CMB_MIB adds an NVMe controller with a CMB instead of a GPU; 8gpu is the 8-GPU server: n0:sw,n0:sw,n0:sw,n0:rp,n1:sw,n1:sw,n1:sw,n1:rp")
    ap.add_argument("--vram", default="256M", type=parse_size, help="VRAM per GPU (default 256M)")
    ap.add_argument("--device", choices=["model", "ivshmem"], default="model",
                    help="what a GPU is: model, the msvm-gpu device (device/, attached over vfio-user; "
                         "needs a QEMU with vfio-user-pci, MSVM_QEMU), or ivshmem, an ivshmem-plain "
                         "BAR of memory (default model)")
    ap.add_argument("--iommu", choices=["none", "intel"], default="none",
                    help="a virtual IOMMU in front of the devices (default none)")
    ap.add_argument("--cpu", choices=["tcg", "zen"], default="tcg",
                    help="the guest CPU under TCG: QEMU's max (tcg), or the same as an AMD Zen one (zen: "
                         "pci_p2pdma then passes P2P through the host bridge)")
    ap.add_argument("--mem", default="1G", help="guest RAM (default 1G)")
    ap.add_argument("--smp", default="2")
    ap.add_argument("--timeout", default=600, type=float, help="seconds (default 600)")
    ap.add_argument("--log", help="console log file")
    ap.add_argument("--append", default="", help="extra kernel command line")
    ap.add_argument("--cmd", default="shell", help="guest command (msvm_cmd=)")
    ap.add_argument("--quiet", action="store_true", help="do not echo the console")
    ap.add_argument("--prealloc", action="store_true",
                    help="back guest RAM and VRAM with host memory up front (benchmarks: under TCG "
                         "the host's first touch of guest memory otherwise dominates some timings)")
    ap.add_argument("--icount", action="store_true",
                    help="deterministic TCG (-icount shift=3,sleep=off): guest time counts "
                         "instructions, so figures repeat between boots (benchmarks)")
    ap.add_argument("--quiet-boot", action="store_true",
                    help="echo the console only once the guest's /init starts (the log has everything)")
    args = ap.parse_args()

    want_kvm = os.environ.get("MSVM_KVM", "") not in ("", "0")
    if want_kvm and args.cpu == "zen":
        raise SystemExit("vm.py: --cpu zen needs TCG (under KVM the guest has the host's CPU)")
    gpus = PRESETS.get(args.gpus, args.gpus)
    tmp = tempfile.mkdtemp(prefix="msvm-vm-")
    entries = [g for g in gpus.split(",") if g]
    model = None
    if args.device == "model" and any(not e.startswith("nvme:") for e in entries):
        top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        model = Model(os.environ.get("MSVM_GPU_BIN", os.path.join(top, "device/target/release/msvm-gpu")),
                      tmp, args.vram)
    qemu_bin = os.environ.get("MSVM_QEMU", "qemu-system-x86_64")
    if model is not None and subprocess.run([qemu_bin, "-device", "vfio-user-pci,help"],
                                             capture_output=True).returncode != 0:
        raise SystemExit(f"vm.py: {qemu_bin} has no vfio-user-pci (QEMU 10.1 or newer): set MSVM_QEMU "
                         "(scripts/setup.sh puts one in ~/.cache/msvm/qemu), or use --device ivshmem")
    topo = Topology(entries, args.vram, args.prealloc, model)
    accel, accel_name = accel_args(want_kvm and not args.icount, args.icount, topo.phys_bits(), args.cpu == "zen")
    qmp_path = os.path.join(tmp, "qmp.sock")
    cmdline = f"console=ttyS0 panic=-1 loglevel=7 msvm_cmd={args.cmd} {args.append}".strip()
    if topo.nodes:
        # QEMU's _PRT of a pxb-pcie host bridge never ends under TCG:
        # ACPICA stops it after 30 s, twice per bridge. Nothing here uses
        # INTx (the ports and GPUs have MSI or no interrupt at all).
        cmdline += " acpi=noirq"
    machine = "q35"
    shared_ram = []
    if model is not None and not topo.nodes:
        # The devices reach guest RAM through the fds QEMU sends them.
        machine += ",memory-backend=msvm_ram"
        pre = ",prealloc=on" if args.prealloc else ""
        size = parse_size(args.mem if args.mem[-1:].isalpha() else args.mem + "M")
        shared_ram = ["-object", f"memory-backend-memfd,id=msvm_ram,size={size},share=on{pre}"]
    # Before the devices: one realized earlier keeps an untranslated
    # address space. Caching mode: the guest flushes after it maps, so that
    # QEMU hears of each mapping and sends it to the device; no interrupt
    # remapping (the guest kernel has none).
    iommu = []
    if args.iommu == "intel":
        iommu = ["-device", "intel-iommu,caching-mode=on,intremap=off,aw-bits=48"]
    qemu = [
        qemu_bin, "-machine", machine, *accel, "-smp", topo.smp_arg(args.smp), "-m", args.mem,
        *iommu,
        *shared_ram,
        "-global", "ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off",
        "-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot",
        "-qmp", f"unix:{qmp_path},server=on,wait=off",
        "-kernel", args.kernel, "-initrd", args.initrd, "-append", cmdline,
        *(["-mem-prealloc"] if args.prealloc and not topo.nodes and model is None else []),
        *topo.numa_args(args.mem, args.smp),
        *topo.args,
    ]
    log = open(args.log, "w") if args.log else None

    def say(msg):
        line = f"[vm] {msg}"
        print(line, flush=True)
        if log:
            log.write(line + "\n")
            log.flush()

    bits = ""
    if topo.phys_bits() and accel_name != "kvm":
        bits = f" ({topo.phys_bits()}-bit guest physical addresses)"
    say(f"accelerator: {accel_name}{bits}; IOMMU: {args.iommu}; GPUs: {args.gpus} ({args.vram >> 20} MiB VRAM each); "
        f"guest: {args.smp} vCPUs, {args.mem} RAM; command: {args.cmd}; timeout {args.timeout:.0f} s")
    t0 = time.monotonic()
    if model is not None:
        for gpu in topo.gpus:
            model.start(gpu)
        say(f"msvm-gpu: {len(topo.gpus)} device processes ({model.binary})")
    proc = subprocess.Popen(qemu, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    qmp = None
    try:
        qmp = Qmp(qmp_path, log)
    except RuntimeError as e:
        say(f"warning: {e}; host actions unavailable")

    console = []
    status = None
    timed_out = False
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    booted = False

    generation = {}
    # GPUs unplugged by a host action: a request repeated by the guest (it
    # re-sends when its console line may have been cut by kernel output)
    # is answered once.
    unplugged = set()

    def host_action(action, gpu):
        if action == "kill":
            if model is None:
                say(f"host: cannot kill {gpu}: no device process (--device ivshmem)")
            elif model.kill(gpu):
                say(f"host: {gpu}'s msvm-gpu process killed")
            else:
                say(f"host: {gpu}'s msvm-gpu process is not running: repeated kill ignored")
            return
        if qmp is None:
            say(f"host: cannot {action} {gpu}: no QMP")
            return
        if (action == "device_del") == (gpu in unplugged):
            say(f"host: {gpu} already {'unplugged' if gpu in unplugged else 'plugged in'}: "
                f"repeated {action} ignored")
            return
        start = time.monotonic()
        try:
            if action == "device_del":
                qmp.command("device_del", id=gpu)
                ev = qmp.wait_event("DEVICE_DELETED", lambda d: d.get("device") == gpu, 30)
                if ev:
                    say(f"host: {gpu} unplugged (DEVICE_DELETED after {time.monotonic() - start:.1f} s)")
                    unplugged.add(gpu)
                    if model is None:
                        qmp.command("object-del", id=topo.gpus[gpu]["memdev"])
                else:
                    say(f"host: {gpu}: no DEVICE_DELETED within 30 s")
            elif model is not None:
                # A new card: a new device process (with new VRAM).
                model.start(gpu)
                qmp.command("device_add", **topo.gpus[gpu])
                unplugged.discard(gpu)
                say(f"host: {gpu} plugged back in (a new msvm-gpu process)")
            else:
                # A fresh memory backend for the new card: QEMU cannot
                # re-register the RAM block of a backend it already used.
                dev = dict(topo.gpus[gpu])
                generation[gpu] = generation.get(gpu, 0) + 1
                mem = f"{dev['memdev'].split('.')[0]}.{generation[gpu]}"
                qmp.command("object-add", **{"qom-type": "memory-backend-memfd", "id": mem,
                                             "size": args.vram, "share": True})
                dev["memdev"] = mem
                qmp.command("device_add", **dev)
                unplugged.discard(gpu)
                topo.gpus[gpu] = dev
                say(f"host: {gpu} plugged back in (VRAM backend {mem})")
        except (RuntimeError, KeyError, OSError) as e:
            say(f"host: {action} {gpu} failed: {e}")

    # Host actions run one at a time, in the order the guest asked for them:
    # a device_add waits until the device_del before it is confirmed.
    actions = queue.Queue()

    def serve_actions():
        while (item := actions.get()) is not None:
            host_action(*item)

    worker = threading.Thread(target=serve_actions, daemon=True)
    worker.start()

    while True:
        left = args.timeout - (time.monotonic() - t0)
        if left <= 0:
            timed_out = True
            break
        events = sel.select(timeout=min(left, 1.0))
        if not events:
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "backslashreplace").rstrip("\r")
            if "msvm guest:" in line:
                booted = True
            if not args.quiet and (booted or not args.quiet_boot):
                print(line, flush=True)
            if log:
                log.write(line + "\n")
            console.append(line)
            m = HOST_RE.search(line)
            if m:
                actions.put(m.groups())
            m = EXIT_RE.search(line)
            if m and status is None:
                status = int(m.group(1))
        if log:
            log.flush()

    actions.put(None)
    worker.join(timeout=35)
    if proc.poll() is None:
        try:
            proc.wait(timeout=15 if status is not None else 0.1)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    elapsed = time.monotonic() - t0
    rc = status if status is not None else 125
    if model is not None:
        model.stop()
        for line in model.report():
            say(line)
        if model.failed and rc == 0:
            rc = 1
    if timed_out:
        say(f"TIMEOUT after {args.timeout:.0f} s")
        rc = 124
    bad, known = classify_splats(console)
    for _, block, label in known:
        say(f"note: known upstream kernel report, not msvm's: {label}")
        say(f"  | {block[0]}")
    if bad:
        say(f"FAIL: {len(bad)} kernel splat report(s) in the console:")
        for _, block, _ in bad[:5]:
            for line in block[:60]:
                say(f"  | {line}")
            say("  |")
        if rc == 0:
            rc = 1
    say(f"guest finished in {elapsed:.1f} s ({accel_name}): status {status if status is not None else 'none'}, harness exit {rc}")
    if log:
        log.close()
    sys.exit(rc)


if __name__ == "__main__":
    main()
