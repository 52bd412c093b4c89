"""File-level import graph of a crate (crate:: and super:: paths, comments skipped) and its cycles;
exits 1 when there is one.

    python3 scripts/import-cycles.py crates/kv/src
"""
import os, re, sys
root = sys.argv[1]
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            files[os.path.relpath(os.path.join(d, f), root)] = open(os.path.join(d, f)).read()

def modpath(rel):
    p = rel[:-3].split('/')
    if p[-1] in ('mod', 'lib'):
        p = p[:-1]
    return p

def resolve(parts):
    # longest prefix that is a file
    for n in range(len(parts), 0, -1):
        pre = '/'.join(parts[:n])
        for c in (pre + '.rs', pre + '/mod.rs'):
            if c in files:
                return c
    return None

edges = {f: set() for f in files}
for f, src in files.items():
    if '/tests' in f or f.endswith('tests.rs'):
        continue
    code = re.sub(r'//[^\n]*', '', src)
    # Inline test modules do not count; `#[cfg(test)] mod x;` declarations end nothing.
    code = re.split(r'\n#\[cfg\(test\)\]\s*\n\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{', code)[0]
    me = modpath(f)
    for m in re.finditer(r'\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)', code):
        parts = m.group(2).strip(':').split('::')
        if m.group(1) == 'crate':
            full = parts
        else:
            base = me[:-1] if not (f.endswith('mod.rs') or f == 'lib.rs') else me[:-1]
            # super of a file module a/b.rs is a; of a/mod.rs is parent of a
            base = me[:-1]
            full = base + parts
        t = resolve(full)
        if t and t != f:
            edges[f].add(t)
# Tarjan SCC
idx, low, st, on, out = {}, {}, [], set(), []
c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(sorted(comp))
for v in edges:
    if v not in idx: sc(v)
for comp in out:
    print(len(comp), comp)
print("cycles:", len(out))
sys.exit(1 if out else 0)
