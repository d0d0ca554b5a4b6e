"""A column that checked its own instruments (issue 27): the report and the terminal say what
its controls found, and never contradict it.

A control is a check whose answer is known in advance, run on the device first
(``<suite>/controls/<name>``, ``metrics.record_kind`` "control"). One that failed marks its
column "instrument not trustworthy here" in the verdict, the terminal, matrix.md, matrix.html
and matrix.json, and shows the verdicts of its suite there as unconfirmed; controls that all
passed say "instruments checked"; a run without them (an older run file, controls deselected)
says "instruments unchecked" in a note, and the aspects its unchecked suites measured are not
good: "unchecked", a warning. An emulated Mac's column (standin-mps) is named as
emulated, on the host's CPU, never by a Mac's chip. The pre-upgrade check puts a line before
the regressions of a candidate whose controls failed."""
import html
import json
import re

import pytest

from harness.core import runfiles
from harness.core.records import Category, RecordKind, Status
from harness.env import devices
from harness.env.facts import env_id
from harness.optim.claims import ANY_REDUCTION_SRC
from harness.report import compare, matrix, schema, verdict
from harness.report.matrix import build, device_name
from tests import test_compare
from tests.conftest import load_facts, no_kernels
from tests.test_report import write_run
from tools import report

FALLBACK_SWALLOWED = ("instrument not trustworthy here: fallback-seen: expected a fallback warning for aten::_foo, "
                      "saw none; the fallback warnings are swallowed, so ops that run on the CPU look native; "
                      "run with -W default::UserWarning")
SAID = "instrument not trustworthy here: ops control fallback-seen"   # what the column is marked with


def check(name: str, status: str = Status.PASS, category: str = Category.NA, target: str = "cpu", reason: str = "",
          **metrics) -> dict:
    suite, subject, *variant = name.split("/")
    return {"check": name, "suite": suite, "subject": subject, "variant": "/".join(variant), "target": target,
            "status": status, "category": category, "reason": reason, "metrics": metrics}


def control(suite: str, name: str, status: str = Status.PASS, reason: str = "", target: str = "cpu") -> dict:
    return check(f"{suite}/controls/{name}", status, Category.CONTROL, target, reason,
                 record_kind=RecordKind.CONTROL, control=name, expected="a known answer", seen="what the device gave")


def checks(target: str = "cpu") -> list[dict]:
    """One ordinary check of every aspect, each passing."""
    return [check("env/threads", target=target),
            check("ops/add/float32", category=Category.NATIVE, target=target),
            check("parity/add/float32/forward", category=Category.PARITY, target=target, margin=0.1),
            check("parity/known_bug/sdpa-nan", category=Category.PARITY, target=target,
                  record_kind=RecordKind.KNOWN_BUG, known_bug="sdpa-nan"),
            check("optim/gradient-checkpointing/memory", category=Category.HOLDS, target=target, mem_ratio=0.5,
                  ci_low=0.5, ci_high=0.5, bound=0.62, kind="lower"),
            check("perf/op_time/add", category=Category.TIMED, target=target, median_s=0.001)]


PASSING = [("ops", "fallback-seen"), ("ops", "native-seen"), ("parity", "exact-passes"),
           ("optim", "memory-sees-allocation"), ("perf", "timing-sees-queued-work")]


def controls(failed: dict | None = None, target: str = "cpu") -> list[dict]:
    """The controls of PASSING, those named in ``failed`` ((suite, name) -> reason) failing."""
    failed = failed or {}
    return [control(s, n, Status.FAIL if (s, n) in failed else Status.PASS, failed.get((s, n), ""), target)
            for s, n in PASSING]


FACTS = load_facts("linux_x86_64")


def verdict_of(recs: list[dict], facts: dict = FACTS) -> verdict.Verdict:
    """The verdict of one run of these records, as the terminal's summary makes it."""
    header = {"run": "R1", "env_id": env_id(facts), "facts": facts, "started": "2026-01-01T00:00:00Z",
              "pytest_args": ["suites/"]}
    (found,) = verdict.for_records(header, recs, {"kind": "end", "run": "R1"})
    return found


def aspect(v: verdict.Verdict, name: str) -> verdict.Aspect | None:
    return next((a for a in v.aspects if a.name == name), None)


# ----------------------------------------------------------------------------- the verdict


def test_a_failed_control_marks_the_column_and_leaves_its_suite_unconfirmed():
    v = verdict_of(checks() + controls({("ops", "fallback-seen"): FALLBACK_SWALLOWED}))
    inst = aspect(v, "instruments")
    assert inst is v.aspects[0] and inst.state == verdict.BAD
    assert inst.line == (f"{SAID} (expected a fallback warning for aten::_foo, saw none; the fallback warnings are "
                         "swallowed, so ops that run on the CPU look native; run with -W default::UserWarning)")
    assert v.state == verdict.BAD and v.headline.startswith(SAID), v.headline
    ops = aspect(v, "ops")
    assert ops.state == verdict.WARN   # it was good: unconfirmed, never good
    assert ops.line.startswith("unconfirmed (the ops instruments failed their controls): 1 native"), ops.line
    assert "(of 1 op checks run)" in ops.line   # the control is not counted as an op
    for other in ("environment", "numerics", "known bugs", "optimizations", "speed and memory"):
        assert aspect(v, other).state == verdict.GOOD and "unconfirmed" not in aspect(v, other).line, other
    assert v.instruments_note == ""


@pytest.mark.parametrize("suite, name, unconfirmed", [
    ("ops", "native-seen", ("ops",)),
    ("parity", "exact-passes", ("numerics", "known bugs")),
    ("optim", "memory-sees-allocation", ("optimizations",)),
    ("perf", "timing-sees-queued-work", ("speed and memory",)),
])
def test_each_suite_s_control_vouches_for_its_own_verdicts(suite, name, unconfirmed):
    v = verdict_of(checks() + controls({(suite, name): f"instrument not trustworthy here: {name}: expected 1, saw 2"}))
    line = aspect(v, "instruments").line
    assert line == f"instrument not trustworthy here: {suite} control {name} (expected 1, saw 2)"
    for a in v.aspects[1:]:
        if a.name in unconfirmed:
            assert a.state == verdict.WARN and a.line.startswith(
                f"unconfirmed (the {suite} instruments failed their controls): "), (a.name, a.line)
            assert not a.short or (a.short.startswith("unconfirmed: ") and a.short in v.headline), a.short
        else:
            assert a.state == verdict.GOOD and "unconfirmed" not in a.line, (a.name, a.line)


def test_a_bad_verdict_stays_bad_when_unconfirmed_and_every_failed_control_is_named():
    recs = checks() + [check("ops/sub/float32", Status.FAIL, Category.NATIVE, reason="wrong")]
    recs += controls({("ops", "fallback-seen"): FALLBACK_SWALLOWED, ("perf", "timing-sees-queued-work"): "too quick"})
    v = verdict_of(recs)
    assert aspect(v, "ops").state == verdict.BAD and aspect(v, "ops").line.startswith("unconfirmed (the ops")
    inst = aspect(v, "instruments")
    assert inst.line.endswith("; and perf control timing-sees-queued-work"), inst.line
    assert inst.detail[:2] == [f"{SAID} (expected a fallback warning for aten::_foo, saw none; the fallback "
                               "warnings are swallowed, so ops that run on the CPU look native; run with "
                               "-W default::UserWarning)",
                               "instrument not trustworthy here: perf control timing-sees-queued-work (too quick)"]
    assert inst.detail[2] == "passed: 3 controls (ops, parity, optim)"
    assert v.headline.startswith(f"{SAID} and 1 more control;"), v.headline


def test_controls_that_all_passed_say_so():
    v = verdict_of(checks() + controls())
    inst = aspect(v, "instruments")
    assert inst.state == verdict.GOOD
    assert inst.line == "instruments checked: 5 controls passed (ops, parity, optim, perf)"
    assert v.state == verdict.GOOD and "unconfirmed" not in " ".join(a.line for a in v.aspects)
    assert v.instruments_note == ""


def test_the_detail_names_a_skipped_control_and_the_suites_that_ran_without_any():
    skipped = control("ops", "fallback-seen", Status.SKIP, "every op has a kernel here")
    v = verdict_of(checks() + [control("ops", "native-seen"), skipped])
    inst = aspect(v, "instruments")
    # the ops control passed, the other suites measured with none: not "instruments checked" in
    # green beside three aspects marked unchecked (report review, defect 4)
    assert (inst.state, inst.line) == (verdict.WARN, "instruments unchecked for parity, optim, perf: no parity, "
                                                     "optim or perf control ran here (1 control passed (ops))")
    assert inst.detail == ["skipped here: ops control fallback-seen (every op has a kernel here)",
                           "unchecked: no parity control ran here", "unchecked: no optim control ran here",
                           "unchecked: no perf control ran here"]


def test_a_run_without_controls_is_not_green_where_an_unchecked_instrument_measured():
    """A column whose instruments no control checked cannot tell a healthy device from a broken
    instrument: its all-passing ops, numerics, optimizations and speed were read "good" with a
    note in small print. They are warnings now, each line saying why; the environment, which
    no instrument measures, stays good; with the controls the same checks are good."""
    v = verdict_of(checks())
    assert aspect(v, "instruments") is None and v.state == verdict.WARN
    assert v.instruments_note == ("instruments unchecked: this run has no controls (written before mps-compat had "
                                  "them, or the controls were not selected)")
    for name, suite in (("ops", "ops"), ("numerics", "parity"), ("known bugs", "parity"),
                        ("optimizations", "optim"), ("speed and memory", "perf")):
        a = aspect(v, name)
        assert a.state == verdict.WARN and a.line.startswith(f"unchecked (no {suite} control ran here: "), (name, a)
    assert aspect(v, "environment").state == verdict.GOOD
    assert "unchecked: ops" in v.headline, v.headline
    checked = verdict_of(controls() + checks())
    assert checked.state == verdict.GOOD and "unchecked" not in checked.headline
    # one suite's controls missing (an older optim run merged in): only its aspect is unchecked
    partly = verdict_of([c for c in controls() if c["suite"] != "optim"] + checks())
    assert [a.name for a in partly.aspects if a.state == verdict.WARN] == ["instruments", "optimizations"]
    # every control of a suite skipped: nothing checked that suite's instrument either
    skipped = [{**c, "status": Status.SKIP} if c["suite"] == "perf" else c for c in controls()]
    assert [a.name for a in verdict_of(skipped + checks()).aspects if a.state == verdict.WARN] == [
        "instruments", "speed and memory"]
    # a failure stays bad, and says what it was measured through: unchecked never makes a verdict better
    broken = aspect(verdict_of([check("ops/add/float32", Status.FAIL, Category.NA)]), "ops")
    assert broken.state == verdict.BAD and broken.line.startswith("unchecked (no ops control ran here: ")
    falls_back = aspect(verdict_of([check("ops/add/float32", category=Category.CPU_FALLBACK)]), "ops")
    assert falls_back.state == verdict.WARN and falls_back.short.startswith("unchecked: ops"), falls_back


def test_an_environment_run_alone_has_nothing_for_instruments_to_vouch_for():
    """The environment suite has no controls and measures with no instrument: a run of it alone
    (pytest suites/ -m env) is not told its instruments went unchecked."""
    v = verdict_of([check("env/threads"), check("env/backend-built")])
    assert aspect(v, "instruments") is None and v.instruments_note == ""
    skipped_ops = [check("env/threads"), check("ops/add/float32", Status.SKIP, reason="not selected")]
    assert verdict_of(skipped_ops).instruments_note == ""
    assert verdict_of([check("env/threads"), check("ops/add/float32", category=Category.NATIVE)]).instruments_note \
        .startswith("instruments unchecked: this run has no controls")


def test_controls_that_were_all_skipped_are_said_in_the_note():
    recs = checks() + [check("ops/controls/fallback-seen", Status.SKIP, Category.CONTROL,
                             reason="every op has a kernel for this device in this torch",
                             record_kind=RecordKind.CONTROL, control="fallback-seen")]
    v = verdict_of(recs)
    assert aspect(v, "instruments") is None
    assert v.instruments_note == ("instruments unchecked: every control was skipped here (ops control fallback-seen: "
                                  "every op has a kernel for this device in this torch)")


def test_a_failed_control_is_its_own_cause_among_the_failures():
    recs = controls({("parity", "exact-passes"): "expected a pass, saw a fail"})
    (group,) = verdict.failure_groups(recs)
    assert group.cause == verdict.CONTROL_FAILED and group.checks == ["parity/controls/exact-passes"]
    assert "unconfirmed" in group.what and group.switch
    assert verdict.family_of(recs[2]) == "controls"


@pytest.mark.parametrize("name, family", [
    ("parity/compiled.minilm/float32/forward-backward", "torch.compile"),
    ("parity/compiled.softmax/float32/forward", "torch.compile"),
    ("parity/linalg.svd/float32/backward", "linalg"),
    ("parity/pow/float16/backward", "torch ops"),
])
def test_a_compiled_check_is_of_the_torch_compile_family_not_a_torch_op(name, family):
    """The failures table groups by family: the compiled MiniLM step is a torch.compile finding."""
    assert verdict.family_of(check(name, Status.FAIL, Category.PARITY)) == family


# ----------------------------------------------------------------------------- the terminal


def test_the_terminal_names_the_failed_control_first():
    v = verdict_of(checks() + controls({("ops", "fallback-seen"): FALLBACK_SWALLOWED}))
    lines = verdict.terminal_lines([v])
    assert lines[0].startswith(f"XX {v.title}: {SAID}"), lines[0]
    assert lines[1] == f"   instruments: {aspect(v, 'instruments').line}"
    assert any(line.startswith("   ops: unconfirmed (the ops instruments failed their controls)") for line in lines)


# ----------------------------------------------------------------------------- the files


def instrument_contradictions(found, doc: dict, md: str, page: str) -> list[str]:
    """Where the verdicts, matrix.json, matrix.md and the page disagree on a column's instruments."""
    said = []
    text = html.unescape(page)
    columns = {c["id"]: c for c in doc["columns"]}
    untrusted = [cid for cid, c in columns.items() if c["instruments"]["state"] == matrix.UNTRUSTED]
    for v in found:
        ids = [cid for cid in columns if cid == v.column_id or cid.startswith(v.column_id + "/")]
        mine = [columns[cid]["instruments"] for cid in ids]
        if any(x != mine[0] for x in mine):
            said.append(f"{v.title}: its columns' instruments differ")
        state, inst = mine[0]["state"], aspect(v, "instruments")
        marked = v.headline.startswith(matrix.UNTRUSTED_WORDS)
        if state == matrix.UNTRUSTED:
            if v.state == verdict.GOOD or not marked or inst is None or inst.state != verdict.BAD:
                said.append(f"{v.title}: untrusted in matrix.json, the verdict does not say so")
            for failed in mine[0]["failed"]:
                words = f"{matrix.UNTRUSTED_WORDS}: {failed['suite']} control {failed['control']}"
                if words not in md or words not in text or not any(words in x for x in verdict.terminal_lines([v])):
                    said.append(f"{v.title}: {words} is missing from matrix.md, the page or the terminal")
                for name in verdict.ASPECTS_OF_SUITE[failed["suite"]]:
                    a = aspect(v, name)
                    if a and a.state == verdict.GOOD:
                        said.append(f"{v.title}: {name} is good though the {failed['suite']} instruments failed")
        elif marked or (inst and inst.state == verdict.BAD) or any("unconfirmed" in a.line for a in v.aspects):
            said.append(f"{v.title}: {state} in matrix.json, the verdict says the instruments failed")
        elif state == matrix.TRUSTED and (inst is None or inst.state != verdict.GOOD
                                          or any(a.line.startswith("unchecked") for a in v.aspects)):
            said.append(f"{v.title}: trusted in matrix.json, the verdict does not say instruments checked")
        elif state == matrix.UNCHECKED and mine[0].get("unchecked"):   # some suites' records unvouched
            named = [u["suite"] for u in mine[0]["unchecked"]]
            if not (inst is None and v.instruments_note.startswith("instruments unchecked")) and not (
                    inst is not None and inst.state == verdict.WARN and all(s in inst.line for s in named)):
                said.append(f"{v.title}: unchecked in matrix.json, the verdict does not say so")
            for suite in named:
                for name in verdict.ASPECTS_OF_SUITE[suite]:
                    a = aspect(v, name)
                    if a and a.state != verdict.NONE and not a.line.startswith("unchecked ("):
                        said.append(f"{v.title}: {name} does not say it is unchecked")
        elif state == matrix.UNCHECKED and inst is not None:
            said.append(f"{v.title}: unchecked in matrix.json, the verdict says instruments checked")
    if untrusted and "instruments not trustworthy</span>" not in text:
        said.append("the page's column headers carry no badge")
    if not untrusted and ("instruments not trustworthy</span>" in text or matrix.UNTRUSTED_WORDS in md):
        said.append("a column is marked untrusted where none is")
    return said


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A report of two machines: one whose ops control failed (an emulated Mac's broken variant),
    one whose controls passed, and an older run without controls: (found, json, md, html)."""
    tmp = tmp_path_factory.mktemp("controls")
    other = {**FACTS, "host": "other", "cpu": {**FACTS["cpu"], "model": "Intel Xeon"}}
    old = {**FACTS, "host": "older"}
    files = [write_run(tmp / "bad.jsonl", FACTS, checks("standin-mps-mute")
                       + controls({("ops", "fallback-seen"): FALLBACK_SWALLOWED}, "standin-mps-mute")),
             write_run(tmp / "good.jsonl", other, checks() + controls(), run="R2"),
             write_run(tmp / "old.jsonl", old, checks(), run="R3")]
    out = tmp / "out"
    assert report.main([*map(str, files), "--out", str(out), "--kernels", no_kernels(tmp), "--no-baseline"]) == 0
    runs, _, _ = report.load(list(map(str, files)))
    found = verdict.verdicts(build(runs))
    return (found, json.loads((out / "matrix.json").read_text(encoding="utf-8")),
            (out / "matrix.md").read_text(encoding="utf-8"), (out / "matrix.html").read_text(encoding="utf-8"))


def test_matrix_json_carries_each_column_s_instruments_and_matches_its_schema(written):
    _, doc, _, _ = written
    assert schema.problem(doc) is None
    by_host = {c["facts"]["host"]: c["instruments"] for c in doc["columns"]}
    assert by_host["vm"] == {"state": "untrusted", "passed": 4, "skipped": 0, "unchecked": [], "failed": [
        {"suite": "ops", "control": "fallback-seen", "message": FALLBACK_SWALLOWED.split("fallback-seen: ", 1)[1],
         "run": "R1"}]}
    assert by_host["other"] == {"state": "trusted", "failed": [], "passed": 5, "skipped": 0, "unchecked": []}
    assert by_host["older"] == {"state": "unchecked", "failed": [], "passed": 0, "skipped": 0, "unchecked": [
        {"suite": s, "records": n, "of": n, "controls_ran": False}
        for s, n in (("ops", 1), ("parity", 2), ("optim", 1), ("perf", 1))]}
    (verdict_json,) = [v for v in doc["verdicts"] if "standin-mps-mute" in v["title"]]
    assert verdict_json["aspects"][0]["name"] == "instruments" and verdict_json["headline"].startswith(SAID)


@pytest.mark.parametrize("break_it", [
    lambda c: c["instruments"].update(state="trusted"),          # a failed control under "trusted"
    lambda c: c["instruments"].update(failed=[]),                # untrusted with nothing failed
    lambda c: c["instruments"].pop("failed"),
])
def test_the_schema_catches_instruments_that_contradict_themselves(written, break_it):
    _, doc, _, _ = written
    doc = json.loads(json.dumps(doc))
    (col,) = [c for c in doc["columns"] if c["instruments"]["state"] == "untrusted"]
    break_it(col)
    assert "instruments" in (schema.problem(doc) or "")


def test_matrix_md_and_the_page_mark_the_column_and_say_the_rest(written):
    found, doc, md, page = written
    label = next(c["label"] for c in doc["columns"] if c["instruments"]["state"] == "untrusted")
    ops_table = md.split("\n## ops\n")[1].split("\n## ")[0]
    line = next(x for x in ops_table.splitlines() if matrix.UNTRUSTED_WORDS in x)
    assert line.startswith(f"**{label}**: {SAID} (expected a fallback warning for aten::\\_foo"), line
    assert "instruments checked: 5 controls passed (ops, parity, optim, perf)" in md
    assert "instruments unchecked: this run has no controls" in md
    text = html.unescape(page)
    badges = re.findall(r"<span class='badge untrusted' title='([^']*)'>instruments not trustworthy</span>", page)
    assert badges and all(html.unescape(b).startswith(SAID) for b in badges)
    assert len(badges) == len(re.findall(r"<table class='matrix'", page))  # one column marked in every matrix
    assert "instruments checked: 5 controls passed" in text and "instruments unchecked: this run has no" in text
    assert "Instruments: the controls of each column" in text
    table = md.split("Instruments: the controls of each column", 1)[1].split("\n#", 1)[0]
    failed = next(x for x in table.splitlines() if "fallback-seen" in x and "fail" in x)
    assert table.splitlines()[[i for i, x in enumerate(table.splitlines()) if x.startswith("|")][0]].rstrip(
        " |").endswith("reason") and "expected a fallback warning" in failed, table[:2000]


def test_the_report_never_contradicts_the_controls(written):
    found, doc, md, page = written
    assert instrument_contradictions(found, doc, md, page) == []


def test_the_contradiction_finder_finds_what_it_looks_for(written):
    """The check above can fail: a verdict that hides the failed control, a JSON column that
    calls it trusted, a page without the badge are each found."""
    found, doc, md, page = written
    hidden = [verdict.Verdict(**{**v.__dict__, "headline": v.headline.replace(SAID, "fine"),
                                 "aspects": [a for a in v.aspects if a.name != "instruments"], "state": "good"})
              for v in found]
    assert any("does not say so" in x for x in instrument_contradictions(hidden, doc, md, page))
    trusted = json.loads(json.dumps(doc))
    for c in trusted["columns"]:
        c["instruments"].update(state="trusted", failed=[], passed=max(1, c["instruments"]["passed"]))
    assert any("says the instruments failed" in x for x in instrument_contradictions(found, trusted, md, page))
    assert any("badge" in x for x in instrument_contradictions(found, doc, md, page.replace(
        "instruments not trustworthy</span>", "</span>")))


# ----------------------------------------------------------------------------- the emulated Mac


def test_an_emulated_mac_is_named_as_emulated_on_the_host_s_cpu_never_by_a_mac_chip(recorded, monkeypatch):
    assert device_name(FACTS, "standin-mps") == "emulated Mac (standin-mps) on AMD EPYC"
    mac = recorded("apple_silicon_native")   # a header whose facts name a Mac's chip
    assert device_name(mac, "standin-mps-frozen") == "emulated Mac (standin-mps-frozen) on the host's CPU"
    assert device_name(mac, "mps") == "Apple M3 Pro"   # a real Mac's column keeps its chip
    chip_as_cpu = {k: v for k, v in mac.items() if k != "mac"}   # an older header: the chip only as the CPU's model
    assert device_name(chip_as_cpu, "standin-mps") == "emulated Mac (standin-mps) on the host's CPU"
    assert not matrix.is_emulated("standin-mpsx") and not matrix.is_emulated("cpu")
    # a plain stand-in's card read "AMD EPYC · torch 2.15.0 · standin-half-atomic", as a device's would
    assert device_name(FACTS, "standin-half-atomic") == "stand-in accelerator (standin-half-atomic) on AMD EPYC"
    v = verdict_of(checks("standin-mps") + controls(target="standin-mps"), mac)
    assert v.title.startswith("emulated Mac (standin-mps) on the host's CPU · torch ") and "M3" not in v.title

    class Double(devices.StandIn):   # an emulating stand-in registered under another name
        name, emulates = "mac-double", "mps"
    monkeypatch.setitem(devices.STAND_INS, "mac-double", Double())
    assert device_name(FACTS, "mac-double") == "emulated Mac (mac-double) on AMD EPYC"


def test_the_emulated_column_is_labelled_so_in_every_file(written):
    found, doc, md, page = written
    (col,) = [c for c in doc["columns"] if c["target"] == "standin-mps-mute"]
    assert col["device"] == "emulated Mac (standin-mps-mute) on AMD EPYC"
    assert col["label"].startswith("vm emulated Mac (standin-mps-mute) on AMD EPYC · torch ")
    assert col["label"] in md and col["label"] in html.unescape(page)
    heads = re.findall(r"<tr class='cols'>.*?</tr>", page)   # each matrix's column headers
    assert heads and all("<br>emulated Mac (standin-mps-mute) on AMD EPYC<br><span class='badge" in h for h in heads)


# ----------------------------------------------------------------------------- the upgrade check


def sides(tmp_path, baseline_status: str, candidate_status: str):
    def recs(status):
        return [test_compare.rec("ops/add/float32/forward", category="native"),
                test_compare.rec("ops/controls/fallback-seen", status, "control",
                                 reason="" if status == "pass" else FALLBACK_SWALLOWED, record_kind="control",
                                 control="fallback-seen")]
    a = test_compare.write_run(tmp_path / "a.jsonl", recs(baseline_status))
    b = test_compare.write_run(tmp_path / "b.jsonl", recs(candidate_status), torch_version="2.9.0", run_id="r2")
    return compare.load_side([str(a)]), compare.load_side([str(b)])


def test_a_control_that_fails_in_the_candidate_is_a_regression_preceded_by_the_instruments_line(tmp_path):
    cmp = compare.compare(*sides(tmp_path, "pass", "fail"))
    assert [(c.check, c.rule) for c in cmp.regressions] == [("ops/controls/fallback-seen", "status")]
    said = ("the candidate's ops instruments failed their controls (fallback-seen on cpu): its verdicts are "
            "unconfirmed")
    assert cmp.instruments == [said]
    text = compare.render(cmp, "table")
    assert said in text and text.index(said) < text.index("Regressions (1)")
    assert f"**{said}**" in compare.render(cmp, "md")
    assert json.loads(compare.render(cmp, "json"))["instruments"] == [said]


def test_the_instruments_line_stands_when_the_control_failed_on_both_sides_and_not_when_it_passes(tmp_path):
    both = compare.compare(*sides(tmp_path, "fail", "fail"))
    assert both.regressions == [] and both.instruments and both.instruments[0] in compare.render(both)
    (tmp_path / "again").mkdir()
    fine = compare.compare(*sides(tmp_path / "again", "fail", "pass"))
    assert fine.instruments == [] and "instruments" not in compare.render(fine)
    assert [(c.check, c.kind) for c in fine.changes] == [("ops/controls/fallback-seen", "improvement")]


def test_a_candidate_measured_without_its_controls_is_said_to_be_unchecked(tmp_path):
    """`tools.compare` of two older run files (or a candidate run with its controls deselected)
    said "0 regressions" with nothing on its instruments; the report's cards say "unchecked"
    for the same records."""
    def side(name, *extra, target="cpu"):
        recs = [test_compare.rec("ops/add/float32/forward", category="native", target=target),
                test_compare.rec("env/threads", target=target), *extra]
        return compare.load_side([str(test_compare.write_run(tmp_path / f"{name}.jsonl", recs, run_id=name))])
    said = ("the candidate's ops instruments were not checked on cpu (no control of the suite ran there: an older "
            "run, or the controls deselected): its verdicts there are unconfirmed")
    bare = compare.compare(side("a"), side("b"))
    assert bare.instruments == [said] and said in compare.render(bare)   # env measures with no instrument: no line
    control = test_compare.rec("ops/controls/native-seen", "pass", "control", record_kind="control",
                               control="native-seen")
    assert compare.compare(side("c"), side("d", control)).instruments == []
    skipped = {**control, "status": "skip"}
    assert compare.compare(side("e"), side("f", skipped)).instruments == [said]
    # failed on one target, never checked on another: both said
    failed = {**control, "status": "fail"}
    on_cuda = test_compare.rec("ops/add/float32/forward", category="native", target="cuda")
    lines = compare.compare(side("g", on_cuda), side("h", failed, on_cuda)).instruments
    assert [line.split(" (")[0] for line in lines] == ["the candidate's ops instruments failed their controls",
                                                       "the candidate's ops instruments were not checked on cuda"]


def test_the_run_file_reader_keeps_a_control_record(tmp_path):
    """A control record passes the record contract's reader, so the report ever sees it."""
    path = write_run(tmp_path / "c.jsonl", FACTS, controls({("ops", "fallback-seen"): FALLBACK_SWALLOWED}))
    rf = runfiles.read_file(path)
    assert rf.errors == [] and len(rf.runs[0].records) == len(PASSING)
    assert matrix.instruments_of(rf.runs[0].records).state == matrix.UNTRUSTED


def test_a_saving_with_a_long_first_step_says_what_the_user_waits_for_once():
    """torch.compile's saving comes after a compile: the verdict's "helps" line says how long the
    first step took where it was far longer than a steady one, and nothing where it was not."""
    compiled = check("optim/torch-compile/time", category=Category.HOLDS, time_ratio=0.8, ci_low=0.77,
                     ci_high=0.83, bound=0.95, kind="lower", median_b_s=0.35, warmup_b_s=[212.4, 0.36],
                     workload="large")
    fused = check("optim/fused-adamw/time", category=Category.HOLDS, time_ratio=0.48, ci_low=0.45, ci_high=0.5,
                  bound=0.95, kind="lower", median_b_s=0.006, warmup_b_s=[0.007, 0.006])
    found = aspect(verdict_of([compiled, fused]), "optimizations")
    words = {line.split(" x")[0]: line for line in found.detail}
    assert words["helps: torch-compile time"].endswith("(large workload, its first step took 212 s)"), found.detail
    assert "first step" not in words["helps: fused-adamw time"], found.detail


def test_a_claim_that_does_not_hold_says_what_the_document_claimed():
    """A frozen backbone that saves a fifth of the time where the tutorial measured three
    quarters does not hold, though its ratio is below 1: the verdict says both figures, and
    "at most" for a claimed cost (checkpointing's ~20%), so no "x0.81" reads as a pass; a
    source with no figure is quoted none (the 5% is the suite's own)."""
    frozen = check("optim/freeze-backbone/time", Status.XFAIL, Category.DOES_NOT_HOLD, time_ratio=0.807,
                   ci_low=0.68, ci_high=0.88, bound=0.354, claimed_ratio=0.262, kind="lower", workload="small")
    recompute = check("optim/gradient-checkpointing/time", Status.XFAIL, Category.DOES_NOT_HOLD, time_ratio=1.5,
                      ci_low=1.4, ci_high=1.6, bound=1.26, claimed_ratio=1.2, kind="not-higher", workload="small")
    faster = check("optim/fp16-autocast/time", Status.XFAIL, Category.DOES_NOT_HOLD, time_ratio=13.0, ci_low=12.0,
                   ci_high=14.0, bound=0.95, claimed_ratio=0.95, kind="lower", workload="small",
                   source=f'HF guide, summary table: "yes"; {ANY_REDUCTION_SRC}')
    found = aspect(verdict_of([frozen, recompute, faster]), "optimizations")
    # the line names the two that miss their bound by most (x13 for 0.95, x0.81 for 0.354), the detail every one
    assert "freeze-backbone time x0.81, documented x0.26 (small workload)" in found.line, found.line
    assert "fp16-autocast time x13, documented as lower with no figure (small workload)" in found.line, found.line
    assert "does not hold: fp16-autocast time x13, documented as lower with no figure (small workload)" in found.detail
    assert "does not hold: gradient-checkpointing time x1.5, documented at most x1.2 (small workload)" in found.detail
    assert "does not hold: freeze-backbone time x0.81, documented x0.26 (small workload)" in found.detail
    assert "gradient-checkpointing" not in found.line, found.line   # x1.5 for 1.26: the narrowest miss


def test_the_claims_that_miss_their_bound_by_most_are_named_first():
    """The first screen names two claims that do not hold: the widest misses (x3 for a bound
    of 0.95, x0.9 for 0.5), not the first in check order (x1.3 for 1.26)."""
    def missed(name, ratio, bound):
        return check(name, Status.XFAIL, Category.DOES_NOT_HOLD, time_ratio=ratio, ci_low=ratio, ci_high=ratio,
                     bound=bound, claimed_ratio=bound, kind="lower", workload="small")
    found = aspect(verdict_of([missed("optim/a-claim/time", 1.3, 1.26), missed("optim/b-claim/time", 0.9, 0.5),
                               missed("optim/c-claim/time", 3.0, 0.95)]), "optimizations")
    assert "c-claim time x3" in found.line and "b-claim time x0.9" in found.line, found.line
    assert "a-claim" not in found.line and found.line.index("c-claim") < found.line.index("b-claim"), found.line
    assert [d.split(" x")[0] for d in found.detail] == [f"does not hold: {c}-claim time" for c in "cba"]


def test_an_emulated_column_says_how_many_ops_checks_only_the_device_can_answer():
    """The emulated Mac skips a check whose answer this CPU cannot give (harness.ops.opsweep.judge
    marks it emulation_cannot_tell): the ops line counts them apart from the checks run, so
    a reader does not take 5,300 answered checks for the whole sweep."""
    untold = check("ops/special.bessel_j0/float16/forward", Status.SKIP, Category.NA, "standin-mps",
                   "BeyondEmulation: the emulated Mac cannot tell: ...", emulation_cannot_tell=True)
    absent = check("ops/add/float16/forward", Status.SKIP, Category.NA, "standin-mps", "not on this target")
    line = aspect(verdict_of(checks("standin-mps") + [untold, absent]), "ops").line
    assert line.endswith("(of 1 op checks run; 1 more that only the device itself can answer: the CPU it is "
                         "emulated on lacks the kernel or dtype, or takes a path a Mac may not)"), line
    assert aspect(verdict_of(checks("standin-mps") + [absent]), "ops").line.endswith("(of 1 op checks run)")


def test_an_emulated_column_says_how_many_parity_checks_only_the_device_can_answer():
    """The parity checks an emulated device skips as beyond it (the CPU underneath lacks the
    kernel, or its dispatch machinery moves the CPU's result: harness.parity.ops.check) are
    counted on the numerics line, not passed over as if the column had answered everything."""
    ran = check("parity/add/float32/forward", Status.PASS, Category.PARITY, "standin-mps", "")
    untold = [check(f"parity/linalg.{op}/complex64/forward", Status.SKIP, Category.NA, "standin-mps",
                    "BeyondEmulation: the emulated device cannot tell: ...", emulation_cannot_tell=True)
              for op in ("pinv", "polar")]
    other = check("parity/empty/float32/forward", Status.SKIP, Category.PARITY, "standin-mps", "nothing comparable")
    checked = controls(target="standin-mps")
    line = aspect(verdict_of([*checked, ran, *untold, other]), "numerics").line
    assert line == ("as right as the CPU: 1 check, none wrong; 2 more that only the device itself can answer "
                    "(skipped on this emulated column)"), line
    assert aspect(verdict_of([*checked, ran, other]), "numerics").line == "as right as the CPU: 1 check, none wrong"


def test_an_emulated_mac_says_its_times_are_the_cpus():
    """The emulated Mac runs on the CPU: a time ratio on its card is the CPU's, and its
    optimizations and speed lines say so; a real target's do not."""
    timed = [check("optim/tf32/time", Status.FAIL, Category.DOES_NOT_HOLD, target="standin-mps", time_ratio=1.3,
                   ci_low=1.2, ci_high=1.4, bound=0.95, kind="lower"),
             check("perf/op_time/add", category=Category.TIMED, target="standin-mps", median_s=0.001)]
    emulated = verdict_of(checks("standin-mps") + timed)
    for name in ("optimizations", "speed and memory"):
        assert aspect(emulated, name).line.endswith(f"({verdict.EMULATED_TIMES})"), name
    assert not aspect(emulated, "ops").line.endswith(f"({verdict.EMULATED_TIMES})")
    real = verdict_of(checks("cpu"))
    assert verdict.EMULATED_TIMES not in " ".join(a.line for a in real.aspects)


def test_the_controls_section_lists_as_unchecked_only_columns_that_ran_something():
    """A column that ran checks without controls has unchecked instruments; a target whose
    every check was skipped (mps on Linux), or that ran the environment suite alone, measured
    nothing for an instrument to vouch for, and is not listed beside them (report review,
    defect 4: the env-only cpu columns were listed, their cards saying OK)."""
    from harness.report.sections import controls_section
    recs = (controls(target="cuda") + checks("cuda") + [check("env/threads"), check("ops/add/float32", target="cpu",
                                                                                    category=Category.NATIVE)]
            + [check("env/device-available", Status.SKIP, target="mps", reason="not a Mac")])
    header = runfiles.header("R1", env_id(FACTS), FACTS, pytest_args=["suites/"])
    runs = [runfiles.Run("R1", header, "x", [{"kind": "check", "run": "R1", **r} for r in recs],
                         {"kind": "end", "run": "R1", "exitstatus": 0})]
    section = controls_section(build(runs))
    unchecked = section.intro.split("Without controls (instruments unchecked): ")[1]
    assert " cpu (ops)" in unchecked and " mps" not in unchecked and " cuda" not in unchecked, unchecked
    env_only = [r for r in recs if not (r["target"] == "cpu" and r["suite"] == "ops")]
    runs = [runfiles.Run("R1", header, "x", [{"kind": "check", "run": "R1", **r} for r in env_only],
                         {"kind": "end", "run": "R1", "exitstatus": 0})]
    assert "Without controls" not in controls_section(build(runs)).intro


def test_a_later_runs_controls_do_not_vouch_for_an_earlier_run_without_any(tmp_path):
    """A column merges its runs, the newest record of each check winning: an older run file with
    no controls (written before mps-compat had them) and a newer one with them read "instruments
    checked" for the older run's measurements too. A record is vouched for by the controls of its
    own run; where the earlier run had its controls, a later run's replacing them changes nothing."""
    def page(first_has_controls: bool):
        first = checks() + (controls() if first_has_controls else [])
        old = runfiles.read_file(write_run(tmp_path / "old.jsonl", FACTS, first, run="R1")).runs
        new = runfiles.read_file(write_run(tmp_path / "new.jsonl", FACTS, controls() + [
            check("ops/mul/float32", category=Category.NATIVE)], run="R2")).runs
        new[0].header["pytest_args"] = ["suites/", "-k", "mul"]   # a later run of one check (and, so, the controls)
        runs = old + new
        (card,) = [v for v in verdict.verdicts(build(runs)) if v.title.endswith("· cpu")]
        return card
    merged = page(first_has_controls=False)
    # R2's controls passed, but not in the run the other records come from: a warning, not
    # "instruments checked" in green beside aspects marked unchecked (report review, defect 4)
    assert aspect(merged, "instruments").state == verdict.WARN
    assert aspect(merged, "instruments").line.startswith("instruments unchecked for ops, parity, optim, perf: ")
    for name in ("ops", "numerics", "optimizations", "speed and memory"):
        a = aspect(merged, name)
        assert a.state == verdict.WARN and a.line.startswith("unchecked (") and (
            "from runs in which no" in a.line or "from a run in which no" in a.line), (name, a)
    assert aspect(merged, "environment").state == verdict.GOOD
    vouched = page(first_has_controls=True)
    assert [a.name for a in vouched.aspects if a.line.startswith("unchecked")] == []
    assert vouched.state == verdict.GOOD, vouched


def _with_failed_fallback_control(tmp_path):
    """The 2026-11-28 H100 folder's ops run with its ops/controls/fallback-seen set to fail, beside
    the unchanged controls-only run (later, every control passing) and env run: (the runs, the ops
    run's id)."""
    from tests.conftest import recorded_h100_full
    src = recorded_h100_full()
    lines, failed = [], []
    for line in (src / "ops.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("check") == "ops/controls/fallback-seen":
            rec.update(status=Status.FAIL, reason=FALLBACK_SWALLOWED)
            failed.append(rec["run"])
        lines.append(json.dumps(rec))
    assert len(failed) == 1
    (tmp_path / "ops.jsonl").write_text("\n".join(lines) + "\n")
    runs = [run for f in (tmp_path / "ops.jsonl", src / "controls.jsonl", src / "env.jsonl")
            for run in runfiles.read_file(f).runs]
    later = [r for r in runs if r.run_id != failed[0] and any(matrix.is_control(x) for x in r.records)]
    assert later and all(r.header["started"] > next(x for x in runs if x.run_id == failed[0]).header["started"]
                         for r in later)   # the controls-only run is the newer: its passing control is the cell
    return runs, failed[0]


def test_a_control_that_failed_in_a_run_is_not_erased_by_a_later_run_whose_control_passed(tmp_path):
    """A run whose control failed is untrusted for that suite: a later controls-only run whose
    same control passed vouches for its own run, not for the failed run's measurements, which
    still stand in the column. The card is bad and names the control and its run; the ops aspect
    is unconfirmed; the Controls section lists the failure with its run; matrix.json says untrusted."""
    from harness.report.sections import controls_section
    runs, failed_run = _with_failed_fallback_control(tmp_path)
    m = build(runs)
    (card,) = [v for v in verdict.verdicts(m) if v.title.endswith("· cuda")]
    inst = aspect(card, "instruments")
    assert card.state == verdict.BAD and inst.state == verdict.BAD, card.headline
    assert card.headline.startswith(SAID) and "instruments checked" not in inst.line, card.headline
    assert f"run {failed_run}" in inst.line and "fallback warnings are swallowed" in inst.line, inst.line
    ops = aspect(card, "ops")
    assert ops.state == verdict.WARN and ops.line.startswith("unconfirmed (the ops instruments failed their controls): ")
    assert ops.short.startswith("unconfirmed: ops ") and ops.short in card.headline
    assert not ops.line.startswith("unconfirmed (the ops instruments failed their controls): unchecked")
    section = controls_section(m)
    failed_rows = [row for row in section.rows if row[2].key == Status.FAIL]
    assert [row[1] for row in failed_rows] == ["ops/controls/fallback-seen"], section.rows
    assert f"run {failed_run}" in failed_rows[0][-1], failed_rows[0]
    (col,) = [c for c in m.columns if c.target == "cuda"]
    assert col.instruments.as_json()["state"] == matrix.UNTRUSTED
    assert [(f["control"], f["run"]) for f in col.instruments.as_json()["failed"]] == [("fallback-seen", failed_run)]
    assert failed_run not in col.instruments.checked_runs.get("ops", set())   # checked only by controls that passed
    from harness.report.render import json_doc   # the run travels as a field of its own, which the schema allows
    assert schema.problem(json_doc(m, [], [], [])) is None


def test_a_failed_control_of_a_run_whose_records_a_later_whole_run_replaced_no_longer_marks_the_column(tmp_path):
    """The failed control of an earlier run counts while that run's records stand; once a later
    run measured the same checks with its controls passing, nothing of the failed run is read,
    and the column is checked again."""
    failing = controls({("ops", "fallback-seen"): FALLBACK_SWALLOWED})
    old = runfiles.read_file(write_run(tmp_path / "old.jsonl", FACTS, checks() + failing, run="R1")).runs
    new = runfiles.read_file(write_run(tmp_path / "new.jsonl", FACTS, checks() + controls(), run="R2")).runs
    new[0].header["started"] = "2099-01-01T00:00:00Z"
    (card,) = [v for v in verdict.verdicts(build(old + new)) if v.title.endswith("· cpu")]
    assert card.state == verdict.GOOD and aspect(card, "instruments").line.startswith("instruments checked"), card
    only_controls = runfiles.read_file(write_run(tmp_path / "c.jsonl", FACTS, controls(), run="R3")).runs
    only_controls[0].header.update(started="2099-01-01T00:00:00Z", pytest_args=["suites/", "-k", "controls"])
    (card,) = [v for v in verdict.verdicts(build(old + only_controls)) if v.title.endswith("· cpu")]
    assert card.state == verdict.BAD and "ops control fallback-seen" in card.headline, card.headline
    assert "run R1" in aspect(card, "instruments").line
    assert aspect(card, "ops").line.startswith("unconfirmed (the ops instruments")
    assert aspect(card, "numerics").state == verdict.GOOD   # the parity controls of R1 passed
