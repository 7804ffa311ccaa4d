#!/usr/bin/env python3
"""Module import graph of a Rust crate's source tree, with cycle detection,
and the check of msvm's layer map.

usage: import-graph.py [--comments] [--mod-decls] [--no-tests] [--dot] SRC_DIR
       import-graph.py --check MAP SRC_DIR

An edge "a -> b" means: the file of module `a` names a path `crate::b...`,
`super::b...` or `self::b...` (including each item of a `use x::{...}` group),
and `b` is the longest module prefix of that path that is a file of SRC_DIR.
Module names: `migrate`, `mm`, `mm::page`, ...; the crate root file (the
top-level .rs file that no `mod x;` declares) is `crate`. Generated files
(`*_generated.rs`, build products that a module include!()s) are no modules.

By default comments (incl. doc comments/intra-doc links), string literals,
`mod x;` declarations and self-edges are ignored; `--comments` counts paths
in comments too, `--mod-decls` adds parent -> child edges for `mod x;`,
`--no-tests` skips inline `mod tests { ... }` blocks. Each edge is printed
with the number of distinct lines referring and the first file:line. Then Tarjan's SCC:
every strongly connected component with more than one member is a cycle
set, printed with one concrete shortest cycle through it.

`--check MAP` checks the graph against the layer map of MAP
(Documentation/design.rst: the `::` block of its "Layers" section) and
prints each violation as file:line; it exits 1 if there is any:

- every .rs file of SRC_DIR but the crate root and generated files is named
  in the map, on a row of its own (`src/device.rs`; `page.rs` under
  `src/mm/`; a folder's row names its mod.rs) or in the description of the
  row it is part of (`ring/reset.rs` under `src/gpu/`, `engine/warm.rs`
  under `src/engine.rs`, relative to the row's folder), and every file the
  map names exists;
- each row of a file or folder under src/ has a rank, its place in the map;
  a module on no row of its own takes the rank of its nearest ancestor that
  has one (`gpu::ring::reset`: `src/gpu/`'s). Outside src/mm/, an import
  a -> b goes down the map: rank(a) < rank(b), unless a and b are on the
  same row (a folder's parts among themselves are not ordered);
- src/mm/'s modules import only src/mm/ (the glue calls nothing of msvm:
  msvm_dmirror.ko builds it alone), their KUnit tests included;
- no cycle (in src/mm/, among a row's parts; a cycle through an import up
  the map is reported as that import), but the one the map's text
  explains: drm::{driver, file, gem} (kernel::drm's associated types),
  whose imports of each other, and only those, may go up the map.

The crate root (which declares every module and holds the module
parameters) is left out. So are inline `mod tests { ... }` blocks (KUnit
cases, in a module's file or its kunit.rs) but for the src/mm/ rule: a
case is a client of its module, and may take its fixtures from a module
that uses it (numa.rs's cases take pages from page.rs, which places them
by numa.rs); the cases are not part of their module's place in the map.
"""
import os
import re
import sys
from collections import defaultdict, deque

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def blank(s):
    """Keep newlines, blank everything else (so offsets/lines survive)."""
    return "".join(c if c == "\n" else " " for c in s)


def strip(src, keep_comments=False):
    """Blank out string/char literals and (unless keep_comments) comments."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(src[i:j] if keep_comments else blank(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(src[i:j] if keep_comments else blank(src[i:j]))
            i = j
        else:
            m = re.compile(r'(?:b|c)?r(#*)"').match(src, i)
            if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
                end = src.find('"' + m.group(1), m.end())
                end = n if end < 0 else end + 1 + len(m.group(1))
                out.append(blank(src[i:end]))
                i = end
                continue
            if c == '"':
                j = i + 1
                while j < n and src[j] != '"':
                    j += 2 if src[j] == "\\" else 1
                out.append(blank(src[i:j + 1]))
                i = j + 1
                continue
            m = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'").match(src, i)
            if c == "'" and m:
                out.append(blank(m.group(0)))
                i = m.end()
                continue
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(s, i):
    """Index just past the brace group that opens at s[i] == '{'."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def split_top(s):
    parts, depth, cur = [], 0, []
    for c in s:
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += c == "{"
        depth -= c == "}"
        cur.append(c)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand(tail):
    """Paths named by a path tail like `a::b::{c, d::{e}}` -> [[a,b,c],...]."""
    tail = re.sub(r"\s+as\s+%s" % IDENT, "", tail)  # `x as y` names x
    tail = re.sub(r"\s+", "", tail)
    m = re.match(r"((?:%s::)*)(\{.*\}|%s|\*)?" % (IDENT, IDENT), tail)
    head = [x for x in m.group(1).split("::") if x]
    last = m.group(2)
    if last and last.startswith("{"):
        res = []
        for part in split_top(last[1:-1]):
            res += [head + p for p in expand(part)] or [head]
        return res
    return [head + ([last] if last and last != "*" else [])]


def name(mod):
    return "::".join(mod) if mod else "crate"


def build(src_dir, opts):
    """The modules of src_dir (module tuple -> path) and the edges between
    them: (a, b) -> [(file:line, in a `mod tests` block), ...]."""
    files = {}  # module tuple -> path
    for root, _, names in os.walk(src_dir):
        for f in names:
            if not f.endswith(".rs") or f.endswith("_generated.rs"):
                continue  # generated bindings are include!()d, not modules
            rel = os.path.relpath(os.path.join(root, f), src_dir)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            files[tuple(parts)] = os.path.join(root, f)
    # The crate root: a top-level file that no other top-level file declares.
    declared = set()
    for mod, path in files.items():
        if len(mod) == 1:
            declared |= set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(%s)\s*;" % IDENT,
                                       strip(open(path).read()), re.M))
    roots = [m for m in files if len(m) == 1 and m[0] not in declared]
    if len(roots) != 1:
        sys.exit("cannot tell the crate root among %s" % roots)
    root_file = files.pop(roots[0])
    files[()] = root_file
    known = set(files)

    def resolve(segs):
        for k in range(len(segs), -1, -1):
            if tuple(segs[:k]) in known:
                return tuple(segs[:k])
        return ()

    edges = defaultdict(list)  # (a, b) -> [(file:line, in_tests), ...]
    path_re = re.compile(r"(?<![A-Za-z0-9_$])(crate|super|self)((?:\s*::\s*(?:super\s*::\s*)*)(?:%s(?:\s*::\s*%s)*(?:\s*::\s*(?:\{|\*))?|\{))" % (IDENT, IDENT))
    for mod, path in sorted(files.items()):
        raw = open(path).read()
        text = strip(raw, keep_comments="--comments" in opts)
        # Inline `mod x { ... }` blocks: (start, end, name).
        inline = []
        for m in re.finditer(r"\bmod\s+(%s)\s*\{" % IDENT, text):
            ob = m.end() - 1
            inline.append((ob, match_brace(text, ob), m.group(1)))
        if "--mod-decls" in opts:
            for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(%s)\s*;" % IDENT, text, re.M):
                tgt = resolve(list(mod) + [m.group(1)])
                line = text.count("\n", 0, m.start()) + 1
                edges[(mod, tgt)].append(("%s:%d" % (path, line), False))
        for m in path_re.finditer(text):
            pos = m.start()
            scope = [nm for (s, e, nm) in inline if s < pos < e]
            here = list(mod) + scope
            seg_text = m.group(2)
            if seg_text.rstrip().endswith("{"):
                ob = m.start(2) + seg_text.rstrip().rfind("{")
                seg_text = seg_text.rstrip()[:-1] + text[ob:match_brace(text, ob)]
            seg_text = re.sub(r"\s+as\s+%s" % IDENT, "", seg_text)  # `x as y` names x
            rest = re.sub(r"\s+", "", seg_text)[2:]  # drop leading '::'
            if m.group(1) == "crate":
                base = []
            elif m.group(1) == "self":
                base = here[:]
            else:
                base = here[:-1]
            while rest.startswith("super::"):
                base, rest = base[:-1], rest[len("super::"):]
            for p in expand(rest):
                tgt = resolve(base + p)
                if tgt == mod:
                    continue  # self-edge (incl. `use super::*` in mod tests)
                line = text.count("\n", 0, pos) + 1
                edges[(mod, tgt)].append(("%s:%d" % (path, line), "tests" in scope))
    return files, edges


def graph_of(edges):
    graph = defaultdict(set)
    for (a, b) in edges:
        graph[a].add(b)
    return graph


def tarjan(nodes, graph):
    """Strongly connected components (iterative Tarjan), each sorted."""
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for v0 in nodes:
        if v0 in index:
            continue
        work = [(v0, iter(sorted(graph[v0], key=name)))]
        index[v0] = low[v0] = counter[0]; counter[0] += 1
        stack.append(v0); on.add(v0)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph[w], key=name))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == v:
                            break
                    sccs.append(sorted(comp, key=name))
    return sccs


def cycles(comp, graph):
    """A shortest cycle through each member of `comp`, deduplicated."""
    members, seen, out = set(comp), set(), []
    for s in comp:
        prev, q = {s: None}, deque([s])
        found = None
        while q and not found:
            v = q.popleft()
            for w in sorted(graph[v], key=name):
                if w not in members:
                    continue
                if w == s:
                    found = v
                    break
                if w not in prev:
                    prev[w] = v
                    q.append(w)
        if found is None:
            continue
        path = [found]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        path.reverse()
        key = frozenset(path)
        if key in seen:
            continue
        seen.add(key)
        out.append(path + [s])
    return out


def locs_of(edges, a, b):
    return list(dict.fromkeys(loc for loc, _ in edges[(a, b)]))


# The one cycle the map allows (design.rst, the paragraph after the map):
# kernel::drm's associated types tie the driver, its file type and its
# object type together. Only edges among exactly these three may go up.
DRM_CYCLE = frozenset({("drm", "driver"), ("drm", "file"), ("drm", "gem")})
GLUE = ("mm",)


def parse_map(path):
    """The rows of the "Layers" map of `path`: dicts with `token` (what the
    row's entry column says), `rel` (its path under src/, or None), `line`
    (of the map file) and `desc` (its description, lines joined)."""
    lines = open(path).read().split("\n")
    for i in range(len(lines) - 1):
        if lines[i] == "Layers" and re.fullmatch(r"=+", lines[i + 1]):
            break
    else:
        sys.exit("%s: no \"Layers\" section" % path)
    i += 2
    while i < len(lines) and lines[i].strip() != "::":
        i += 1
    i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    indent = len(lines[i]) - len(lines[i].lstrip())
    # The entry column: where the first row's second column starts
    # ("    device       device/  ...").
    m = re.match(r"\s*\S+\s+", lines[i])
    col = m.end()
    rows, folder = [], None
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" " * indent)):
        ln = lines[i]
        i += 1
        if not ln.strip():
            continue
        rest = ln[col:]
        child = re.match(r"  (\S+\.rs|\S+/)\s", rest + " ")
        if rest[:1] not in ("", " ") or (child and folder is not None):
            if rest[:1] not in ("", " "):
                token = rest.split()[0]
                desc = rest[len(token):]
                rel = token[len("src/"):] if token.startswith("src/") else None
                folder = rel if rel is not None and rel.endswith("/") else None
            else:
                token = child.group(1)
                desc = rest[child.end(1):]
                rel = folder + token
            rows.append({"token": token, "rel": rel, "line": i, "desc": desc.strip()})
        elif rows:
            rows[-1]["desc"] += " " + ln.strip()
    return rows


def mod_of(rel):
    """`gpu/` -> ('gpu',); `drm/mod.rs` -> ('drm',); `mm/page.rs` -> ('mm', 'page')."""
    parts = rel.rstrip("/")
    if parts.endswith(".rs"):
        parts = parts[:-3]
    parts = parts.split("/")
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def check(map_path, src_dir, files, edges):
    """The map's rules (see the module's doc); returns the violations."""
    bad = []
    rows = parse_map(map_path)
    rank = {}  # module tuple of a row -> (rank, row)
    named = {}  # path under src/ -> the map's line that names it
    for row in rows:
        rel = row["rel"]
        if rel is None:
            continue
        at = "%s:%d" % (map_path, row["line"])
        if not os.path.exists(os.path.join(src_dir, rel)):
            bad.append("%s: the map names %s, which does not exist" % (at, row["token"]))
            continue
        if not (rel.endswith(".rs") or rel.endswith("/")):
            continue  # C: no module
        mod = mod_of(rel)
        if mod in rank:
            bad.append("%s: %s is on two rows of the map" % (at, rel))
        rank[mod] = (len(rank), row)
        named[rel + "mod.rs" if rel.endswith("/") else rel] = at
        # Files the description names, relative to the row's folder (paths
        # broken across lines, "ring/ session.rs", joined).
        base = rel if rel.endswith("/") else os.path.dirname(rel) + "/" if "/" in rel else ""
        desc = re.sub(r"(?<=[\w-]/)\s+(?=[\w-])", "", row["desc"])
        for f in re.findall(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.rs)\b", desc):
            sub = base + f
            if not os.path.isfile(os.path.join(src_dir, sub)):
                bad.append("%s: %s's description names %s, which does not exist (src/%s)"
                           % (at, row["token"], f, sub))
            elif mod_of(sub)[:len(mod)] != mod:
                bad.append("%s: %s's description names %s, which is not part of it"
                           % (at, row["token"], f))
            else:
                named.setdefault(sub, at)

    root = files[()]
    for mod, path in sorted(files.items()):
        rel = os.path.relpath(path, src_dir).replace(os.sep, "/")
        if path != root and rel not in named:
            bad.append("%s: not in the map (%s, \"Layers\")" % (path, map_path))

    def entry(mod):
        for k in range(len(mod), 0, -1):
            if mod[:k] in rank:
                return mod[:k]
        return None

    def where(mod):
        row = rank[entry(mod)][1]
        return "src/%s (%s:%d)" % (row["rel"], map_path, row["line"])

    glue = lambda m: m[:1] == GLUE
    deps = {}  # the edges the rules above let through: (a, b) -> [file:line, ...]
    for (a, b) in sorted(edges, key=lambda e: (name(e[0]), name(e[1]))):
        if a == ():
            continue  # the crate root is left out
        if glue(a) and not glue(b):
            for loc in locs_of(edges, a, b):
                bad.append("%s: %s -> %s: src/mm/ imports only src/mm/ (the glue calls"
                           " nothing of msvm)" % (loc, name(a), name(b)))
            continue
        locs = list(dict.fromkeys(loc for loc, t in edges[(a, b)] if not t))
        if b == () or not locs:
            continue
        ea, eb = entry(a), entry(b)
        if (glue(a) or ea is None or eb is None or ea == eb or rank[ea][0] < rank[eb][0]
                or (a in DRM_CYCLE and b in DRM_CYCLE)):
            # src/mm/ among itself, not in the map (reported above), the
            # same row, down the map, or the DRM exception.
            deps[(a, b)] = locs
            continue
        for loc in locs:
            bad.append("%s: %s -> %s goes up the map: %s is listed below %s"
                       % (loc, name(a), name(b), where(a), where(b)))

    # No cycle among those (in src/mm/, or among a row's parts) but the DRM
    # one; a cycle through an edge up the map is reported by that edge.
    graph = graph_of(deps)
    for comp in tarjan(sorted(set(files) - {()}, key=name), graph):
        if len(comp) < 2 or set(comp) <= DRM_CYCLE:
            continue
        for cyc in cycles(comp, graph):
            if set(cyc) <= DRM_CYCLE:
                continue
            steps = ", ".join("%s -> %s at %s" % (name(x), name(y), deps[(x, y)][0])
                              for x, y in zip(cyc, cyc[1:]))
            bad.append("%s: cycle %s (%s)" % (deps[(cyc[0], cyc[1])][0],
                                              " -> ".join(name(x) for x in cyc), steps))
    return bad, len(rank)


def main(argv):
    opts, args, check_map = set(), [], None
    it = iter(argv)
    for a in it:
        if a == "--check":
            check_map = next(it, None)
        elif a.startswith("--check="):
            check_map = a[len("--check="):]
        elif a.startswith("--"):
            opts.add(a)
        else:
            args.append(a)
    if len(args) != 1 or not os.path.isdir(args[0]) or (check_map is not None
                                                        and not os.path.isfile(check_map)):
        sys.exit(__doc__)
    src_dir = os.path.normpath(args[0])
    files, edges = build(src_dir, opts)

    if check_map is not None:
        bad, nrows = check(check_map, src_dir, files, edges)
        for b in bad:
            print(b)
        if bad:
            print("import-graph: %d violation%s of the layer map (%s, \"Layers\")"
                  % (len(bad), "" if len(bad) == 1 else "s", check_map))
            sys.exit(1)
        print("import-graph: %d modules, %d map rows: imports follow the layer map of %s"
              " (one cycle, drm::{driver, file, gem}, as allowed)"
              % (len(files), nrows, check_map))
        return

    if "--no-tests" in opts:
        edges = {e: [x for x in l if not x[1]] for e, l in edges.items()}
        edges = defaultdict(list, {e: l for e, l in edges.items() if l})
    graph = graph_of(edges)
    nodes = sorted(files, key=name)

    if "--dot" in opts:
        print("digraph imports {")
        for (a, b) in sorted(edges, key=lambda e: (name(e[0]), name(e[1]))):
            print('  "%s" -> "%s";' % (name(a), name(b)))
        print("}")
        return

    print("# %d modules, %d edges (src: %s)" % (len(nodes), len(edges), src_dir))
    for (a, b) in sorted(edges, key=lambda e: (name(e[0]), name(e[1]))):
        locs = locs_of(edges, a, b)
        print("%s -> %s   [%d line%s, first %s]" % (name(a), name(b), len(locs),
                                                  "" if len(locs) == 1 else "s", locs[0]))

    cyc = [c for c in tarjan(nodes, graph) if len(c) > 1]
    print()
    print("# strongly connected components with >1 member: %d" % len(cyc))
    for c in sorted(cyc, key=lambda c: (-len(c), name(c[0]))):
        print("SCC (%d): %s" % (len(c), ", ".join(name(x) for x in c)))
        for cycle in cycles(c, graph):
            print("  cycle: " + " -> ".join(name(x) for x in cycle))
            for a, b in zip(cycle, cycle[1:]):
                locs = locs_of(edges, a, b)
                print("      %s -> %s at %s" % (name(a), name(b), ", ".join(locs[:3])
                                               + (" ..." if len(locs) > 3 else "")))
    if not cyc:
        print("(none: the graph is acyclic)")


if __name__ == "__main__":
    main(sys.argv[1:])
