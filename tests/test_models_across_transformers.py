"""The registry's models on every transformers the project supports (>= 4.46): transformers
4.x has no sdpa attention for T5 and raises when asked for it, which failed every T5 check
(18 on the CPU) under transformers 4.57.6. A class without sdpa is built with eager attention,
as transformers picks by itself, and the checks whose point is sdpa say why they skip."""
import transformers

from harness.core import models
from harness.parity.models import references
from harness.parity.numerics.tolerances import TABLE


def _without_sdpa(monkeypatch, cls):
    monkeypatch.setattr(cls, "_supports_sdpa", False)


def test_a_class_without_sdpa_is_built_with_eager_attention_and_says_so(monkeypatch):
    if int(transformers.__version__.split(".")[0]) >= 5:   # uv.lock's: every registered class has sdpa
        assert [name for name in models.MODELS if models.sdpa_missing(name)] == []
    _without_sdpa(monkeypatch, transformers.T5ForConditionalGeneration)
    example = models.example("t5")
    assert example.attn_implementation == "eager"
    assert models.example("t5", "eager").attn_implementation == "eager"
    assert models.example("gpt2").attn_implementation == "sdpa"   # the others as asked
    why = models.sdpa_missing("t5")
    assert why.startswith(f"transformers {transformers.__version__} has no sdpa attention for "
                          "T5ForConditionalGeneration") and "eager" in why


def test_the_sdpa_against_eager_check_of_such_a_model_is_a_skip_with_the_reason(monkeypatch):
    _without_sdpa(monkeypatch, transformers.T5ForConditionalGeneration)
    tol = TABLE[("model", "float32")]
    got = references.sdpa_vs_eager("t5", "cpu", (tol.rtol, tol.atol), (tol.rtol, tol.atol))
    assert isinstance(got, str) and "no sdpa attention" in got


def test_every_registered_model_names_a_class_transformers_has():
    for name, spec in models.MODELS.items():
        assert isinstance(getattr(transformers, spec.model_class, None), type), name


def test_the_perf_suites_own_t5_is_built_with_eager_attention_there_and_says_so(monkeypatch):
    from harness.perf import models as perf_models
    _without_sdpa(monkeypatch, transformers.T5ForConditionalGeneration)
    model, _, about = perf_models.build("t5", "small", "cpu")
    assert model.config._attn_implementation == "eager"
    assert about.endswith(f"eager attention (transformers {transformers.__version__} has no sdpa for it)"), about
    model, _, about = perf_models.build("gpt2", "small", "cpu")
    assert model.config._attn_implementation == "sdpa" and "attention" not in about


def test_a_float64_reference_that_cannot_run_is_the_references_cause_not_the_targets():
    """transformers 4.46.3-4.51.3 build GPT-2's causal mask in float32 with float64's lowest
    value: every GPT-2 parity check failed with "the run itself failed: RuntimeError: value
    cannot be converted to type float without overflow" and no cause. The float64 side's
    failure is now said as the reference's, with the switch (measured: fixed in 4.52.1)."""
    import pytest

    from harness.parity.models import runs
    from harness.plugin.record import Recorder

    def compute(side):
        if side.dtype == "float64":
            raise RuntimeError("value cannot be converted to type float without overflow")
        return {"side": side.name}
    with pytest.raises(RuntimeError) as raised:
        runs.runs_on("cpu", compute)
    line = str(raised.value)
    assert line.startswith(models.REFERENCE_FAILED) and "without overflow" in line
    found = models.reference_failed(f"RuntimeError: {line}")
    assert found["cause"] == models.REFERENCE_CAUSE and "transformers>=4.52" in found["switch"]
    assert models.reference_failed("RuntimeError: value cannot be converted to type float without overflow") == {}

    class Raised:
        kind, detail, value = "raised", f"RuntimeError: {line}", None
    record = Recorder()
    with pytest.raises(pytest.fail.Exception) as failed:   # the check ends there, failed
        record.value_of(Raised(), "the run itself")
    assert record.metrics["cause"] == models.REFERENCE_CAUSE and "transformers>=4.52" in record.metrics["switch"]
    assert str(failed.value).startswith(f"the run itself failed: RuntimeError: {models.REFERENCE_FAILED}")
