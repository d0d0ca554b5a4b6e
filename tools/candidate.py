"""The candidate side of the upgrade check, run inside the candidate environment.

    python -m tools.candidate [SPEC ...] [-- PYTEST_ARGS ...]

Installs the requirement SPECs (``torch==2.15.*``, ``transformers==5.23.0`` ...) into this
Python's environment with uv, says which versions it got, runs the suites with
``--baseline`` against the kept baseline, and writes the comparison to
``reports/upgrade-check.md`` (and ``.json``). Meant to run as ``tox -e candidate -- SPEC ...``
(``./compat candidate SPEC ...``), so the environment you use stays as it is.

Exit status: pytest's (1 when a check failed or regressed against the baseline); 2 when
there is no usable baseline or the install failed, before anything runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from harness.report import compare

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = ROOT / "reports" / "baseline.jsonl"
REPORT = ROOT / "reports" / "upgrade-check.md"
SHOWN = ("torch", "transformers", "datasets", "accelerate", "tokenizers", "peft")


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(requirement specs, pytest args): the specs come before a ``--``, pytest's after it."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def uv_command() -> list[str] | None:
    """uv to install with: ``MPS_COMPAT_UV`` (set by ./compat), on PATH, or beside this Python."""
    for candidate in (os.environ.get("MPS_COMPAT_UV"), shutil.which("uv"), str(Path(sys.executable).parent / "uv")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return [candidate]
    return None


def install(specs: list[str]) -> str | None:
    """Install ``specs`` into this environment; an error line, or None."""
    uv = uv_command()
    if uv is None:
        return "no uv found to install the candidate versions (pip install uv, or set MPS_COMPAT_UV)"
    res = subprocess.run([*uv, "pip", "install", "--python", sys.executable, *specs])
    return None if res.returncode == 0 else f"installing {' '.join(specs)} failed (uv exit {res.returncode}; above)"


def versions() -> str:
    got = []
    for name in SHOWN:
        try:
            got.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(got)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tools.candidate", description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", help="requirement specs to install, e.g. torch==2.15.*")
    parser.add_argument("--baseline-file", default=os.environ.get("MPS_COMPAT_BASELINE", str(DEFAULT_BASELINE)))
    parser.add_argument("--report", default=str(REPORT), help="where the comparison goes (.md; .json beside it)")
    ours, pytest_args = split_args(argv)
    args = parser.parse_args(ours)
    try:
        compare.load_side([args.baseline_file], "baseline")
    except compare.CompareError as exc:
        print(f"error: {exc}; keep one first with ./compat baseline (pytest suites/ --save-baseline "
              f"{os.path.relpath(args.baseline_file)})", file=sys.stderr)
        return 2
    if args.specs:
        problem = install(args.specs)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    print(f"candidate: {versions()}", flush=True)
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/", "--baseline", args.baseline_file,
                          "--compare-out", args.report, *pytest_args], cwd=ROOT)
    print(f"comparison written to {os.path.relpath(args.report)} (and .json)")
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
