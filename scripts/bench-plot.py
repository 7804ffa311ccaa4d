#!/usr/bin/python3
"""The picture of `make bench`: reads the BENCH and LATENCY lines of a bench
console log and writes one SVG with three panels:

1. movement throughput, msvm vs test_hmm vs the copy floor, per op and size;
2. the phase split of each msvm movement (stacked: collect, allocate, copy,
   install, and the rest of its time);
3. the latency distribution (CDF) of each path of `msvm-tests bench-latency`.

usage: bench-plot.py CONSOLE_LOG OUT.svg
"""
import re
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

OPS = ("to_dev", "to_dev_4k", "to_sys", "to_sys_4k", "fault_back", "fault_back_4k")
PHASES = ("collect", "alloc", "copy", "install")


def parse(path):
    vals, cdfs = {}, {}
    for line in open(path, errors="replace"):
        line = line.strip()
        m = re.match(r"BENCH (\S+) ([0-9.]+) (\S+)", line)
        if m:
            vals[m.group(1)] = float(m.group(2))
            continue
        m = re.match(r"LATENCY (\S+) ([0-9.,]+)$", line)
        if m:
            cdfs[m.group(1)] = [float(x) for x in m.group(2).split(",")]
    return vals, cdfs


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    vals, cdfs = parse(sys.argv[1])
    sizes = [s for s in ("64M", "256M", "1024M") if f"to_dev_{s}.msvm" in vals]
    fig, axes = plt.subplots(3, 1, figsize=(11, 15))

    ax = axes[0]
    names = [f"{op}_{s}" for s in sizes for op in OPS if f"{op}_{s}.msvm" in vals]
    x = range(len(names))
    w = 0.27
    for k, (key, label) in enumerate((("msvm", "msvm"), ("test_hmm", "test_hmm"), ("floor", "copy floor"))):
        ys = [vals.get(f"{n}.{key}", 0) for n in names]
        ax.bar([i + (k - 1) * w for i in x], ys, w, label=label)
    ax.set_xticks(list(x), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("GiB/s")
    ax.set_title("Movement throughput (one boot; floor: the driver's copies alone)")
    ax.legend()

    ax = axes[1]
    names = [n for n in names if f"{n}.total_ms" in vals]
    # Per GiB moved, so that sizes compare (a flat cost per GiB scales).
    gib = {n: int(n.rsplit("_", 1)[1].rstrip("M")) / 1024 for n in names}
    bottom = [0.0] * len(names)
    for ph in PHASES + ("other",):
        if ph == "other":
            ys = [max(vals[f"{n}.total_ms"] - sum(vals.get(f"{n}.{p}_ms", 0) for p in PHASES), 0)
                  / gib[n] for n in names]
        else:
            ys = [vals.get(f"{n}.{ph}_ms", 0) / gib[n] for n in names]
        ax.bar(range(len(names)), ys, 0.6, bottom=bottom, label=ph)
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("ms per GiB (one round)")
    ax.set_title("Where each msvm movement's time goes (STATS phase split), per GiB")
    ax.legend()

    ax = axes[2]
    pct = [k * 5 for k in range(21)]
    colors = plt.get_cmap("tab20").colors
    for k, (name, qs) in enumerate(cdfs.items()):
        ax.plot(qs, pct, label=name, color=colors[k % len(colors)],
                linestyle="--" if name.endswith("_checksum") else "-")
    ax.set_xscale("log")
    ax.set_xlabel("latency, us (log)")
    ax.set_ylabel("percentile")
    ax.set_title("Latency distributions (1,000 samples each, gpu0)")
    ax.legend(fontsize=7, ncol=2)

    fig.tight_layout()
    fig.savefig(sys.argv[2])
    print(f"bench-plot: wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
