"""One rule for a version against a release (harness.env.fitness.has_feature / has_fix): a
feature gate counts a pre-release, nightly or local build as its release; a guard against a bug
fixed in a release trusts only that release and what follows it."""
import dataclasses

import pytest

from harness.env import devices, fitness, timing
from tests.conftest import load_facts

NIGHTLY_26, RC_26, LOCAL_26 = "2.6.0.dev20250101", "2.6.0rc1", "2.6.0+cpu"


@pytest.mark.parametrize("version,since,has", [
    ("2.6.0", "2.6", True), (RC_26, "2.6", True), (NIGHTLY_26, "2.6", True), (LOCAL_26, "2.6", True),
    ("2.6.0.dev20250101+cpu", "2.6", True), ("2.6.0a0+git1234abc", "2.6", True), ("2.6.1", "2.6", True),
    ("2.5.1", "2.6", False), ("2.5.1+cu121", "2.6", False), ("2.5.0rc1", "2.6", False),
    ("26.1", "15", True), ("15.0", "15", True), ("14.7.1", "15", False),
    (None, "2.6", False), ("", "2.6", False), ("not a version", "2.6", False),
])
def test_a_feature_counts_a_pre_release_of_its_release(version, since, has):
    assert fitness.has_feature(version, since) is has
    if version:
        assert fitness.has_feature(fitness.version_of(version), since) is has   # a parsed version alike


@pytest.mark.parametrize("version,fixed", [
    ("2.15.0", True), ("2.15.0+cpu", True), ("2.15.1", True), ("2.15.1rc1", True), ("2.15.0.post1", True),
    ("2.16.0.dev20261101", True), ("2.16.0.dev20261101+cpu", True), ("2.16.0a0+gitabc1234", True),
    ("2.15.0.dev20260801", False), ("2.15.0.dev20261001+cpu", False), ("2.15.0rc1", False),
    ("2.15.0a0+gitabc1234", False), ("2.14.1", False), (None, False), ("garbage", False),
])
def test_a_fix_trusts_only_its_release_and_what_follows(version, fixed):
    assert fitness.has_fix(version, "2.15") is fixed


@pytest.mark.parametrize("version,uses_events", [
    ("2.15.0", True), ("2.15.0+cpu", True), ("2.16.0.dev20261101", True), ("2.16.0.dev20261101+cpu", True),
    ("2.15.0.dev20260801", False), ("2.15.0.dev20261015+cpu", False), ("2.15.0rc1", False),
    ("2.14.1", False), ("not a version", False),
])
def test_the_mps_event_hang_guard_trusts_no_pre_release_of_the_fix(version, uses_events):
    """MPS event timing could hang before pytorch#196395, released in 2.15: a 2.15 nightly or
    release candidate may predate it, so it is timed by the wall clock."""
    assert timing.MPS_EVENT_TIMING_SINCE == "2.15"
    assert timing.mps_events_time_the_device(version) is uses_events


@pytest.mark.parametrize("torch_v", ["2.6.0", RC_26, NIGHTLY_26, LOCAL_26])
def test_a_2_6_gate_passes_on_a_2_6_pre_release_nightly_or_local_build(torch_v):
    f = load_facts("apple_silicon_native")
    f["torch"]["version"] = f["packages"]["torch"] = torch_v
    f["mac"]["version"] = "14.0"
    assert fitness.gate_gaps(fitness.GATES["mps-bf16-autocast"], f) == []
    assert fitness.judge_gate("mps-bf16-autocast")(f).outcome == "ok"
    assert fitness.mps_macos_floor(fitness.torch_version(f)).torch == "2.6"


@pytest.mark.parametrize("torch_v", ["2.5.1", "2.5.1+cpu", "2.6.0.dev20250101"])
def test_a_gate_still_refuses_what_is_older(torch_v):
    f = load_facts("apple_silicon_native")
    f["torch"]["version"], f["mac"]["version"] = torch_v, "14.0"
    outcome = fitness.judge_gate("mps-bf16-autocast")(f).outcome
    assert outcome == ("ok" if torch_v.startswith("2.6") else "limit")


def test_the_other_torch_gates_follow_the_feature_rule():
    f = load_facts("apple_silicon_native")
    f["torch"]["version"], f["packages"]["accelerate"] = "2.8.0rc1", "1.11.0rc2"
    assert fitness.judge_gate("mps-trainer-fp16")(f).outcome == "ok"          # torch 2.8, accelerate 1.11
    f["env"]["PYTORCH_ENABLE_MPS_FALLBACK"] = "false"
    assert "torch >= 2.8 reads every value" in fitness.judge_fallback_env(f).summary
    intel = load_facts("intel_mac")
    intel["torch"]["version"] = "2.13.0.dev20260101"   # torch 2.13 refuses a discrete GPU
    assert fitness._watermark_default_low(intel) == 1.4
    intel["torch"]["mps_available"], intel["mac"]["version"] = False, "14.7"
    assert "from torch 2.13 one with unified memory" in fitness.mps_unavailable_cause(intel)[1]
    assert fitness.kernel_switches({"PYTORCH_MPS_FAST_MATH": "1"}, "2.5.0rc1") == ["PYTORCH_MPS_FAST_MATH=1"]
    f["torch"]["version"] = "1.12.0rc1"
    assert fitness.judge_torch_for_mps(f).outcome == "ok"


@pytest.mark.parametrize("torch_v,served", [
    ("2.13.0", True), ("2.13.0rc1", True), ("2.13.0.dev20260101", True), ("2.13.0+cpu", True),
    ("2.15.0", True), ("2.12.1", False), ("2.12.1+cpu", False), (None, False),
])
def test_the_accelerator_peak_counters_follow_the_feature_rule(torch_v, served):
    """torch.accelerator's peak counters serve MPS from torch 2.13: a feature, so a 2.13
    pre-release, nightly or local build has them too."""
    f = load_facts("apple_silicon_native")
    f["torch"]["version"] = torch_v
    assert devices.ACCELERATOR_STATS_SINCE == "2.13"
    assert (devices.backend("mps", f)._accelerator_stats() is not None) is served


@pytest.mark.parametrize("version", [RC_26, NIGHTLY_26, LOCAL_26])
def test_a_claim_s_gates_and_autocast_s_first_release_take_a_pre_release_as_the_release(version):
    """The optimization claims' torch, macOS and package minimums, and the first torch whose
    autocast offers a dtype on a device, are features: a 2.6 pre-release has them."""
    from harness.optim import claims
    from harness.parity.models import precision
    facts = {"torch": {"version": version}, "python": {"version": "3.11.7"},
             "mac": {"version": "14.0"}, "packages": {"accelerate": "1.11.0rc1"}}
    gate = claims.Gate(targets=("mps",), reason="r", fix="f", source="s", torch="2.6", macos="14",
                       package="accelerate", package_min="1.11")
    assert claims.gap(gate, facts) is None, claims.gap(gate, facts)
    assert claims.gap(dataclasses.replace(gate, torch="2.7"), facts).startswith("this is torch 2.6.0")
    assert precision.scaler_unsupported("mps", version.replace("2.6", "2.8")) is None
    assert precision.scaler_unsupported("mps", version) is not None
