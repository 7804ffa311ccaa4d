#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Writes the glue of src/mm/ as a patch series against the kernel source.

Usage: rust-mm-series.py KSRC OUTDIR

The abstractions msvm_dmirror.ko uses (the closure of its imports in
src/mm/) become kernel::mm modules (rust/kernel/mm/*.rs, and a module's
folder of submodules, src/mm/<m>/, as rust/kernel/mm/<m>/), one patch per
abstraction (page handles, NUMA homes and CPU access to pages form one:
they need each other); the C helpers each calls become
rust/helpers/mm_*.c files (rust_helper_ names), added by the patch of the
first abstraction that calls them; the headers and the few constants they
need go to rust/bindings/bindings_helper.h in the first patch; the port
becomes samples/rust/rust_dmirror.rs (CONFIG_SAMPLE_RUST_DMIRROR) in the
last. The series is generated from the tree, never kept beside it: src/mm/
stays the one copy. OUTDIR gets git format-patch files and a cover letter
(Documentation/upstream/rust-mm.rst says what upstream would still ask).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUTHOR = "msvm developers <msvm@localhost>"

# (patch name, modules, subject, what it adds). Order: dependencies first.
SERIES = [
    ("owner", ["owner"], "rust: mm: add device-private owner tokens",
     "A dev_private_owner token, and the static key whose address is the\n"
     "owner of a family of pagemaps of one Rust type, so that a page found\n"
     "with it is known to be that type's."),
    ("mmap", ["mmap", "kunit_mm"], "rust: mm: add the mmap lock for writing, and a try for reading",
     "MmapWriteGuard (killable), its exclusive VMAs, MmapRead (waiting or\n"
     "trying): kernel::mm offers the read lock only;\n"
     "and LockedVma, a VMA whose mm's mmap lock is held (a VMA's own lock,\n"
     "which VmaReadGuard derefs to a VmaRef with, is not enough for a page\n"
     "walk). With TestMapping, memory of a process for KUnit cases (the\n"
     "case's kthread is given an mm, as kunit_vm_mmap() does), which the\n"
     "KUnit cases of this series touch through user copies."),
    ("cancel", ["cancel"], "rust: mm: add cancellation points for long operations",
     "Cancel::check reschedules and stops an operation on a fatal signal\n"
     "(EINTR), when its DRM device is unplugged (ENODEV), or when another\n"
     "device of its driver begins to go away (EAGAIN; the driver's own\n"
     "Departures count those)."),
    ("misc", ["misc"], "rust: mm: add misc devices whose files reach their driver's data",
     "kernel::miscdevice hands open() the registration only; Misc<F> keeps\n"
     "the data beside it and finds it from there."),
    ("page", ["page", "numa", "dma", "rawdev"], "rust: mm: add page handles bounded by what keeps the page alive",
     "PageRef<'a> borrows a struct page for as long as what keeps it alive;\n"
     "NewPage is a page allocated to be a migration destination; SysPage a\n"
     "system page's contents, read and written with memcpy semantics; Home\n"
     "the NUMA node a new page is placed on (the DMA and NUMA calls take the\n"
     "struct device behind a Device: rawdev). They need each other."),
    ("freemap", ["freemap"], "rust: mm: add the free map of a chunk of device memory",
     "A bitmap and a count per 2 MiB block: whole blocks handed out as\n"
     "large folios; freeing (from folio_free) never allocates."),
    ("fault", ["fault"], "rust: mm: add the CPU fault on a device-private page",
     "Fault, migrate_to_ram's view (page, address, VMA, what became of the\n"
     "fault's lock), and its trade for the mmap lock held for writing."),
    ("migrate", ["migrate"], "rust: mm: add migrate_vma",
     "VmaMigration: collect, take destinations (NewPage only), install,\n"
     "finalize on drop, so a migration is never left half done. No\n"
     "migrate_device_* wrapper: on 7.3 it holds no anon_vma reference."),
    ("pagemap", ["pagemap"], "rust: mm: add MEMORY_DEVICE_PRIVATE pagemaps",
     "Pagemap<T: PagemapOps>: request_free_mem_region + memremap_pages,\n"
     "memunmap_pages on drop; callbacks dispatched to T; pages handed out\n"
     "only off its own free map and back only through folio_free."),
    ("hmm", ["hmm", "inflight"], "rust: mm: add hmm_range_fault mirrors over interval notifiers",
     "Mirror<T: MirrorTable>: an interval notifier whose invalidations take\n"
     "the mutex that holds the driver's table T; walks under a sequence whose\n"
     "pages can only be had, checked, under that lock. Every walk is\n"
     "corrected for a device-private PMD walked from inside (see the hmm.c\n"
     "fix this series does not depend on)."),
    ("backing", ["backing"], "rust: mm: add backing blocks for devices a CPU emulates",
     "Block: contiguous system pages of any order up to a 2 MiB block's,\n"
     "allocated at once and split (split_page) into single pages on\n"
     "demand; copies between their pages and the pages a migration moves;\n"
     "a zeroed bounce buffer."),
    ("exclusive", ["exclusive"], "rust: mm: add make_device_exclusive",
     "ExclusivePage: the folio locked and referenced, the mirror's sequence\n"
     "read before the call, whose own invalidation the mirror skips."),
    ("pagetable", ["pagetable"], "rust: mm: add a CPU-side mirror table",
     "PageTable, what test_hmm keeps in an xarray: filled only from a walk\n"
     "or migration still valid under the mirror's lock, or from a page made\n"
     "exclusive; emptied by every invalidation of its range."),
]

GLUE = os.path.join(TOP, "src", "mm")
# The port's modules (dmirror/*.rs but its root).
PORT_FILES = ("device", "file", "memory", "uapi")
# What the abstractions need of the configuration (Cancel names DRM devices).
RUST_CFG = '#[cfg(all(CONFIG_DEVICE_PRIVATE, CONFIG_HMM_MIRROR, CONFIG_DRM = "y"))]'
C_CFG = ("#if IS_ENABLED(CONFIG_DEVICE_PRIVATE) && IS_ENABLED(CONFIG_HMM_MIRROR) && "
         "IS_BUILTIN(CONFIG_DRM)")
HELPER_SOURCES = [os.path.join(TOP, "src", f)
                  for f in ("helpers.c", "helpers_alloc.c", "helpers_kunit.c", "zap_huge_pmd.c")]


def run(*args, cwd=None):
    subprocess.run(args, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def module_files(m):
    """The files of src/mm/'s module `m`, relative to src/mm/: `m.rs`, then
    its submodules' (its folder `m/`, at any depth), each of which goes to
    the same place under rust/kernel/mm/."""
    files = [m + ".rs"]
    for root, dirs, names in os.walk(os.path.join(GLUE, m)):
        dirs.sort()
        files += [os.path.relpath(os.path.join(root, n), GLUE) for n in sorted(names)
                  if n.endswith(".rs")]
    return files


def rust_glue(text, depth=0):
    """A src/mm/ file as a kernel::mm module (`depth` folders below
    src/mm/: a submodule's file reaches msvm's bindings through as many
    more `super::`)."""
    text = re.sub(r"^\s*#\[allow\(dead_code\)\] // msvm_dmirror\.ko's.*\n", "", text, flags=re.M)
    text = text.replace("pub(crate)", "pub")
    text = text.replace("use " + "super::" * (depth + 1) + "bindings as b;", "use crate::bindings as b;")
    text = re.sub(r"(?<![\w:])kernel::", "crate::", text)
    text = re.sub(r"#\[((?:crate::macros::)?)kunit_tests\(msvm_(\w+)\)\]", r"#[\1kunit_tests(rust_mm_\2)]", text)
    return text


def drop_unused(text, others):
    """`text` without its functions of restricted visibility (`pub(super)`,
    `pub(in crate::mm)`; top-level, or methods) that neither it nor
    `others` calls: msvm's other modules may, or a module of a later
    patch, which adds them then (so that each patch builds without dead
    code)."""
    # Calls only, not mentions in comments.
    code = lambda s: re.sub(r"//[^\n]*", "", s)
    others = code(others)

    def keep(m, text, method):
        name = m.group(2)
        rest = code(text.replace(m.group(0), ""))
        if method:
            # A method: called as `Type::name` or `.name(` elsewhere, or as
            # `Self::name` in its own file.
            impls = re.findall(r"^impl(?:<[^\n>]*>)? (?:[\w:<>', ]+ for )?(\w+)",
                               text[:m.start()], re.M)
            ty = impls[-1] if impls else "Self"
            pat = r"\b(?:%s|Self)::%s\b|\.%s\(" % (ty, name, name)
            used = re.search(pat, rest) or re.search(r"\b%s::%s\b|\.%s\(" % (ty, name, name), others)
        else:
            used = re.search(r"\b" + name + r"\b", rest + others)
        return m.group(0) if used else ""
    for ind in ("", "    "):
        pat = (r"((?:^" + ind + r"(?:///|#\[)[^\n]*\n)*)^" + ind
               + r"pub\((?:super|in [\w:]+)\) (?:unsafe )?fn (\w+)[^{]*\{\n.*?^" + ind + r"\}\n\n?")
        text = re.sub(pat, lambda m, t=text, i=ind: keep(m, t, i != ""), text, flags=re.M | re.S)
    # No blank line left before a closing brace (a block's last item gone),
    # and no impl block left empty.
    text = re.sub(r"\n\n+( *\}\n)", r"\n\1", text)
    return re.sub(r"^impl\b[^\n{]*\{\n\}\n\n?", "", text, flags=re.M)


def rust_sample(text, root):
    """A dmirror/ file as part of samples/rust/rust_dmirror."""
    text = text.replace("crate::mm::", "kernel::mm::")
    text = text.replace("kunit_tests(msvm_dmirror_", "kunit_tests(rust_dmirror_")
    if root:
        text = re.sub(r"// The glue serves msvm too.*?\nmod mm;\n", "", text, flags=re.S)
        text = text.replace("use mm::misc::Misc;", "use kernel::mm::misc::Misc;")
        for m in PORT_FILES:
            text = text.replace(f"\nmod {m};", f'\n#[path = "rust_dmirror/{m}.rs"]\nmod {m};')
        text = text.replace('name: "msvm_dmirror"', 'name: "rust_dmirror"')
    return text


class CItem:
    def __init__(self, text, includes):
        self.text = text
        # The includes above it in its file, which it compiles with.
        self.includes = includes
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        code = re.sub(r"//.*", "", code)
        head = code.split("{", 1)[0]
        m = re.search(r"\b(msvm_\w+)\s*\(", head)
        s = re.search(r"^struct (\w+) \{", code, re.M)
        self.name = m.group(1) if m else (s.group(1) if s else None)
        self.static = bool(re.search(r"^static\b", head, re.M))
        self.uses = set(re.findall(r"\b(msvm_\w+)\b", code)) - {self.name}


def c_items(path):
    """The top-level items (with their leading comments) of a C file, each
    with the includes above it (a file may include what only its last
    items need just before them). What comes before the first include is
    the file's own comment, of no item."""
    items, includes, cur, depth = [], [], [], 0
    lines = open(path).readlines()
    first = next((k for k, x in enumerate(lines) if x.startswith("#include")), 0)
    for line in lines[first:]:
        if depth == 0 and line.startswith("#include"):
            if '"' not in line:
                includes.append(line)
            continue
        if depth == 0 and not line.strip():
            if cur and any("{" in x or ";" in x for x in cur):
                items.append(CItem("".join(cur), list(includes)))
                cur = []
            continue
        cur.append(line)
        depth += line.count("{") - line.count("}")
    if cur:
        items.append(CItem("".join(cur), list(includes)))
    return [i for i in items if i.name]


def helper_file(items, names, exported, consts):
    """The C of the helpers `names` (callees first), renamed rust_helper_,
    with the includes each has above it in its file."""
    order, seen = [], set()

    def visit(n):
        if n in seen or n not in names:
            return
        seen.add(n)
        for u in sorted(items[n].uses):
            visit(u)
        order.append(n)

    for n in sorted(names):
        visit(n)
    body, includes = [], set()
    for n in order:
        includes |= set(items[n].includes)
        t = items[n].text
        t = re.sub(r"\b(" + "|".join(map(re.escape, sorted(exported))) + r")\b",
                   r"rust_helper_\1", t)
        body.append(t)
    text = "\n".join(body)
    shared = "".join(consts) + "\n" if re.search(r"MSVM_HOME_|msvm_migrate_select", text) else ""
    return ("// SPDX-License-Identifier: GPL-2.0\n\n" + C_CFG + "\n\n"
            + "".join(sorted(includes)) + "\n" + shared + text + "\n#endif\n")


def closure(items, names):
    out, st = set(), list(names)
    while st:
        n = st.pop()
        if n in out or n not in items:
            continue
        out.add(n)
        st.extend(items[n].uses)
    return out


def main():
    ksrc, outdir = sys.argv[1], os.path.abspath(sys.argv[2])
    items = {}
    for src in HELPER_SOURCES:
        for i in c_items(src):
            items[i.name] = i
    exported = {n for n, i in items.items() if not i.static and not n[0].isupper()
                and not re.search(r"^struct " + n + r" \{", i.text, re.M)}

    work = tempfile.mkdtemp()
    try:
        tree = os.path.join(work, "tree")
        touched = ["rust/kernel/mm.rs", "rust/helpers/helpers.c", "rust/bindings/bindings_helper.h",
                   "samples/rust/Kconfig", "samples/rust/Makefile", "MAINTAINERS"]
        for f in touched:
            os.makedirs(os.path.dirname(os.path.join(tree, f)), exist_ok=True)
            shutil.copy(os.path.join(ksrc, f), os.path.join(tree, f))
        git = lambda *a: run("git", "-c", "user.name=msvm developers", "-c",
                             "user.email=msvm@localhost", *a, cwd=tree)
        git("init", "-q")
        git("add", "-A")
        git("commit", "-q", "-m", "Linux 7.3")

        def commit(subject, body):
            git("add", "-A")
            git("commit", "-q", "-m", subject + "\n\n" + body + "\n\nGenerated from msvm's src/mm/ "
                "(scripts/rust-mm-series.py).")

        # 1: the headers, and the constants of msvm_helpers.h.
        hdr = open(os.path.join(TOP, "include", "msvm_helpers.h")).read()
        consts = re.findall(r"^enum msvm_migrate_select \{.*?^\};\n|^#define MSVM_HOME_\w+ \d+\n",
                            hdr, re.M | re.S)
        path = os.path.join(tree, "rust/bindings/bindings_helper.h")
        text = open(path).read()
        add = ("#include <linux/hmm.h>\n#include <linux/memremap.h>\n#include <linux/migrate.h>\n"
               "#include <linux/mmu_notifier.h>\n#include <linux/rmap.h>\n")
        text = text.replace("#include <linux/mm.h>\n", "#include <linux/mm.h>\n" + add, 1)
        text += ("\n/* kernel::mm's device memory: migrate_vma's source selection (an\n"
                 " * anonymous enum in migrate.h) and how a new system page is had. */\n"
                 + "".join(consts))
        open(path, "w").write(text)
        commit("rust: bindings: add the headers of HMM, migration and device memory",
               "hmm.h, memremap.h, migrate.h, mmu_notifier.h and rmap.h for the\n"
               "kernel::mm abstractions that follow, and two sets of constants they\n"
               "share with their C helpers.")

        # The abstractions, each with the helpers it is the first to call.
        given, all_calls = set(), set()
        mmrs = os.path.join(tree, "rust/kernel/mm.rs")
        helpers_c = os.path.join(tree, "rust/helpers/helpers.c")
        added = []
        for name, mods, subject, body in SERIES:
            calls = set()
            added += mods
            # Every module so far, again: a function that only a module of
            # this patch calls goes into its (earlier) file now. A module's
            # submodules are files of it like its own (each sees the
            # others' calls).
            files = [f for x in added for f in module_files(x)]
            for m in added:
                for f in module_files(m):
                    others = "".join(open(os.path.join(GLUE, x)).read() for x in files if x != f)
                    src = drop_unused(open(os.path.join(GLUE, f)).read(), others)
                    calls |= {c for c in re.findall(r"\bb::(msvm_\w+)\s*\(", src)}
                    dst = os.path.join(tree, "rust/kernel/mm", f)
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    open(dst, "w").write(rust_glue(src, f.count("/")))
                if m not in mods:
                    continue
                # After the modules before it (sorted), so that the list
                # reads as the series adds it.
                t = open(mmrs).read()
                line = RUST_CFG + "\npub mod " + m + ";\n"
                prev = [x for x in re.findall(r"^pub mod (\w+);\n", t, re.M) if x != "virt" and x < m]
                after = "pub mod " + (max(prev) if prev else "virt") + ";\n"
                t = t.replace(after, after + line, 1)
                open(mmrs, "w").write(t)
            all_calls |= calls
            need = closure(items, calls) - given
            if need:
                given |= need
                fname = "mm_" + name + ".c"
                open(os.path.join(tree, "rust/helpers", fname), "w").write(
                    helper_file(items, need, exported, consts))
                # After the helpers of the patches before (which these may
                # call).
                t = open(helpers_c).read()
                prev = re.findall(r'^#include "(mm(?:_\w+)?\.c)"\n', t, re.M)
                after = '#include "' + prev[-1] + '"\n'
                t = t.replace(after, after + '#include "' + fname + '"\n', 1)
                open(helpers_c, "w").write(t)
            commit(subject, body)
        missing = all_calls - given
        if missing:
            sys.exit("rust-mm-series: helpers not found: " + ", ".join(sorted(missing)))

        # The port, as a sample.
        sdir = os.path.join(tree, "samples/rust/rust_dmirror")
        os.makedirs(sdir, exist_ok=True)
        for f in PORT_FILES:
            src = open(os.path.join(TOP, "dmirror", f + ".rs")).read()
            open(os.path.join(sdir, f + ".rs"), "w").write(rust_sample(src, False))
        src = open(os.path.join(TOP, "dmirror", "msvm_dmirror.rs")).read()
        open(os.path.join(tree, "samples/rust/rust_dmirror.rs"), "w").write(rust_sample(src, True))
        kc = os.path.join(tree, "samples/rust/Kconfig")
        t = open(kc).read()
        entry = ("config SAMPLE_RUST_DMIRROR\n"
                 "\ttristate \"HMM test driver (lib/test_hmm.c in Rust)\"\n"
                 "\tdepends on DEVICE_PRIVATE && HMM_MIRROR && TRANSPARENT_HUGEPAGE && DRM=y\n"
                 "\thelp\n"
                 "\t  lib/test_hmm.c in Rust, on the kernel::mm abstractions of device\n"
                 "\t  memory, with test_hmm's uAPI and device nodes, so that\n"
                 "\t  tools/testing/selftests/mm/hmm-tests runs against it.\n\n"
                 "\t  To compile this as a module, choose M here:\n"
                 "\t  the module will be called rust_dmirror.\n\n"
                 "\t  If unsure, say N.\n\n")
        t = t.replace("config SAMPLE_RUST_HOSTPROGS", entry + "config SAMPLE_RUST_HOSTPROGS", 1)
        open(kc, "w").write(t)
        mk = os.path.join(tree, "samples/rust/Makefile")
        t = open(mk).read()
        t = re.sub(r"(obj-\$\(CONFIG_SAMPLE_RUST_MINIMAL\)\s+\+= rust_minimal\.o\n)",
                   r"\1obj-$(CONFIG_SAMPLE_RUST_DMIRROR)\t\t+= rust_dmirror.o\n", t, count=1)
        open(mk, "w").write(t)
        commit("samples: rust: add rust_dmirror, lib/test_hmm.c in Rust",
               "The HMM test driver on the kernel::mm abstractions of this series, with\n"
               "test_hmm's uAPI (lib/test_hmm_uapi.h) and device nodes, so that the\n"
               "unmodified tools/testing/selftests/mm/hmm-tests runs against it. It has\n"
               "no unsafe code.")

        # Who looks after what the series adds: the Rust mm entry already
        # covers rust/kernel/mm/; its helpers and the HMM parts are named.
        mt = os.path.join(tree, "MAINTAINERS")
        t = open(mt).read()
        t = t.replace("F:\trust/helpers/mm.c\n", "F:\trust/helpers/mm.c\nF:\trust/helpers/mm_*.c\n", 1)
        hmm = "".join("F:\trust/kernel/mm/" + m + ".rs\n"
                      + ("F:\trust/kernel/mm/" + m + "/\n" if len(module_files(m)) > 1 else "")
                      for m in ("hmm", "pagetable"))
        t = t.replace("F:\tmm/hmm*\n", "F:\tmm/hmm*\n" + hmm + "F:\tsamples/rust/rust_dmirror*\n", 1)
        open(mt, "w").write(t)
        commit("MAINTAINERS: add the Rust device-memory abstractions and rust_dmirror",
               "The Rust mm entry covers rust/kernel/mm/ already; add its new helpers,\n"
               "and list the HMM mirror, its CPU-side table and the sample under HMM.")

        cover = open(os.path.join(TOP, "Documentation", "upstream", "rust-mm-cover.txt")).read()
        if os.path.isdir(outdir):
            shutil.rmtree(outdir)
        os.makedirs(outdir)
        run("git", "-c", "user.name=msvm developers", "-c", "user.email=msvm@localhost",
            "format-patch", "-q", "--cover-letter", "-o", outdir,
            "--to=linux-mm@kvack.org", "--to=rust-for-linux@vger.kernel.org",
            "--cc=Alice Ryhl <aliceryhl@google.com>", "--cc=Lorenzo Stoakes <ljs@kernel.org>",
            "--cc=Liam R. Howlett <liam@infradead.org>", "--cc=Jason Gunthorpe <jgg@nvidia.com>",
            "--cc=Leon Romanovsky <leonro@nvidia.com>", "--cc=Andrew Morton <akpm@linux-foundation.org>",
            "--cc=Miguel Ojeda <ojeda@kernel.org>", "--cc=Danilo Krummrich <dakr@kernel.org>",
            "HEAD~" + str(len(SERIES) + 3),
            cwd=tree)
        cl = [f for f in os.listdir(outdir) if f.startswith("0000-")][0]
        t = open(os.path.join(outdir, cl)).read()
        t = t.replace("*** SUBJECT HERE ***", cover.split("\n", 1)[0])
        t = t.replace("*** BLURB HERE ***", cover.split("\n", 1)[1].strip())
        open(os.path.join(outdir, cl), "w").write(t)
    finally:
        shutil.rmtree(work)
    print(outdir)


if __name__ == "__main__":
    main()
