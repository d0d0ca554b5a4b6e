"""./compat env (tools/envinfo.py): the block a user pastes into a bug report. Each probe is
fed a machine's recorded outputs (a Mac's sysctl and system_profiler, an H100's torch), and
each is made to fail: a failure is one line in the block, never the end of it."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.test_facts import M2_PRO, fake_run
from tools import envinfo

GIB = 2 ** 30

MAC_TORCH = {"importable": True, "version": "2.15.0", "cuda_build": None, "mps_built": True, "mps_available": True,
             "cuda_available": False, "cuda_devices": [], "mps_recommended_max_memory": 22906503168}
H100_TORCH = {"importable": True, "version": "2.15.0+cu132", "cuda_build": "13.2", "mps_built": False,
              "mps_available": False, "cuda_available": True,
              "cuda_devices": [{"name": "NVIDIA H100 80GB HBM3", "capability": [9, 0], "total_memory": 85024112640}]}
VERSIONS = {"torch": "2.15.0", "transformers": "5.23.0", "accelerate": "1.15.0", "datasets": "5.2.0",
            "tokenizers": "0.23.3", "peft": None}


def boom(*args, **kwargs):
    raise RuntimeError("probe exploded\nsecond line")


def mac_probes(**over) -> envinfo.Probes:
    base = dict(
        run=fake_run(M2_PRO), system="darwin",
        environ={"PYTORCH_ENABLE_MPS_FALLBACK": "1", "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0",
                 "PYTORCH_MPS_LOG_PROFILE_INFO": "1", "PYTORCH_ENABLE_MPS_SOMETHING_NEW": "x",
                 "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HOME": "/Users/me"},
        torch=lambda: dict(MAC_TORCH), packages=lambda names: {n: VERSIONS.get(n) for n in names},
        nvidia_driver=boom,   # never asked on a Mac
        python=lambda: {"version": "3.11.7", "implementation": "CPython", "executable": "/opt/homebrew/bin/python3",
                        "arch": "arm64", "bits": 64},
        os_facts=lambda: {"system": "Darwin", "release": "23.5.0", "machine": "arm64",
                          "platform": "macOS-14.5-arm64-arm-64bit"},
        usable_cpus=lambda: 12, ram_bytes=boom, distribution=boom,
        collect_env=lambda: "PyTorch version: 2.15.0\nIs debug build: False\nOS: macOS 14.5 (arm64)\n",
        revision=lambda: "8738ec28d705")
    base.update(over)
    return envinfo.Probes(**base)


@pytest.fixture(autouse=True)
def no_mac_ver(monkeypatch):
    import platform
    monkeypatch.setattr(platform, "mac_ver", lambda *a, **k: ("", ("", "", ""), ""))


def lines_of(text: str) -> list[str]:
    assert text.startswith("```text\n") and text.endswith("\n```\n"), text
    return text.splitlines()[1:-1]


def row(lines, label) -> str:
    """The value of the machine line ``label`` (above the variables, so collect_env's own
    lines do not count)."""
    found = [ln for ln in lines[:lines.index("MPS environment variables:")] if ln.startswith(label + ":")]
    assert len(found) == 1, (label, lines)
    return found[0].split(":", 1)[1].strip()


def test_an_apple_silicon_mac_names_chip_gpu_memory_and_mps():
    lines = lines_of(envinfo.block(mac_probes()))
    assert row(lines, "Chip") == "Apple M2 Pro (Mac14,9)"
    assert row(lines, "GPU cores") == "19"
    assert row(lines, "Unified memory") == "32 GiB (34359738368 bytes)"
    assert row(lines, "MPS") == "built yes, available yes; recommended max memory 21.3 GiB (22906503168 bytes)"
    assert row(lines, "CUDA") == "none (a torch built without CUDA)"
    assert row(lines, "CPU") == "Apple M2 Pro (12 usable cores)"
    assert row(lines, "OS") == "macOS 14.5 (macOS-14.5-arm64-arm-64bit)"
    assert row(lines, "Python").startswith("3.11.7 CPython, runs as arm64, 64-bit")
    assert row(lines, "Rosetta 2") == "no (native arm64)"
    assert not any(ln.startswith(("NVIDIA driver", "Memory:")) for ln in lines)   # not a Linux line


def test_the_mps_variables_named_and_any_other_set():
    lines = lines_of(envinfo.block(mac_probes()))
    start = lines.index("MPS environment variables:")
    listed = lines[start + 1:lines.index("", start)]
    assert listed == ["  PYTORCH_ENABLE_MPS_FALLBACK=1", "  PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0",
                      "  PYTORCH_MPS_LOW_WATERMARK_RATIO: not set", "  PYTORCH_MPS_FAST_MATH: not set",
                      "  PYTORCH_MPS_PREFER_METAL: not set",
                      "  PYTORCH_ENABLE_MPS_SOMETHING_NEW=x", "  PYTORCH_MPS_LOG_PROFILE_INFO=1"]


def test_versions_revision_and_torchs_own_report():
    lines = lines_of(envinfo.block(mac_probes()))
    start = lines.index("Versions:")
    assert lines[start + 1:start + 8] == [
        "  torch         2.15.0", "  transformers  5.23.0", "  accelerate    1.15.0", "  datasets      5.2.0",
        "  tokenizers    0.23.3", "  peft          not installed", "  mps-compat    8738ec28d705"]
    assert lines[lines.index("torch.utils.collect_env:") + 1:] == [
        "PyTorch version: 2.15.0", "Is debug build: False", "OS: macOS 14.5 (arm64)"]


def test_rosetta_is_named_with_its_consequence():
    translated = {**M2_PRO, ("sysctl", "-n", "sysctl.proc_translated"): "1"}
    py = {"version": "3.11.7", "implementation": "CPython", "executable": "/usr/local/bin/python3", "arch": "x86_64",
          "bits": 64}
    lines = lines_of(envinfo.block(mac_probes(run=fake_run(translated), python=lambda: py,
                                              torch=lambda: {**MAC_TORCH, "mps_available": False})))
    assert row(lines, "Rosetta 2").startswith("yes: this Python is x86_64 under Rosetta 2")
    assert "runs as x86_64" in row(lines, "Python")
    assert row(lines, "MPS") == "built yes, available no"
    assert row(lines, "GPU cores") == "19"    # the machine's GPU, whatever this Python runs as


def test_an_h100_names_the_gpu_its_memory_and_the_driver():
    lines = lines_of(envinfo.block(mac_probes(
        system="linux", run=fake_run({}), torch=lambda: dict(H100_TORCH), nvidia_driver=lambda: "570.86.15",
        ram_bytes=lambda: 2015 * GIB, distribution=lambda: "Ubuntu 22.04.5 LTS",
        os_facts=lambda: {"system": "Linux", "platform": "Linux-6.8.0-x86_64-with-glibc2.35"},
        python=lambda: {"version": "3.12.3", "implementation": "CPython", "executable": "/usr/bin/python3",
                        "arch": "x86_64", "bits": 64}, usable_cpus=lambda: 16)))
    assert row(lines, "CUDA GPU 0") == "NVIDIA H100 80GB HBM3, 79.2 GiB (85024112640 bytes), sm_90"
    assert row(lines, "NVIDIA driver") == "570.86.15"
    assert row(lines, "MPS") == "built no, available no"
    assert row(lines, "Memory") == f"2015 GiB ({2015 * GIB} bytes)"
    assert row(lines, "OS") == "Ubuntu 22.04.5 LTS (Linux-6.8.0-x86_64-with-glibc2.35)"
    assert not any(ln.startswith(("Chip", "GPU cores", "Rosetta", "Unified memory")) for ln in lines)
    assert "  torch         2.15.0+cu132" in lines   # torch's own version, with its build


def test_a_mac_whose_commands_all_fail_says_unknown_line_by_line():
    lines = lines_of(envinfo.block(mac_probes(run=fake_run({("sysctl", "-n", "hw.optional.arm64"): "1"}))))
    assert row(lines, "Chip").startswith("unknown (sysctl -n machdep.cpu.brand_string gave nothing)")
    assert row(lines, "GPU cores").startswith("unknown (system_profiler SPDisplaysDataType -json")
    assert row(lines, "Unified memory") == "unknown (sysctl -n hw.memsize gave nothing)"
    assert row(lines, "OS") == "macOS (version unknown) (macOS-14.5-arm64-arm-64bit)"


def test_an_older_torch_without_recommended_max_memory():
    old = {**MAC_TORCH, "version": "2.2.2"}
    del old["mps_recommended_max_memory"]
    lines = lines_of(envinfo.block(mac_probes(torch=lambda: old)))
    assert row(lines, "MPS") == ("built yes, available yes; recommended max memory: not in this torch "
                                 "(torch.mps.recommended_max_memory)")


def test_torch_that_does_not_import_is_one_line():
    broken = {"importable": False, "error": "ImportError: dlopen(libtorch_cpu.dylib): incompatible architecture"}
    lines = lines_of(envinfo.block(mac_probes(torch=lambda: broken)))
    assert row(lines, "torch") == f"does not import ({broken['error']})"
    assert not any(ln.startswith(("MPS:", "CUDA")) for ln in lines)
    assert "  torch         2.15.0" in lines   # the installed distribution's version still


@pytest.mark.parametrize("probe,says,failed", [
    ("torch", "torch: could not be read (RuntimeError: probe exploded)", 1),
    ("packages", "  package versions: could not be read (RuntimeError: probe exploded)", 1),
    ("revision", "  mps-compat revision: could not be read (RuntimeError: probe exploded)", 1),
    ("collect_env", "torch.utils.collect_env: could not be read (RuntimeError: probe exploded)", 1),
    ("python", "Python: could not be read (RuntimeError: probe exploded)", 1),
    ("os_facts", "OS: could not be read (RuntimeError: probe exploded)", 1),
    ("usable_cpus", "CPU:                  Apple M2 Pro (usable CPUs: could not be read (RuntimeError: "
                    "probe exploded))", 1),
    # the command runner: the Mac's probes and the CPU's (sysctl on a Mac) each say so
    ("run", "Mac (sysctl, system_profiler): could not be read (RuntimeError: probe exploded)", 2),
])
def test_a_probe_that_raises_is_one_line_and_the_rest_is_there(probe, says, failed):
    lines = lines_of(envinfo.block(mac_probes(**{probe: boom})))
    assert says in lines
    assert "MPS environment variables:" in lines and "Versions:" in lines
    assert sum("could not be read" in ln for ln in lines) == failed


def test_every_probe_failing_still_gives_a_block():
    failing = {name: boom for name in ("run", "torch", "packages", "revision", "collect_env", "python", "os_facts",
                                       "usable_cpus", "nvidia_driver", "ram_bytes", "distribution")}
    for system in ("darwin", "linux"):
        lines = lines_of(envinfo.block(mac_probes(system=system, **failing)))
        assert sum("could not be read" in ln for ln in lines) >= 7
        assert "  PYTORCH_MPS_PREFER_METAL: not set" in lines


def test_the_fence_outgrows_backticks_inside():
    text = envinfo.block(mac_probes(collect_env=lambda: "a ``` inside\n"))
    assert text.startswith("````text\n") and text.endswith("\n````\n")


def test_short_leaves_torchs_report_out(capsys):
    assert envinfo.main(["--short"]) == 0
    out = capsys.readouterr().out
    assert "torch.utils.collect_env" not in out and out.startswith("```text\n")


def test_on_this_machine_the_command_prints_the_block_and_exits_0():
    res = subprocess.run([sys.executable, "-m", "tools.envinfo"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = lines_of(res.stdout)
    import platform
    assert row(lines, "Python").startswith(platform.python_version())
    try:   # torch's own report, in this interpreter: torch 2.6's raises in a venv without pip
        from torch.utils import collect_env
        collect_env.get_pretty_env_info()
    except Exception as exc:   # said in one line, the rest of the block printed
        assert f"torch.utils.collect_env: could not be read ({type(exc).__name__}" in res.stdout, res.stdout
        return
    assert "torch.utils.collect_env:" in lines and any(ln.startswith("PyTorch version:") for ln in lines)
    assert "could not be read" not in res.stdout, res.stdout


def test_a_rosetta_question_sysctl_could_not_answer_is_said_as_such():
    """An x86_64 Python whose sysctl cannot be run (cron's PATH, a sandbox) read "no (an Intel
    Mac)": facts that could not be read are None now, and the row says so, with the check by hand."""
    py = {"version": "3.11.7", "implementation": "CPython", "executable": "/usr/local/bin/python3", "arch": "x86_64",
          "bits": 64}
    lines = lines_of(envinfo.block(mac_probes(run=lambda *a, **k: None, python=lambda: py,
                                              torch=lambda: {**MAC_TORCH, "mps_available": False})))
    said = row(lines, "Rosetta 2")
    assert said.startswith("cannot tell (") and "Intel" not in said, said
    assert "/usr/local/bin/python3 -c" in said and "sysctl.proc_translated" in said
