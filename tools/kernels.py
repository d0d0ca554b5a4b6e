"""The static MPS kernel table of a torch version, read from its native_functions.yaml.

    python -m tools.kernels                       # the installed torch: ops with an MPS kernel
    python -m tools.kernels --wheel PATH          # any torch wheel file (read in place)
    python -m tools.kernels --torch-version 2.6.0 # the macOS arm64 wheel, downloaded with pip and cached
    python -m tools.kernels diff A B              # MPS ops gained and lost from A to B
                                                  # (each a version, a wheel path, or "installed")

``--format text|json`` chooses what is printed. ``--out FILE`` writes the JSON document to
FILE instead and prints one summary line; ``--save`` writes it to
``reports/kernels/<torch-version>.json`` (``diff-<old>-<new>.json`` for a diff; the version
without its local part, ``2.15.0`` for ``2.15.0+cu132``), where the report picks it up.
Downloaded wheels are kept in ``~/.cache/mps-compat/wheels`` (``$MPS_COMPAT_CACHE/wheels``).
Bad input (missing file, not a wheel, a wheel without the yaml, a failed download) gives one
line on stderr and exit status 2.

The table is static: see ``harness.ops.kernels.CAVEAT`` for what it cannot see.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness.core import runfiles
from harness.ops import kernels
from harness.ops.kernels import KernelsError, Snapshot
from tools import cli

ROOT = Path(__file__).resolve().parent.parent
SAVE_DIR = ROOT / "reports" / "kernels"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + error
        raise KernelsError(f"{message} (see {self.prog} --help)")


def _label(s: Snapshot) -> str:
    return f"torch {s.torch_version or '(unknown version)'} ({s.source})"


def table_text(s: Snapshot) -> str:
    c = kernels.counts(s.table)
    other = ", ".join(f"{k} {n}" for k, n in c["other_mps_keys"].items()) or "none"
    head = [_label(s),
            f"{c['mps']} of {c['entries']} native_functions.yaml entries have a native MPS kernel: "
            f"{c['mps_direct']} name MPS in their dispatch, {c['mps_via_delegate']} through their structured_delegate",
            f"other MPS keys (not counted): {other}; composites (not counted): "
            f"{c['composite_implicit']} implicit, {c['composite_explicit']} explicit",
            f"caveat: {kernels.CAVEAT}"]
    return "\n".join([*(f"# {h}" for h in head), *kernels.mps_ops(s.table)])


def diff_text(old: Snapshot, new: Snapshot) -> str:
    d = kernels.diff(old.table, new.table)
    new_ops, removed, composite = set(d["new_ops"]), set(d["removed_ops"]), set(d["now_composite"])
    out = [f"# {_label(old)} -> {_label(new)}",
           f"# MPS ops: {kernels.counts(old.table)['mps']} -> {kernels.counts(new.table)['mps']}: "
           f"{len(d['gained'])} gained ({len(new_ops)} of them new ops), {len(d['lost'])} lost "
           f"({len(removed)} of them removed ops, {len(composite)} now composite), {d['unchanged']} unchanged",
           f"# caveat: {kernels.CAVEAT}", f"gained ({len(d['gained'])}):"]
    out += [f"  + {n}{' (new op)' if n in new_ops else ''}" for n in d["gained"]]
    out += [f"lost ({len(d['lost'])}):"]
    why = {**{n: " (now CompositeImplicitAutograd)" for n in composite}, **{n: " (op removed)" for n in removed}}
    out += [f"  - {n}{why.get(n, '')}" for n in d["lost"]]
    return "\n".join(out)


def _parser() -> tuple[_Parser, _Parser]:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--format", choices=("text", "json"), default="text", help="what to print (default: text)")
    where = common.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="FILE", help="write the JSON document to FILE")
    where.add_argument("--save", action="store_true", help=f"write the JSON document under {SAVE_DIR}")
    table = _Parser(prog="python -m tools.kernels", parents=[common], description=cli.summary(__doc__),
                    epilog="diff: python -m tools.kernels diff A B (--help for its options)")
    source = table.add_mutually_exclusive_group()
    source.add_argument("--wheel", metavar="PATH", help="a torch wheel file")
    source.add_argument("--torch-version", metavar="X", help="download the macOS arm64 wheel of torch X (cached)")
    dif = _Parser(prog="python -m tools.kernels diff", parents=[common],
                  description="MPS ops gained and lost from A to B")
    dif.add_argument("old", metavar="A", help="a torch version, a wheel path, or 'installed'")
    dif.add_argument("new", metavar="B", help="a torch version, a wheel path, or 'installed'")
    return table, dif


def out_problem(path) -> str | None:
    """Why ``--out`` cannot be ``path``: a file that holds something other than a kernel table
    or diff this tool wrote (their JSON begins with the schema), which replacing would lose."""
    why = runfiles.held_otherwise(path, lambda head: head.startswith(b'{\n "schema": '), "a kernel table or diff")
    return f"--out {path}: {why}; replacing it would lose what it holds; give a new path" if why else None


def run(argv: list[str]) -> int:
    table_p, diff_p = _parser()
    args = (diff_p.parse_args(argv[1:]) if argv[:1] == ["diff"] else table_p.parse_args(argv))
    problem = out_problem(args.out) if args.out else None
    if problem:   # before a download: a mistyped --out must not cost a file
        raise KernelsError(problem)
    if argv[:1] == ["diff"]:
        old, new = kernels.load_spec(args.old), kernels.load_spec(args.new)
        doc, text = kernels.diff_doc(old, new), diff_text(old, new)
        name = f"diff-{kernels.base_version(old.torch_version)}-{kernels.base_version(new.torch_version)}.json"
        summary = f"{len(doc['gained'])} gained, {len(doc['lost'])} lost, {doc['unchanged']} unchanged"
    else:
        snap = (kernels.load_wheel(args.wheel) if args.wheel else
                kernels.load_version(args.torch_version) if args.torch_version else kernels.load_installed())
        doc, text = kernels.table_doc(snap), table_text(snap)
        name = f"{kernels.base_version(snap.torch_version)}.json"
        summary = f"{doc['counts']['mps']} MPS ops of {doc['counts']['entries']} entries ({_label(snap)})"
    dump = json.dumps(doc, indent=1)
    out = Path(args.out) if args.out else SAVE_DIR / name if args.save else None
    if out is None:
        print(dump if args.format == "json" else text)
        return 0
    try:
        runfiles.write_atomic(out, dump + "\n")
    except OSError as exc:
        raise KernelsError(f"{out}: cannot write: {exc.strerror or exc}") from None
    print(f"wrote {out}: {summary}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else list(argv))
    except KernelsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help (errors go through _Parser.error)
        return exc.code or 0
    except BrokenPipeError:  # `| head`: stop quietly (Python docs, "Note on SIGPIPE")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
