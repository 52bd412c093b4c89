#!/usr/bin/env bash
# Keeps a long-lived cargo target directory from filling the disk.
#
# Removes incremental caches, and in each deps/ and examples/ folder keeps only
# the three newest builds of every artifact name (cargo leaves one per hash,
# i.e. one per past set of features or dependency versions). What is removed is
# rebuilt on demand, so this is safe to run before any build.
#
# Usage: bash scripts/prune-target.sh TARGET_DIR
set -euo pipefail
target="${1:?usage: prune-target.sh TARGET_DIR}"
[ -d "$target" ] || exit 0
before=$(du -sm "$target" | cut -f1)
rm -rf "$target"/*/incremental
python3 - "$target" <<'PY'
import collections, os, re, sys

root = sys.argv[1]
artifact = re.compile(r"(.+?)-([0-9a-f]{16})(\..*)?$")
for profile in os.listdir(root):
    for sub in ("deps", "examples"):
        folder = os.path.join(root, profile, sub)
        if not os.path.isdir(folder):
            continue
        groups = collections.defaultdict(list)
        for name in os.listdir(folder):
            m = artifact.match(name)
            if m:
                groups[(m.group(1), m.group(3) or "")].append(os.path.join(folder, name))
        for paths in groups.values():
            paths.sort(key=os.path.getmtime, reverse=True)
            for stale in paths[3:]:
                if os.path.isdir(stale):
                    continue
                os.remove(stale)
PY
after=$(du -sm "$target" | cut -f1)
echo "prune-target: $target ${before} MiB -> ${after} MiB"
