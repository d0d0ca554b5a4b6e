"""harness.ops.audit (op recorder, fallback capture per phase, static prediction), harness.core.models
(the built-in tiny models) and the tools.audit command line."""
import json
import math
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from harness.core import models
from harness.env import devices, facts
from harness.ops import audit, fallback
from tests.conftest import ROOT
from tools import audit as audit_cli

FALLBACK_MSG = ("The operator '{op}' is not currently supported on the MPS backend and will fall back to run "
                "on the CPU. This may have performance implications.")


def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3), torch.randn(5, 4)


# --------------------------------------------------------------------------- the recorder

def test_op_names_are_spelled_as_the_mps_fallback_warning_spells_them():
    # operator_name() prints "name" or "name.overload" (no ".default"); OpOverload.name() too.
    assert audit.op_name(torch.ops.aten.addmm.default) == "aten::addmm"
    assert audit.op_name(torch.ops.aten.add.Tensor) == "aten::add.Tensor"
    warned = fallback.ops_named([FALLBACK_MSG.format(op="aten::add.Tensor"), FALLBACK_MSG.format(op="aten::addmm")])
    assert warned == [audit.op_name(torch.ops.aten.add.Tensor), audit.op_name(torch.ops.aten.addmm.default)]


def test_a_linear_layer_dispatches_addmm_forward_mm_backward_and_the_adamw_loop():
    model, x = linear()
    r = audit.audit_model(model, x, "cpu")
    assert r.error is None and r.device == "cpu"
    assert {"aten::addmm", "aten::t"} <= set(r.ops["forward"])
    assert {"aten::mm", "aten::sum.dim_IntList"} <= set(r.ops["backward"])
    # torch's default on the CPU (and on MPS): neither foreach nor fused, one op per parameter
    assert r.optimizer["path"] == "single-tensor"
    assert {"aten::lerp_.Scalar", "aten::addcdiv_", "aten::mul_.Tensor", "aten::sqrt"} <= set(r.ops["optimizer"])
    assert r.calls["optimizer"]["aten::addcdiv_"] == 2  # weight and bias
    assert not any(op.startswith("profiler::") for op in r.ops["optimizer"])
    assert all(op.startswith("aten::") and not op.endswith(".default") for ph in audit.PHASES for op in r.ops[ph])
    assert r.fallback_ops == [] and math.isfinite(r.loss)


@pytest.mark.parametrize("optimizer, path, op", [("adamw-foreach", "foreach", "aten::_foreach_lerp_.Scalar"),
                                                 ("adamw-fused", "fused", "aten::_fused_adamw_"),
                                                 ("sgd", "single-tensor", "aten::add_.Tensor")])
def test_the_optimizer_kernel_path_is_read_from_the_ops_it_dispatched(optimizer, path, op):
    model, x = linear()
    r = audit.audit_model(model, x, "cpu", optimizer=optimizer)
    assert r.error is None and r.optimizer["path"] == path and op in r.ops["optimizer"]


def test_a_failing_model_is_one_line_naming_the_phase_and_keeps_what_ran_before():
    class Boom(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            self.lin(x)
            raise ValueError("boom\nsecond line")

    r = audit.audit_model(Boom(), torch.randn(2, 4), "cpu")
    assert r.error == "forward: ValueError: boom"
    assert "aten::addmm" in r.ops["forward"] and r.ops["backward"] == []
    detached = audit.audit_model(torch.nn.Linear(4, 3), torch.randn(2, 4), "cpu", loss_fn=lambda o, b: o.detach().sum())
    assert detached.error.startswith("backward: RuntimeError:") and "\n" not in detached.error
    assert "aten::addmm" in detached.ops["forward"] and detached.ops["optimizer"] == []
    frozen = audit.audit_model(torch.nn.Linear(4, 3).requires_grad_(False), torch.randn(2, 4), "cpu")
    assert frozen.error == "setup: ValueError: optimizer got an empty parameter list"
    assert audit.audit_model(torch.nn.Linear(4, 3), torch.randn(2, 4), "tpu").error.startswith("setup: ")
    assert audit.audit_model(torch.nn.Linear(4, 3), torch.randn(2, 4), "cpu", optimizer="lion").error == \
        f"setup: ValueError: unknown optimizer 'lion'; known: {', '.join(audit.OPTIMIZERS)}"


def test_fallback_warnings_are_listed_under_the_phase_that_raised_them(monkeypatch):
    model, x = linear()
    original = model.forward

    def forward(inp):  # as MPS warns when an op without a kernel runs on the CPU
        warnings.warn(FALLBACK_MSG.format(op="aten::foo"), UserWarning)
        out = original(inp)
        out.register_hook(lambda g: warnings.warn(FALLBACK_MSG.format(op="aten::bar.out")) or g)
        warnings.warn("an unrelated warning")
        return out

    monkeypatch.setattr(model, "forward", forward)
    r = audit.audit_model(model, x, "cpu")
    assert r.error is None
    assert r.fallback_by_phase == {"forward": ["aten::foo"], "backward": ["aten::bar.out"], "optimizer": []}
    assert r.fallback_ops == ["aten::foo", "aten::bar.out"]
    assert "aten::addmm" in r.ops["forward"]  # the capture does not hide the ops
    assert r.warnings == ["an unrelated warning"]


# --------------------------------------------------------------------------- built-in models

class _Audits(dict):
    """A built-in model built and audited on the CPU when a test first asks for it, once per
    module: a run that deselects one (`-k "not minilm"` where its weights are absent) builds
    nothing of it. How long that takes is not taken here: a self-test asserts no time, and
    benchmarks/selftest_time.py prints the slowest tests."""

    def __missing__(self, name: str):
        ex = models.example(name)
        self[name] = found = (ex, audit.audit_model(ex.model, ex.batch, "cpu", loss_fn=ex.loss_fn))
        return found


@pytest.fixture(scope="module")
def audits():
    return _Audits()


@pytest.mark.parametrize("name", list(models.MODELS))
def test_each_built_in_model_audits_a_training_step_on_cpu(audits, name):
    ex, r = audits[name]
    assert r.error is None, r.error
    assert all(r.ops[phase] for phase in audit.PHASES)
    assert r.attn_implementation == ex.attn_implementation == "sdpa"
    assert r.optimizer["path"] == "single-tensor" and math.isfinite(r.loss)
    assert {"aten::mm", "aten::sum.dim_IntList"} & set(r.ops["backward"])


def test_minilm_is_the_pretrained_model_with_its_tokenizer(audits):
    ex, r = audits["minilm"]
    assert type(ex.model).__name__ == "BertModel" and ex.model.config.hidden_size == 384
    assert ex.batch["input_ids"].shape == (2 * len(models.MINILM_PAIRS), models.SEQ)
    assert ex.batch["input_ids"][0, 0].item() == models.minilm_tokenizer().cls_token_id


def test_models_and_batches_are_seeded_and_leave_the_callers_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = models.example("gpt2"), models.example("gpt2")
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(a.batch[k], b.batch[k]) for k in a.batch)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert set(a.batch) == {"input_ids", "attention_mask", "labels"}


def test_the_attention_implementation_is_chosen_explicitly_and_changes_the_ops():
    eager = models.example("llama", attn_implementation="eager")
    assert eager.attn_implementation == "eager"
    r = audit.audit_model(eager.model, eager.batch, "cpu")
    assert not any("scaled_dot_product" in op for op in r.ops["forward"])
    with pytest.raises(ValueError, match="attn_implementation"):
        models.tiny_bert(attn_implementation="flash")


def test_batch_for_shapes_labels_by_head():
    t5 = models.batch_for(models.tiny_t5())
    assert t5["labels"].shape == (models.BATCH, models.SEQ // 2)
    bert = models.batch_for(models.tiny_bert())
    assert bert["labels"].shape == (models.BATCH,)
    with pytest.raises(ValueError, match="vocab_size"):
        models.batch_for(torch.nn.Linear(2, 2))


# --------------------------------------------------------------------------- prediction

KERNELS = {"add.out", "addmm.out", "mm", "_softmax.out", "sum.IntList_out"}
DELEGATES = {"add.Tensor": "add.out", "add_.Tensor": "add.out", "addmm": "addmm.out"}


@pytest.mark.parametrize("name", ["gpt2", "llama", "t5", "bert"])
def test_a_float64_model_gets_a_float64_loss_equal_to_transformers_own_in_float32(name):
    """transformers' causal-LM loss upcasts with ``logits.float()``, which casts a float64
    model's logits down: the reference side of model parity would train on a float32 loss.
    ``loss_of`` computes it again in float64, with transformers' definition (same value)."""
    ex = models.example(name)
    ex.model.eval()  # no dropout: the two forwards must see the same network
    narrow = ex.model(**ex.batch).loss
    wide_model = ex.model.double()
    wide_out = wide_model(**ex.batch)
    loss = models.loss_of(wide_out, ex.batch, None, wide_model)
    assert loss.dtype == torch.float64 and loss.requires_grad
    assert float(loss) == pytest.approx(float(narrow), rel=1e-5)  # the same definition (shift, ignored pads)
    assert float(loss) != float(loss.float())  # float64's value, not a float32 one widened
    loss.backward()
    assert all(p.grad is None or p.grad.dtype == torch.float64 for p in wide_model.parameters())


def test_a_narrower_loss_without_the_model_to_recompute_it_is_one_clear_error():
    ex = models.example("gpt2")
    out = ex.model.double()(**ex.batch)
    with pytest.raises(TypeError, match="narrower dtype than its torch.float64 logits.*give loss_fn"):
        models.loss_of(out, ex.batch)


def test_normalize_op_accepts_each_spelling():
    for spelling in ("aten::add.Tensor", "aten.add.Tensor", "add.Tensor"):
        assert audit.normalize_op(spelling) == "add.Tensor"
    for spelling in ("aten::addmm", "aten.addmm.default", "addmm.default", "addmm"):
        assert audit.normalize_op(spelling) == "addmm"
    assert audit.normalize_op("custom::op.x") == "custom::op.x"


def test_predict_native_splits_on_a_fake_kernel_table():
    ops = {"forward": ["aten::addmm", "aten::t", "aten::add.Tensor", "aten::_scaled_dot_product_flash_attention_for_cpu"],
           "backward": ["aten::mm", "aten::foo.bar", "custom::op"], "optimizer": ["aten::add_.Tensor"]}
    p = audit.predict_native(ops, KERNELS, DELEGATES, composite_ops={"t"})
    assert p["with_kernel"] == ["aten::add.Tensor", "aten::add_.Tensor", "aten::addmm", "aten::mm"]
    assert p["composite"] == ["aten::t"]
    assert p["without_kernel"] == ["aten::_scaled_dot_product_flash_attention_for_cpu", "aten::foo.bar", "custom::op"]
    assert p["matched"] == {"aten::add.Tensor": "structured_delegate", "aten::add_.Tensor": "structured_delegate",
                            "aten::addmm": "structured_delegate", "aten::mm": "exact", "aten::t": "composite"}
    assert "CPU's SDPA kernel" in p["notes"]["aten::_scaled_dot_product_flash_attention_for_cpu"]


def test_predict_native_exact_names_by_default_op_family_on_request():
    ops = ["aten::add.Tensor", "aten::sum.dim_IntList", "aten::mm", "aten::gelu", "aten::col2im"]
    exact = audit.predict_native(ops, KERNELS | {"add.Tensor", "col2im"})  # a table with delegates resolved
    assert exact["with_kernel"] == ["aten::add.Tensor", "aten::col2im", "aten::mm"]
    assert exact["without_kernel"] == ["aten::gelu", "aten::sum.dim_IntList"] and exact["composite"] == []
    assert "CPU fallback" in exact["notes"]["aten::col2im"]
    loose = audit.predict_native(ops, KERNELS, by_name=True)
    assert loose["matched"]["aten::sum.dim_IntList"] == "same-name" and loose["without_kernel"] == ["aten::col2im",
                                                                                                   "aten::gelu"]


# --------------------------------------------------------------------------- the verdict

STEP_METRICS = ["model", "attn", "ops", "fallback_ops", "optimizer_path", "predicted_without_mps_kernel",
                "predicted_notes"]


def _step_result(**changes) -> audit.Audit:
    """audit_builtin's result for a step that ran natively on MPS."""
    ops = {"forward": ["aten::addmm", "aten::relu"], "backward": ["aten::mm"], "optimizer": ["aten::add_.Tensor"]}
    return audit.Audit(**{"model": "BertForSequenceClassification", "ops": ops, "device": "mps:0",
                          "attn_implementation": "sdpa", "optimizer": {"path": "single-tensor"}, **changes})


def test_the_step_verdict_is_native_a_fallback_or_an_unsupported_op_naming_the_switch():
    mps_ops = {"addmm", "relu", "mm", "add_.Tensor"}  # a table with delegates resolved
    native = audit.judge_builtin("bert", _step_result(), mps_ops, set())
    assert (native.status, native.category, native.message) == ("pass", "native", "")
    assert list(native.metrics) == STEP_METRICS and native.metrics["ops"] == {"forward": 2, "backward": 1,
                                                                           "optimizer": 1}
    fell_back = audit.judge_builtin("bert", _step_result(fallback_ops=["aten::relu"]), mps_ops - {"relu"}, set())
    assert (fell_back.status, fell_back.category) == ("pass", "cpu-fallback")
    assert fell_back.metrics["predicted_without_mps_kernel"] == ["aten::relu"]
    error = "backward: NotImplementedError: The operator 'aten::mm' is not currently implemented for the MPS device"
    unsupported = audit.judge_builtin("bert", _step_result(error=error), mps_ops, set())
    assert (unsupported.status, unsupported.category) == ("fail", "unsupported")
    assert unsupported.message.startswith(error) and "PYTORCH_ENABLE_MPS_FALLBACK=1" in unsupported.message
    old_torch = "forward: RuntimeError: \"erfinv_cpu\" not implemented for 'Half'"   # torch 2.6's missing dtype
    assert audit.judge_builtin("bert", _step_result(error=old_torch), mps_ops, set()).category == "unsupported"
    broken = audit.judge_builtin("bert", _step_result(error="forward: RuntimeError: boom"), mps_ops, set())
    assert (broken.status, broken.category, broken.message) == ("fail", "n/a", "forward: RuntimeError: boom")
    silent = audit.judge_builtin("bert", _step_result(ops={**_step_result().ops, "backward": []}), mps_ops, set())
    assert (silent.status, silent.category) == ("fail", "native") and "backward phase" in silent.message


# --------------------------------------------------------------------------- command line

@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    """Run tools.audit in-process: returns (status, stdout, stderr). Env changes are undone."""
    for var in (*facts.OFFLINE_VARS, "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS"):
        old = os.environ.get(var)
        monkeypatch.setenv(var, old if old is not None else "x")
        if old is None:
            monkeypatch.delenv(var)
    (tmp_path / "audit_factories.py").write_text(textwrap.dedent("""
        import torch
        def pair():
            torch.manual_seed(0)
            return torch.nn.Linear(4, 3), torch.randn(5, 4)
        def triple():
            return torch.nn.Linear(4, 3), (torch.randn(5, 4),), lambda out, batch: out.pow(2).mean()
        def bare():
            return torch.nn.Linear(4, 3)
        def boom():
            raise RuntimeError("no weights here\\nsecond line")
        def failing_model():
            return torch.nn.Linear(4, 3), torch.randn(5, 7)
        def odd():
            return 42
        NOT_CALLABLE = 3
    """))
    (tmp_path / "audit_broken.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def run(*argv):
        status = audit_cli.main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err
    return run


def test_cli_tables_match_the_harness_without_importing_it():
    assert audit_cli.BUILTINS == tuple(models.MODELS)
    assert audit_cli.OPTIMIZERS == tuple(audit.OPTIMIZERS)


def test_cli_audits_a_built_in_model_with_a_prediction(cli, tmp_path):
    kernels = tmp_path / "k.json"
    kernels.write_text(json.dumps({"mps_ops": ["addmm", "mm", "add.Tensor"]}))
    status, out, err = cli("bert", "--format", "json", "--kernels", str(kernels))
    assert status == 0 and err == ""
    doc = json.loads(out)
    assert doc["model"] == "BertForSequenceClassification" and doc["target"] == "bert"
    assert all(doc["ops"][p] for p in audit.PHASES) and doc["error"] is None
    assert {"aten::addmm", "aten::mm"} <= set(doc["prediction"]["with_kernel"])
    status, out, err = cli("bert", "--attn", "eager")
    assert status == 0 and out.startswith("bert: BertForSequenceClassification, attention eager on cpu")
    assert "\nforward: " in out and "\nbackward: " in out and "\noptimizer: " in out
    assert "fell back to the CPU: n/a (ran on the CPU)" in out


@pytest.mark.parametrize("factory", ["pair", "triple"])
def test_cli_takes_a_factory_returning_model_and_batch(cli, factory):
    status, out, err = cli(f"audit_factories:{factory}", "--format", "json", "--optimizer", "adamw-foreach")
    doc = json.loads(out)
    assert status == 0 and "aten::addmm" in doc["ops"]["forward"] and doc["optimizer"]["path"] == "foreach"


def test_cli_a_model_failing_in_its_step_exits_1_with_the_error(cli):
    status, out, err = cli("audit_factories:failing_model")
    assert status == 1 and err.startswith("audit: audit_factories:failing_model: forward: RuntimeError:")
    assert len(err.splitlines()) == 1 and "error: forward: RuntimeError" in out


BAD = [
    (["nosuchmodel"], "unknown model 'nosuchmodel'"),
    (["no_such_module_xyz:make"], "no module named 'no_such_module_xyz'"),
    (["audit_broken:make"], "importing 'audit_broken' failed: ModuleNotFoundError"),
    (["audit_factories:missing"], "has no attribute 'missing'"),
    (["audit_factories:NOT_CALLABLE"], "not a callable factory"),
    (["audit_factories:boom"], "the factory raised RuntimeError: no weights here"),
    (["audit_factories:bare"], "only a transformers PreTrainedModel gets one built"),
    (["audit_factories:odd"], "returned a int; expected a model"),
    (["audit_factories:pair", "--attn", "eager"], "--attn applies to the built-in models"),
    (["bert", "--device", "tpu"], "--device: unknown target 'tpu'"),
    (["bert", "--format", "xml"], "invalid choice: 'xml'"),
    (["bert", "--kernels", "/no/such/file.json"], "--kernels /no/such/file.json: cannot read"),
    ([], "required: model"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a) or "no-args" for a, _ in BAD])
def test_cli_bad_input_is_one_line_and_exit_2(cli, argv, message):
    status, out, err = cli(*argv)
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("audit: ") and message in err, err


def test_cli_bad_kernels_file_is_one_line(cli, tmp_path):
    for text in ("{not json", json.dumps({"ops": []}), json.dumps({"mps_ops": ["a"], "composite_ops": "t"})):
        (tmp_path / "k.json").write_text(text)
        status, out, err = cli("bert", "--kernels", str(tmp_path / "k.json"))
        assert status == 2 and len(err.splitlines()) == 1 and err.startswith("audit: --kernels ")


def test_cli_an_absent_device_is_a_usage_error(cli):
    if devices.backend("mps").availability().available:
        pytest.skip("MPS is present on this machine")
    status, out, err = cli("bert", "--device", "mps")
    assert status == 2 and err.startswith("audit: --device mps: MPS unavailable") and len(err.splitlines()) == 1


def test_cli_as_a_process_says_bad_input_in_one_line_without_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (["bert", "--device", "tpu"], ["no_such_module_xyz:make"]):
        res = subprocess.run([sys.executable, "-m", "tools.audit", *argv], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1, res.stderr
        assert "Traceback" not in res.stderr
