"""An exception in the words a record keeps: one line, and, where a library asks this torch
for something it lacks, who asks and what to change.

A library made for a newer torch fails on an older one in a way its first line does not
explain: transformers 5.24 calls ``torch.compiler.is_exporting()`` in its mask code, which
torch 2.6 lacks. Run eagerly, transformers' own try/except hides it; compiled, dynamo ends
graph capture with "InternalTorchDynamoError: AttributeError: module 'torch.compiler' has no
attribute 'is_exporting'", and every compiled BERT or Llama fails. The user can act on
that only when told which library asks and which versions meet: ``api_gap`` finds the
library in the traceback (or in the user-code frames dynamo writes into its message) and
``one_line`` adds it to the line, with the switch (upgrade torch, or downgrade it where torch
removed the name, or install a release of that library made for this torch).

The same gap shows in three more shapes, read the same way: a torch module the library imports
("No module named 'torch.distributed.tensor'"), a Tensor method ("'Tensor' object has no
attribute 'x'"), and a keyword an older torch function does not take (transformers passing
``enable_gqa=`` to ``scaled_dot_product_attention``, which torch 2.4 rejects with "got an
unexpected keyword argument"). That message names only the function's bare name, so it counts
as a gap only where the call is seen to be torch's: the failing call's source (the innermost
frame's position) is parsed and its callee looked up in that frame, through modules, classes,
tensors and nn.Modules only. A user function torch passes the keyword on to (checkpoint's) is
not torch's, and is no gap.

Pure reading of an exception, of the source lines it points at and of the installed packages'
metadata: nothing is run.
"""
from __future__ import annotations

import ast
import builtins
import functools
import importlib.metadata
import inspect
import linecache
import re
import sys
import traceback
import types

# "module 'torch.compiler' has no attribute 'is_exporting'", "cannot import name 'x' from 'torch.y'"
_MISSING = (re.compile(r"module '(torch(?:\.\w+)*)' has no attribute '(\w+)'"),
            re.compile(r"cannot import name '(\w+)' from '(torch(?:\.\w+)*)'"),
            re.compile(r"No module named '(torch(?:\.\w+)+)'"),
            re.compile(r"'Tensor' object has no attribute '(\w+)'"))
_KEYWORD = re.compile(r"^([\w.<>]+)\(\) got an unexpected keyword argument '(\w+)'")
_FILE = re.compile(r'File "([^"]+)", line (\d+)')
_SWITCH = re.compile(r"lacks: (upgrade torch (?:\([^)]*\))?, or install [^;]*)")
_LIBRARY = re.compile(r"; ([\w.-]+) (?:\d[\w.+!-]*) calls torch\.")   # "<dist> <version> calls torch.x"
_SITE = re.compile(r"[/\\](?:site|dist)-packages[/\\]([A-Za-z_][\w]*)[/\\]")


def _missing_api(text: str) -> str | None:
    """The torch name ``text`` says is missing (``torch.compiler.is_exporting``), or None."""
    if m := _MISSING[0].search(text):
        return f"{m.group(1)}.{m.group(2)}"
    if m := _MISSING[1].search(text):
        return f"{m.group(2)}.{m.group(1)}"
    if m := _MISSING[2].search(text):
        return m.group(1)
    if m := _MISSING[3].search(text):
        return f"torch.Tensor.{m.group(1)}"
    return None


def _torch_module(obj) -> str | None:
    """The torch module ``obj`` (a function, class, method or builtin) belongs to, or None
    where it is not torch's."""
    owner = getattr(obj, "__self__", None)
    module = (getattr(obj, "__module__", None)
              or (type(owner).__module__ if owner is not None and not isinstance(owner, types.ModuleType) else None)
              or getattr(getattr(obj, "__objclass__", None), "__module__", None))
    return module if isinstance(module, str) and (module == "torch" or module.startswith("torch.")) else None


def _callee(tb) -> tuple[list[str], object, object] | None:
    """The function the innermost frame of ``tb`` was calling when it raised: its dotted
    expression as written (["F", "scaled_dot_product_attention"]), the object its first name
    is there and the object the whole names, or None. Lookups go through modules,
    classes, nn.Modules and a tensor's methods only, so no code of anyone else's runs."""
    frame = traceback.extract_tb(tb, limit=1)[0]
    if frame.colno is None or frame.end_lineno is None:
        return None
    lines = [line.encode() for line in linecache.getlines(frame.filename)[frame.lineno - 1:frame.end_lineno]]
    if not lines:
        return None
    if len(lines) == 1:
        lines[0] = lines[0][frame.colno:frame.end_colno]
    else:   # positions are byte offsets into the first and the last line
        lines[0], lines[-1] = lines[0][frame.colno:], lines[-1][:frame.end_colno]
    try:
        call = ast.parse(b"".join(lines).decode().strip(), mode="eval").body
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(call, ast.Call):
        return None
    path, node = [], call.func
    while isinstance(node, ast.Attribute):
        path.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    scopes = (tb.tb_frame.f_locals, tb.tb_frame.f_globals, vars(builtins))
    root = obj = next((scope[node.id] for scope in scopes if node.id in scope), None)
    torch = sys.modules.get("torch")
    plain = (types.ModuleType, type) + ((torch.Tensor, torch.nn.Module) if torch is not None else ())
    for attr in path:
        # a tensor's data attributes (.grad, .data) are read by code that may warn: methods only
        if not isinstance(obj, plain) or (torch is not None and isinstance(obj, torch.Tensor)
                                          and inspect.isdatadescriptor(inspect.getattr_static(obj, attr, None))):
            return None
        obj = getattr(obj, attr, None)
    return [node.id, *path], root, obj


def _rejected_keyword(exc: BaseException) -> str | None:
    """"torch.nn.functional.scaled_dot_product_attention with the keyword enable_gqa" where
    ``exc`` is a torch function refusing a keyword it does not take; None otherwise."""
    m = _KEYWORD.match(str(exc)) if isinstance(exc, TypeError) else None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    found = _callee(tb) if m and tb is not None else None
    if found is None:
        return None
    written, root, obj = found
    said = m.group(1).split(".")
    named = said[-2] if said[-1] == "__init__" and len(said) > 1 else said[-1]
    module = _torch_module(obj)
    if module is None or getattr(obj, "__name__", None) != named:
        return None
    if isinstance(root, types.ModuleType):   # as the library wrote it, its alias spelled out: F. -> torch.nn.functional.
        name = ".".join([root.__name__, *written[1:]])
    elif isinstance(getattr(obj, "__self__", None), sys.modules["torch"].Tensor):   # x.softmax(...)
        name = f"torch.Tensor.{named}"
    else:   # a method of a torch module or class: where it is defined
        name = f"{module}.{getattr(obj, '__qualname__', named)}"
    return f"{name} with the keyword {m.group(2)}"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _package_of(path: str) -> tuple[str, str, str] | None:
    """The installed distribution a source file belongs to, its version and the file's path
    inside it; None for torch, pytest, the standard library, this project and anything else
    outside site-packages."""
    m = _SITE.search(path)
    if not m or m.group(1) in ("torch", "_pytest", "pytest", "pluggy"):
        return None
    dists = _distributions().get(m.group(1)) or [m.group(1)]
    try:
        return dists[0], importlib.metadata.version(dists[0]), path[m.start(1):].replace("\\", "/")
    except importlib.metadata.PackageNotFoundError:
        return None


def api_gap(exc: BaseException) -> str | None:
    """Where a library asks this torch for a name it lacks: "transformers 5.24.0 calls
    torch.compiler.is_exporting (transformers/utils/import_utils.py line 1868), which torch
    2.6.0 lacks: upgrade torch (...), or install a transformers release made for torch 2.6". None
    when the exception is not a missing torch name. The caller is the last frame outside
    torch, of the traceback and of the user-code frames dynamo puts in its message."""
    texts = [str(e) for e in _chain(exc)]
    name = (next((n for t in texts if (n := _missing_api(t))), None)
            or next((n for e in _chain(exc) if (n := _rejected_keyword(e))), None))
    if name is None:
        return None
    frames = [(f.filename, str(f.lineno)) for e in _chain(exc)[::-1] for f in traceback.extract_tb(e.__traceback__)]
    frames += [m.groups() for t in texts[::-1] for m in _FILE.finditer(t)]
    caller = next(((pkg, line) for path, line in reversed(frames) if (pkg := _package_of(path))), None)
    try:
        import torch
        have, release = f"torch {torch.__version__}", "torch " + ".".join(torch.__version__.split(".")[:2])
    except ImportError:   # the error came from a torch import; no version to name
        have = release = "this torch"
    # Usually the library is newer than torch; where torch removed the name it is older, and
    # only the library's release notes tell which: both ways are said.
    torch_side = "upgrade torch (or downgrade it, where torch removed the name)"
    if caller is None:
        return (f"a library calls {name}, which {have} lacks: {torch_side}, or install a release of that library "
                f"made for {release}")
    (dist, version, file), line = caller
    return (f"{dist} {version} calls {name} ({file} line {line}), which {have} lacks: {torch_side}, "
            f"or install a {dist} release made for {release}")


def gap_switch(line: str) -> str | None:
    """What an error line (``one_line``'s) says to change where a library asks torch for a name
    it lacks ("upgrade torch (...), or install a transformers release made for torch 2.6"): a
    version mismatch, fixed by versions, not a bug to report. None for any other error."""
    m = _SWITCH.search(line) if " calls torch." in line else None
    return m.group(1) if m else None


GAP_CAUSE = "version-gap"


def gap_metrics(line: str) -> dict:
    """A record's cause, what happened and switch for an error line that is a version gap, so
    the report groups every check one library's gap broke under one cause ("version-gap:
    transformers") with the versions to change; {} for any other error."""
    switch = gap_switch(line)
    if switch is None:
        return {}
    library = _LIBRARY.search(line)
    name = library.group(1) if library else None
    return {"cause": f"{GAP_CAUSE}: {name}" if name else GAP_CAUSE,
            "cause_what": f"{name or 'a library'} asks this torch for a name it lacks: it was made for another torch",
            "switch": switch}


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type, the first line of its message, and ``api_gap``'s
    words where a library asks this torch for a name it lacks."""
    text = str(exc).strip()
    line = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
    gap = api_gap(exc)
    return f"{line}; {gap}" if gap else line
