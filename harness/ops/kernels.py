"""The static MPS kernel table: which aten ops have a native MPS kernel in a torch version.

Source of the facts: every torch wheel ships ``torchgen/packaged/ATen/native/
native_functions.yaml`` (checked in the 2.6.0, 2.14.1 and 2.15.0 wheels), the list from
which torchgen generates the dispatcher registrations. Each entry has ``func: name.overload
(args) -> ret`` and optionally ``dispatch:``, a mapping whose keys are comma-separated
dispatch keys (``CPU, CUDA, MPS: impl``). The rules below are torchgen's own
(``torchgen/model.py``, ``NativeFunction.from_yaml``; ``torchgen/dest/register_dispatch_key.py``):

- An entry *has a native MPS kernel* when ``MPS`` is one of its dispatch keys.
- ``structured_delegate: foo.out``: the functional / in-place variant of a structured
  kernel carries no backend key of its own (torchgen rejects CPU/CUDA/MPS/XPU/MTIA there:
  "if structured_delegate, then must not have {key} in dispatch dictionary (it is
  delegated!)") and gets one generated for every backend its ``.out`` delegate names. So
  an entry has an MPS kernel when its delegate does.
- An entry with neither ``dispatch`` nor ``structured_delegate`` is CompositeImplicitAutograd.
- Other keys ending in ``MPS`` (``SparseMPS``, ``SparseCsrMPS``, ``QuantizedMPS`` ...) are
  kernels for those tensor layouts; they are counted apart and do not make an op "MPS".

What the table cannot see is in ``CAVEAT``. Everything here reads files; torch is never imported.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

SCHEMA = 1
YAML_MEMBER = "torchgen/packaged/ATen/native/native_functions.yaml"
MPS_KEY = "MPS"
CAVEAT = ("static table: it lists the ops whose native_functions.yaml entry registers an MPS kernel. It cannot "
          "see CompositeImplicitAutograd ops (they decompose into other ops and run on MPS when those do), nor "
          "CompositeExplicitAutograd kernels shared by every backend, nor ops that always go through the "
          "registered CPU fallback even where an MPS entry exists. Running the op is the ground truth "
          "(the ops suite).")
# macOS arm64 torch wheels are tagged macosx_11_0_arm64 up to 2.11 and macosx_14_0_arm64 from
# 2.12 (checked with pip 23.2: 2.6.0, 2.10.0, 2.11.0 are macosx_11_0; 2.12.0 has none; 2.14.1 is
# macosx_14_0). pip expands a macOS --platform to every earlier macOS version, so macosx_14_0
# alone finds both kinds; macosx_11_0 alone misses 2.12+. Both are passed, to say what is meant.
PLATFORMS = ("macosx_14_0_arm64", "macosx_11_0_arm64")
PYTHON_VERSION = "3.11"  # any CPython tag of the release will do: the yaml is the same in each


class KernelsError(Exception):
    """Input that cannot be turned into a kernel table; the message is one line."""


# --------------------------------------------------------------------------- parsing

def split_keys(key: str) -> list[str]:
    return [k.strip() for k in str(key).split(",") if k.strip()]


def parse(text: str, source: str = "<text>") -> dict[str, dict]:
    """{op overload name -> {dispatch_keys, mps, composite, structured_delegate}}, by the rules above."""
    import yaml   # here, not at the top: tools.report checks saved tables (table_problem) without PyYAML
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader reads the 630 kB file in 0.2 s
    try:
        entries = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise KernelsError(f"{source}: not valid YAML ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("func"), str)
                                                 for e in entries):
        raise KernelsError(f"{source}: not a native_functions.yaml (expected a list of entries with 'func:')")
    for e in entries:   # the fields read below, of the types torchgen writes: one line naming the first other one
        name = e["func"].split("(", 1)[0].strip()[:80]
        if not isinstance(e.get("dispatch"), (dict, type(None))):
            raise KernelsError(f"{source}: entry {name!r}: dispatch is {type(e['dispatch']).__name__}, "
                               "not a mapping of dispatch keys")
        if not isinstance(e.get("structured_delegate"), (str, type(None))):
            raise KernelsError(f"{source}: entry {name!r}: structured_delegate is "
                               f"{type(e['structured_delegate']).__name__}, not an op name")
    table: dict[str, dict] = {}
    for e in entries:
        name = e["func"].split("(", 1)[0].strip()
        keys = sorted({k for key in (e.get("dispatch") or {}) for k in split_keys(key)})
        delegate = e.get("structured_delegate")
        if any(k.startswith("CompositeImplicitAutograd") for k in keys) or (not keys and not delegate):
            composite = "implicit"
        elif any(k.startswith("CompositeExplicitAutograd") for k in keys):
            composite = "explicit"
        else:
            composite = None
        table[name] = {"dispatch_keys": keys, "mps": MPS_KEY in keys, "composite": composite,
                       "structured_delegate": delegate}
    for row in table.values():  # delegates are .out overloads, which are never delegates themselves
        if not row["mps"] and row["structured_delegate"]:
            row["mps"] = MPS_KEY in table.get(row["structured_delegate"], {}).get("dispatch_keys", ())
    return table


def mps_ops(table: dict) -> list[str]:
    """Sorted op overload names with a native MPS kernel (directly or through their delegate)."""
    return sorted(name for name, row in table.items() if row["mps"])


def composite_ops(table: dict) -> list[str]:
    """Sorted names without an MPS kernel of their own whose kernel is device-generic
    (CompositeImplicitAutograd: decomposes into other ops; CompositeExplicitAutograd: one
    kernel for every backend). "No MPS kernel" is no verdict on these."""
    return sorted(name for name, row in table.items() if not row["mps"] and row["composite"])


def other_mps_ops(table: dict) -> dict[str, list[str]]:
    """{SparseMPS / SparseCsrMPS / QuantizedMPS ... -> sorted ops naming that key}."""
    out: dict[str, list[str]] = {}
    for name, row in sorted(table.items()):
        for k in row["dispatch_keys"]:
            if k != MPS_KEY and k.endswith(MPS_KEY):
                out.setdefault(k, []).append(name)
    return dict(sorted(out.items()))


def counts(table: dict) -> dict:
    direct = sum(MPS_KEY in row["dispatch_keys"] for row in table.values())
    mps = sum(row["mps"] for row in table.values())
    return {"entries": len(table), "mps": mps, "mps_direct": direct, "mps_via_delegate": mps - direct,
            "composite_implicit": sum(row["composite"] == "implicit" for row in table.values()),
            "composite_explicit": sum(row["composite"] == "explicit" for row in table.values()),
            "other_mps_keys": {k: len(v) for k, v in other_mps_ops(table).items()}}


def diff(old: dict, new: dict) -> dict:
    """MPS ops gained and lost from ``old`` to ``new`` (tables), with what explains some of them:
    ``new_ops`` (gained, not in the old yaml at all), ``removed_ops`` (lost, gone from the new
    yaml: often a rename) and ``now_composite`` (lost, now CompositeImplicitAutograd: the op
    decomposes into others, e.g. linalg_lu_factor into linalg_lu_factor_ex from 2.6 to 2.14)."""
    a, b = set(mps_ops(old)), set(mps_ops(new))
    lost = sorted(a - b)
    return {"gained": sorted(b - a), "lost": lost, "unchanged": len(a & b),
            "new_ops": sorted(n for n in b - a if n not in old), "removed_ops": [n for n in lost if n not in new],
            "now_composite": [n for n in lost if new.get(n, {}).get("composite") == "implicit"]}


# --------------------------------------------------------------------------- loaders

@dataclasses.dataclass
class Snapshot:
    source: str                 # "installed:<yaml path>" or "wheel:<wheel path>"
    torch_version: str | None
    table: dict


def installed_yaml_path() -> Path:
    spec = importlib.util.find_spec("torchgen")
    if spec is None or not spec.submodule_search_locations:
        raise KernelsError("torchgen not found: torch is not installed in this Python "
                           f"({sys.executable}); pass --wheel PATH or --torch-version X")
    path = Path(list(spec.submodule_search_locations)[0]) / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not path.is_file():
        raise KernelsError(f"{path}: missing; this torch install ships no native_functions.yaml "
                           "(a source build?); pass --wheel PATH or --torch-version X")
    return path


def load_installed() -> Snapshot:
    path = installed_yaml_path()
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return Snapshot(f"installed:{path}", version, parse(path.read_text(encoding="utf-8"), str(path)))


def load_wheel(path: str | os.PathLike) -> Snapshot:
    """Read the yaml (and the version, from the dist-info METADATA) out of a wheel, without extracting it."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            if YAML_MEMBER not in names:
                raise KernelsError(f"{path}: no {YAML_MEMBER} in it (not a torch wheel?)")
            text = zf.read(YAML_MEMBER).decode("utf-8")
            meta = next((n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
            version = HeaderParser().parsestr(zf.read(meta).decode("utf-8", "replace")).get("Version") if meta else None
    except FileNotFoundError:
        raise KernelsError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise KernelsError(f"{path}: is a directory, not a wheel") from None
    except zipfile.BadZipFile:
        raise KernelsError(f"{path}: not a wheel (not a zip file)") from None
    except OSError as exc:
        raise KernelsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return Snapshot(f"wheel:{path}", version, parse(text, f"{path}:{YAML_MEMBER}"))


def cache_root() -> Path:
    """The suite's cache: $MPS_COMPAT_CACHE, default ~/.cache/mps-compat."""
    return Path(os.environ.get("MPS_COMPAT_CACHE") or Path.home() / ".cache" / "mps-compat")


def cache_dir() -> Path:
    """Where downloaded wheels are kept: <cache_root>/wheels."""
    return cache_root() / "wheels"


def check_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise KernelsError(f"not a torch version: {version!r} (expected e.g. 2.6.0)") from None


def cached_wheel(version: str, dest: Path) -> Path | None:
    want = check_version(version)
    for whl in sorted(dest.glob("torch-*.whl")) if dest.is_dir() else ():
        try:
            if Version(whl.name.split("-")[1]) == want:
                return whl
        except (IndexError, InvalidVersion):
            continue
    return None


def pip_reason(output: str, version: str | None = None) -> str:
    """One line from pip's output saying why a download failed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    text = "\n".join(lines)
    if "No module named pip" in text:
        return f"pip is not installed in {sys.executable}; install it, or pass a wheel file"
    if re.search(r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution"
                 r"|ConnectTimeout|Network is unreachable", text):
        return "pip could not reach the package index (no network?)"
    constraint = re.search(r"The user requested \(constraint\) (\S+)", text)
    if constraint:
        req = constraint.group(1)
        try:  # pip blames its constraint even when the constraint allows the version and no wheel matched
            allowed = version is not None and Requirement(req).specifier.contains(version, prereleases=True)
        except (InvalidRequirement, InvalidVersion):
            allowed = False
        if allowed:
            return f"no macOS arm64 wheel of torch=={version} found (pip reports a conflict with its constraint {req})"
        return f"pip's constraint {req} excludes it (set in a pip constraints file or PIP_CONSTRAINT)"
    for pattern in (r"ERROR: (No matching distribution found for .*)", r"ERROR: (Could not find a version.*?)"
                    r"( \(from versions:.*)?$", r"ERROR: (.*)"):
        m = next((re.match(pattern, line) for line in lines if re.match(pattern, line)), None)
        if m:
            return m.group(1)[:300]
    return (lines[-1] if lines else "pip failed with no output")[:300]


def download_wheel(version: str, dest: str | os.PathLike | None = None, python_version: str = PYTHON_VERSION,
                   timeout: float = 900) -> Path:
    """The macOS arm64 torch wheel of ``version``, from the cache or downloaded into it with pip.

    Runs ``python -m pip download --no-deps --only-binary=:all: --platform ... --python-version
    3.11 torch==VERSION`` into a temporary directory beside the cache and moves the wheel in,
    so an interrupted download never leaves a partial wheel behind. pip's own configuration
    (index, constraints files) applies.
    """
    check_version(version)
    dest = Path(dest) if dest is not None else cache_dir()
    hit = cached_wheel(version, dest)
    if hit:
        return hit
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               *(a for p in PLATFORMS for a in ("--platform", p)), "--python-version", python_version,
               f"torch=={version}", "-d", tmp, "--progress-bar", "off", "--retries", "2"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KernelsError(f"torch=={version}: pip download took more than {timeout:.0f} s") from None
        wheels = sorted(Path(tmp).glob("torch-*.whl"))
        if res.returncode != 0 or not wheels:
            raise KernelsError(f"torch=={version}: download failed: {pip_reason(res.stdout + res.stderr, version)}")
        target = dest / wheels[0].name
        shutil.move(str(wheels[0]), target)
    return target


def load_version(version: str, dest: str | os.PathLike | None = None) -> Snapshot:
    return load_wheel(download_wheel(version, dest))


def load_spec(spec: str) -> Snapshot:
    """``installed``, a wheel path, or a torch version to download."""
    if spec == "installed":
        return load_installed()
    if spec.endswith(".whl") or os.sep in spec or Path(spec).exists():
        return load_wheel(spec)
    try:
        Version(spec)
    except InvalidVersion:
        raise KernelsError(f"{spec}: neither a wheel file nor a torch version") from None
    return load_version(spec)


# --------------------------------------------------------------------------- documents

def base_version(version: str | None) -> str:
    return (version or "unknown").split("+")[0]


def table_doc(snap: Snapshot) -> dict:
    return {"schema": SCHEMA, "source": snap.source, "torch_version": snap.torch_version,
            "mps_ops": mps_ops(snap.table), "composite_ops": composite_ops(snap.table), "counts": counts(snap.table),
            "other_mps_ops": other_mps_ops(snap.table), "caveat": CAVEAT}


# A saved table's fields as its readers take them (tools.report's predicted section, tools.audit):
# name -> (the type, in words). A table is a file that may have been edited or cut short.
TABLE_FIELDS = {"mps_ops": (list, "a list of op names"), "torch_version": ((str, type(None)), "text or null"),
                "source": (str, "text"), "caveat": (str, "text"), "counts": (dict, "an object"),
                "composite_ops": (list, "a list of op names"), "other_mps_ops": (dict, "an object")}


def is_table(doc) -> bool:
    """Whether a saved document is a kernel table (a diff has no ``mps_ops``)."""
    return isinstance(doc, dict) and "mps_ops" in doc


def table_problem(doc: dict) -> str | None:
    """What keeps a saved kernel table (``table_doc``) from being read, in one phrase naming
    the field; None when it can be. Its op lists must hold names (text) only."""
    if doc.get("schema") != SCHEMA or isinstance(doc.get("schema"), bool):
        said = repr(doc.get("schema"))
        said = said if len(said) <= 40 else said[:39] + "…"
        return f"kernel table schema {said}, this reader understands {SCHEMA}"
    for name, (types, words) in TABLE_FIELDS.items():
        if name in doc and not isinstance(doc[name], types):
            return f"field {name} is {type(doc[name]).__name__}, not {words}"
    for name in ("mps_ops", "composite_ops"):
        bad = next((i for i, op in enumerate(doc.get(name) or []) if not isinstance(op, str)), None)
        if bad is not None:
            return f"field {name}[{bad}] is {type(doc[name][bad]).__name__}, not an op name (text)"
    return None


def diff_doc(old: Snapshot, new: Snapshot) -> dict:
    side = lambda s: {"source": s.source, "torch_version": s.torch_version, "mps": counts(s.table)["mps"]}  # noqa: E731
    return {"schema": SCHEMA, "old": side(old), "new": side(new), **diff(old.table, new.table), "caveat": CAVEAT}
