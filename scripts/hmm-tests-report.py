#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The report of a hmm-tests guest run (tests/guest/hmm-tests.sh) of a
reference module and its port: the results side by side, test by test,
benchmark_thp_migration's times as ratios (port / reference, one boot),
and one line "hmm-tests: REF P/T passed, PORT P/T passed".

Usage: hmm-tests-report.py CONSOLE_LOG REF PORT [SUITE,...]

Exits 1 if the port fails a test the reference passes, a module's run did
not end, a KUnit case the modules ran at load failed or one of the SUITEs
did not run, or vm.py found kernel reports it does not know for upstream
ones.
"""

import re
import sys

res = {}
ended = set()
splats = False
bench = {}  # module -> (size, direction) -> (ms with THP, ms without)
mod = None
size = None
kunit = {}  # KUnit suite (top level of the modules' KTAP) -> passed
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\[ *[\d.]+\] (ok|not ok) \d+ (\w+)$", line.rstrip())
    if m:
        kunit[m.group(2)] = kunit.get(m.group(2), True) and m.group(1) == "ok"
    if re.match(r"\[ *[\d.]+\] +not ok ", line):
        kunit["(a case)"] = False
    m = re.match(r"hmm-tests: (module|end) (\S+)", line)
    if m:
        mod = m.group(2) if m.group(1) == "module" else None
        if mod:
            res[mod] = {}
            bench[mod] = {}
        else:
            ended.add(m.group(2))
        continue
    if re.match(r"\[vm\] FAIL: \d+ kernel splat", line):
        splats = True
    m = re.match(r"=== .* \((.*)\) ===", line)
    if m:
        size = m.group(1)
    m = re.match(r"(Sys->Dev|Dev->Sys) Migration\s+\|\s+([\d.]+) ms\s+\|\s+([\d.]+) ms", line)
    if mod and m:
        bench[mod][(size, m.group(1))] = (float(m.group(2)), float(m.group(3)))
    m = re.match(r"(ok|not ok) \d+ (\S+)( # SKIP)?", line)
    if mod and m:
        res[mod][m.group(2)] = "skip" if m.group(3) else ("pass" if m.group(1) == "ok" else "FAIL")
ref, port = sys.argv[2], sys.argv[3]
mods = [ref, port]
names = sorted({n for r in res.values() for n in r})
print(f"{'test':56} {ref:>9} {port:>13}")
for n in names:
    print(f"{n:56} {res.get(ref, {}).get(n, '-'):>9} {res.get(port, {}).get(n, '-'):>13}")
c, r = bench.get(ref, {}), bench.get(port, {})
if c and r:
    # benchmark_thp_migration's times, port / reference (one boot).
    print(f"{'benchmark_thp_migration':28} {'THP':>6} {'no THP':>7}  ({port} / {ref})")
    for k in c:
        if k in r:
            print(f"{k[0] + ' ' + k[1]:28} {r[k][0] / c[k][0]:6.2f} {r[k][1] / c[k][1]:7.2f}")
def score(m):
    r = [v for v in res.get(m, {}).values() if v != "skip"]
    return f"{sum(v == 'pass' for v in r)}/{len(r)}"
print(f"hmm-tests: {ref} {score(ref)} passed, {port} {score(port)} passed")
worse = [n for n in names if res.get(ref, {}).get(n) == "pass"
         and res.get(port, {}).get(n) != "pass"]
fail = False
if worse or any(m not in ended for m in mods):
    print(f"hmm-tests: {port} fails where {ref} passes: "
          + (", ".join(worse) or "a module's run did not end"))
    fail = True
if kunit:
    print("hmm-tests: KUnit suites at load: "
          + " ".join(n + ("" if ok else " FAILED") for n, ok in sorted(kunit.items())))
if not all(kunit.values()):
    print("hmm-tests: a KUnit case failed")
    fail = True
missing = [n for n in (sys.argv[4].split(",") if len(sys.argv) > 4 else []) if n not in kunit]
if missing:
    print("hmm-tests: KUnit suites that did not run: " + " ".join(missing))
    fail = True
if splats:
    print("hmm-tests: the kernel reported errors (see the console log above)")
    fail = True
sys.exit(1 if fail else 0)
