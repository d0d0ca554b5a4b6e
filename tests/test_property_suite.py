"""The property-parity suite: what its strategies draw, that it catches a layout bug with
a reproducer, and that its default (ci) profile gives the same records on every run."""
import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import find, given, settings, strategies as st

from harness import hypothesis_profiles, journal, strategies as S
from harness.pytest_plugin import Recorder
from tests.conftest import ROOT

FIND = settings(max_examples=2000, derandomize=True, database=None)
MANY = settings(max_examples=200)
NON_CONTIGUOUS = ("transposed", "permuted", "strided", "expanded")


def realized(ex: S.Example) -> dict:
    """The example's tensors as the CPU float32 check sees them."""
    return {name: t for name, t in ex.arguments(ex.make(), torch.float32, "cpu").items()
            if isinstance(t, torch.Tensor)}


def floats_of(ex: S.Example) -> list[tuple[S.Floats, torch.Tensor]]:
    args = realized(ex)
    return [(spec, args[name]) for name, spec in ex.inputs if isinstance(spec, S.Floats)]


# --------------------------------------------------------------------------- what the strategies draw

@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
def test_every_layout_reaches_the_op_as_a_non_contiguous_view(layout):
    ex = find(S.attention(), lambda e: any(spec.layout == layout and not t.is_contiguous()
                                           for spec, t in floats_of(e)), settings=FIND)
    views = [t for spec, t in floats_of(ex) if spec.layout == layout and not t.is_contiguous()]
    assert views
    if layout == "expanded":
        assert 0 in views[0].stride()
    if layout == "strided":
        assert views[0].stride()[-1] == 2 and views[0].storage_offset() == 1


@pytest.mark.parametrize("wanted", [
    pytest.param(lambda s: 0 in s, id="zero-size"),
    pytest.param(lambda s: 1 in s, id="side-of-1"),
    pytest.param(lambda s: {7, 13, 31} & set(s), id="prime"),
    pytest.param(lambda s: 3001 in s, id="few-thousand-prime"),
    pytest.param(lambda s: 2048 in s and len(s) > 1, id="few-thousand-with-batch"),
])
def test_shapes_reach_the_edges(wanted):
    assert wanted(find(S.shapes(), wanted, settings=FIND))


@MANY
@given(shape=S.shapes())
def test_shapes_stay_within_the_element_budget(shape):
    assert torch.Size(shape).numel() <= S.MAX_ELEMENTS


def test_matmul_batches_broadcast_and_baddbmm_input_broadcasts():
    def broadcasts(e):
        a, b = (dict(e.inputs)[n].shape[:-2] for n in ("a", "b"))
        return a != b and len(a) > 0 and len(b) > 0
    ex = find(S.matmuls(), broadcasts, settings=FIND)
    a, b = realized(ex)["a"], realized(ex)["b"]
    assert torch.matmul(a, b).shape[:-2] == torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    ex = find(S.baddbmm(), lambda e: len(dict(e.inputs)["input"].shape) < 3, settings=FIND)
    assert len(realized(ex)["input"].shape) < 3


@MANY
@given(ex=S.without_ties(dim_none=True))
def test_index_returning_ops_see_no_ties_in_any_dtype(ex):
    base = ex.make()["x"]
    x = dict(ex.inputs)["x"].view(base)
    dim = dict(ex.options)["dim"]
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        along = x.to(dtype).flatten() if dim is None else x.to(dtype).movedim(dim, -1)
        ordered = along.sort(-1).values
        assert not bool((ordered[..., 1:] == ordered[..., :-1]).any()), dtype


@MANY
@given(ex=S.cross_entropy())
def test_cross_entropy_targets_have_ignored_entries_but_never_only(ex):
    target, c = realized(ex)["target"], dict(ex.inputs)["target"].high
    assert bool(((target == -100) | ((target >= 0) & (target < c))).all())
    assert bool((target != -100).any())


def test_some_cross_entropy_example_ignores_some_targets():
    ex = find(S.cross_entropy(), lambda e: bool((realized(e)["target"] == -100).any()), settings=FIND)
    assert bool((realized(ex)["target"] == -100).any())


@MANY
@given(ex=S.attention())
def test_attention_masks_never_hide_every_key_of_a_query(ex):
    mask = realized(ex).get("attn_mask")
    if mask is not None and mask.numel():
        assert bool(mask.any(-1).all())


def test_embedding_indices_include_the_padding_row():
    def padded(e):
        padding_idx = dict(e.options)["padding_idx"]
        return padding_idx is not None and bool((realized(e)["indices"] == padding_idx).any())
    assert padded(find(S.embedding(), padded, settings=FIND))


# --------------------------------------------------------------------------- the runner off the CPU target

def _softmax_on_a_stand_in_accelerator(fn):
    """A Tally for target "mps" whose device is the CPU: the accelerator branch, run here."""
    record = Recorder()
    tally = S.Tally(record, "float16", "mps", torch.device("cpu"))
    ex = S.Example(seed=3, scale=4.0, inputs=(("x", S.Floats((7, 13), "transposed")),), options=(("dim", -1),))

    @settings(max_examples=1, database=None)
    @given(st.just(ex))
    def once(example):
        tally.check("softmax", fn, example)

    once()
    return record.metrics


def test_off_the_cpu_the_target_is_judged_against_float64_with_the_cpu_as_the_yardstick():
    m = _softmax_on_a_stand_in_accelerator(lambda x, dim: torch.softmax(x, dim))
    assert m["reference"] == "float64" and m["yardstick"] == "cpu" and m["rule"] == "float64-rules"
    assert 0 < m["cpu_ref_err"] == m["target_ref_err"] == m["max_abs_err"] < m["atol"] and m["margin"] < 1
    assert "ACCURACY" not in m["tolerance_source"] and "the CPU's own error" in m["tolerance_source"]


def test_a_side_that_overflows_where_float64_does_not_is_infinitely_off():
    m = _softmax_on_a_stand_in_accelerator(lambda x, dim: x * 1e5)  # beyond float16's 65504
    assert m["cpu_ref_err"] == m["target_ref_err"] == math.inf


# --------------------------------------------------------------------------- the suite, run in a child pytest

def run(tmp_path, *args):
    run_file = tmp_path / f"run{len(list(tmp_path.iterdir()))}.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/parity/test_properties.py", "-m", "parity and cpu",
                          "-q", "-p", "no:cacheprovider", "--run-file", str(run_file), *args],
                         cwd=ROOT, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    records = [r for run_ in journal.read_file(run_file).runs for r in run_.records] if run_file.exists() else []
    return res, records


def test_a_gelu_wrong_only_for_non_contiguous_inputs_fails_with_a_reproducer(tmp_path):
    res, records = run(tmp_path, "-k", "float32", "-p", "tests.prop_sabotage")
    status = {r["subject"]: r["status"] for r in records}
    assert res.returncode == 1, res.stdout[-3000:]
    assert status.pop("gelu") == "fail"
    assert len(status) > 20 and set(status.values()) == {"pass"}
    gelu = next(r for r in records if r["subject"] == "gelu")
    assert "output 'out' is off against float64" in gelu["reason"] and "margin=" in gelu["reason"]
    assert gelu["metrics"]["margin"] > 1
    # hypothesis's smallest failing example ("Falsifying example" in older hypothesis), then
    # the note of the strides the op saw
    marker = next(m for m in ("Failing test case: test_gelu(", "Falsifying example: test_gelu(") if m in res.stdout)
    shown = res.stdout[res.stdout.index(marker):]
    assert "seed=" in shown and "inputs on cpu: x (" in shown and "stride" in shown
    assert any(f"layout='{name}'" in shown for name in NON_CONTIGUOUS)


@pytest.mark.slow
def test_the_ci_profile_is_the_default_and_gives_the_same_records_on_every_run(tmp_path):
    pick = ("-k", "(silu or embedding) and float32")
    key = lambda recs: sorted((r["check"], r["status"], str(r["metrics"])) for r in recs)  # noqa: E731
    _, first = run(tmp_path, *pick)
    _, second = run(tmp_path, *pick)
    assert len(first) == 2 and key(first) == key(second)
    assert {r["metrics"]["examples"] for r in first} == {hypothesis_profiles.CI_EXAMPLES}


def test_the_deep_profile_draws_more_examples(tmp_path):
    _, deep = run(tmp_path, "-k", "silu and float32", "--hypothesis-profile=deep")
    assert [r["metrics"]["examples"] for r in deep] == [hypothesis_profiles.DEEP_EXAMPLES]
