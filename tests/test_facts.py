"""The fact judges against recorded fact sets: each machine gets the verdicts a person
who knows MPS would give it, and each failure carries its fix."""
import copy

import pytest

from harness.env import checks, facts, fitness
from tests.conftest import load_facts

MPS_SUBJECTS = [c.subject for c in checks.CHECKS if "mps" in c.targets]
# usable only where MPS is: a machine whose MPS device is unavailable can use none of them
MIXED_PRECISION = ("fp16-autocast", "bf16-autocast", "trainer-fp16")

# Expected outcome of every mps check, per recorded machine (ok / fail / limit / na).
EXPECTED = {
    "apple_silicon_native": dict.fromkeys(MPS_SUBJECTS, "ok"),
    "rosetta": {**dict.fromkeys(MPS_SUBJECTS, "ok"), "python-arch": "fail", "not-rosetta": "fail",
                "device-available": "fail", "trainer-default-device": "fail",
                "fp16-autocast": "limit", "bf16-autocast": "limit", "trainer-fp16": "limit"},
    "intel_mac": {**dict.fromkeys(MPS_SUBJECTS, "ok"),
                  "fp16-autocast": "limit", "bf16-autocast": "limit", "trainer-fp16": "limit"},
    "macos_12_2": {**dict.fromkeys(MPS_SUBJECTS, "ok"), "macos-version": "fail", "device-available": "fail",
                   "trainer-default-device": "fail", **dict.fromkeys(MIXED_PRECISION, "limit")},
    "torch_no_mps": {**dict.fromkeys(MPS_SUBJECTS, "ok"), "backend-built": "fail", "device-available": "fail",
                     "trainer-default-device": "fail", **dict.fromkeys(MIXED_PRECISION, "limit")},
    "torch_2_15_on_macos_14": {**dict.fromkeys(MPS_SUBJECTS, "ok"), "macos-version": "fail",
                               "device-available": "fail", "trainer-default-device": "fail",
                               **dict.fromkeys(MIXED_PRECISION, "limit")},
    "linux_x86_64": dict.fromkeys(MPS_SUBJECTS, "na"),
}
# What TrainingArguments would pick on each machine (recorded alongside the facts).
TRAINER = {"apple_silicon_native": "mps", "rosetta": "cpu", "intel_mac": "mps", "macos_12_2": "cpu",
           "torch_no_mps": "cpu", "torch_2_15_on_macos_14": "cpu", "linux_x86_64": "cpu"}


def _mps_cases():
    return [(name, case) for name in EXPECTED for case in checks.CHECKS if "mps" in case.targets]


@pytest.mark.parametrize("machine,case", _mps_cases(), ids=lambda v: getattr(v, "subject", v))
def test_mps_judges_give_the_expected_verdict(machine, case):
    f = {**load_facts(machine), "trainer": {"device": TRAINER[machine], "error": None}}
    # evaluate() adds the live autocast probe, which needs the device itself: judge those purely.
    verdict = case.fitness_of(f) if case.autocast and fitness.is_mac(f) else checks.evaluate(case, "mps", f)
    assert verdict.outcome == EXPECTED[machine][case.subject], verdict
    if verdict.outcome in ("fail", "limit"):
        assert verdict.fix, f"{case.subject} on {machine} gives no fix: {verdict}"


@pytest.mark.parametrize("machine", sorted(EXPECTED))
def test_every_mps_check_is_na_off_a_mac_and_judged_on_one(machine):
    f = {**load_facts(machine), "trainer": {"device": TRAINER[machine], "error": None}}
    outcomes = {c.subject: checks.evaluate(c, "mps", f).outcome
                for c in checks.CHECKS if "mps" in c.targets and not c.autocast}
    if machine.startswith("linux"):
        assert set(outcomes.values()) == {"na"}
    else:
        assert "na" not in outcomes.values()


def test_rosetta_is_named_as_the_cause_with_the_arm64_fix():
    f = load_facts("rosetta")
    cause, fix = fitness.mps_unavailable_cause(f)
    assert "Rosetta" in cause and "arm64 Python" in fix
    assert "Rosetta" in fitness.judge_python_arch(f).summary


def test_intel_mac_is_not_judged_by_its_cpu():
    f = load_facts("intel_mac")
    assert fitness.judge_python_arch(f).outcome == "ok"
    assert fitness.mps_unavailable_cause(f) is None
    # The same Intel Mac without a Metal GPU: unavailable, and the reason says so.
    f["torch"]["mps_available"] = False
    cause, fix = fitness.mps_unavailable_cause(f)
    assert "Intel Mac" in cause and "AMD GPU" in fix


def test_old_macos_cause_and_fix():
    cause, fix = fitness.mps_unavailable_cause(load_facts("macos_12_2"))
    assert "12.2" in cause and "12.3" in fix


@pytest.mark.parametrize("torch_v,needed", [("2.2.2", "12.3"), ("2.6.0", "13"), ("2.9.0", "14"), ("2.15.0", "15")])
def test_a_macos_before_mps_is_told_the_macos_its_torch_needs(torch_v, needed):
    """Below 12.3 no torch has MPS, and a newer torch needs more than 12.3: updating to 12.3
    would leave MPS unavailable with torch 2.15, so the fix names the macOS this torch needs."""
    f = load_facts("macos_12_2")
    f["torch"]["version"] = f["packages"]["torch"] = torch_v
    cause, fix = fitness.mps_unavailable_cause(f)
    judged = fitness.judge_macos_version(f)
    for said in (fix, judged.fix):
        assert f"update macOS to {needed} or newer" in said


@pytest.mark.parametrize("machine", ["torch_2_15_on_macos_14", "torch_no_mps", "macos_12_2", "rosetta"])
def test_no_mps_feature_is_usable_without_the_mps_device(machine):
    """The versions may allow fp16/bf16 autocast and the Trainer's fp16, yet with MPS unavailable
    none of it runs: the gate says so, with the device's cause and fix, never 'usable'."""
    f = load_facts(machine)
    cause, fix = fitness.mps_unavailable_cause(f)
    for key in ("mps-fp16-autocast", "mps-bf16-autocast", "mps-trainer-fp16"):
        v = fitness.judge_gate(key)(f)
        assert v.outcome == "limit" and v.metrics["usable"] is False
        assert cause in v.summary and "env/device-available" in v.summary and v.fix == fix


def test_torch_without_mps_cause_and_fix():
    cause, fix = fitness.mps_unavailable_cause(load_facts("torch_no_mps"))
    assert "no MPS backend" in cause and "pip install" in fix


def test_linux_cause_names_the_platform():
    cause, _ = fitness.mps_unavailable_cause(load_facts("linux_x86_64"))
    assert cause.startswith("MPS unavailable: this is Linux x86_64")


@pytest.mark.parametrize("value,torch_v,outcome,says", [
    (None, "2.15.0", "ok", "not set"), ("1", "2.15.0", "ok", "on"), ("0", "2.2.2", "ok", "off"),
    ("false", "2.15.0", "fail", "every value but '0' as on"), ("true", "2.4.0", "fail", "std::stoi"),
    ("2", "2.4.0", "fail", "integer 2"), ("", "2.15.0", "fail", "not 0 or 1"),
])
def test_fallback_variable_values(value, torch_v, outcome, says):
    f = load_facts("apple_silicon_native")
    f["env"]["PYTORCH_ENABLE_MPS_FALLBACK"] = value
    f["torch"]["version"] = torch_v
    v = fitness.judge_fallback_env(f)
    assert v.outcome == outcome and says in v.summary


@pytest.mark.parametrize("machine,high,low,outcome", [
    ("apple_silicon_native", None, None, "ok"), ("apple_silicon_native", "1.7", "1.4", "ok"),
    ("apple_silicon_native", "0.0", None, "ok"), ("apple_silicon_native", "2.0", "2.0", "ok"),
    ("apple_silicon_native", "abc", None, "fail"),   # strtod: becomes 0.0, no limit at all
    ("apple_silicon_native", "-1", None, "fail"), ("apple_silicon_native", "2.5", None, "fail"),
    ("apple_silicon_native", "1.0", "1.5", "fail"),
    ("apple_silicon_native", "1.0", None, "fail"),   # the default low ratio 1.4 exceeds it
    ("intel_mac", "1.0", None, "ok"),                # discrete GPU before torch 2.13: default low 1.0
    ("apple_silicon_native", None, "x", "fail"),
    ("apple_silicon_native", "1.5x", None, "ok"),    # strtod reads the leading 1.5
    ("apple_silicon_native", "2.5x", None, "fail"),  # ... and 2.5 is out of range
    ("apple_silicon_native", "nan", None, "fail"),   # torch's range check refuses NaN
])
def test_watermark_ratios(machine, high, low, outcome):
    f = load_facts(machine)
    f["env"]["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] = high
    f["env"]["PYTORCH_MPS_LOW_WATERMARK_RATIO"] = low
    assert fitness.judge_watermark_env(f).outcome == outcome


def test_a_watermark_with_trailing_text_is_read_as_torch_reads_it():
    """torch reads the ratios with strtod: '1.5x' is 1.5, not 'no number, so 0.0'."""
    f = load_facts("apple_silicon_native")
    f["env"]["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] = "1.5x"
    v = fitness.judge_watermark_env(f)
    assert "high 1.5" in v.summary and "read as 1.5" in v.summary and "0.0" not in v.summary


@pytest.mark.parametrize("machine,fast,metal,outcome,says", [
    ("apple_silicon_native", None, None, "ok", "MPS kernels as torch ships them"),
    ("apple_silicon_native", "0", None, "ok", "MPS kernels as torch ships them"),
    ("apple_silicon_native", "1", None, "ok", "PYTORCH_MPS_FAST_MATH=1: Metal kernels compiled with fast math"),
    ("apple_silicon_native", None, "1", "ok", "PYTORCH_MPS_PREFER_METAL=1: matmuls on torch's own Metal kernel"),
    # torch reads only whether PYTORCH_MPS_PREFER_METAL is set: "0" turns the Metal matmul on
    ("apple_silicon_native", None, "0", "fail", "PYTORCH_MPS_PREFER_METAL='0' turns torch's own Metal matmul ON"),
    ("apple_silicon_native", None, "", "fail", "turns torch's own Metal matmul ON"),
    ("apple_silicon_native", "true", None, "fail", "PYTORCH_MPS_FAST_MATH='true' is not 0 or 1"),
    ("linux_x86_64", "1", "0", "na", "not applicable"),
])
def test_the_mps_kernel_switches(machine, fast, metal, outcome, says):
    f = load_facts(machine)
    f["env"]["PYTORCH_MPS_FAST_MATH"], f["env"]["PYTORCH_MPS_PREFER_METAL"] = fast, metal
    v = fitness.judge_kernel_env(f)
    assert v.outcome == outcome and says in v.summary, v
    assert (outcome == "fail") == bool(v.fix)


def test_a_kernel_switch_the_installed_torch_predates_switches_nothing():
    """PYTORCH_MPS_PREFER_METAL is read from torch 2.3, PYTORCH_MPS_FAST_MATH from 2.5 (the first
    macOS binaries that name them): set on an older torch, they change no kernel, and two runs
    of it are not 'compared across different kernel switches'."""
    f = load_facts("apple_silicon_native")
    f["env"]["PYTORCH_MPS_FAST_MATH"], f["env"]["PYTORCH_MPS_PREFER_METAL"] = "1", "1"
    f["torch"]["version"] = "2.2.2"
    v = fitness.judge_kernel_env(f)
    assert v.outcome == "ok" and v.summary.startswith("MPS kernels as torch ships them"), v
    assert "PYTORCH_MPS_FAST_MATH is set but torch 2.2.2 does not read it (from torch 2.5)" in v.summary
    assert fitness.kernel_switches(f["env"], "2.2.2") == []
    assert fitness.kernel_switches(f["env"], "2.4.1") == ["PYTORCH_MPS_PREFER_METAL=1"]
    assert fitness.kernel_switches(f["env"], "2.5.0") == fitness.kernel_switches(f["env"]) == [
        "PYTORCH_MPS_FAST_MATH=1", "PYTORCH_MPS_PREFER_METAL=1"]
    f["env"]["PYTORCH_MPS_PREFER_METAL"] = "0"   # a value it would misread, on a torch that does not read it
    assert fitness.judge_kernel_env(f).outcome == "ok"


@pytest.mark.parametrize("torch_version, macos, needed, below", [
    ("2.5.1", "12.7", None, None), ("2.6.0", "12.7", "13", "2.6"), ("2.8.0", "13.6", None, None),
    ("2.9.1", "13.6", "14", "2.9"), ("2.11.0", "13.6", "14", "2.9"), ("2.12.0", "13.6", "14", "2.9"),
    ("2.14.1", "14.5", None, None), ("2.15.0", "14.5", "15", "2.15"), ("2.15.0", "13.6", "15", "2.9"),
    ("2.15.0", "12.7", "15", "2.6"), ("2.15.0", "15.0", None, None), ("2.16.0.dev20261101", "14.7", "15", "2.15"),
    ("2.15.0.dev20260901", "14.7", "15", "2.15")])
def test_the_macos_each_torch_needs_for_mps(torch_version, macos, needed, below):
    """The macOS each torch's MPS needs, as the real wheels' binaries say it: 12.3 to torch 2.5,
    13 from 2.6, 14 from 2.9, 15 from 2.15 (the wheels of 2.6 to 2.11 install on macOS 11, and
    2.15's on 14). The way back names the torch below the first floor this macOS misses: torch
    2.12 on macOS 13 is told 'torch<2.9', since 2.11 needs macOS 14 as well."""
    f = load_facts("apple_silicon_native")
    f["mac"]["version"], f["torch"]["version"] = macos, torch_version
    # as these releases run there: the floor never outranks an observed is_available() (tests/test_env_read.py)
    f["torch"]["mps_available"] = needed is None
    v = fitness.judge_macos_version(f)
    if needed is None:
        assert v.outcome == "ok", v
        return
    assert v.outcome == "fail" and f"macOS {needed}+ only" in v.summary and f"macOS {macos}" in v.summary
    assert f"update macOS to {needed}" in v.fix and f"pip install 'torch<{below}'" in v.fix, v.fix
    cause, fix = fitness.mps_unavailable_cause(f)
    assert f"supports MPS on macOS {needed}+ only" in cause and fix == v.fix


def test_torch_2_15_on_macos_14_is_named_as_the_cause_not_a_missing_metal_device():
    """The upgrade trap: pip installs torch 2.15 on macOS 14 (wheel tag macosx_14_0), whose MPS
    then refuses the OS; the user is told that, not that the Mac lacks a Metal device."""
    f = load_facts("torch_2_15_on_macos_14")
    cause, fix = fitness.mps_unavailable_cause(f)
    assert cause == "MPS unavailable: torch 2.15.0 supports MPS on macOS 15+ only, and this is macOS 14.5"
    assert "Metal" not in cause and "pip install 'torch<2.15'" in fix


def test_autocast_probe_decides_after_the_gate(monkeypatch):
    """A gate that says usable but an autocast that does not work is a failure; without a
    gate, a dtype autocast refuses is a limitation of this version."""
    from harness.env import devices
    f = load_facts("apple_silicon_native")   # an mps gate needs facts where MPS is available to pass
    monkeypatch.setattr(devices.CPUBackend, "autocast_probe", lambda self, dtype: (False, "autocast produced float32"))
    gated = checks.EnvCheck("x", ("cpu",), "?", gate="mps-fp16-autocast", autocast="float16")
    ungated = checks.EnvCheck("x", ("cpu",), "?", autocast="float16")
    assert checks.evaluate(gated, "cpu", f).outcome == "fail"
    assert checks.evaluate(ungated, "cpu", f).outcome == "limit"
    monkeypatch.setattr(devices.CPUBackend, "autocast_probe", lambda self, dtype: (True, "ok"))
    assert checks.evaluate(gated, "cpu", f).outcome == "ok"


@pytest.mark.parametrize("torch_v,macos,accel,expect", [
    ("2.4.1", "14.0", "1.15.0", {"mps-fp16-autocast": "limit", "mps-bf16-autocast": "limit",
                                 "mps-trainer-fp16": "limit"}),
    ("2.5.0", "14.0", "1.10.1", {"mps-fp16-autocast": "ok", "mps-bf16-autocast": "limit",
                                 "mps-trainer-fp16": "limit"}),
    ("2.6.0", "13.6", "1.11.0", {"mps-fp16-autocast": "ok", "mps-bf16-autocast": "limit",
                                 "mps-trainer-fp16": "limit"}),
    ("2.8.0", "14.0", "1.11.0", {"mps-fp16-autocast": "ok", "mps-bf16-autocast": "ok", "mps-trainer-fp16": "ok"}),
    ("2.8.0", "15.1", "1.10.9", {"mps-fp16-autocast": "ok", "mps-bf16-autocast": "ok",
                                 "mps-trainer-fp16": "limit"}),
])
def test_mixed_precision_gates_at_their_boundaries(torch_v, macos, accel, expect):
    f = load_facts("apple_silicon_native")
    f["torch"]["version"] = f["packages"]["torch"] = torch_v
    f["mac"]["version"] = macos
    f["packages"]["accelerate"] = accel
    got = {key: fitness.judge_gate(key)(f).outcome for key in expect}
    assert got == expect


def test_gate_reports_what_is_missing_and_how_to_get_it():
    f = load_facts("apple_silicon_native")
    f["torch"]["version"], f["mac"]["version"] = "2.5.1", "13.6"
    v = fitness.judge_gate("mps-bf16-autocast")(f)
    assert "torch >= 2.6" in v.summary and "macOS >= 14" in v.summary
    assert "pip install -U 'torch>=2.6'" in v.fix and "macOS" in v.fix


def test_an_intel_mac_is_not_told_to_pip_install_a_torch_pypi_lacks():
    """PyPI's last Intel-Mac torch is 2.2.2: `pip install -U 'torch>=2.6'` finds nothing there."""
    f = load_facts("intel_mac")
    v = fitness.judge_gate("mps-bf16-autocast")(f)
    assert "torch >= 2.6" in v.summary and "macOS >= 14" in v.summary
    assert "pip install -U 'torch" not in v.fix and "no torch >= 2.6 for Intel Macs" in v.fix and "2.2.2" in v.fix
    assert "from source" in v.fix and "macOS" in v.fix


def test_tokenizers_built_for_another_arch_fails():
    f = load_facts("apple_silicon_native")
    f["tokenizers"]["binary_archs"] = ["x86_64"]
    v = fitness.judge_tokenizers_native(f)
    assert v.outcome == "fail" and "x86_64" in v.summary and "reinstall" in v.fix
    f["tokenizers"]["binary_archs"] = ["x86_64", "arm64"]  # universal2 is fine
    assert fitness.judge_tokenizers_native(f).outcome == "ok"
    f["tokenizers"].update(importable=False, error="ImportError: dlopen failed")
    assert fitness.judge_tokenizers_native(f).outcome == "fail"


def test_cpu_threads_oversubscribed():
    f = load_facts("linux_x86_64")
    f["torch"]["num_threads"], f["cpu"]["usable"] = 16, 2
    f["env"]["OMP_NUM_THREADS"] = "16"
    v = fitness.judge_cpu_threads(f)
    assert v.outcome == "fail" and "OMP_NUM_THREADS=2" in v.fix
    f["torch"]["num_threads"] = 2
    assert fitness.judge_cpu_threads(f).outcome == "ok"


def test_cpu_without_avx2_is_a_limit():
    f = load_facts("linux_x86_64")
    f["torch"]["cpu_capability"] = "DEFAULT"
    assert fitness.judge_cpu_capability(f).outcome == "limit"
    assert fitness.judge_cpu_capability(load_facts("apple_silicon_native")).outcome == "ok"  # arm64 reports DEFAULT


def _with_gpu(f, **torch_facts):
    f = copy.deepcopy(f)
    f["nvidia_driver"] = "550.54.14"
    f["torch"].update(torch_facts)
    return f


def test_cuda_not_applicable_without_a_gpu_but_misconfigured_with_one():
    linux = load_facts("linux_x86_64")
    assert fitness.judge_cuda_present(linux).outcome == "na"
    cpu_only = _with_gpu(linux, cuda_build=None)
    assert "CPU-only" in fitness.judge_cuda_present(cpu_only).summary
    old_driver = _with_gpu(linux)
    v = fitness.judge_cuda_present(old_driver)
    assert v.outcome == "fail" and "driver" in v.fix
    hidden = _with_gpu(linux)
    hidden["env"]["CUDA_VISIBLE_DEVICES"] = ""
    assert "hides every GPU" in fitness.judge_cuda_present(hidden).summary


def test_cuda_capability_and_bf16():
    f = _with_gpu(load_facts("linux_x86_64"), cuda_available=True, cuda_bf16=False,
                  cuda_devices=[{"name": "Tesla T4", "capability": [7, 5], "total_memory": 1}])
    assert fitness.judge_cuda_capability(f).outcome == "ok"
    assert fitness.judge_cuda_bf16(f).outcome == "limit"
    f["torch"]["cuda_devices"][0]["capability"] = [6, 0]  # Pascal: not in this build's sm_75+ list
    v = fitness.judge_cuda_capability(f)
    assert v.outcome == "fail" and "sm_60" in v.summary


@pytest.mark.parametrize("cap,arch,outcome", [((9, 0), ["sm_80", "sm_90a"], "ok"),
                                              ((12, 0), ["sm_80", "sm_100f", "sm_120f"], "ok"),
                                              ((12, 0), ["sm_80", "sm_100f"], "fail"),
                                              ((12, 0), ["sm_75", "compute_120a"], "ok")])
def test_cuda_capability_reads_arch_specific_and_family_targets(cap, arch, outcome):
    """sm_90a and sm_120f (custom builds, CUDA 12.9's family targets) name their generation: no
    crash on int('90a'), and sm_120f counts as kernels for an sm_120 GPU."""
    f = _with_gpu(load_facts("linux_x86_64"), cuda_available=True,
                  cuda_devices=[{"name": "GPU", "capability": list(cap), "total_memory": 1}])
    f["torch"]["cuda_arch_list"] = arch
    assert fitness.judge_cuda_capability(f).outcome == outcome


def test_env_id_names_host_python_and_torch():
    assert facts.env_id(load_facts("apple_silicon_native")) == "mac-py3.11.7-torch2.15.0"


@pytest.mark.parametrize("text,version", [
    # the open kernel module's spelling, as on the recorded H100 machine (whose env record said "for")
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22-I3-H04-03-1)"
     "  Sat Sep 20 00:47:16 UTC 2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n", "580.95.05"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n", "550.54.14"),
    ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  34.1.1  Release Build  (buildbrain@mobile-u64)\n", "34.1.1"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.142  Release Build  (dvs-builder@U22)\n", "580.142"),
    # the open module's line as a 570 driver writes it; the word after "Module" is "for", never the version
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16-I3-B03-4-3)"
     "  Thu Jan 16 23:21:36 UTC 2025\n", "570.86.15"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15  Release Build  "
     "(dvs-builder@U16-I3-B03-4-3)\n", "570.86.15"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 570.86.15 Release Build\n", "570.86.15"),  # single spaces
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64\t570.86.15\tRelease Build\n", "570.86.15"),   # tabs
    # a blank line first
    ("\nNVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n", "570.86.15"),
    ("something else entirely\n", "something else entirely"),  # still says a driver is there
])
def test_the_nvidia_driver_version_is_read_from_either_kernel_module(text, version):
    assert facts.parse_nvidia_driver(text) == version


# --------------------------------------------------------------------------- probes fed recorded outputs

# What an M2 Pro Mac (19-core GPU, 32 GB) answers, in the shape system_profiler and sysctl
# print it; a test feeds these to the probes through their ``run`` argument on any machine.
M2_PRO_DISPLAYS = """{
  "SPDisplaysDataType" : [
    {
      "_name" : "Apple M2 Pro",
      "spdisplays_mtlgpufamilysupport" : "spdisplays_metal3",
      "spdisplays_ndrvs" : [
        {"_name" : "Color LCD", "spdisplays_main" : "spdisplays_yes", "spdisplays_pixelresolution" : "3024 x 1964"}
      ],
      "spdisplays_vendor" : "sppci_vendor_Apple",
      "sppci_bus" : "spdisplays_builtin",
      "sppci_cores" : "19",
      "sppci_device_type" : "spdisplays_gpu",
      "sppci_model" : "Apple M2 Pro"
    }
  ]
}"""
# An Intel MacBook Pro: two GPUs, neither Apple's, no core count.
INTEL_DISPLAYS = """{"SPDisplaysDataType": [
  {"_name": "Intel UHD Graphics 630", "sppci_model": "Intel UHD Graphics 630",
   "spdisplays_vendor": "sppci_vendor_intel", "spdisplays_vram_shared": "1536 MB", "sppci_bus": "spdisplays_builtin"},
  {"_name": "AMD Radeon Pro 5500M", "sppci_model": "AMD Radeon Pro 5500M", "spdisplays_vendor": "sppci_vendor_amd",
   "spdisplays_vram": "8 GB", "sppci_bus": "spdisplays_pcie_device"}]}"""

M2_PRO = {
    ("sw_vers", "-productVersion"): "14.5",
    ("sysctl", "-n", "sysctl.proc_translated"): "0",
    ("sysctl", "-n", "hw.optional.arm64"): "1",
    ("sysctl", "-n", "machdep.cpu.brand_string"): "Apple M2 Pro",
    ("sysctl", "-n", "hw.model"): "Mac14,9",
    ("sysctl", "-n", "hw.memsize"): "34359738368",
    ("system_profiler", "SPDisplaysDataType", "-json"): M2_PRO_DISPLAYS,
}
INTEL_MAC = {
    ("sw_vers", "-productVersion"): "13.6.7",
    ("sysctl", "-n", "hw.optional.arm64"): None,            # no such key on an Intel Mac: sysctl fails
    ("sysctl", "-n", "sysctl.proc_translated"): None,
    ("sysctl", "-n", "machdep.cpu.brand_string"): "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz",
    ("sysctl", "-n", "hw.model"): "MacBookPro16,1",
    ("sysctl", "-n", "hw.memsize"): "17179869184",
    ("system_profiler", "SPDisplaysDataType", "-json"): INTEL_DISPLAYS,
}


def fake_run(outputs: dict, asked: list | None = None):
    """A command runner answering recorded outputs (None, as run_command gives for a
    command that fails or is missing, for anything not recorded)."""
    def run(cmd, env=None):
        if asked is not None:
            asked.append(tuple(cmd))
        return outputs.get(tuple(cmd))
    return run


@pytest.fixture
def no_mac_ver(monkeypatch):
    """platform.mac_ver() as off a Mac (''), so the probes ask sw_vers, which the test answers."""
    import platform
    monkeypatch.setattr(platform, "mac_ver", lambda *a, **k: ("", ("", "", ""), ""))


def test_an_apple_silicon_macs_gpu_cores_and_unified_memory(no_mac_ver):
    mac = facts.mac_facts(fake_run(M2_PRO), system="darwin")
    assert mac == {"version": "14.5", "proc_translated": False, "hw_arm64": True, "chip": "Apple M2 Pro",
                   "model": "Mac14,9", "gpu_cores": 19, "memory_bytes": 34359738368}


def test_under_rosetta_the_gpu_is_still_read(no_mac_ver):
    mac = facts.mac_facts(fake_run({**M2_PRO, ("sysctl", "-n", "sysctl.proc_translated"): "1"}), system="darwin")
    assert mac["proc_translated"] and mac["hw_arm64"] and mac["gpu_cores"] == 19


def test_an_intel_mac_has_memory_but_no_gpu_core_count(no_mac_ver):
    asked = []
    mac = facts.mac_facts(fake_run(INTEL_MAC, asked), system="darwin")
    assert mac["gpu_cores"] is None and mac["memory_bytes"] == 17179869184 and not mac["hw_arm64"]
    assert facts.GPU_PROFILE_CMD not in [list(c) for c in asked]   # not asked: it has no Apple GPU
    assert facts.parse_gpu_cores(INTEL_DISPLAYS) is None


def test_a_mac_whose_probes_all_fail_says_none_for_each(no_mac_ver):
    mac = facts.mac_facts(fake_run({("sysctl", "-n", "hw.optional.arm64"): "1"}), system="darwin")
    assert mac["gpu_cores"] is None and mac["memory_bytes"] is None and mac["chip"] is None
    assert mac["version"] is None


def test_off_a_mac_nothing_is_asked():
    asked = []
    assert facts.mac_facts(fake_run(M2_PRO, asked), system="linux") is None
    assert asked == []


SW_VERS = ("sw_vers", "-productVersion")


@pytest.mark.parametrize("python_says,sw_vers_says,version,asked", [
    ("16.0", "26.1", "26.1", True),     # macOS 26 seen by a Python built with a pre-26 SDK
    ("16.1", "26.1", "26.1", True),
    ("10.16", "11.7.10", "11.7.10", True),   # macOS 11+ seen by a Python built with a pre-11 SDK
    ("16.0", None, "16.0", True),       # sw_vers fails: what Python said is kept
    ("15.5", "26.1", "15.5", False),    # a real macOS 15 (or 26, with a new SDK) is believed
    ("26.1", "99.0", "26.1", False),
    ("14.7.1", "99.0", "14.7.1", False),
])
def test_a_compatibility_macos_version_is_asked_of_sw_vers(monkeypatch, python_says, sw_vers_says, version, asked):
    """Python reads SystemVersion.plist, which macOS rewrites for a program built with an SDK
    older than a renumbering: 10.16 on macOS 11 and later, 16.x on macOS 26. sw_vers, asked with
    SYSTEM_VERSION_COMPAT=0, gives the real number; a version that is not such a stand-in is not
    asked again."""
    import platform
    monkeypatch.setattr(platform, "mac_ver", lambda *a, **k: (python_says, ("", "", ""), "arm64"))
    calls = []

    def run(cmd, env=None):
        calls.append((tuple(cmd), env))
        return sw_vers_says if tuple(cmd) == SW_VERS else M2_PRO.get(tuple(cmd))
    mac = facts.mac_facts(run, system="darwin")
    assert mac["version"] == version
    sw_vers_calls = [env for cmd, env in calls if cmd == SW_VERS]
    assert sw_vers_calls == ([{"SYSTEM_VERSION_COMPAT": "0"}] if asked else [])


def test_macos_26_read_through_sw_vers_is_judged_as_26(monkeypatch):
    import platform
    monkeypatch.setattr(platform, "mac_ver", lambda *a, **k: ("16.0", ("", "", ""), "arm64"))
    f = load_facts("apple_silicon_native")
    f["mac"] = facts.mac_facts(fake_run({**M2_PRO, SW_VERS: "26.1"}), system="darwin")
    v = fitness.judge_macos_version(f)
    assert v.outcome == "ok" and v.metrics["macos"] == "26.1", v


@pytest.mark.parametrize("text,cores", [
    (M2_PRO_DISPLAYS, 19),
    (None, None), ("", None), ("system_profiler: command not found", None), ("[]", None),
    ('{"SPDisplaysDataType": {"not": "a list"}}', None),
    ('{"SPDisplaysDataType": ["text", {"sppci_model": "Apple M1", "spdisplays_vendor": "sppci_vendor_Apple"}]}', None),
    ('{"SPDisplaysDataType": [{"sppci_model": "Apple M1", "sppci_cores": "many"}]}', None),
    ('{"SPDisplaysDataType": [{"sppci_model": "Apple M1", "sppci_cores": "0"}]}', None),
    # an eGPU listed first, then the Apple GPU: the Apple one's count
    ('{"SPDisplaysDataType": [{"sppci_model": "AMD Radeon RX 6800", "sppci_cores": "60", '
     '"spdisplays_vendor": "sppci_vendor_amd"}, {"sppci_model": "Apple M1 Max", "sppci_cores": "32"}]}', 32),
    ('{"SPDisplaysDataType": [{"_name": "Apple M4", "spdisplays_vendor": "sppci_vendor_Apple", '
     '"sppci_cores": "10"}]}', 10),
])
def test_gpu_cores_are_read_from_the_apple_gpu_entry_only(text, cores):
    assert facts.parse_gpu_cores(text) == cores


@pytest.mark.parametrize("out,expect", [("34359738368", 34359738368), ("", None), (None, None), ("32 GB", None),
                                        ("0", None)])
def test_memory_bytes_is_a_positive_count_or_none(out, expect):
    assert facts.mac_memory_bytes(fake_run({("sysctl", "-n", "hw.memsize"): out})) == expect


def test_the_cpu_model_comes_from_sysctl_on_a_mac_and_cpuinfo_on_linux(tmp_path):
    assert facts.cpu_model(fake_run(M2_PRO), system="darwin") == "Apple M2 Pro"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    assert facts.cpu_model(fake_run({}), system="linux", cpuinfo=cpuinfo) == "AMD EPYC 9654 96-Core Processor"


class _FakeMps:
    def __init__(self, fn):
        if fn is not None:
            self.recommended_max_memory = fn


def _boom():
    raise RuntimeError("no Metal device")


@pytest.mark.parametrize("fn,expect", [(lambda: 22906503168, 22906503168), (None, None), (_boom, None)])
def test_mps_recommended_max_memory_where_torch_has_it(fn, expect):
    import types
    assert facts.mps_recommended_max_memory(types.SimpleNamespace(mps=_FakeMps(fn))) == expect
    assert facts.mps_recommended_max_memory(types.SimpleNamespace()) is None   # a torch without torch.mps


def test_the_recommended_max_memory_is_a_torch_fact_only_where_mps_is_available(monkeypatch):
    import torch
    f = facts.torch_facts()
    if not f["mps_available"]:
        assert "mps_recommended_max_memory" not in f
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 22906503168, raising=False)
    assert facts.torch_facts()["mps_recommended_max_memory"] == 22906503168


def test_recorded_fact_sets_without_the_new_keys_still_judge_and_name():
    """Run files written before gpu_cores, memory_bytes and mps_recommended_max_memory
    existed are read as they are (the keys are optional; the schema did not change)."""
    f = load_facts("apple_silicon_native")
    assert "gpu_cores" not in f["mac"] and "mps_recommended_max_memory" not in f["torch"]
    assert f["facts_schema"] == facts.FACTS_SCHEMA == 1
    assert fitness.mps_unavailable_cause(f) is None and facts.env_id(f) == "mac-py3.11.7-torch2.15.0"


def test_an_intel_mac_on_torch_2_13_is_told_that_mps_needs_unified_memory_there():
    """torch 2.13's binary refuses a GPU without unified memory ('MPS backend is only supported
    on devices with unified memory'): an Intel Mac's AMD GPU is told so, with the torch that
    still took it; before 2.13 the advice is the Metal-capable GPU's."""
    f = load_facts("intel_mac")
    f["mac"]["version"], f["torch"]["mps_available"] = "14.6", False
    f["torch"]["version"] = "2.13.0"
    cause, fix = fitness.mps_unavailable_cause(f)
    assert "no usable Metal device" in cause and "from torch 2.13 one with unified memory" in fix, fix
    f["torch"]["version"] = "2.12.1"
    assert "unified memory" not in fitness.mps_unavailable_cause(f)[1]
