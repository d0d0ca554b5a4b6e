"""The emulated Mac (``standin-mps``, tests/emulated_mps.py) through the env, ops, parity and perf
suites, as CI runs it: the suites' own code on their MPS branches, judged from the run file.

Two child pytest runs of a small selection (``pytest suites/env suites/ops suites/parity
suites/perf -p tests.standins --device standin-mps -k ...``), one with the MPS fallback on and
one with it off, run side by side; and a child Python that reads perf's memory reader on the
emulated Mac and on its frozen variant. Each test below asserts on what those wrote: the
records' status, category, target and the figures that show which branch judged them.

Which targets each suite's table gives an emulating stand-in is checked here directly, with a
stand-in registered for the test (no torch needed): the MPS cases exactly, none in float64.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from packaging.version import Version

from harness.core import runfiles
from harness.env import devices, timing
from tests.conftest import ROOT

TARGET = "standin-mps"
SUITES = ("suites/env", "suites/ops", "suites/parity", "suites/perf")
# One op with an MPS kernel (add), one without (mode: no MPS entry in native_functions.yaml),
# one whose PyTorch tolerance differs on MPS (asinh: TestConsistency's toleranceOverride), a
# model step, a compiled op (skipped, with the reason), an op timing, and the whole env table.
ON = " or ".join((
    "test_environment_is_fit_for_target",
    f"test_op_runs_on_target and ({TARGET}-add-float32-forward or {TARGET}-mode-float32-forward)",
    f"test_op_parity and ({TARGET}-asinh-float32-forward or {TARGET}-mode-float32-forward)",
    "test_model_forward_backward and bert",
    f"test_compiled_op and {TARGET}-compiled.nn.functional.linear-float32-forward",
    f"test_op_time and {TARGET}-matmul-float32-forward",
))
OFF = f"test_op_runs_on_target and {TARGET}-mode-float32-forward"
# The controls each of these suites opens its run with on a target (kept whatever -k selects)
CONTROLS = (("ops", "fallback-seen"), ("ops", "native-seen"), ("ops", "fallback-seen-again"),
            ("ops", "in-kernel-fallback-seen"),
            ("parity", "exact-passes"), ("parity", "perturbed-fails"), ("parity", "reference-float64-cpu"),
            ("perf", "memory-sees-allocation"), ("perf", "timing-sees-queued-work"))
TIMEOUT_S = 900


def _start(run_file, *args) -> subprocess.Popen:
    # a timing lock of their own (harness.env.timing.alone): these runs judge no figure, and must
    # not wait for another session's measurements on a shared machine
    env = {**os.environ, timing.LOCK_VAR: str(run_file.parent / "timing-lock")}
    return subprocess.Popen([sys.executable, "-m", "pytest", *SUITES, "-p", "tests.standins", "--device", TARGET,
                             "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--run-file", str(run_file), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


# The memory reader perf's long runs take (harness.perf.memory.reader) on an emulated Mac: 16 MiB
# allocated on the device, read before, with it held, and after it is freed.
READER = textwrap.dedent("""
    import json, sys
    import torch
    import tests.standins  # noqa: F401  registers the emulated Macs
    from harness.env import devices
    from harness.perf import memory
    out = {}
    for target in sys.argv[1:]:
        read = memory.reader(target)
        before = read()
        with devices.on_device(target):
            held = torch.ones(2 ** 22, device=devices.place(target))
        during = read()
        del held
        out[target] = {"before": before, "during": during, "after": read()}
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """The two suite runs and the reader, side by side: (run name -> {check: record}), reader's figures."""
    tmp = tmp_path_factory.mktemp("emulated")
    files = {"on": tmp / "on.jsonl", "off": tmp / "off.jsonl"}
    procs = {"on": _start(files["on"], "-k", ON, "--workload", "small"),
             "off": _start(files["off"], "-k", OFF, "--mps-fallback", "off"),
             "reader": subprocess.Popen([sys.executable, "-c", READER, TARGET, f"{TARGET}-frozen"], cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)}
    said = {name: proc.communicate(timeout=TIMEOUT_S) for name, proc in procs.items()}
    runs = {}
    for name, path in files.items():
        tail = (said[name][0] or "")[-3000:]
        assert path.exists(), f"the {name} run wrote no run file:\n{tail}"
        records = [r for run in runfiles.read_file(path).runs for r in run.records]
        runs[name] = {r["check"]: r for r in records}
        runs[name]["_output"] = tail
    assert procs["reader"].returncode == 0, said["reader"][1][-3000:]
    return runs, json.loads(said["reader"][0].strip().splitlines()[-1])


def _record(emulated, check: str, run: str = "on") -> dict:
    runs, _ = emulated
    assert check in runs[run], f"no record of {check} in the {run} run:\n{runs[run]['_output']}"
    rec = runs[run][check]
    assert rec["target"] == TARGET, rec
    return rec


# --------------------------------------------------------------------------- env

def test_the_env_suite_judges_the_recorded_mac_and_finds_it_fit(emulated):
    """On this Linux machine the mps rows are "not applicable"; on the emulated Mac they judge
    the recorded Mac (macOS 14.5, arm64 Python, MPS built and available): they pass."""
    runs, _ = emulated
    env = {check: rec for check, rec in runs["on"].items() if check.startswith("env/")}
    for check in ("env/macos-version", "env/python-arch", "env/not-rosetta", "env/backend-built",
                  "env/device-available", "env/bf16-autocast"):
        assert _record(emulated, check)["status"] == "pass", env.get(check)
    assert {rec["status"] for rec in env.values()} <= {"pass", "skip", "xfail"}, env
    limited = [rec["reason"] for rec in env.values() if rec["status"] == "xfail"]   # a gate of this torch alone:
    assert all("needs torch >= " in why for why in limited), limited   # 2.6's Trainer fp16 on MPS needs 2.8
    assert "env/capability" not in env and "env/threads" not in env   # the CPU's rows are not the Mac's


# --------------------------------------------------------------------------- ops

def test_an_op_with_an_mps_kernel_runs_native_and_is_held_to_pytorchs_mps_expectations(emulated):
    rec = _record(emulated, "ops/add/float32/forward")
    assert (rec["status"], rec["category"]) == ("pass", "native")
    assert rec["metrics"]["pytorch_expects"] == "pass" and rec["metrics"]["fallback_ops"] == []


def test_an_op_without_an_mps_kernel_falls_back_with_the_fallback_on(emulated):
    """PyTorch's MPS consistency test expects aten::mode to fail (it runs without the
    fallback); with the fallback on it runs on the CPU, as on a Mac: an xpass, seen falling back."""
    rec = _record(emulated, "ops/mode/float32/forward")
    expects = rec["metrics"]["pytorch_expects"]   # the installed torch's list: 2.15's xfail; 2.6's has no entry
    assert (rec["status"], rec["category"]) == ("xpass" if expects == "xfail" else "pass", "cpu-fallback"), rec
    assert rec["metrics"]["fallback_ops"] == ["aten::mode"] and expects in ("xfail", "pass")


def test_an_op_without_an_mps_kernel_is_unsupported_with_the_fallback_off(emulated):
    rec = _record(emulated, "ops/mode/float32/forward", "off")
    expected_failure = rec["metrics"]["pytorch_expects"] == "xfail"   # as the installed torch's list says
    assert (rec["status"], rec["category"]) == ("xfail" if expected_failure else "fail", "unsupported"), rec
    assert "The operator 'aten::mode' is not currently implemented for the MPS device" in rec["reason"]


# --------------------------------------------------------------------------- parity

def test_op_parity_on_the_emulated_mac_takes_pytorchs_mps_tolerance(emulated):
    """asinh has a toleranceOverride in TestConsistency for MPS only: the check judged by it
    took the MPS branch; it passes (the float64 reference stayed on the CPU, outside the
    device, where the emulated Mac would refuse it)."""
    from harness.ops.declarations import op_table, tolerance_override
    rec = _record(emulated, "parity/asinh/float32/forward")
    assert rec["status"] == "pass"
    if tolerance_override(op_table()["asinh"], "mps", torch.float32, "forward") is None:   # torch 2.6's declares none
        assert rec["metrics"]["tolerance_source"].startswith("torch.testing.assert_close defaults"), rec
        return
    assert "TestConsistency" in rec["metrics"]["tolerance_source"] and "(mps)" in rec["metrics"]["tolerance_source"]


def test_op_parity_of_an_op_that_falls_back_passes(emulated):
    rec = _record(emulated, "parity/mode/float32/forward")
    assert (rec["status"], rec["category"]) == ("pass", "parity") and rec["metrics"]["compared"] > 0


def test_a_model_training_step_on_the_emulated_mac_matches_float64(emulated):
    rec = _record(emulated, "parity/model_forward_backward/bert")
    assert (rec["status"], rec["category"]) == ("pass", "parity")


def test_a_compiled_check_on_the_emulated_mac_is_skipped_with_why(emulated):
    """Held to MPS's compile gate (torch >= 2.7), then skipped: inductor would compile CPU code."""
    rec = _record(emulated, "parity/compiled.nn.functional.linear/float32/forward")
    if Version(torch.__version__.split("+")[0]) < Version("2.7"):   # the gate itself: no Metal kernels before 2.7
        assert rec["status"] == "skip" and "generates Metal kernels for MPS from torch 2.7" in rec["reason"], rec
        return
    assert rec["status"] == "skip" and "not mps's kernels" in rec["reason"] and "on a Mac" in rec["reason"]


# --------------------------------------------------------------------------- perf

def test_perf_times_an_op_on_the_emulated_mac(emulated):
    rec = _record(emulated, "perf/matmul/float32/forward")
    assert rec["status"] == "pass" and rec["category"] in ("timed", "noisy")
    assert rec["metrics"]["clock"] == "wall clock" and rec["metrics"]["median_s"] > 0 and rec["metrics"]["rounds"] > 0


def test_perfs_memory_reader_reads_the_emulated_torch_mps(emulated):
    """MPS's readings (allocated: torch.mps.current_allocated_memory; driver), not CUDA's or the
    CPU's alone, moved by the 16 MiB held; on the frozen variant they stay where they were."""
    _, readings = emulated
    mib16 = 2 ** 24
    good, frozen = readings[TARGET], readings[f"{TARGET}-frozen"]
    assert set(good["during"]) == {"rss", "allocated", "driver"}
    assert good["during"]["allocated"] - good["before"]["allocated"] == mib16
    assert good["after"]["allocated"] == good["before"]["allocated"]
    assert good["during"]["driver"] >= good["during"]["allocated"]
    assert frozen["during"]["allocated"] == frozen["before"]["allocated"]


def test_every_control_of_these_runs_passed_on_the_emulated_mac(emulated):
    """The controls (<suite>/controls/<name>) open each suite's run: on the emulated Mac,
    whose instruments are not broken, none may fail."""
    runs, _ = emulated
    controls = [rec for run in runs.values() for check, rec in run.items()
                if check != "_output" and rec.get("subject") == "controls"]
    assert {f"{suite}/controls/{name}" for suite, name in CONTROLS} <= set(runs["on"])
    assert "ops/controls/fallback-seen" in runs["off"]   # seen raising NotImplementedError there
    assert [(r["check"], r["status"], r.get("reason")) for r in controls if r["status"] not in ("pass", "skip")] == []


# --------------------------------------------------------------------------- the cases an emulated target gets

class _Emulating(devices.StandIn):
    name, emulates, suites = "standin-emulating", "mps", ("env", "ops", "parity", "optim", "perf")


class _Plain(devices.StandIn):
    name = "standin-plain"


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(devices.STAND_INS, _Emulating.name, _Emulating())
    monkeypatch.setitem(devices.STAND_INS, _Plain.name, _Plain())


def _ids(table, target):
    return {(c.subject, c.variant) for c in table if target in c.targets}


def test_an_emulating_stand_in_gets_exactly_the_mps_cases_and_none_in_float64(registered):
    from harness.env import checks
    from harness.ops import opsweep
    from harness.parity.ops import check
    from harness.perf import ops as perf_ops
    ops = opsweep.emulated(opsweep.cases())
    assert _ids(ops, _Emulating.name) == _ids(ops, "mps") and _ids(ops, _Plain.name) == set()
    assert not any("float64" in variant for _, variant in _ids(ops, _Emulating.name))
    parity = check.cases()
    assert _ids(parity, _Emulating.name) == _ids(parity, "mps")
    assert _ids(parity, _Plain.name) != _ids(parity, "mps")   # a plain stand-in has the CPU's dtypes
    env = checks.cases()
    assert _ids(env, _Emulating.name) == _ids(env, "mps") and _ids(env, _Plain.name) == set()
    assert _Emulating.name in perf_ops.targets() and _Plain.name not in perf_ops.targets()


def test_an_emulating_stand_in_has_compiled_checks_and_a_plain_one_has_none(registered):
    from harness.parity import compiled
    assert _Emulating.name in compiled.targets() and _Plain.name not in compiled.targets()
    assert {c.model for c in compiled.model_cases() if _Emulating.name in c.targets} == set(compiled.models.MODELS)
