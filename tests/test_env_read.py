"""The env judges never build a verdict on a fact that could not be read, and never contradict
what torch itself observed.

- sysctl lives in /usr/sbin, which cron's and launchd's PATH (/usr/bin:/bin) lacks: it is asked
  by that path first, then by name. Where it still answers nothing, Rosetta and the chip are
  "cannot tell" (None, with the reason), and the judges say so (xfail, with how to check by
  hand), never a failure or a pass built on the failed read; an arm64 Python is proof of Apple
  silicon and of running natively, whatever sysctl said.
- The macOS floor table (read in the release wheels) never fails a torch whose
  ``torch.backends.mps.is_available()`` was observed True (a nightly or a source build).
- A torch that does not import is told the reinstall that replaces it
  (``--force-reinstall --no-cache-dir``), and a wheel of another architecture is named as such.
"""
import copy
import platform

import pytest

from harness.core.records import Status
from harness.env import checks, facts, fitness
from tests.conftest import load_facts
from tests.test_facts import fake_run

CRON_PATH_OUTPUTS = {   # an M2 Pro where only absolute paths run (PATH=/usr/bin:/bin)
    ("sw_vers", "-productVersion"): "15.5",
    ("/usr/sbin/sysctl", "-n", "sysctl.proc_translated"): "0",
    ("/usr/sbin/sysctl", "-n", "hw.optional.arm64"): "1",
    ("/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string"): "Apple M2 Pro",
    ("/usr/sbin/sysctl", "-n", "hw.model"): "Mac14,9",
    ("/usr/sbin/sysctl", "-n", "hw.memsize"): "34359738368",
    ("/usr/sbin/system_profiler", "SPDisplaysDataType", "-json"):
        '{"SPDisplaysDataType": [{"sppci_model": "Apple M2 Pro", "spdisplays_vendor": "sppci_vendor_Apple", '
        '"sppci_cores": "19"}]}',
}
ONLY_SW_VERS = {("sw_vers", "-productVersion"): "15.5"}   # sysctl and system_profiler not found at all
INTEL_OUTPUTS = {   # an Intel Mac: sysctl runs, and has neither key
    ("sw_vers", "-productVersion"): "13.6.7",
    ("/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string"): "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz",
    ("/usr/sbin/sysctl", "-n", "hw.model"): "MacBookPro16,1",
    ("/usr/sbin/sysctl", "-n", "hw.memsize"): "17179869184",
}
MPS_CHECKS = [c for c in checks.CHECKS if "mps" in c.targets and not c.autocast]


@pytest.fixture
def as_machine(monkeypatch):
    """This process's architecture as the probes see it, and no mac_ver (sw_vers answers)."""
    monkeypatch.setattr(platform, "mac_ver", lambda *a, **k: ("", ("", "", ""), ""))

    def set_arch(arch: str):
        monkeypatch.setattr(platform, "machine", lambda: arch)
    set_arch("x86_64")
    return set_arch


def with_mac(machine: str, mac: dict, arch: str, mps_available: bool) -> dict:
    f = copy.deepcopy(load_facts(machine))
    f["mac"] = mac
    f["python"]["arch"] = f["os"]["machine"] = arch
    f["torch"]["mps_available"] = mps_available
    f["trainer"] = {"device": "mps" if mps_available else "cpu", "error": None}
    return f


# --------------------------------------------------------------------------- A: sysctl read by its path

def test_sysctl_and_system_profiler_are_found_where_cron_s_path_does_not_reach(as_machine):
    asked = []
    mac = facts.mac_facts(fake_run(CRON_PATH_OUTPUTS, asked), system="darwin")
    assert mac == {"version": "15.5", "proc_translated": False, "hw_arm64": True, "chip": "Apple M2 Pro",
                   "model": "Mac14,9", "gpu_cores": 19, "memory_bytes": 34359738368}
    assert asked[asked.index(("sw_vers", "-productVersion")) + 1][0] == facts.SYSCTL == "/usr/sbin/sysctl"
    assert facts.cpu_model(fake_run(CRON_PATH_OUTPUTS), system="darwin") == "Apple M2 Pro"


def test_a_sysctl_that_answers_nothing_tells_nothing_and_says_why(as_machine):
    """An x86_64 Python that cannot run sysctl may be on an Intel Mac or under Rosetta: None for
    both, with the reason, never the False an Intel Mac would read."""
    mac = facts.mac_facts(fake_run(ONLY_SW_VERS), system="darwin")
    assert mac["proc_translated"] is None and mac["hw_arm64"] is None, mac
    for key in ("proc_translated", "hw_arm64"):
        assert "/usr/sbin/sysctl" in mac["unreadable"][key] and "PATH" in mac["unreadable"][key]


def test_an_arm64_python_is_apple_silicon_and_native_though_sysctl_answers_nothing(as_machine):
    as_machine("arm64")
    mac = facts.mac_facts(fake_run(ONLY_SW_VERS), system="darwin")
    assert (mac["hw_arm64"], mac["proc_translated"]) == (True, False) and "unreadable" not in mac, mac


def test_an_intel_mac_s_missing_keys_are_still_read_as_an_intel_mac(as_machine):
    """sysctl runs and has no such key: that is an Intel Mac, read, not a failed read."""
    mac = facts.mac_facts(fake_run(INTEL_OUTPUTS), system="darwin")
    assert (mac["hw_arm64"], mac["proc_translated"]) == (False, False) and "unreadable" not in mac, mac


def test_a_native_arm64_python_is_fit_whatever_sysctl_could_not_read(as_machine):
    """The reviewer's case: a native arm64 Python under cron was told "Python reports arm64 on an
    Intel Mac. Fix: install a native x86_64 Python"."""
    mac = facts.mac_facts(fake_run(ONLY_SW_VERS), system="darwin")   # read by an x86_64 process: None, None
    f = with_mac("apple_silicon_native", mac, "arm64", mps_available=True)
    for case in MPS_CHECKS:
        v = checks.evaluate(case, "mps", f)
        assert v.outcome == "ok", (case.subject, v)
    assert "Intel" not in fitness.judge_python_arch(f).message()


@pytest.mark.parametrize("mac", [
    {"version": "15.5", "proc_translated": None, "hw_arm64": None,
     "unreadable": {"proc_translated": "sysctl answered nothing", "hw_arm64": "sysctl answered nothing"}},
    {"version": "15.5"},    # the keys left out (a reader drops a None its schema does not take)
])
def test_an_x86_64_python_whose_rosetta_cannot_be_read_is_told_so_not_judged(mac):
    """Under Rosetta or on an Intel Mac? Neither "native on this Intel Mac" nor a failure: each
    judge that needs the answer says it cannot tell, what it could not read and how to read it."""
    f = with_mac("rosetta", copy.deepcopy(mac), "x86_64", mps_available=False)
    arch, rosetta = fitness.judge_python_arch(f), fitness.judge_not_rosetta(f)
    for v, key in ((arch, "hw.optional.arm64"), (rosetta, "sysctl.proc_translated")):
        assert v.outcome == fitness.LIMIT and v.summary.startswith("cannot tell"), v
        assert key in v.summary and "sysctl -n sysctl.proc_translated" in v.fix, v
        if "unreadable" in mac:
            assert "sysctl answered nothing" in v.summary
    assert "Intel Mac" not in arch.summary
    cause, fix = fitness.mps_unavailable_cause(f)
    assert "cannot be told" in cause and "Intel Mac" not in cause and "sysctl -n sysctl.proc_translated" in fix
    for case in MPS_CHECKS:
        if case.subject in ("python-arch", "not-rosetta"):
            verdict = checks.judge(case, "mps", f)
            assert verdict.status == Status.XFAIL and "cannot tell" in verdict.message, verdict


# --------------------------------------------------------------------------- B: torch's own word over the table

@pytest.mark.parametrize("torch_v,macos", [("2.9.0.dev20250601", "13.6"), ("2.9.0a0+git1234abc", "13.6"),
                                           ("2.15.0.dev20260901", "14.7"), ("2.6.0", "12.7")])
def test_the_floor_table_never_fails_a_torch_that_runs_mps_here(torch_v, macos):
    f = copy.deepcopy(load_facts("apple_silicon_native"))
    f["mac"]["version"], f["torch"]["version"] = macos, torch_v
    f["trainer"] = {"device": "mps", "error": None}
    v = fitness.judge_macos_version(f)
    assert v.outcome == "ok" and v.metrics["floor_contradicted"] is True, v
    assert "is_available() is True" in v.note and f"macOS {macos}" in v.note and "expects" in v.note, v
    verdict = checks.judge(next(c for c in MPS_CHECKS if c.subject == "macos-version"), "mps", f)
    assert verdict.status == Status.PASS and verdict.message == v.note      # the note is the pass's reason
    outcomes = {c.subject: checks.evaluate(c, "mps", f).outcome for c in MPS_CHECKS}
    assert "fail" not in outcomes.values(), outcomes                       # nothing contradicts the device
    f["torch"]["mps_available"] = False                                     # where it does not: still the floor
    v = fitness.judge_macos_version(f)
    assert v.outcome == "fail" and "only: MPS is unavailable here" in v.summary, v


# --------------------------------------------------------------------------- C: a torch that does not import

WRONG_WHEEL = ("ImportError: dlopen(/opt/homebrew/lib/python3.11/site-packages/torch/_C.cpython-311-darwin.so, "
               "0x0002): tried: '/opt/homebrew/lib/python3.11/site-packages/torch/_C.cpython-311-darwin.so' "
               "(mach-o file, but is an incompatible architecture (have 'x86_64', need 'arm64'))")


def broken_torch(error: str, arch: str = "arm64") -> dict:
    f = copy.deepcopy(load_facts("apple_silicon_native"))
    f["torch"] = {"importable": False, "error": error}
    f["python"]["arch"] = f["os"]["machine"] = arch
    return f


def test_an_x86_64_torch_under_an_arm64_python_is_named_and_force_reinstalled():
    f = broken_torch(WRONG_WHEEL)
    cause, fix = fitness.mps_unavailable_cause(f)
    judged = fitness.judge_torch_for_mps(f)
    for said, told in ((cause, fix), (judged.summary, judged.fix)):
        assert "x86_64 wheel was installed under an arm64 Python" in said, said
        assert "/opt/homebrew/bin/python3 -m pip install --force-reinstall --no-cache-dir torch" in told, told
        assert "print(platform.machine())" in told and not told.startswith("reinstall torch: pip install -U"), told


def test_an_arm64_torch_under_an_x86_64_python_is_told_the_arm64_python_as_well():
    f = broken_torch(WRONG_WHEEL.replace("have 'x86_64', need 'arm64'", "have 'arm64', need 'x86_64'"), "x86_64")
    f["mac"]["proc_translated"] = None   # not read: the import problem is named all the same
    _, fix = fitness.mps_unavailable_cause(f)
    assert "--force-reinstall --no-cache-dir torch" in fix and fitness.ARM64_PYTHON_FIX in fix, fix


@pytest.mark.parametrize("error,said", [
    ("ImportError: dlopen(.../_C.so, 2): no suitable image found.  Did find: .../_C.so: mach-o file, but is an "
     "incompatible architecture", "an x86_64 wheel under an arm64 Python, or an arm64 wheel under an x86_64 one"),
    ("ImportError: libtorch_cpu.dylib: image not found", "torch does not import"),
])
def test_any_torch_that_does_not_import_is_force_reinstalled(error, said):
    cause, fix = fitness.mps_unavailable_cause(broken_torch(error))
    assert said in cause and "--force-reinstall --no-cache-dir torch" in fix, fix


def test_a_torch_that_is_not_installed_is_told_to_install_it():
    f = broken_torch("ModuleNotFoundError: No module named 'torch'")
    v = fitness.judge_torch_for_mps(f)
    assert v.outcome == "fail" and "not installed" in v.summary and v.fix.endswith("-m pip install torch"), v
