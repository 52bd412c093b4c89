"""The house's size goals (issue 29): non-test source files over 600 lines, functions over 150 lines,
and direct `libc::` calls outside a crate's `sys` module. Prints offenders; exits 1 if any.

    python3 scripts/house-check.py [crates]
"""
import os, re, sys

FILE_MAX, FN_MAX = 600, 150
root = sys.argv[1] if len(sys.argv) > 1 else 'crates'
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern "C")\s+)*fn\s+(\w+)')
bad = []


def code_lines(src):
    """Source before the first top-level inline `#[cfg(test)] mod NAME {` (its tests do not count;
    a `#[cfg(test)] mod NAME;` declaration does not end the count)."""
    lines = src.split('\n')
    for i, l in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ''
        if l.startswith('#[cfg(test)]') and re.match(r'(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{', nxt):
            return lines[:i]
    return lines


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split('//')[0]


for d, _, fs in os.walk(root):
    if '/tests' in d or '/benches' in d or '/fuzz' in d or '/target' in d:
        continue
    for f in sorted(fs):
        if not f.endswith('.rs') or f == 'tests.rs':
            continue
        path = os.path.join(d, f)
        lines = code_lines(open(path).read())
        if len(lines) > FILE_MAX:
            bad.append(f'file {path}: {len(lines)} lines')
        if 'libc::' in '\n'.join(strip(l) for l in lines) and f != 'sys.rs' and '/sys/' not in path:
            bad.append(f'libc {path}: calls libc:: outside a sys module')
        i = 0
        while i < len(lines):
            m = FN.match(lines[i])
            if not m:
                i += 1
                continue
            depth, opened, j = 0, False, i
            while j < len(lines):
                s = strip(lines[j])
                if not opened and ';' in s and '{' not in s:
                    break  # a declaration without a body
                depth += s.count('{') - s.count('}')
                opened = opened or '{' in s
                if opened and depth <= 0:
                    break
                j += 1
            n = j - i + 1
            if opened and n > FN_MAX:
                bad.append(f'fn {path}:{i + 1} {m.group(5)}: {n} lines')
            i += 1
print('\n'.join(bad) or 'house: every file and function within its size, libc only in sys modules')
sys.exit(1 if bad else 0)
