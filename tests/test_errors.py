"""An exception as a record's line (harness.core.errors): where a library asks this torch for a
name it lacks (transformers 5.24 on torch 2.6: ``torch.compiler.is_exporting``), the line names
the library, its version, the file and the versions to change; any other error is left as it was.

The library here is a real installed distribution, made in a temporary site-packages folder
(a package and its dist-info), so the line is found the way a user's would be.
"""
import pytest
import torch

from harness.core import errors, records
from harness.core.isolate import Outcome, Sandbox
from harness.core.records import Category
from harness.parity import compiled
from harness.plugin.record import Recorder
from harness.report import verdict

RELEASE = "torch " + ".".join(torch.__version__.split(".")[:2])


@pytest.fixture
def gaplib(tmp_path, monkeypatch):
    """``gaplib`` 1.2.3 installed in a site-packages folder: ``ask()`` calls a torch name no torch
    has, ``ask_compiled_style()`` raises what dynamo raises (the user code in the message)."""
    site = tmp_path / "lib" / "site-packages"
    (site / "gaplib").mkdir(parents=True)
    (site / "gaplib" / "__init__.py").write_text(
        "import torch\n\n\ndef ask():\n    return torch.compiler.no_such_name()\n")
    (site / "gaplib" / "keywords.py").write_text(
        "import torch\nimport torch.nn.functional as F\nimport torch.utils.checkpoint\n\n"
        "def attend(q):\n    return F.scaled_dot_product_attention(\n        q, q, q,\n        no_such_keyword=True)\n\n\n"
        "def method(x):\n    return x.tril(0, no_such_keyword=1)\n\n\n"
        "def optimizer(p):\n    return torch.optim.AdamW([p], no_such_keyword=1)\n\n\n"
        "def passes_on(fn, x):   # torch hands the keyword to the library's own function\n"
        "    return torch.utils.checkpoint.checkpoint(fn, x, no_such_keyword=1, use_reentrant=False)\n\n\n"
        "def own(x):\n    return x\n\n\n"
        "def imports():\n    import torch.no_such_module  # noqa: F401\n\n\n"
        "def tensor(x):\n    return x.no_such_method()\n")
    info = site / "gaplib-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gaplib\nVersion: 1.2.3\n")
    (info / "top_level.txt").write_text("gaplib\n")
    monkeypatch.syspath_prepend(str(site))
    errors._distributions.cache_clear()
    yield site
    errors._distributions.cache_clear()


def _raised(fn) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def test_a_library_asking_torch_for_a_missing_name_is_named_with_its_version_file_and_the_switch(gaplib):
    import gaplib as lib
    line = records.error_line(_raised(lib.ask))
    assert line.startswith("AttributeError: module 'torch.compiler' has no attribute 'no_such_name'; ")
    assert (f"gaplib 1.2.3 calls torch.compiler.no_such_name (gaplib/__init__.py line 5), which torch "
            f"{torch.__version__} lacks: upgrade torch (or downgrade it, where torch removed the name), or install a gaplib release made for {RELEASE}") in line
    assert errors.gap_switch(line) == f"upgrade torch (or downgrade it, where torch removed the name), or install a gaplib release made for {RELEASE}"


def test_dynamos_user_code_frames_in_its_message_find_the_library_when_the_traceback_is_torchs(gaplib):
    """Dynamo raises from its own frames and writes the traced user code into the message."""
    where = gaplib / "gaplib" / "masks.py"
    try:
        raise AttributeError("module 'torch.compiler' has no attribute 'is_exporting'")
    except AttributeError as inner:
        exc = RuntimeError(f"AttributeError: {inner}\n\nfrom user code:\n   File \"{where}\", line 353, in f\n    x")
    line = errors.one_line(exc)
    assert line.count("\n") == 0 and "gaplib 1.2.3 calls torch.compiler.is_exporting (gaplib/masks.py line 353)" in line


def test_an_import_of_a_missing_torch_name_is_a_gap_too(gaplib):
    exc = ImportError("cannot import name 'flex_attention' from 'torch.nn.attention' (/x/torch/nn/attention.py)")
    line = errors.one_line(exc)
    assert "a library calls torch.nn.attention.flex_attention, which torch" in line
    said = errors.gap_metrics(line)   # no library found: the cause names none
    assert said["cause"] == "version-gap" and said["cause_what"].startswith("a library asks"), said


@pytest.mark.parametrize("call, said, line", [
    ("attend", "torch.nn.functional.scaled_dot_product_attention with the keyword no_such_keyword", 6),
    ("method", "torch.Tensor.tril with the keyword no_such_keyword", 12),
    ("optimizer", "torch.optim.AdamW with the keyword no_such_keyword", 16),
    ("imports", "torch.no_such_module", 28),
    ("tensor", "torch.Tensor.no_such_method", 32)])
def test_a_keyword_module_or_tensor_method_this_torch_lacks_is_a_gap_named_as_the_library_wrote_it(gaplib, call, said, line):
    """transformers passing ``enable_gqa=`` to an older torch's scaled_dot_product_attention:
    the TypeError names only ``scaled_dot_product_attention()``; the line says whose function
    (the alias ``F`` spelled out) and which library's call, across a call written over lines."""
    from gaplib import keywords
    x = torch.ones(1, 2, 2)
    out = records.error_line(_raised(lambda: getattr(keywords, call)(*(() if call == "imports" else (x,)))))
    assert (f"; gaplib 1.2.3 calls {said} (gaplib/keywords.py line {line}), which torch {torch.__version__} lacks: "
            f"upgrade torch (or downgrade it, where torch removed the name), or install a gaplib release made for {RELEASE}") in out, out
    assert errors.gap_metrics(out)["cause"] == "version-gap: gaplib"


def test_a_keyword_torch_passes_on_to_a_function_of_the_librarys_own_is_no_gap(gaplib):
    """checkpoint hands its extra keywords to the function it runs: that function refusing one is
    the library's own mistake, whatever torch, and the line names no versions."""
    from gaplib import keywords
    out = records.error_line(_raised(lambda: keywords.passes_on(keywords.own, torch.ones(2))))
    assert out == "TypeError: own() got an unexpected keyword argument 'no_such_keyword'" and errors.gap_switch(out) is None


@pytest.mark.parametrize("exc", [ValueError("bad input\nsecond line"), AttributeError("'NoneType' has no attribute 'x'"),
                                 AttributeError("module 'numpy' has no attribute 'float'"),
                                 TypeError("softmax() got an unexpected keyword argument 'dim2'"),   # no frame: nothing seen to be torch's
                                 ModuleNotFoundError("No module named 'torch'")])
def test_any_other_error_keeps_its_first_line_and_names_no_switch(exc):
    line = records.error_line(exc)
    assert line == f"{type(exc).__name__}: {str(exc).splitlines()[0]}" and errors.gap_switch(line) is None


def test_the_sandbox_child_says_the_gap_in_its_line():
    box = Sandbox(timeout=120)
    try:
        out = box.call("tests.sandbox_targets:asks_torch_for_a_missing_name")
    finally:
        box.close()
    assert out.kind == "raised", out
    assert out.detail.startswith("AttributeError: module 'torch' has no attribute 'no_such_name'; ")
    assert f"which torch {torch.__version__} lacks: upgrade torch" in out.detail


def test_a_compile_failure_from_a_version_gap_says_the_versions_once_and_asks_for_no_bug_report(gaplib):
    import gaplib as lib
    error = records.error_line(_raised(lib.ask))
    verdict = compiled._compile_failed(error, "eager", "model bert", {})
    assert verdict.category == Category.COMPILE_FAILED and verdict.cause == "version-gap: gaplib"
    assert verdict.message.count("upgrade torch") == 1 and compiled.REPORT not in verdict.message
    assert verdict.message.endswith("; or " + compiled.EAGERLY)
    assert verdict.metrics["switch"] == f"upgrade torch (or downgrade it, where torch removed the name), or install a gaplib release made for {RELEASE}"
    other = compiled._compile_failed("RuntimeError: something else", "eager", "model bert", {})
    assert compiled.REPORT in other.message and "upgrade torch" not in other.message


def test_every_check_one_librarys_gap_broke_is_one_cause_on_the_page_with_the_versions_to_change(gaplib):
    """The compiled family's record and a check that raised in the sandbox (the optimization
    suite's torch-compile claim) group under one cause, with the switch; another library's gap
    is a cause of its own, and an ordinary error stays ungrouped."""
    import gaplib as lib
    line = records.error_line(_raised(lib.ask))
    compiled_rec = {"check": "parity/compiled.bert/float32/forward-backward", "status": "fail",
                    "metrics": compiled._compile_failed(line, "eager", "model bert", {}).metrics}
    claim = Recorder()
    with pytest.raises(pytest.fail.Exception):
        claim.value_of(Outcome("raised", detail=line), "the measurement")
    other = line.replace("gaplib", "otherlib")
    plain = Recorder()
    with pytest.raises(pytest.fail.Exception):
        plain.value_of(Outcome("raised", detail="RuntimeError: boom"), "the measurement")
    recs = [compiled_rec, {"check": "optim/torch-compile/time", "status": "fail", "metrics": claim.metrics},
            {"check": "optim/x/time", "status": "fail", "metrics": errors.gap_metrics(other)},
            {"check": "optim/y/time", "status": "fail", "metrics": plain.metrics}]
    groups = {g.cause: g for g in verdict.failure_groups(recs)}
    assert groups["version-gap: gaplib"].checks == ["parity/compiled.bert/float32/forward-backward",
                                                    "optim/torch-compile/time"]
    assert groups["version-gap: gaplib"].switch == f"upgrade torch (or downgrade it, where torch removed the name), or install a gaplib release made for {RELEASE}"
    assert "gaplib asks this torch for a name it lacks" in groups["version-gap: gaplib"].what
    assert groups["version-gap: otherlib"].checks == ["optim/x/time"] and "otherlib" in groups["version-gap: otherlib"].switch
    assert plain.metrics == {} and groups[verdict.UNDETERMINED].checks == ["optim/y/time"]


def test_a_model_audit_that_fails_on_a_missing_torch_name_keeps_its_phase_and_names_the_library(gaplib):
    """The ops suite's model step (harness.ops.audit) writes its failure through the same line:
    the phase first, then the library and the versions to change."""
    import gaplib as lib
    from harness.ops import audit
    line = audit._one_line("forward", _raised(lib.ask))
    assert line.startswith("forward: AttributeError: module 'torch.compiler' has no attribute 'no_such_name'; ")
    assert "gaplib 1.2.3 calls torch.compiler.no_such_name" in line and errors.gap_switch(line)
