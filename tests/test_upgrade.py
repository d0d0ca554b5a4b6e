"""The two sides of the upgrade check (tools/upgrade.py): each runs the suites in the runs
./compat suites makes, keeps each run's part, and joins the parts (the baseline) or compares
them all at once (the candidate); an interrupted run replaces nothing."""
import json
import subprocess
import sys

import pytest

from harness.core import runfiles
from harness.report import compare
from tests.conftest import ROOT
from tests.test_compare import rec, write_run
from tools import suiteplan, upgrade

PHASES = [suiteplan.Phase("untimed", ["env", "ops", "parity"], 2), suiteplan.Phase("optim", ["optim"], 0),
          suiteplan.Phase("perf", ["perf"], 2)]
# what each run records, by phase: the three parts of one whole run
RECORDS = {"untimed": [rec("env/threads"), rec("ops/softmax/float32/forward", category="native"),
                       rec("parity/gelu/float32/forward", category="parity", max_abs_err=1e-7, margin=0.05)],
           "optim": [rec("optim/gradient-accumulation/memory", category="holds", mem_ratio=0.5, ci_low=0.5,
                         ci_high=0.5, bound=0.62)],
           "perf": [rec("perf/op-time/softmax", category="n/a")]}


class FakeRuns:
    """tools.suiteplan's execute and planned, with pytest's runs played: each run writes its
    part where --save-baseline says (unless it ``short`` of its checks) and answers its status."""

    def __init__(self, statuses=(0, 0, 0), records=RECORDS, short=(), env_id="host-a-torch2.8", phases=PHASES):
        self.statuses, self.records, self.short, self.env_id = statuses, records, short, env_id
        self.phases = list(phases)
        self.calls: list[list[str]] = []
        self.installs: list[tuple[list[str], list[str]]] = []

    def planned(self, argv, say=print):
        return suiteplan.Plan(list(self.phases), None, set())

    def execute(self, plan, argv, extra=None):
        ran, status = [], 0
        for i, phase in enumerate(plan.phases):
            args = extra(phase) + list(argv)
            self.calls.append(args)
            rc = self.statuses[i]
            part = args[args.index("--save-baseline") + 1]
            if rc in (0, 1) and phase.name not in self.short:
                write_run(part, self.records[phase.name], env_id=self.env_id, run_id=f"r-{phase.name}")
            ran.append((phase, rc))
            if rc not in (0, 1, 5):
                return suiteplan.Outcome(rc, ran)
            status = max(status, rc)
        return suiteplan.Outcome(status, ran)

    def install(self, specs, pins=()):
        """uv's install, played: what it was asked, and success."""
        self.installs.append((list(specs), list(pins)))
        return None

    def run(self):
        return {"execute": self.execute, "planned": self.planned, "install": self.install}


def test_the_baseline_is_the_runs_parts_joined(tmp_path, capsys):
    kept = tmp_path / "reports" / "baseline.jsonl"
    runs = FakeRuns()
    assert upgrade.main(["baseline", "--baseline-file", str(kept), "--", "-m", "not mps"], **runs.run()) == 0
    for args in runs.calls:   # each run keeps its own part, named for it, then the user's arguments
        assert args[1].endswith(".jsonl") and args[2:] == ["--part-of-plan", "-m", "not mps"]
    assert len({args[1] for args in runs.calls}) == 3
    rf = runfiles.read_file(kept)
    assert rf.errors == [] and [r.run_id for r in rf.runs] == ["r-untimed", "r-optim", "r-perf"]
    assert all(r.complete for r in rf.runs)
    side = compare.load_side([str(kept)])
    assert len(side.records) == 5 and side.complete
    out = capsys.readouterr().out
    assert "baseline kept: " in out and "(5 checks from 3 pytest runs;" in out
    assert [p.name for p in kept.parent.iterdir()] == ["baseline.jsonl"]   # the parts are gone


def test_failed_checks_still_make_a_baseline_and_say_so_in_the_status(tmp_path):
    kept = tmp_path / "baseline.jsonl"
    assert upgrade.main(["baseline", "--baseline-file", str(kept)], **FakeRuns(statuses=(1, 0, 0)).run()) == 1
    assert len(runfiles.read_file(kept).runs) == 3


@pytest.mark.parametrize("statuses,short,status,says", [
    ((0, 2, 0), (), 2, "the run of optim ended early (pytest exit 2)"),          # Ctrl-C in the second run
    ((0, 0, 3), (), 3, "the run of perf ended early (pytest exit 3)"),
    ((1, 0, 0), ("untimed",), 1, "the run of env, ops, parity did not run every check it selected"),   # -x
])
def test_a_run_that_did_not_end_leaves_the_old_baseline_whole(tmp_path, capsys, statuses, short, status, says):
    kept = write_run(tmp_path / "baseline.jsonl", [rec("env/threads")], run_id="old")
    before = kept.read_bytes()
    assert upgrade.main(["baseline", "--baseline-file", str(kept)],
                        **FakeRuns(statuses=statuses, short=short).run()) == status
    assert kept.read_bytes() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"baseline NOT replaced: {says}"), err
    assert "still holds its earlier run (1 checks)" in err[0]
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.jsonl"]


def test_a_baseline_that_selected_nothing_is_not_written(tmp_path, capsys):
    kept = tmp_path / "baseline.jsonl"
    assert upgrade.main(["baseline", "--baseline-file", str(kept)], **FakeRuns(statuses=(5, 5, 5)).run()) == 5
    assert not kept.exists() and "baseline NOT written: the run recorded no check" in capsys.readouterr().err


def _baseline(tmp_path):
    parts = [write_run(tmp_path / f"b-{name}.jsonl", recs, run_id=f"b-{name}") for name, recs in RECORDS.items()]
    kept = tmp_path / "baseline.jsonl"
    kept.write_text("".join(p.read_text() for p in parts))
    return kept


def test_the_candidate_is_compared_once_over_all_its_runs(tmp_path, capsys):
    kept, report = _baseline(tmp_path), tmp_path / "upgrade-check.md"
    worse = {**RECORDS, "optim": [rec("optim/gradient-accumulation/memory", category="does-not-hold", mem_ratio=0.9,
                                      ci_low=0.9, ci_high=0.9, bound=0.62)]}
    runs = FakeRuns(records=worse, env_id="host-a-torch2.10")
    code = upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(report), "--", "-m", "cpu"],
                        **runs.run())
    assert code == 1
    for args in runs.calls:   # each run reads the baseline (perf confirms against it) and compares nothing itself,
        # into the candidate's own run file, beside the comparison (never your environment's)
        assert args[2:] == ["--part-of-plan", "--baseline", str(kept), "--run-file",
                            str(tmp_path / "runs" / "candidate.jsonl"), "-m", "cpu"]
    out = capsys.readouterr().out
    assert "FAILED: 1 regression(s) against " in out
    md, data = report.read_text(), json.loads(report.with_suffix(".json").read_text())
    assert "optim/gradient-accumulation/memory" in md and data["counts"]["regression"] == 1
    assert data["counts"]["disappeared"] == 0     # the other runs' checks are found, not "disappeared"


def test_an_unchanged_candidate_passes(tmp_path, capsys):
    kept, report = _baseline(tmp_path), tmp_path / "upgrade-check.md"
    assert upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(report)],
                        **FakeRuns(env_id="host-a-torch2.10").run()) == 0
    assert "0 regression" in report.read_text() and "comparison written to" in capsys.readouterr().out


def test_failures_the_baseline_had_too_are_no_regression(tmp_path, capsys):
    """The exit status says whether the upgrade broke something: checks that failed before it
    and still fail (this machine's own findings) do not make it 1."""
    failing = {**RECORDS, "parity": [], "untimed": [rec("env/threads"), rec("parity/exp/float16/forward", "fail",
                                                                            category="parity")]}
    kept = write_run(tmp_path / "baseline.jsonl", failing["untimed"], run_id="b")
    report = tmp_path / "upgrade-check.md"
    runs = FakeRuns(statuses=(1,), records=failing, env_id="host-a-torch2.10",
                    phases=[suiteplan.Phase("untimed", ["env", "parity"], 2)])
    assert upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(report)], **runs.run()) == 0
    assert "0 regression(s)" in capsys.readouterr().out


def test_a_candidate_run_that_did_not_end_writes_no_comparison(tmp_path, capsys):
    kept, report = _baseline(tmp_path), tmp_path / "upgrade-check.md"
    assert upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(report)],
                        **FakeRuns(statuses=(0, 0, 2), env_id="host-a-torch2.10").run()) == 2
    assert not report.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("no comparison: the run of perf ended early (pytest exit 2); "), err
    assert err[0].endswith(f"{report.name} was not written")


def test_args_split_at_the_double_dash():
    assert upgrade.split_args(["torch==2.15.*", "transformers==5.23.0", "--", "-m", "cpu"]) == (
        ["torch==2.15.*", "transformers==5.23.0"], ["-m", "cpu"])
    assert upgrade.split_args(["torch==2.15.*"]) == (["torch==2.15.*"], [])


@pytest.mark.parametrize("side", ["baseline", "candidate"])
@pytest.mark.parametrize("arg", ["--baseline", "--save-baseline=b.jsonl", "--compare-out", "--part-of-plan"])
def test_an_option_the_command_sets_itself_is_refused_before_anything_runs(tmp_path, capsys, side, arg):
    runs = FakeRuns()
    assert upgrade.main([side, "--baseline-file", str(_baseline(tmp_path)), "--", "-m", "env", arg, "x.jsonl"],
                        **runs.run()) == 2
    assert runs.calls == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{arg.split('=')[0]} is set by ./compat {side} itself" in err


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_place_that_cannot_be_written_is_said_before_anything_runs(tmp_path, capsys, side):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    runs = FakeRuns()
    args = ["--baseline-file", str(blocker / "b.jsonl")] if side == "baseline" else [
        "--baseline-file", str(_baseline(tmp_path)), "--report", str(blocker / "check.md")]
    assert upgrade.main([side, *args], **runs.run()) == 2
    err = capsys.readouterr().err
    assert runs.calls == [] and err.count("\n") == 1 and "cannot write there" in err and "a-file" in err


def test_candidate_without_a_usable_baseline_stops_before_installing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(upgrade, "install", lambda specs: pytest.fail("installed without a baseline"))
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"kind": "header", "sch')
    for path in (tmp_path / "none.jsonl", cut):
        assert upgrade.main(["candidate", "torch==2.15.*", "--baseline-file", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "./compat baseline" in err
        # ./compat candidate asks first, before tox builds the candidate's environment
        assert upgrade.main(["check", "torch==2.15.*", "--baseline-file", str(path)]) == 2
        assert capsys.readouterr().err == err
    assert upgrade.main(["check", "torch==2.15.*", "--baseline-file", str(_baseline(tmp_path)), "--report",
                         str(tmp_path / "check.md"), "--", "-m", "env"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("selection,says", [
    (["-m", "mpss"], "-m 'mpss': no such marker: mpss (the suites' markers: cpu, cuda, mps, env, ops, parity, "),
    (["-m", "env and"], "-m 'env and': pytest cannot read this expression"),
    (["-k", "softmax and ("], "-k 'softmax and (': pytest cannot read this expression"),
])
def test_a_selection_pytest_will_refuse_stops_the_candidate_before_its_install(tmp_path, capsys, selection, says):
    """`./compat candidate 'torch==2.15.*' -- -m mpss` built the candidate's environment (an
    install of torch, minutes) before pytest said "Unknown marker"."""
    args = ["check", "torch==2.15.*", "--baseline-file", str(_baseline(tmp_path)), "--report", str(tmp_path / "c.md")]
    assert upgrade.main([*args, "--", *selection]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {says}"), line
    assert upgrade.main([*args, "--", "-m", "(env or ops) and not mps", "-k", "softmax"]) == 0


@pytest.mark.parametrize("specs,says", [
    (["torch=2.15"], "'torch=2.15': not a requirement uv can read ("),
    (["torch==2.15.*", "transformers 5.24"], "'transformers 5.24': not a requirement uv can read ("),
    (["./torch-9.0-cp311-none-macosx_11_0_arm64.whl"], "./torch-9.0-cp311-none-macosx_11_0_arm64.whl: no such file"),
    (["git+https://example.org/t.git"], "git+https://example.org/t.git: cannot tell which package this installs"),
], ids=["one-equals-sign", "a-space", "missing-wheel", "a-url-that-names-no-package"])
def test_specs_uv_would_refuse_stop_the_candidate_before_its_environment_is_built(tmp_path, capsys, specs, says):
    """`./compat candidate torch=2.15` built the candidate's tox environment, the first time
    an install of torch, before uv said it could not read the spec. No spec at all is the
    same versions again (docs/upgrade-check.md injects a fault that way): not refused."""
    args = ["--baseline-file", str(_baseline(tmp_path)), "--report", str(tmp_path / "c.md"), "--", "-m", "env"]
    assert upgrade.main(["check", *specs, *args]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {says}"), line
    wheel = tmp_path / "torch-2.16.0-cp311-none-macosx_11_0_arm64.whl"
    wheel.write_bytes(b"")
    for fine in ([], ["torch==2.15.*", "transformers>=5.24,<6"], ["torch[opt]==2.15.0; python_version >= '3.10'"],
                 [str(wheel)], ["torch @ https://example.org/torch-2.16.whl"], ["t @ git+https://example.org/t.git"],
                 ["https://example.org/whl/torch-2.16.0-cp311-none-macosx_11_0_arm64.whl"]):
        assert upgrade.main(["check", *fine, *args]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_named_output_that_holds_something_else_is_refused_before_the_runs(tmp_path, capsys, monkeypatch, side):
    """`--baseline-file README.md` (or MPS_COMPAT_BASELINE) and `--report README.md` replaced
    README.md with a baseline or a comparison after the runs."""
    notes = tmp_path / "README.md"
    notes.write_text("# my notes\n")
    monkeypatch.setattr(upgrade, "install", lambda specs: pytest.fail("installed before the report was checked"))
    runs = FakeRuns()
    args = (["--baseline-file", str(notes)] if side == "baseline" else
            ["torch==2.15.*", "--baseline-file", str(_baseline(tmp_path)), "--report", str(notes)])
    for command in ([side, *args], ["check", *args]) if side == "candidate" else ([side, *args],):
        assert upgrade.main(command, **runs.run()) == 2
        [line] = capsys.readouterr().err.splitlines()
        what = "run records" if side == "baseline" else "an upgrade check's comparison"
        assert line.startswith(f"error: --{'baseline-file' if side == 'baseline' else 'report'} {notes}: it holds "
                               f"something other than {what} (it begins '# my notes'); replacing it would lose"), line
    assert runs.calls == [] and notes.read_text() == "# my notes\n"


@pytest.mark.slow
def test_the_real_env_suite_kept_then_tried_again(tmp_path):
    """Both sides for real, on the env suite: the plugin keeps each run's part, the baseline
    is joined, and the same environment tried again has nothing regressed."""
    kept, report, run_file = tmp_path / "baseline.jsonl", tmp_path / "check.md", tmp_path / "runs.jsonl"
    pytest_args = ["--", "-m", "env and cpu", "--run-file", str(run_file), "-p", "no:cacheprovider"]

    def tool(*args):
        return subprocess.run([sys.executable, "-m", "tools.upgrade", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=600)
    first = tool("baseline", "--baseline-file", str(kept), *pytest_args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    assert "this run's part kept (" in first.stdout and "baseline kept: " in first.stdout
    assert compare.load_side([str(kept)]).complete
    again = tool("candidate", "--baseline-file", str(kept), "--report", str(report), *pytest_args)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert "mps-compat: against the baseline" not in again.stdout   # the run compared nothing itself
    assert "0 regression(s)" in report.read_text() and "comparison written to" in again.stdout


class SelectedRuns(FakeRuns):
    """FakeRuns whose runs say in their headers that they ran ``-m MARKEXPR`` (as pytest's runs
    of ``./compat candidate ... -- -m MARKEXPR`` do); a phase with no records writes no part."""

    def __init__(self, markexpr: str, **kwargs):
        super().__init__(**kwargs)
        self.markexpr = markexpr

    def execute(self, plan, argv, extra=None):
        outcome = super().execute(plan, argv, extra)
        for args in self.calls:
            part = args[args.index("--save-baseline") + 1]
            try:
                lines = open(part).read().splitlines()
            except FileNotFoundError:
                continue
            header = {**json.loads(lines[0]), "selection": {"markexpr": self.markexpr, "keyword": "",
                                                            "args": ["suites"]}}
            open(part, "w").write("\n".join([json.dumps(header), *lines[1:]]) + "\n")
        return outcome


def test_a_candidate_of_a_narrower_selection_than_the_baseline_lists_no_check_it_did_not_run(tmp_path, capsys):
    """A whole baseline and a candidate of `-m "env or ops or parity"`: the optim and perf
    checks were not asked for, and are one note, not disappeared; a parity check the candidate
    lacks, selected by that -m, did disappear, though no parity check ran at all."""
    kept, report = _baseline(tmp_path), tmp_path / "upgrade-check.md"
    narrower = {"untimed": RECORDS["untimed"][:2], "optim": [], "perf": []}
    expr = "env or ops or parity"
    runs = SelectedRuns(expr, records=narrower, env_id="host-a-torch2.10")
    assert upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(report), "--", "-m", expr],
                        **runs.run()) == 0
    data = json.loads(report.with_suffix(".json").read_text())
    assert [c["check"] for c in data["changes"] if c["kind"] == "disappeared"] == ["parity/gelu/float32/forward"]
    assert any(n.startswith("2 check(s) of the baseline are outside the candidate's selection") for n in data["notes"])


# --------------------------------------------------------------------------- the candidate is the baseline + SPEC

def test_a_spec_uv_did_not_apply_stops_the_candidate_before_its_runs(tmp_path, capsys):
    """SPEC torch==2.16.* with torch 2.15 still installed (uv kept a version that satisfied the
    rest, or the environment was reused) ran every suite and compared the baseline's torch with
    itself: exit 0, "0 regressions". Now the installed versions are checked first."""
    kept, report = _baseline(tmp_path), tmp_path / "upgrade-check.md"
    runs = FakeRuns(env_id="host-a-torch2.15")
    args = ["--baseline-file", str(kept), "--report", str(report)]
    assert upgrade.main(["candidate", "torch==2.16.*", *args], **runs.run()) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: torch==2.16.*: torch 2.15") and "NAME==VERSION" in line, line
    assert runs.calls == [] and not report.exists()
    # what is installed, asked for: runs; a package no SPEC named that differs from the baseline's is said
    assert upgrade.main(["candidate", "torch==2.15.*", *args], **runs.run()) == 0
    out = capsys.readouterr().out
    assert "note: transformers 5.0.0 -> " in out and "though no SPEC named it" in out


def test_in_its_environment_the_candidate_keeps_the_baselines_versions_of_what_no_spec_names(tmp_path, monkeypatch):
    """The candidate's tox environment was built from the project's open requirements: naming
    transformers alone also moved torch to its newest. There the SPECs are installed with the
    baseline's versions of the rest (its header's packages); elsewhere nothing else is touched."""
    kept, report = _baseline(tmp_path), tmp_path / "upgrade-check.md"
    args = ["--baseline-file", str(kept), "--report", str(report)]
    runs = FakeRuns(env_id="host-a-torch2.15")
    upgrade.main(["candidate", "torch==2.15.*", *args], **runs.run())
    assert runs.installs == [(["torch==2.15.*"], [])]
    monkeypatch.setenv(upgrade.IN_CANDIDATE_ENV, "1")
    runs = FakeRuns(env_id="host-a-torch2.15")
    upgrade.main(["candidate", "Torch==2.15.*", *args], **runs.run())
    assert runs.installs == [(["Torch==2.15.*"], ["transformers==5.0.0"])]
    # no SPEC (a noise check): the baseline's versions where the environment's differ
    runs = FakeRuns(env_id="host-a-torch2.15")
    upgrade.main(["candidate", *args], **runs.run())
    assert runs.installs == [([], ["torch==2.8.0", "transformers==5.0.0"])]
    # and what ./compat builds that environment under (UV_CONSTRAINT): the pins and the plain SPECs
    out = tmp_path / "constraints.txt"
    assert upgrade.main(["check", "torch==2.16.*", "peft @ git+https://example.org/peft.git", *args,
                         "--constraints", str(out)], **runs.run()) == 0
    assert out.read_text() == "transformers==5.0.0\ntorch==2.16.*\n"


def test_a_candidate_selecting_suites_the_baseline_never_ran_is_refused_before_anything_runs(tmp_path, capsys):
    """A baseline kept with -m env and a candidate of every suite: every run was made, then "no
    comparison", with the regression status 1. Now the check says so first, with the command
    that keeps a baseline of that selection, and a comparison that cannot be made exits 2."""
    kept = write_run(tmp_path / "baseline.jsonl", [rec("env/threads")], run_id="b")
    report = tmp_path / "upgrade-check.md"
    runs = FakeRuns(env_id="host-a-torch2.10")
    for side in ("check", "candidate"):
        assert upgrade.main([side, "--baseline-file", str(kept), "--report", str(report), "--", "-m", "not mps"],
                            **runs.run()) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("error: the baseline holds no ops, optim, parity, perf check") and \
            "./compat baseline -m not mps" in line, line
    assert runs.calls == [] and runs.installs == [] and not report.exists()
