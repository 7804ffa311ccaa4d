#!/usr/bin/env python3
"""Module import graph of a Rust crate's source tree, with cycle detection.

usage: import-graph.py [--comments] [--mod-decls] [--no-tests] [--dot] SRC_DIR

An edge "a -> b" means: the file of module `a` names a path `crate::b...`,
`super::b...` or `self::b...` (including each item of a `use x::{...}` group),
and `b` is the longest module prefix of that path that is a file of SRC_DIR.
Module names: `migrate`, `mm`, `mm::page`, ...; the crate root file (the
top-level .rs file that no `mod x;` declares) is `crate`.

By default comments (incl. doc comments/intra-doc links), string literals,
`mod x;` declarations and self-edges are ignored; `--comments` counts paths
in comments too, `--mod-decls` adds parent -> child edges for `mod x;`,
`--no-tests` skips inline `mod tests { ... }` blocks. Each edge is printed
with the number of distinct lines referring and the first file:line. Then Tarjan's SCC:
every strongly connected component with more than one member is a cycle
set, printed with one concrete shortest cycle through it.
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


def main(argv):
    opts = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1 or not os.path.isdir(args[0]):
        sys.exit(__doc__)
    src_dir = os.path.normpath(args[0])

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

    def name(mod):
        return "::".join(mod) if mod else "crate"

    def resolve(segs):
        for k in range(len(segs), -1, -1):
            if tuple(segs[:k]) in known:
                return tuple(segs[:k])
        return ()

    edges = defaultdict(list)  # (a, b) -> [file:line, ...]
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
                edges[(mod, tgt)].append("%s:%d" % (path, line))
        for m in path_re.finditer(text):
            pos = m.start()
            scope = [nm for (s, e, nm) in inline if s < pos < e]
            if "--no-tests" in opts and "tests" in scope:
                continue
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
                edges[(mod, tgt)].append("%s:%d" % (path, line))

    graph = defaultdict(set)
    for (a, b) in edges:
        graph[a].add(b)
    nodes = sorted(known, key=name)

    if "--dot" in opts:
        print("digraph imports {")
        for (a, b) in sorted(edges, key=lambda e: (name(e[0]), name(e[1]))):
            print('  "%s" -> "%s";' % (name(a), name(b)))
        print("}")
        return

    print("# %d modules, %d edges (src: %s)" % (len(nodes), len(edges), src_dir))
    for (a, b) in sorted(edges, key=lambda e: (name(e[0]), name(e[1]))):
        locs = list(dict.fromkeys(edges[(a, b)]))
        print("%s -> %s   [%d line%s, first %s]" % (name(a), name(b), len(locs),
                                                  "" if len(locs) == 1 else "s", locs[0]))

    # Tarjan's strongly connected components (iterative).
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

    cyc = [c for c in sccs if len(c) > 1]
    print()
    print("# strongly connected components with >1 member: %d" % len(cyc))
    for c in sorted(cyc, key=lambda c: (-len(c), name(c[0]))):
        members = set(c)
        print("SCC (%d): %s" % (len(c), ", ".join(name(x) for x in c)))
        # Shortest cycle through each member, deduplicated.
        seen = set()
        for s in c:
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
            cycle = path + [s]
            print("  cycle: " + " -> ".join(name(x) for x in cycle))
            for a, b in zip(cycle, cycle[1:]):
                locs = list(dict.fromkeys(edges[(a, b)]))
                print("      %s -> %s at %s" % (name(a), name(b), ", ".join(locs[:3])
                                               + (" ..." if len(locs) > 3 else "")))
    if not cyc:
        print("(none: the graph is acyclic)")


if __name__ == "__main__":
    main(sys.argv[1:])
