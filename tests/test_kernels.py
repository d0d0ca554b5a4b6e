"""harness.ops.kernels and tools.kernels: the static MPS kernel table, on tiny yaml fixtures,
fake wheels and the installed torch's real native_functions.yaml. No network: pip is
never run for real here (scripts/kernels_diff_check.sh does that)."""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.ops import kernels
from harness.ops.kernels import KernelsError
from tests.conftest import ROOT
from tools import kernels as cli

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"


def table(name: str) -> dict:
    return kernels.parse((FIXTURES / name).read_text(), name)


def make_wheel(path: Path, yaml_name: str | None = "v1.yaml", version: str = "2.6.0") -> Path:
    """A zip laid out like a torch wheel: the yaml member and the dist-info METADATA."""
    with zipfile.ZipFile(path, "w") as zf:
        if yaml_name:
            zf.writestr(kernels.YAML_MEMBER, (FIXTURES / yaml_name).read_text())
        zf.writestr(f"torch-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return path


@pytest.fixture
def wheels(tmp_path):
    return (make_wheel(tmp_path / "torch-2.6.0-cp311-none-macosx_11_0_arm64.whl", "v1.yaml", "2.6.0"),
            make_wheel(tmp_path / "torch-2.14.1-cp311-cp311-macosx_14_0_arm64.whl", "v2.yaml", "2.14.1"))


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------- parsing and rules

def test_entries_are_keyed_by_overload_name_with_their_dispatch_keys():
    t = table("v1.yaml")
    assert len(t) == 14 and "add.out" in t and "mm" in t
    assert t["add.out"]["dispatch_keys"] == ["CPU", "CUDA", "MPS", "SparseCPU", "SparseMPS"]
    assert t["mm"]["mps"] and not t["only_cpu"]["mps"]


def test_composite_kind_follows_torchgen():
    t = table("v1.yaml")
    assert t["linear_like"]["composite"] == "implicit"       # no dispatch at all
    assert t["zeros_like_ish"]["composite"] == "explicit"
    assert t["lin_mps"]["composite"] == "implicit" and t["lin_mps"]["mps"]  # MPS overrides the decomposition
    assert t["add.Tensor"]["composite"] is None and t["mm"]["composite"] is None


def test_a_structured_delegate_has_an_mps_kernel_when_its_out_overload_does():
    t = table("v1.yaml")
    assert t["add.Tensor"]["structured_delegate"] == "add.out"
    assert "MPS" not in t["add.Tensor"]["dispatch_keys"] and t["add.Tensor"]["mps"]
    assert t["add_.Tensor"]["mps"]
    assert not t["cpu_struct"]["mps"] and t["cpu_struct"]["composite"] is None


def test_only_the_mps_key_counts_other_mps_keys_are_listed_apart():
    t = table("v1.yaml")
    assert not t["sparse_thing"]["mps"]
    assert kernels.other_mps_ops(t) == {"SparseCsrMPS": ["sparse_thing"],
                                        "SparseMPS": ["add.Tensor", "add.out", "sparse_thing"]}
    assert kernels.mps_ops(t) == ["add.Tensor", "add.out", "add_.Tensor", "decomposed", "gone_op", "lin_mps",
                                  "lost_op", "mm"]
    c = kernels.counts(t)
    assert (c["entries"], c["mps"], c["mps_direct"], c["mps_via_delegate"]) == (14, 8, 6, 2)


def test_diff_names_gained_and_lost_ops_and_why():
    d = kernels.diff(table("v1.yaml"), table("v2.yaml"))
    assert d["gained"] == ["gained_op", "only_cpu"] and d["new_ops"] == ["gained_op"]
    assert d["lost"] == ["decomposed", "gone_op", "lost_op"]
    assert d["removed_ops"] == ["gone_op"] and d["now_composite"] == ["decomposed"]
    assert d["unchanged"] == 5


@pytest.mark.parametrize("text, why", [("- func: [unclosed", "not valid YAML"),
                                       ((FIXTURES / "not_a_table.yaml").read_text(), "not a native_functions.yaml"),
                                       ("- dispatch: {CPU: x}\n", "not a native_functions.yaml")])
def test_text_that_is_not_a_native_functions_yaml_is_one_error_line(text, why):
    with pytest.raises(KernelsError, match=why) as exc:
        kernels.parse(text, "x.yaml")
    assert "\n" not in str(exc.value)


# --------------------------------------------------------------------------- wheels and downloads

def test_a_wheel_is_read_in_place_with_its_version(wheels):
    snap = kernels.load_wheel(wheels[1])
    assert snap.torch_version == "2.14.1" and snap.source == f"wheel:{wheels[1]}"
    assert "gained_op" in kernels.mps_ops(snap.table)


@pytest.mark.parametrize("make, why", [(lambda p: p / "absent.whl", "no such file"),
                                       (lambda p: p, "is a directory"),
                                       (lambda p: (p / "x.whl").write_text("not a zip") and p / "x.whl", "not a zip"),
                                       (lambda p: make_wheel(p / "t.whl", yaml_name=None), "not a torch wheel")])
def test_bad_wheels_give_one_error_line(tmp_path, make, why):
    with pytest.raises(KernelsError, match=why) as exc:
        kernels.load_wheel(make(tmp_path))
    assert "\n" not in str(exc.value)


def test_a_cached_wheel_is_returned_without_running_pip(tmp_path, monkeypatch):
    whl = make_wheel(tmp_path / "torch-2.6.0-cp311-none-macosx_11_0_arm64.whl")
    monkeypatch.setattr(kernels.subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    assert kernels.download_wheel("2.6", tmp_path) == whl   # 2.6 == 2.6.0
    monkeypatch.setenv("MPS_COMPAT_CACHE", str(tmp_path / "c"))
    assert kernels.cache_dir() == tmp_path / "c" / "wheels"


def test_the_download_runs_pip_for_macos_arm64_and_keeps_the_wheel(tmp_path, monkeypatch):
    seen = {}

    def fake_pip(cmd, **kw):
        seen["cmd"] = cmd
        make_wheel(Path(cmd[cmd.index("-d") + 1]) / "torch-2.14.1-cp311-cp311-macosx_14_0_arm64.whl", "v2.yaml")
        return subprocess.CompletedProcess(cmd, 0, "Saved", "")
    monkeypatch.setattr(kernels.subprocess, "run", fake_pip)
    whl = kernels.download_wheel("2.14.1", tmp_path / "cache")
    assert whl.parent == tmp_path / "cache" and whl.is_file() and list(whl.parent.iterdir()) == [whl]
    cmd = " ".join(seen["cmd"])
    assert "pip download --no-deps --only-binary=:all:" in cmd and "torch==2.14.1" in cmd
    assert "--platform macosx_14_0_arm64 --platform macosx_11_0_arm64 --python-version 3.11" in cmd


CONSTRAINT = """ERROR: Cannot install torch==2.15.0 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested torch==2.15.0
    The user requested (constraint) torch<=2.14.1

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""
NO_MATCH = """ERROR: Could not find a version that satisfies the requirement torch==9.9.9 (from versions: 2.6.0, 2.7.0)
ERROR: No matching distribution found for torch==9.9.9
"""
NO_NETWORK = """WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after \
connection broken by 'NewConnectionError('<...>: Failed to establish a new connection: [Errno 111] Connection \
refused')': /simple/torch/
ERROR: Could not find a version that satisfies the requirement torch==2.6.0 (from versions: none)
"""


def failing_pip(cmd, **kw):
    return subprocess.CompletedProcess(cmd, 1, "", CONSTRAINT)


@pytest.mark.parametrize("output, version, expected", [
    (CONSTRAINT, "2.15.0", "pip's constraint torch<=2.14.1 excludes it"),
    (CONSTRAINT.replace("2.15.0", "2.14.1"), "2.14.1", "no macOS arm64 wheel of torch==2.14.1 found"),
    (NO_MATCH, "9.9.9", "No matching distribution found for torch==9.9.9"),
    (NO_NETWORK, "2.6.0", "could not reach the package index"),
    ("/usr/bin/python: No module named pip\n", "2.6.0", "pip is not installed"),
])
def test_pip_failures_are_told_in_one_line(output, version, expected):
    reason = kernels.pip_reason(output, version)
    assert expected in reason and "\n" not in reason


def test_a_failed_download_is_a_kernels_error_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels.subprocess, "run", failing_pip)
    with pytest.raises(KernelsError, match=r"^torch==2.15.0: download failed: pip's constraint torch<=2.14.1"):
        kernels.download_wheel("2.15.0", tmp_path)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the command line

def test_cli_lists_mps_ops_under_a_count_header_with_the_caveat(wheels, capsys):
    assert cli.main(["--wheel", str(wheels[0])]) == 0
    out = capsys.readouterr().out.splitlines()
    header = [line for line in out if line.startswith("#")]
    assert "8 of 14" in header[1] and "6 name MPS" in header[1] and "2 through their structured_delegate" in header[1]
    assert any("CompositeImplicitAutograd" in h and "CPU fallback" in h for h in header)
    assert [line for line in out if not line.startswith("#")] == kernels.mps_ops(table("v1.yaml"))


def test_cli_json_and_out_file_hold_the_report_document(wheels, tmp_path, capsys):
    assert cli.main(["--wheel", str(wheels[0]), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 1 and doc["torch_version"] == "2.6.0" and doc["counts"]["mps"] == 8
    assert doc["source"].startswith("wheel:") and "add.Tensor" in doc["mps_ops"] and doc["caveat"]
    out = tmp_path / "k.json"
    assert cli.main(["--wheel", str(wheels[0]), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == doc and capsys.readouterr().out.startswith(f"wrote {out}")


def test_cli_save_writes_under_reports_kernels_by_version(wheels, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "SAVE_DIR", tmp_path / "reports" / "kernels")
    assert cli.main(["--wheel", str(wheels[1]), "--save"]) == 0
    assert cli.main(["diff", str(wheels[0]), str(wheels[1]), "--save"]) == 0
    assert sorted(p.name for p in cli.SAVE_DIR.iterdir()) == ["2.14.1.json", "diff-2.6.0-2.14.1.json"]


def test_cli_diff_lists_gained_and_lost_with_counts(wheels, capsys):
    assert cli.main(["diff", str(wheels[0]), str(wheels[1])]) == 0
    out = capsys.readouterr().out
    assert "8 -> 7: 2 gained (1 of them new ops), 3 lost" in out and "5 unchanged" in out
    assert "  + gained_op (new op)" in out and "  + only_cpu\n" in out
    assert "  - gone_op (op removed)" in out and "  - decomposed (now CompositeImplicitAutograd)" in out
    assert cli.main(["diff", str(wheels[0]), str(wheels[1]), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["old"]["torch_version"] == "2.6.0" and doc["new"]["mps"] == 7
    assert (doc["gained"], doc["lost"]) == (["gained_op", "only_cpu"], ["decomposed", "gone_op", "lost_op"])


@pytest.mark.parametrize("argv, why", [
    (["--wheel", "/nonexistent/torch.whl"], "no such file"),
    (["--wheel", str(FIXTURES / "v1.yaml")], "not a wheel"),
    (["--torch-version", "two.six"], "not a torch version"),
    (["diff", "2.6.0"], "required"),
    (["diff", "not-a-version", "2.6.0"], "neither a wheel file nor a torch version"),
    (["--bogus"], "unrecognized arguments"),
    (["--format", "xml"], "invalid choice"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, why, capsys):
    assert cli.main(argv) == 2
    assert why in one_line_error(capsys.readouterr().err)


def test_cli_failed_download_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MPS_COMPAT_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels.subprocess, "run", failing_pip)
    assert cli.main(["--torch-version", "2.15.0"]) == 2
    assert "pip's constraint torch<=2.14.1" in one_line_error(capsys.readouterr().err)


def test_cli_wheel_without_the_yaml_in_a_child_process_prints_no_traceback(tmp_path):
    whl = make_wheel(tmp_path / "torch-2.6.0-py3-none-any.whl", yaml_name=None)
    res = subprocess.run([sys.executable, "-m", "tools.kernels", "--wheel", str(whl)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    assert "not a torch wheel" in one_line_error(res.stderr)


# --------------------------------------------------------------------------- the real yaml

def test_the_installed_torch_has_hundreds_of_mps_kernels_including_the_well_known():
    snap = kernels.load_installed()
    ops, c = set(kernels.mps_ops(snap.table)), kernels.counts(snap.table)
    assert c["entries"] > 2000 and c["mps_direct"] > 300 and len(ops) > 300
    assert {"add.out", "mm.out", "_softmax.out", "bmm.out", "addmm.out"} <= ops   # dispatch names MPS
    assert {"add.Tensor", "mm", "_softmax"} <= ops                                # through structured_delegate
    assert not snap.table["add.Tensor"]["dispatch_keys"].count("MPS")
    assert snap.table["dropout"]["composite"] == "implicit"                        # invisible to the table


def test_an_out_file_that_holds_something_else_is_refused_before_any_download(wheels, tmp_path, monkeypatch, capsys):
    """`--out README.md` replaced the user's file with a kernel table, after a download of minutes."""
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n\nkeep me\n")
    monkeypatch.setattr(kernels, "load_version", lambda *a, **k: pytest.fail("downloaded before refusing --out"))
    assert cli.main(["--torch-version", "2.8.0", "--out", str(notes)]) == 2
    assert cli.main(["diff", "2.6.0", "2.8.0", "--out", str(notes)]) == 2
    for line in capsys.readouterr().err.splitlines():
        assert line == (f"error: --out {notes}: it holds something other than a kernel table or diff (it begins "
                        "'# my notes'); replacing it would lose what it holds; give a new path"), line
    assert notes.read_text() == "# my notes\n\nkeep me\n"
    out = tmp_path / "k.json"   # what the tool wrote there before, a table or a diff, it replaces
    for args in (["--wheel", str(wheels[0])], ["diff", str(wheels[0]), str(wheels[1])], ["--wheel", str(wheels[1])]):
        assert cli.main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["torch_version"] == "2.14.1"
