"""The emulated Mac (tests/emulated_mps.py) checked against what it claims, and each broken
variant seen to differ exactly where its summary says.

Each fact is tested on the thing itself: ops are run inside the stand-in's context and watched
through the instruments the suites use (harness.ops.fallback.capture, the Backend's memory
readings and synchronize). Memory figures are deltas, since the counters are per process and
other tests share this one; the warn-once is per process, so it is watched in a fresh one.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from packaging.version import Version

from harness.env import devices, fitness
from harness.ops import fallback
from tests import emulated_mps as em
from tests import standins  # noqa: F401  (registers the stand-ins)

ROOT = Path(__file__).resolve().parent.parent
VAR = em.FALLBACK_VAR
EMULATED = ("standin-mps", "standin-mps-mute", "standin-mps-once", "standin-mps-nokernels", "standin-mps-frozen",
            "standin-mps-blind", "standin-mps-skewed")

# Ops with a simple call, by their entry in native_functions.yaml; a test takes those the
# installed torch's table says have no MPS kernel (checked, not assumed).
CANDIDATES = {
    "channel_shuffle": lambda: F.channel_shuffle(torch.arange(8.0).view(1, 8, 1, 1), 2),
    "logit_": lambda: torch.full((4,), 0.25).logit_(),
    "multi_margin_loss": lambda: F.multi_margin_loss(torch.ones(2, 3), torch.tensor([0, 2])),
    "mode": lambda: torch.tensor([1.0, 2.0, 2.0]).mode(),
}
NATIVE = ("add.Tensor", lambda: torch.ones(3) + torch.ones(3))


def without_kernel(count: int = 1) -> list[tuple[str, object]]:
    table = em.kernel_snapshot().table
    found = [(name, call) for name, call in CANDIDATES.items()
             if name in table and not table[name]["mps"] and not table[name]["composite"]]
    if len(found) < count:
        pytest.fail(f"fewer than {count} of {', '.join(CANDIDATES)} lack an MPS kernel in the installed torch's "
                    "table: add ops that do to CANDIDATES in tests/test_emulated_mps.py")
    return found[:count]


def mac(name: str = "standin-mps") -> em.EmulatedMac:
    return devices.stand_in(name)


def outcome(call):
    """What a call gave: its result, or its exception."""
    try:
        return call()
    except Exception as exc:  # the exception is the observation
        return exc


# --------------------------------------------------------------------------- registration and identity

def test_the_emulated_mac_and_its_variants_are_registered_as_mps_for_every_suite():
    for name in EMULATED:
        si = devices.stand_in(name)
        assert si is not None, f"{name} is not registered by tests/standins.py"
        assert (si.emulates, devices.rules_of(name), devices.is_emulated(name)) == ("mps", "mps", True)
        assert set(si.suites) == {"env", "ops", "parity", "optim", "perf"} and devices.place(name) == "cpu"
    broken = [devices.stand_in(n).summary for n in EMULATED[1:]]
    assert all(s.startswith("broken on purpose: ") for s in broken) and len(set(broken)) == len(broken)
    assert not mac().summary.startswith("broken") and devices.stand_in(em.MacOS13.name) is None


def test_backend_is_mps_on_the_cpu_with_the_recorded_mac_facts(monkeypatch):
    be = devices.backend("standin-mps")
    assert isinstance(be, devices.MPSBackend) and be.device() == torch.device("cpu")
    available = be.availability()
    assert available.available
    assert available.reason.startswith(f"an emulated Mac on this CPU (standin-mps): kernel table of torch "
                                       f"{em.torch_release()} (")
    assert "Apple M3 Pro" in available.reason and "never a Mac" in available.reason
    # MPS's dtypes judged on the recorded Mac: no float64, bf16 (macOS 15.5 >= 14)
    assert torch.float64 not in be.dtypes() and torch.bfloat16 in be.dtypes()
    for value in ("1", None):
        if value is None:
            monkeypatch.delenv(VAR, raising=False)
        else:
            monkeypatch.setenv(VAR, value)
        f = devices.facts_for("standin-mps", {"this": "machine"})
        assert f["env"][VAR] == value and f["torch"]["version"] == em.torch_release()
        assert f["mac"]["version"] == "15.5" and fitness.mps_unavailable_cause(f) is None


def test_the_emulated_torch_mps_offers_only_what_the_real_one_does():
    ns = mac().mps_namespace()
    offered = set(vars(ns))
    assert offered and offered <= set(dir(torch.mps))
    assert {"current_allocated_memory", "driver_allocated_memory"} <= offered  # in every torch >= 2.0
    acc = devices.backend("standin-mps")._accelerator_stats()
    if fitness.has_feature(fitness.torch_version(mac().facts()), "2.13"):   # MPSBackend's gate
        assert acc is not None and set(vars(acc)) <= set(dir(torch.accelerator))
    else:
        assert acc is None
    if "recommended_max_memory" in offered:
        assert ns.recommended_max_memory() == devices.memory_of("cpu")[0]


def test_fallback_switch_reads_as_the_installed_torch_does():
    assert em.fallback_enabled({VAR: "1"}) and not em.fallback_enabled({VAR: "0"}) and not em.fallback_enabled({})
    # torch >= 2.8 takes every value but "0" as on (harness.env.fitness.judge_fallback_env)
    assert em.fallback_enabled({VAR: "true"}) == fitness.has_feature(em.torch_release(), "2.8")


@pytest.mark.parametrize("release,on", [("2.8.0rc1", True), ("2.8.0.dev20250601", True), ("2.7.1", False)])
def test_fallback_switch_counts_a_pre_release_as_its_release(monkeypatch, release, on):
    """The env suite reads PYTORCH_ENABLE_MPS_FALLBACK=true as on from a 2.8 pre-release
    (fitness.judge_fallback_env); the emulated Mac must agree, or its ops fall back where the
    env suite says they raise."""
    monkeypatch.setattr(em, "torch_release", lambda: release)
    assert em.fallback_enabled({VAR: "true"}) is on


# --------------------------------------------------------------------------- the kernel table and the fallback

def test_an_op_without_a_kernel_falls_back_with_mps_warning_and_runs_on_the_cpu(monkeypatch):
    monkeypatch.setenv(VAR, "1")
    (name, call), = without_kernel()
    plain = call()
    with fallback.capture() as seen, mac().context():
        result = call()
    assert seen.ops == [f"aten::{name}"]
    got, want = em._tensors_of(result), em._tensors_of(plain)
    assert len(got) == len(want) > 0 and all(torch.equal(r, p) for r, p in zip(got, want))


def test_the_warning_is_mps_text_exactly(monkeypatch):
    monkeypatch.setenv(VAR, "1")
    (name, call), = without_kernel()
    previous = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as caught, mac().context():
            warnings.simplefilter("always")
            call()
    finally:
        torch.set_warn_always(previous)
    texts = [str(w.message) for w in caught if fallback.FALLBACK_RE.search(str(w.message))]
    assert texts == [f"The operator 'aten::{name}' is not currently supported on the MPS backend and will fall back "
                     "to run on the CPU. This may have performance implications."]
    assert [w.category for w in caught] == [UserWarning] and caught[0].filename == __file__


@pytest.mark.parametrize("value", ["0", None])
def test_an_op_without_a_kernel_raises_mps_not_implemented_with_the_fallback_off(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    (name, call), = without_kernel()
    with mac().context():
        got = outcome(call)
    assert isinstance(got, NotImplementedError)
    assert str(got).startswith(f"The operator 'aten::{name}' is not currently implemented for the MPS device. ")
    assert "set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1`" in str(got)
    assert torch.version.git_version in str(got)


def test_an_op_with_a_kernel_runs_silently(monkeypatch):
    monkeypatch.setenv(VAR, "1")
    key, call = NATIVE
    assert em.kernel_snapshot().table[key]["mps"], f"{key} has no MPS kernel in this torch's table: pick another"
    with fallback.capture() as seen, mac().context():
        call()
    assert (seen.ops, seen.other_warnings) == ([], [])


WARN_ONCE_CHILD = """
import json, warnings, torch
from harness.env import devices
from harness.ops import fallback
from tests import standins
from tests.test_emulated_mps import without_kernel
(_, first), (_, second) = without_kernel(2)
si = devices.stand_in({name!r})

def warned(call, times):
    with warnings.catch_warnings(record=True) as caught, si.context():
        warnings.simplefilter("always")
        for _ in range(times):
            call()
    return sum(bool(fallback.FALLBACK_RE.search(str(w.message))) for w in caught)

seen = []
torch.set_warn_always(True)
seen.append(warned(first, 2))     # every time, and the once not used up
torch.set_warn_always(False)
seen.append(warned(first, 2))     # once
seen.append(warned(second, 1))    # one call site: another op is silent too
torch.set_warn_always(True)
seen.append(warned(second, 2))    # every time again
print(json.dumps(seen))
"""


def warnings_in_a_fresh_process(name: str) -> list[int]:
    env = {**os.environ, VAR: "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", WARN_ONCE_CHILD.format(name=name)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_warning_is_once_per_process_and_every_time_with_warn_always():
    assert warnings_in_a_fresh_process("standin-mps") == [2, 1, 0, 2]


def test_once_variant_warns_once_even_with_warn_always():
    assert warnings_in_a_fresh_process("standin-mps-once") == [1, 0, 0, 0]


@pytest.mark.parametrize("value", ["1", "0"])
def test_mute_variant_swallows_the_fallback(monkeypatch, value):
    monkeypatch.setenv(VAR, value)
    (name, call), = without_kernel()
    with fallback.capture() as real, mac().context():
        got = outcome(call)
    with fallback.capture() as mute, mac("standin-mps-mute").context():
        muted = outcome(call)
    assert (real.ops, isinstance(got, NotImplementedError)) == (([f"aten::{name}"], False) if value == "1"
                                                                 else ([], True))
    assert mute.ops == [] and not isinstance(muted, Exception)


def test_nokernels_variant_falls_back_on_an_op_with_a_kernel(monkeypatch):
    monkeypatch.setenv(VAR, "1")
    key, call = NATIVE
    with fallback.capture() as real, mac().context():
        call()
    with fallback.capture() as empty, mac("standin-mps-nokernels").context():
        call()
    assert real.ops == [] and f"aten::{key}" in empty.ops


# --------------------------------------------------------------------------- dtypes

def test_float64_on_the_device_is_refused_with_mps_type_error():
    made_outside = torch.ones(2, dtype=torch.float64)
    for call in (lambda: torch.ones(2, dtype=torch.float64), lambda: torch.ones(2).double(),
                 lambda: torch.add(made_outside, 1), lambda: torch.zeros(2, dtype=torch.complex128)):
        with mac().context():
            got = outcome(call)
        assert isinstance(got, TypeError), got
        assert str(got) in (em.FLOAT64, "Trying to convert ComplexDouble to the MPS backend but it does not have "
                                         "support for that dtype.")
    assert torch.equal(made_outside + 1, torch.full((2,), 2.0, dtype=torch.float64))   # the CPU's own float64


def test_float64_message_is_mps_text():
    assert em.FLOAT64 == ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
                          "Please use float32 instead.")


def test_bf16_and_complex_allowed_on_the_recorded_macos_14_and_refused_on_macos_13():
    def run(si):
        with si.context():
            return [outcome(lambda: torch.ones(2, dtype=torch.bfloat16) + 1),
                    outcome(lambda: torch.ones(2, dtype=torch.complex64) * 2)]
    on14, on13 = run(mac()), run(em.MacOS13())
    assert all(isinstance(r, torch.Tensor) for r in on14)
    assert [(type(e), str(e)) for e in on13] == [(TypeError, "MPS BFloat16 is only supported on MacOS 14 or newer"),
                                                 (TypeError, "MPS complex types are only supported on MacOS 14.0 "
                                                             "or newer.")]
    assert torch.bfloat16 not in em.MacOS13().backend(None).dtypes()


# --------------------------------------------------------------------------- memory

N = 250_000   # float32 elements: 1,000,000 bytes


@contextlib.contextmanager
def no_collection():
    """Nothing freed by the cycle collector while memory is read: the counters are the process's,
    and garbage of an earlier test dying in the window would move them."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def allocation_seen(name: str) -> dict:
    """The memory readings around one allocation of N float32s, a view of it, and its release."""
    be = devices.backend(name)
    with no_collection(), devices.on_device(name):
        before = be.memory_current()
        t = torch.empty(N)
        allocated = be.memory_current() - before
        driver_covers = be.memory_driver() >= be.memory_current()
        v = t.view(500, 500)
        with_view = be.memory_current() - before
        del t, v
        released = be.memory_current() - before
    return {"allocated": allocated, "with_view": with_view, "released": released, "driver_covers": driver_covers}


def test_memory_moves_by_an_allocation_and_back():
    assert allocation_seen("standin-mps") == {"allocated": 4 * N, "with_view": 4 * N, "released": 0,
                                              "driver_covers": True}


def test_frozen_variant_memory_does_not_move():
    seen = allocation_seen("standin-mps-frozen")
    assert (seen["allocated"], seen["with_view"], seen["released"]) == (0, 0, 0)


def peak_seen(name: str) -> tuple[int, int]:
    """How far the peak rose while N float32s came and went after a reset; the peak above the
    current reading after another reset."""
    be = devices.backend(name)
    with no_collection(), devices.on_device(name):
        assert be.reset_peak()
        before = be.memory_peak()
        t = torch.empty(N)
        del t
        rose = be.memory_peak() - before
        be.reset_peak()
        after_reset = be.memory_peak() - be.memory_current()
    return rose, after_reset


def test_peak_since_reset():
    """From torch 2.13 MPS's peak is read through torch.accelerator (MPSBackend's gate); before
    it there is none, and the emulated Mac of that torch offers none either: the peak reads as
    unknown, never as zero (harness.optim.measure then samples the current allocation)."""
    if not fitness.has_feature(fitness.torch_version(mac().facts()), "2.13"):
        be = devices.backend("standin-mps")
        with no_collection(), devices.on_device("standin-mps"):
            assert be.reset_peak() is False and be.memory_peak() is None
        return
    assert peak_seen("standin-mps") == (4 * N, 0)
    assert peak_seen("standin-mps-frozen")[0] == 0


def test_driver_memory_keeps_the_pool_until_empty_cache():
    be = devices.backend("standin-mps")
    with no_collection(), devices.on_device("standin-mps"):
        be.empty_cache()
        base = be.memory_driver()
        t = torch.empty(N)
        del t
        kept = be.memory_driver() - base
        be.empty_cache()
        emptied = be.memory_driver() - be.memory_current()
    assert (kept, emptied) == (4 * N, 0)


def test_reentering_the_context_counts_and_queues_once():
    be = devices.backend("standin-mps")
    a = torch.ones(8, 8)
    with no_collection(), mac().context():
        before = be.memory_current()
        with mac().context(), mac("standin-mps-frozen").context():
            t = torch.empty(N)
            moved = be.memory_current() - before
            c = a @ a
            queued = em.pending()
        still_queued = em.pending()
    assert (moved, queued, still_queued, em.pending()) == (4 * N, 1, 1, 0)
    assert torch.equal(c, torch.full((8, 8), 8.0)) and t.numel() == N


# --------------------------------------------------------------------------- the queue

def test_matmul_work_is_deferred_until_another_op_and_results_are_right():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    a3, b3 = a[None], b[None]   # views made here: a view inside would run the queue
    reference = ((a @ b) @ b + 1, torch.bmm(a3, b3))
    queued_before = em.PROCESS.deferred
    with mac().context():
        c = a @ b
        d = c @ b
        e = torch.bmm(a3, b3)
        waiting = em.pending()
        f = d + 1
        after = em.pending()
    assert (waiting, after, em.PROCESS.deferred - queued_before) == (3, 0, 3)
    assert torch.equal(f, reference[0]) and torch.equal(e, reference[1])


def test_work_is_queued_and_seen_op_by_op_under_inference_mode_too(monkeypatch):
    # autograd is off there, so composite ops reach the rules whole and are decomposed by them
    monkeypatch.setenv(VAR, "1")
    a = torch.randn(8, 8)
    queued_before = em.PROCESS.deferred
    with mac().context(), torch.inference_mode():
        c = F.linear(a, a) @ a
        waiting = em.pending()
    assert waiting >= 1 and em.PROCESS.deferred > queued_before and em.pending() == 0
    assert torch.equal(c, F.linear(a, a) @ a)


def queue_after_synchronize(name: str) -> tuple[int, bool]:
    """Queued ops left after the backend's synchronize; and whether the result read outside the
    context (no synchronize) is right."""
    a = torch.randn(16, 16)
    be = devices.backend(name)
    with devices.on_device(name):
        c = a @ a
        be.synchronize()
        left = em.pending()
    return left, torch.equal(c, a @ a)


def test_synchronize_runs_the_queue():
    assert queue_after_synchronize("standin-mps") == (0, True)


def test_blind_variant_synchronize_leaves_the_work_queued():
    assert queue_after_synchronize("standin-mps-blind") == (1, True)


def test_training_through_queued_outputs_gives_the_plain_gradients():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 4, requires_grad=True) for _ in range(3))
    conv = torch.nn.Conv1d(4, 4, 3)

    def step():
        att = F.scaled_dot_product_attention(q, k, v)   # its saved outputs are filled in later
        loss = conv(att.flatten(0, 1).transpose(1, 2)).square().sum()
        loss.backward()
        grads = [t.grad.clone() for t in (q, k, v, conv.weight)]
        for t in (q, k, v, conv.weight):
            t.grad = None
        return [loss.detach(), *grads]

    plain = step()
    queued_before = em.PROCESS.deferred
    with mac().context():
        emulated = step()
    assert em.PROCESS.deferred > queued_before
    assert all(torch.equal(x, y) for x, y in zip(plain, emulated))


# --------------------------------------------------------------------------- results

def test_skewed_variant_moves_every_floating_result_by_one_percent():
    with mac().context():
        exact = torch.ones(3) * 2
    with mac("standin-mps-skewed").context():
        skewed = torch.ones(1, 3) * 2
        mm = torch.eye(3) @ torch.eye(3)   # a queued result too
    assert torch.equal(exact, torch.full((3,), 2.0))
    assert torch.allclose(skewed, torch.full((1, 3), 2.0 * em.SKEW * em.SKEW), rtol=1e-6, atol=0)
    assert not torch.equal(mm, torch.eye(3)) and torch.equal(mm == 0, torch.eye(3) == 0)


# --------------------------------------------------------------------------- code written for a Mac

def test_code_written_for_a_mac_names_mps_and_the_cpu_as_on_a_mac():
    """Inside device_names, "mps:0" places tensors on the device (counted, float64 refused) and
    a call that names the CPU makes CPU tensors (not counted, float64 allowed); moving a tensor
    either way copies it, as between a Mac's two memories; torch.device("mps:0") keeps its name,
    so code that chooses by it (OpInfo's highest_precision_float, where the installed
    torch.testing has it: 2.15's has, 2.11's has not) chooses for MPS."""
    from torch.testing._internal import common_dtype
    highest_precision_float = getattr(common_dtype, "highest_precision_float", None)
    be = devices.backend("standin-mps")
    with no_collection(), devices.on_device("standin-mps"), devices.device_names("standin-mps"):
        assert torch.device("mps:0").type == "mps"
        assert highest_precision_float is None or highest_precision_float("mps:0") == torch.float32
        before = be.memory_current()
        on_device = torch.ones(N, device="mps:0")
        counted = be.memory_current() - before
        on_cpu = torch.ones(N, dtype=torch.float64, device="cpu") * 2     # an op on CPU tensors alone
        back = on_device.cpu()
        moved = on_cpu.to("mps:0", torch.float32)
        after_moves = be.memory_current() - before
        refused = outcome(lambda: torch.ones(2, dtype=torch.float64, device="mps"))
        default = torch.zeros(2, dtype=torch.float64)                     # no device: the CPU, torch's default
        scalar_operand = on_device[:2] * torch.tensor(3.0, dtype=torch.float64, device="cpu")
    assert counted == 4 * N and after_moves == 8 * N      # the CPU tensors not counted, the moved one counted
    assert on_cpu.dtype == torch.float64 and float(on_cpu[0]) == 2.0 and float(moved[0]) == 2.0
    assert back.data_ptr() != on_device.data_ptr() and moved.data_ptr() != on_cpu.data_ptr()
    assert isinstance(refused, TypeError) and str(refused) == em.FLOAT64
    assert default.dtype == torch.float64 and scalar_operand.tolist() == [3.0, 3.0]
    with mac().context():     # outside device_names the suites' own convention holds: "cpu" is the device
        assert isinstance(outcome(lambda: torch.ones(2, dtype=torch.float64, device="cpu")), TypeError)


def test_the_ops_sweep_makes_the_emulated_mac_s_samples_for_mps(monkeypatch):
    """OpInfo's samples for MPS leave out the float64 operands no Mac is given (full_like's
    dtype=highest_precision_float(device), softmax's dtype=): made for "cpu", 99 of the emulated
    Mac's 5,482 ops checks failed on them; made for "mps:0", as on a Mac, they run natively."""
    from harness.ops import opsweep
    monkeypatch.setenv(VAR, "1")
    assert opsweep.sample_device("standin-mps") == "mps:0" and opsweep.sample_device("standin-tf32") == "cpu"
    for key in ("full_like", "softmax.with_dtype"):
        run = opsweep.run_case(key, "standin-mps", "float32", "forward")
        if samples_hand_a_mac_float64(key):   # torch 2.6's OpInfo does, for MPS too: a Mac refuses them as well
            assert (run.category, run.error_type) == ("error", "TypeError"), (key, run)
        else:
            assert (run.category, run.message) == ("native", ""), (key, run)


def samples_hand_a_mac_float64(key: str) -> bool:
    """Whether the installed OpInfo's float32 samples of ``key``, made for "mps:0" as PyTorch's
    MPS tests make them, hand in a float64 (a tensor, or dtype=torch.float64): seen apart from
    the emulation, in the samples themselves (torch 2.11 and 2.15: no; 2.6: yes)."""
    from torch.utils import _pytree as pytree
    from harness.ops.declarations import op_table
    with devices.device_names("standin-mps"):
        samples = list(op_table()[key].sample_inputs("mps:0", torch.float32))
    leaves = pytree.tree_leaves([(s.input, s.args, s.kwargs) for s in samples])
    return any(x is torch.float64 or isinstance(x, torch.Tensor) and x.dtype == torch.float64 for x in leaves)


def test_what_the_cpu_underneath_lacks_is_not_judged_as_the_mac_s(monkeypatch):
    """An op with an MPS kernel whose CPU kernel lacks the dtype, and a float64 tensor torch's
    own code made for an op where on a Mac it chooses by the device (linalg_pinv's tolerance):
    the emulated Mac cannot tell, and the check is skipped with that reason. An op without an
    MPS kernel runs the CPU's on a Mac too: its missing dtype is MPS's answer, unsupported."""
    from harness.core.records import Status
    from harness.ops import opsweep
    monkeypatch.setenv(VAR, "1")
    table = em.kernel_snapshot().table
    assert not table["special_ndtri"]["mps"]
    lacks = opsweep.run_case("special.bessel_j0", "standin-mps", "float16", "forward")
    chooses = opsweep.run_case("linalg.pinv", "standin-mps", "float32", "forward")
    cannot_tell = [(chooses, "made a torch.float64 tensor")]
    if table["special_bessel_j0"]["mps"]:   # the macOS wheel's kernel (torch 2.15's; not 2.6's)
        cannot_tell.append((lacks, "has no kernel for this dtype"))
    else:   # no MPS kernel: a Mac runs the CPU's too, and its missing dtype is the Mac's answer
        assert lacks.error_type != "BeyondEmulation" and "not implemented for 'Half'" in lacks.message, lacks
    for run, says in cannot_tell:
        assert (run.category, run.error_type) == ("n/a", "BeyondEmulation") and says in run.message, run
        verdict = opsweep.judge(run, None, on_mps=True)
        assert verdict.status == Status.SKIP and verdict.message.startswith("BeyondEmulation: the emulated Mac "
                                                                            "cannot tell")
        assert verdict.metrics["emulation_cannot_tell"] is True     # the report counts these apart
    with fallback.capture(), mac().context():    # as a check captures: warn-always, the once unused
        missing = outcome(lambda: torch.special.ndtri(torch.full((2,), 0.5, dtype=torch.float16)))
    on_the_cpu = outcome(lambda: torch.special.ndtri(torch.full((2,), 0.5, dtype=torch.float16)))
    assert "not implemented for 'Half'" in str(missing)   # the fallback's CPU kernel answers, as on a Mac:
    assert type(missing) is type(on_the_cpu) and str(missing) == str(on_the_cpu)   # NotImplementedError, 2.6 Runtime
    on_cpu = opsweep.run_case("special.bessel_j0", "cpu", "float16", "forward")
    assert on_cpu.category == "unsupported"     # the CPU's own column still says what the CPU lacks


# The CPU kernel's error for a dtype it lacks, as torch 2.6 and 2.7 raise it (ATen's dispatch macros
# through TORCH_CHECK: a RuntimeError; the same text as a NotImplementedError from 2.8).
OLD_TORCH_LACKS = {"erfinv": RuntimeError("\"erfinv_cpu\" not implemented for 'Half'"),
                   "addmm": RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'"),
                   "special_ndtri": RuntimeError("\"ndtri_cpu\" not implemented for 'Half'")}


@contextlib.contextmanager
def cpu_raises(op, error: BaseException):
    """The CPU underneath raising ``error`` for ``op`` (an OpOverload), as another torch's kernel
    does: a dispatch mode entered below the emulated Mac's, so it sees the calls the emulation
    makes to the CPU (EmulatedMac.kernel) and nothing the emulation's rules have not passed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Raises(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is op:
                raise error
            return func(*args, **(kwargs or {}))

    with Raises():
        yield


@pytest.mark.parametrize("error, lacks", [
    (RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'"), True),          # torch 2.6, 2.7
    (NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Half'"), True),   # torch 2.8 and later
    (NotImplementedError("\"exp_vml_cpu\" not implemented for 'Float8_e4m3fn'"), True),   # torch 2.15's: c10's name
    (RuntimeError("MKL FFT doesn't support tensors of type: Half"), True),            # torch 2.6's FFT library
    (NotImplementedError("MKL FFT doesn't support tensors of type: Half"), True),     # torch 2.15's
    (RuntimeError("The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"), False),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)"), False),
    (RuntimeError("not implemented for this reason"), False),
    (RuntimeError("expected \"addmm_impl_cpu_\" not implemented for 'Half'"), False),   # the form, but not the message
    (NotImplementedError(em.NOT_IMPLEMENTED.format(op="aten::mode", sha="0")), False),   # MPS's own: no kernel at all
    (TypeError("\"addmm_impl_cpu_\" not implemented for 'Half'"), False)])
def test_a_cpu_kernel_without_the_dtype_is_told_by_its_message_not_its_class(error, lacks):
    assert em.cpu_lacks_dtype(error) is lacks


@pytest.mark.parametrize("name", ["erfinv", "addmm"])
def test_the_older_torch_s_runtime_error_for_a_missing_dtype_is_beyond_emulation(name):
    """torch 2.6 and 2.7 raise RuntimeError where a CPU kernel lacks the dtype (torch 2.8 and
    later NotImplementedError, the same message): for an op with an MPS kernel the emulated
    Mac cannot tell either way, and says so. Run where the emulation calls the CPU
    (EmulatedMac.kernel), for an op run at once and for one run from the queue (a flush runs
    with Python dispatch off, so no mode can stand in for the CPU there: called directly)."""
    assert em.kernel_snapshot().table[name]["mps"]
    op = getattr(torch.ops.aten, name).default
    half = torch.ones(2, 2, dtype=torch.float16)
    for kind in (em.NATIVE, em.QUEUED):
        with cpu_raises(op, OLD_TORCH_LACKS[name]):
            told = outcome(lambda: mac().kernel(op, kind, (half,) * (3 if name == "addmm" else 1), {}))
        assert isinstance(told, devices.BeyondEmulation), (kind, told)
        assert "has an MPS kernel in this torch's table" in str(told) and "not implemented for 'Half'" in str(told)
        assert told.__cause__ is OLD_TORCH_LACKS[name]


def test_the_older_torch_s_runtime_error_on_the_emulated_mac_reads_cannot_tell_not_unsupported(monkeypatch):
    """The ops sweep's classification of an op with an MPS kernel whose CPU kernel raises the
    older torch's RuntimeError for the dtype: n/a (the emulated Mac cannot tell), skipped when
    judged, never "unsupported"; a RuntimeError of another kind from the same op (a shape) is
    the op's own error; an op without an MPS kernel runs the CPU's on a Mac too, so its
    missing dtype is MPS's answer there: unsupported, the RuntimeError as torch raised it."""
    from harness.core.records import Status
    from harness.ops import opsweep
    monkeypatch.setenv(VAR, "1")
    assert not em.kernel_snapshot().table["special_ndtri"]["mps"]

    def runs(call):
        call()
        em.flush()        # as the sweep's samples synchronize: a queued op has run
        yield True

    half = torch.full((2,), 0.5, dtype=torch.float16)
    with cpu_raises(torch.ops.aten.erfinv.default, OLD_TORCH_LACKS["erfinv"]):
        lacks = opsweep.classified("standin-mps", runs(lambda: torch.erfinv(half)))
        wrong_shape = opsweep.classified("standin-mps", runs(lambda: torch.ones(3) + torch.ones(4)))
    with cpu_raises(torch.ops.aten.erfinv.default, RuntimeError("erfinv: something else went wrong")):
        own_error = opsweep.classified("standin-mps", runs(lambda: torch.erfinv(half)))
    with cpu_raises(torch.ops.aten.special_ndtri.default, OLD_TORCH_LACKS["special_ndtri"]):
        falls_back = opsweep.classified("standin-mps", runs(lambda: torch.special.ndtri(half)))
    assert (lacks.category, lacks.error_type) == ("n/a", "BeyondEmulation"), lacks
    assert "has no kernel for this dtype (RuntimeError: \"erfinv_cpu\" not implemented for 'Half')" in lacks.message
    verdict = opsweep.judge(lacks, None, on_mps=True)
    assert verdict.status == Status.SKIP and verdict.metrics["emulation_cannot_tell"] is True
    assert (wrong_shape.category, wrong_shape.error_type) == ("error", "RuntimeError"), wrong_shape
    assert "must match the size of tensor b" in wrong_shape.message
    assert (own_error.category, own_error.error_type, own_error.message) == (
        "error", "RuntimeError", "RuntimeError: erfinv: something else went wrong"), own_error
    assert (falls_back.category, falls_back.error_type) == ("unsupported", "RuntimeError"), falls_back
    assert falls_back.fallback_ops == ("aten::special_ndtri",)
    assert falls_back.message == "RuntimeError: \"ndtri_cpu\" not implemented for 'Half'", falls_back


def cpu_path_makes_float64(op_name: str) -> list[str]:
    """The ops that made a float64 tensor from operands with none, seen by a dispatch mode over
    OpInfo's float32 samples of ``op_name`` (those a Mac is given: no float64 operand) on the
    plain CPU: what the emulated Mac's doubt is checked against, found without it."""
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    def f64(tree) -> bool:
        return any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in pytree.tree_leaves(tree))

    made: set[str] = set()

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if f64(out) and not f64((args, kwargs)):
                made.add(str(func))
            return out

    op = next(o for o in op_db if o.name == op_name and not o.variant_test_name)
    samples = [s for s in op.sample_inputs("cpu", torch.float32) if not f64((s.input, s.args, s.kwargs))]
    assert samples
    with Watch():
        for s in samples:
            op(s.input, *s.args, **s.kwargs)
    return sorted(made)


def test_a_float64_converted_from_an_operand_is_mps_s_error_doubted_and_settled_by_pytorch_s_expectation(monkeypatch):
    """quantile converts its q to float64 on the CPU's path (torch 2.15; 2.11 keeps float32),
    renorm's backward takes its norm in the CPU's accumulate type (float64); on a Mac they stay
    float32, and PyTorch's MPS tests expect both to pass. The emulated Mac raises MPS's
    TypeError as before (code under test sees the device's error) marked with its doubt, where
    the installed torch's CPU path makes the float64 (seen apart, by a dispatch mode on the plain
    CPU); the ops judge skips the check where PyTorch expects a pass and keeps PyTorch's xfail
    where it expects a failure (float_power computes in float64 on any device). A float64 made
    with no operand where no device is named and no Mac code runs (the suites' own device work)
    is doubted too: a factory the caller asked for, or one torch's C++ code calls inside another
    op with the device's accumulate type (batch_norm of an empty input)."""
    from harness.core.records import Status
    from harness.env import devices
    from harness.ops import opsweep
    monkeypatch.setenv(VAR, "1")
    q = opsweep.run_case("quantile", "standin-mps", "float32", "forward")
    converts = cpu_path_makes_float64("quantile")
    if converts:
        assert (q.category, q.error_type, q.message) == ("error", "TypeError", "TypeError: " + em.FLOAT64), q
        assert q.doubt.startswith("on the CPU underneath, aten::_to_copy made a float64 tensor from float32 operands"), q
    else:     # this torch's CPU path keeps float32: the Mac's answer, native, nothing to doubt
        assert (q.category, q.doubt) == ("native", ""), q
    renorm = opsweep.run_case("renorm", "standin-mps", "float32", "backward")
    assert cpu_path_makes_float64("renorm") == [] and renorm.failed_in == "backward", renorm   # its forward keeps float32
    assert "aten::linalg_vector_norm made a float64" in renorm.doubt, renorm
    for doubted in (q, renorm) if converts else (renorm,):
        skipped = opsweep.judge(doubted, None, on_mps=True)
        assert skipped.status == Status.SKIP and skipped.metrics["emulation_cannot_tell"] is True
        assert skipped.message.startswith("the emulated Mac cannot tell: on the CPU underneath") and \
            "PyTorch's own MPS test expects this check to pass on a Mac" in skipped.message
        assert opsweep.judge(doubted, "xfail", on_mps=True).status == Status.XFAIL
    with mac().context():
        made = outcome(lambda: torch.ones(2, dtype=torch.float64))
        converted = outcome(lambda: torch.ones(2).double())
    assert isinstance(made, TypeError) and str(made) == em.FLOAT64
    assert devices.doubt_of(made).startswith("on the CPU underneath, aten::ones made a float64 tensor with no operand")
    with mac().context(), mac().device_names():
        named = outcome(lambda: torch.ones(2, dtype=torch.float64, device="mps"))
    assert isinstance(named, TypeError) and devices.doubt_of(named) == ""     # Mac code that names the device asked
    assert isinstance(converted, TypeError) and str(converted) == em.FLOAT64 and devices.doubt_of(converted)
    on_cpu = opsweep.run_case("quantile", "cpu", "float32", "forward")
    assert (on_cpu.category, on_cpu.doubt) == ("native", "")


def test_gradscaler_s_float64_reciprocal_off_mps_is_let_through_and_gives_the_mac_s_bits():
    """torch.amp.GradScaler.unscale_ takes the reciprocal of its scale in float64 on any device
    but mps:0, which the emulated Mac (a CPU to it) would refuse: the 4 float16 autocast
    training checks failed on it and not on a Mac. Inside that function the float64 is let
    through (its power-of-two scales have exact float32 reciprocals, the Mac's branch); a
    float64 tensor made anywhere else on the device is still MPS's TypeError."""
    if not em.python_device_choices():
        pytest.skip("this torch's GradScaler has no MPS branch: its float64 is refused as on a Mac")
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mac().context():
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
        loss = model(torch.ones(3, 4)).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        refused = outcome(lambda: torch.ones(2).double())
    plain = torch.nn.Linear(4, 2)
    plain.load_state_dict(model.state_dict())
    plain(torch.ones(3, 4)).sum().backward()
    assert torch.equal(model.weight.grad, plain.weight.grad)       # unscaled exactly, as 2**16 * (1 / 2**16)
    assert isinstance(refused, TypeError) and str(refused) == em.FLOAT64


def test_a_parity_miss_the_emulation_s_own_machinery_gives_is_not_judged_as_the_mac_s(monkeypatch):
    """torch 2.15's complex64 linalg.pinv is off by O(1) on the CPU under any dispatch mode
    (pytorch/pytorch#198118: a conjugate view inside the kernel is read unresolved when the
    Python dispatch key is on), so the emulated Mac, a dispatch mode, missed float64 there: 5
    parity fails that said nothing about a Mac. A miss that the CPU gives too through the
    emulation's machinery without MPS's rules (StandIn.bare, a pass-through mode) is skipped
    as one only a Mac answers; a wrong kernel of the emulated device itself (the skewed
    variant, 1% off) still fails, as the pass-through result meets float64."""
    from harness.core.records import Status
    from harness.parity.ops import check
    monkeypatch.setenv(VAR, "1")
    a = torch.randn(5, 5, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    truth = torch.linalg.pinv(a.to(torch.complex128))
    with em.PassThrough():
        through = torch.linalg.pinv(a)
    if torch.allclose(through.to(torch.complex128), truth, atol=1e-4):
        pytest.skip("this torch's complex linalg.pinv is right under a dispatch mode (pytorch/pytorch#198118 fixed)")
    run = check.run_case("linalg.pinv", "standin-mps", "complex64", "forward")
    assert run.error.startswith("BeyondEmulation: the emulated device cannot tell"), run.error
    verdict = check.judge(run)
    assert verdict.status == Status.SKIP and verdict.metrics["emulation_cannot_tell"] is True
    skewed = check.judge(check.run_case("add", "standin-mps-skewed", "float32", "forward"))
    assert skewed.status == Status.FAIL, skewed
    assert check.judge(check.run_case("add", "standin-mps", "float32", "forward")).status == Status.PASS


def test_a_parity_sample_the_emulated_mac_doubts_is_set_aside_and_the_others_judged(monkeypatch):
    """batch_norm of an empty input makes its statistics in the accumulate type picked by the
    device's type: float64 on the CPU underneath, float32 on MPS. The emulated Mac raised
    MPS's float64 error there, and the whole float32 parity check read "no result to
    compare" though PyTorch's own MPS test expects batch_norm to run. That sample is now set
    aside as one only a Mac answers, and the others are judged; where every sample is, the
    check is the emulation's "cannot tell"; where PyTorch expects the op to fail (float_power
    computes in float64 on any device), the doubt changes nothing."""
    from harness.core.records import Status
    from harness.parity.ops import check
    monkeypatch.setenv(VAR, "1")
    run = check.run_case("nn.functional.batch_norm", "standin-mps", "float32", "forward")
    verdict = check.judge(run)
    assert verdict.status == Status.PASS and run.compared > 0 and run.beyond > 0, verdict.message
    assert verdict.metrics["samples_beyond"] == run.beyond and "emulated Mac cannot tell" in verdict.message
    skewed = check.judge(check.run_case("nn.functional.batch_norm", "standin-mps-skewed", "float32", "forward"))
    assert skewed.status == Status.FAIL, skewed.message            # the samples judged still catch a wrong kernel
    every = check.judge(check.run_case("pinverse", "standin-mps", "float32", "forward"))
    assert every.status == Status.SKIP and every.metrics["emulation_cannot_tell"] is True, every.message
    expected_to_fail = check.judge(check.run_case("float_power", "standin-mps", "float32", "backward"))
    assert expected_to_fail.message.startswith("no result to compare"), expected_to_fail.message


def test_a_complex32_result_is_judged_at_its_own_tolerance():
    """chalf() gives complex32, for which the tolerance table had no row: every chalf check of
    an integer dtype on a device read "no result to compare: KeyError"."""
    from harness.core.records import Status
    from harness.parity.ops import check
    run = check.run_case("chalf", "standin-mps", "int64", "forward")
    assert check.judge(run).status == Status.PASS and run.compared > 0, run.error


def test_a_parity_sample_that_asks_for_float64_is_set_aside_on_mps_and_the_others_judged(monkeypatch):
    """full_like's samples include one with dtype=torch.float64, which MPS lacks: on a Mac
    that one sample ended every full_like parity check as "no result to compare". It is set
    aside on MPS's rules (its failure is MPS's known lack, which the env and ops suites
    report), the others judged; the CPU compares every sample."""
    import types

    from harness.core.records import Status
    from harness.parity.ops import check
    monkeypatch.setenv(VAR, "1")
    assert check.lacking_dtype("mps", types.SimpleNamespace(input=torch.ones(2), args=(torch.float64,), kwargs={}))
    assert check.lacking_dtype("mps", types.SimpleNamespace(input=torch.ones(2), args=(torch.ones(1).double(),),
                                                            kwargs={})) == "float64"
    assert not check.lacking_dtype("cuda", types.SimpleNamespace(input=torch.ones(2), args=(),
                                                                 kwargs={"dtype": torch.float64}))
    run = check.run_case("full_like", "standin-mps", "float32", "forward")
    verdict = check.judge(run)
    assert verdict.status == Status.PASS and run.compared > 0, verdict.message
    assert verdict.metrics["samples_lacking_dtype"] > 0 and verdict.metrics["lacking_dtype"] == "float64"
    assert "samples_lacking_dtype" not in check.judge(check.run_case("full_like", "cpu", "float32", "forward")).metrics
    every = check.judge(check.run_case("softmax.with_dtype", "standin-mps", "float32", "forward"))
    assert every.status == Status.SKIP and "every sample asks for float64, which MPS does not have" in every.message


def test_an_op_the_cpu_cannot_run_says_the_yardstick_is_missing_not_the_device(monkeypatch):
    """The CPU has no float16 bessel_j0: on a device, the parity check has nothing to hold
    the device's result against, and says so (it read "no result to compare (see the ops
    suite)", as if the device had failed). An op the device itself refuses (double() on MPS)
    still says that."""
    from harness.core.records import Status
    from harness.parity.ops import check
    monkeypatch.setenv(VAR, "1")
    yardstick = check.judge(check.run_case("special.bessel_j0", "standin-mps", "float16", "forward"))
    assert yardstick.status == Status.SKIP and yardstick.message.startswith("no CPU result to compare with"), \
        yardstick.message
    assert "bessel_j0_cpu" in yardstick.message
    device = check.judge(check.run_case("double", "standin-mps", "float32", "forward"))
    assert device.message.startswith("no result to compare (see the ops suite)"), device.message


class _SampledOp:
    """An OpInfo-like op whose sample function draws an index as float64 on the device it is
    asked for, as torch 2.6's ``index_variable`` did (MPS refuses float64 there), and whose
    ``extra`` sample, when given, holds a float64 operand that no device of MPS's can take."""

    def __init__(self, extra: bool = False):
        self.extra = extra

    def sample_inputs(self, device, dtype, requires_grad=False):
        from torch.testing._internal.opinfo.core import SampleInput
        for n in (3, 4):
            index = torch.rand(2, dtype=torch.double, device=device).mul_(n).floor_().long()
            yield SampleInput(torch.ones(n, dtype=dtype, device=device, requires_grad=requires_grad), args=(index,))
        if self.extra:
            yield SampleInput(torch.ones(2, dtype=torch.float64, device=device))

    def __call__(self, x, index=None):
        return x[index] if index is not None else x


@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_a_sample_function_the_device_refuses_gets_its_samples_from_the_cpu(monkeypatch, pass_):
    """On torch 2.6 the ops sweep said __getitem__, index_put and randint fail on MPS in every
    dtype: OpInfo's sample function drew float64 on the device before the op was called. The
    samples are then made on the CPU and moved, the op runs, and the record says why."""
    from harness.ops import opsweep
    monkeypatch.setattr(opsweep, "op_table", lambda: {"fake": _SampledOp()})
    run = opsweep.run_case("fake", "standin-mps", "float32", pass_)
    assert (run.category, run.samples) == ("native", 2), run
    assert run.samples_from_cpu.startswith("OpInfo's sample function failed on mps:0 (TypeError: Cannot convert a MPS")
    v = opsweep.judge(run, None, on_mps=True)
    assert v.status == "pass" and "made on the CPU and moved there" in v.message
    assert v.metrics["samples_from_cpu"] == run.samples_from_cpu
    # samples that cannot be moved either: the op never ran, and the check says nothing of it
    monkeypatch.setattr(opsweep, "op_table", lambda: {"fake": _SampledOp(extra=True)})
    run = opsweep.run_case("fake", "standin-mps", "float32", pass_)
    v = opsweep.judge(run, None, on_mps=True)
    assert (run.category, v.status) == ("n/a", "skip") and "the op never ran" in v.message, v
    assert not v.metrics.get(devices.CANNOT_TELL)   # a real Mac's sweep says it too: not the emulation's doubt
    # on the CPU nothing is refused, and a sample function's own error stays what it was
    monkeypatch.setattr(opsweep, "op_table", lambda: {"fake": _SampledOp()})
    assert opsweep.run_case("fake", "cpu", "float32", pass_).category == "native"
