#!/usr/bin/env bash
# A check, not a test: download two real macOS arm64 torch wheels and print the MPS kernel diff.
#
#   scripts/kernels_diff_check.sh [OLD [NEW]]    default: 2.6.0 and 2.14.1
#
# 2.14.1 is the newest torch this machine's pip allows (a pip constraints file caps it);
# elsewhere pass the newest release. Needs PyPI; the wheels (~70 MB and ~130 MB) are kept in
# ~/.cache/mps-compat/wheels ($MPS_COMPAT_CACHE/wheels), so a second run downloads nothing.
# Exit status: 0, or 2 with one line on stderr when a wheel cannot be had.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py="${PYTHON:-.venv/bin/python}"; [ -x "$py" ] || py=python3
exec "$py" - "${1:-2.6.0}" "${2:-2.14.1}" <<'PY'
import sys, time
from harness.ops import kernels

snaps = []
for version in sys.argv[1:3]:
    t0 = time.monotonic()
    try:
        cached = kernels.cached_wheel(version, kernels.cache_dir())
        whl = kernels.download_wheel(version)
        t1 = time.monotonic()
        snaps.append(kernels.load_wheel(whl))
    except kernels.KernelsError as exc:
        sys.exit(print(f"error: {exc}", file=sys.stderr) or 2)
    how = "from the cache" if cached else f"downloaded in {t1 - t0:.1f} s"
    print(f"torch {version}: {whl.name}, {whl.stat().st_size / 1e6:.0f} MB, {how}; "
          f"yaml read in {time.monotonic() - t1:.1f} s")
old, new = snaps
d = kernels.diff_doc(old, new)
print(f"MPS ops: torch {old.torch_version} {d['old']['mps']} -> torch {new.torch_version} {d['new']['mps']}: "
      f"{len(d['gained'])} gained ({len(d['new_ops'])} of them new ops), {len(d['lost'])} lost "
      f"({len(d['removed_ops'])} of them removed ops, {len(d['now_composite'])} now composite), "
      f"{d['unchanged']} unchanged")
for key, mark in (("gained", "+"), ("lost", "-")):
    ops = d[key]
    print(f"{key} ({len(ops)}){', first 10' if len(ops) > 10 else ''}:")
    for op in ops[:10]:
        tag = (" (new op)" if op in d["new_ops"] else " (op removed)" if op in d["removed_ops"] else
               " (now CompositeImplicitAutograd)" if op in d["now_composite"] else "")
        print(f"  {mark} {op}{tag}")
print(f"full list: python -m tools.kernels diff {sys.argv[1]} {sys.argv[2]}")
PY
