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
