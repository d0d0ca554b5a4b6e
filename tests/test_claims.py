"""The claims table: every claim cites a seed and quotes it, every number has a source,
seed 003's path is as the seed reports it, the gates judge recorded machines right, and
what users read names each document by its title and gives every Chinese quote its English."""
import copy
import dataclasses
import hashlib
import re
from pathlib import Path

import pytest

from harness.core.records import Category, Status
from harness.optim import claims as C
from harness.optim import documents as D
from harness.optim import techniques
from harness.env import devices
from tests.conftest import ROOT, load_facts

# The source documents, kept in the repository (tests/fixtures/seeds/README.md says where they
# came from and gives their digests): the claims are checked against their text on every clone,
# never skipped for want of a folder outside it.
SEEDS = ROOT / "tests" / "fixtures" / "seeds"
DIGEST_LINE = re.compile(r"^\s*([0-9a-f]{64})  (\S+)$", re.M)   # sha256sum's form, as the README lists them
NAMES = [c.name for c in C.CLAIMS]
REQUIRED = {"larger-batch", "batch-multiple-of-8", "gradient-accumulation", "gradient-checkpointing", "fp16-autocast",
            "bf16-autocast", "tf32", "adafactor", "adamw-8bit", "fused-adamw", "dataloader-workers", "pin-memory",
            "torch-compile", "peft-lora", "freeze-backbone", "shorter-max-length", "dynamic-padding",
            "sdpa-attention", "accelerator-vs-cpu", "deepspeed-zero", "torch-cuda-amp-on-mac"}


def _seed_text(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def test_the_table_covers_every_technique_of_the_issue():
    assert REQUIRED <= set(NAMES)
    assert C.TARGET_CLASSES == devices.TARGETS


@pytest.mark.parametrize("claim", C.CLAIMS, ids=NAMES)
def test_every_claim_names_a_seed_file(claim):
    assert C.SEED_NAME.match(claim.source) and claim.source in C.SEED_FILES
    assert claim.section and claim.section_en and claim.quote and claim.quote_en


@pytest.mark.parametrize("claim", C.CLAIMS, ids=NAMES)
def test_every_claims_section_and_quote_occur_in_its_seed(claim):
    text = _seed_text(claim.source)
    assert claim.section in text
    assert claim.quote in text


def test_the_seed_files_exist_as_named():
    assert {p.name for p in SEEDS.glob("*.txt")} == set(C.SEED_FILES)


def test_the_seed_files_are_the_documents_as_given():
    """Each file's bytes are the ones its README lists (the digests of the shared folder's
    copies): an editor's re-encoding or a line-ending conversion would change the text a
    claim's quote is looked up in, and this names the file it happened to."""
    readme = (SEEDS / "README.md").read_text(encoding="utf-8")
    listed = {name: digest for digest, name in DIGEST_LINE.findall(readme)}
    assert set(listed) == set(C.SEED_FILES)
    changed = [name for name, digest in listed.items()
               if hashlib.sha256((SEEDS / name).read_bytes()).hexdigest() != digest]
    assert changed == []


@pytest.mark.parametrize("claim", C.CLAIMS, ids=NAMES)
def test_every_number_has_a_source(claim):
    for quantity in C.QUANTITIES:
        assert set(claim.expect(quantity)) == set(C.TARGET_CLASSES)
        for target, e in claim.expect(quantity).items():
            assert e.source.strip(), (claim.name, quantity, target)
            if e.kind != "none":
                assert e.basis, (claim.name, quantity, target)
    assert claim.tolerance.source.strip() and claim.tolerance.memory >= 0 and claim.tolerance.time >= 0
    for gate in claim.gates:
        assert gate.reason and gate.fix and gate.source, (claim.name, gate)
        assert set(gate.targets) <= set(C.TARGET_CLASSES)


@pytest.mark.parametrize("claim", C.CLAIMS, ids=NAMES)
def test_a_lower_claim_never_loosens_into_no_change(claim):
    for quantity in C.QUANTITIES:
        for target, e in claim.expect(quantity).items():
            setup = {e.scale: 0.5} if e.scale else {}
            bound = C.holds_bound(claim, quantity, target, **setup)
            if e.kind == "none":
                assert bound is None and C.expected_ratio(claim, quantity, target) is None
            elif e.kind == "lower":
                assert bound <= 1.0
            else:
                assert bound >= e.ratio


def test_expected_ratio_reads_the_table():
    assert C.expected_ratio("gradient-checkpointing", "time", "mps") == 1.2
    assert C.expected_ratio("tf32", "time", "mps") is None
    assert C.expected_ratio("peft-lora", "memory", "cuda", trainable_fraction=0.02) == pytest.approx(0.02)
    with pytest.raises(KeyError, match="trainable_fraction"):
        C.expected_ratio("peft-lora", "memory", "cuda")
    assert C.expected_ratio("adamw-8bit", "memory", "cpu") == C.ADAM8BIT_STATE_B / C.ADAMW_STATE_B


# --------------------------------------------------------------------------- seed 003's path

def test_seed_003_path_is_the_seeds_table():
    path = C.SEED_003_PATH
    assert path.batch_size == 32 and path.max_length == 128 and "macbert-large" in path.model
    first = path.steps[0]
    assert (first.batch_size, first.grad_accum, first.max_length, first.memory_gb, first.time_s) == (32, 1, 128,
                                                                                                     15.1, 44.1)
    assert [s.claim for s in path.steps] == [None, "gradient-accumulation", "gradient-checkpointing", "adafactor",
                                             "freeze-backbone", "shorter-max-length"]
    assert [s.memory_gb for s in path.steps] == [15.1, 7.5, 7.3, 5.5, 3.5, 3.4]
    assert [s.time_s for s in path.steps] == [44.1, 122, 461, 455, 119, 110]
    assert path.steps[-1].max_length == 64


def test_seed_003_path_memory_never_rises():
    memory = [s.memory_gb for s in C.SEED_003_PATH.steps]
    assert all(b <= a for a, b in zip(memory, memory[1:]))


def test_seed_003_rows_occur_in_the_seed():
    text = _seed_text(C.SEED_003_PATH.source)
    assert C.SEED_003_PATH.section in text
    for step in C.SEED_003_PATH.steps:
        line = next(line for line in text.splitlines() if step.row in line)
        assert f"{step.memory_gb:g}G" in line and f"{step.time_s:g}s" in line, line


def test_claims_from_seed_003_use_the_paths_ratios():
    for claim, ratio in C.SEED_003_PATH.ratios("memory"):
        assert C.expected_ratio(claim, "memory", "mps") == round(ratio, 3)
    assert C.expected_ratio("freeze-backbone", "time", "cuda") == round(119 / 455, 3)


def test_trainer_kwargs_pick_the_installed_name():
    assert C.trainer_kwargs("dynamic-padding", {"train_sampling_strategy"}) == {
        "train_sampling_strategy": "group_by_length"}
    assert C.trainer_kwargs("dynamic-padding", {"group_by_length"}) == {"group_by_length": True}
    assert C.trainer_kwargs("gradient-checkpointing", {"gradient_checkpointing"}) == {"gradient_checkpointing": True}
    assert C.trainer_kwargs("freeze-backbone", set()) == {}
    with pytest.raises(LookupError):
        C.trainer_kwargs("tf32", {"fp16"})


# --------------------------------------------------------------------------- gates on recorded machines

def _facts(name, **packages):
    f = copy.deepcopy(load_facts(name))
    f["packages"].update(packages)
    return f


def _with_cuda(name, capability):
    f = _facts(name)
    f["torch"]["cuda_available"] = True
    f["torch"]["cuda_devices"] = [{"name": "GPU", "capability": list(capability), "total_memory": 1 << 34}]
    return f


def test_tf32_does_not_apply_on_mps_or_cpu_and_says_why():
    f = load_facts("apple_silicon_native")
    ok, reason = C.applies("tf32", "mps", f)
    assert not ok and "CUDA" in reason and "Ampere" in reason and "Fix:" in reason
    assert not C.applies("tf32", "cpu", load_facts("linux_x86_64"))[0]
    assert C.applies("tf32", "cuda", _with_cuda("linux_x86_64", (8, 0)))[0]
    ok, reason = C.applies("tf32", "cuda", _with_cuda("linux_x86_64", (7, 5)))
    assert not ok and "7.5" in reason


def test_bitsandbytes_8bit_does_not_apply_on_mps():
    f = _facts("apple_silicon_native", bitsandbytes="0.50.0")
    ok, reason = C.applies("adamw-8bit", "mps", f)
    assert not ok and "MPS" in reason
    assert C.applies("adamw-8bit", "cpu", f)[0]
    ok, reason = C.applies("adamw-8bit", "cpu", _facts("linux_x86_64", bitsandbytes="0.45.0"))
    assert not ok and "0.50" in reason
    ok, reason = C.applies("adamw-8bit", "cuda", _facts("linux_x86_64", bitsandbytes=None))
    assert not ok and "not installed" in reason
    ok, reason = C.applies("adamw-8bit", "cuda", load_facts("linux_x86_64"))
    assert not ok and "not recorded" in reason


def test_torch_compile_on_mps_needs_torch_2_7():
    assert C.applies("torch-compile", "mps", load_facts("apple_silicon_native"))[0]
    ok, reason = C.applies("torch-compile", "mps", load_facts("intel_mac"))   # torch 2.2.2
    assert not ok and "2.7" in reason and "2.2.2" in reason
    assert C.applies("torch-compile", "cpu", load_facts("intel_mac"))[0]


def test_torch_compile_python_gate_only_concerns_new_pythons():
    f = _facts("intel_mac")
    f["python"]["version"] = "3.12.1"
    ok, reason = C.applies("torch-compile", "cpu", f)
    assert not ok and "3.12" in reason and "2.4" in reason


def test_fp16_on_mps_depends_on_the_path():
    intel = load_facts("intel_mac")     # torch 2.2.2, accelerate 1.0.1
    assert not C.applies("fp16-autocast", "mps", intel, via="torch")[0]
    f = _facts("apple_silicon_native")
    f["torch"]["version"] = f["packages"]["torch"] = "2.6.0"
    # torch.autocast('mps', float16) runs from torch 2.5, but the knob trains with torch.amp.GradScaler,
    # which steps on MPS from 2.8 (harness.parity.models.precision.SCALER_SINCE)
    ok, reason = C.applies("fp16-autocast", "mps", f, via="torch")
    assert not ok and "GradScaler" in reason and "2.8" in reason, reason
    f["torch"]["version"] = f["packages"]["torch"] = "2.8.0"
    f["packages"]["accelerate"] = "1.10.0"
    assert C.applies("fp16-autocast", "mps", f, via="torch")[0]
    ok, reason = C.applies("fp16-autocast", "mps", f, via="trainer")   # the Trainer's needs accelerate 1.11 too
    assert not ok and "1.11" in reason
    assert C.applies("fp16-autocast", "mps", load_facts("apple_silicon_native"))[0]


def test_bf16_on_mps_needs_macos_14():
    assert not C.applies("bf16-autocast", "mps", load_facts("intel_mac"))[0]   # macOS 13.6, torch 2.2.2
    f = _facts("apple_silicon_native")
    f["mac"]["version"] = "13.6"
    ok, reason = C.applies("bf16-autocast", "mps", f)
    assert not ok and "macOS" in reason
    assert C.applies("bf16-autocast", "mps", load_facts("apple_silicon_native"))[0]
    assert not C.applies("bf16-autocast", "cuda", _with_cuda("linux_x86_64", (7, 5)))[0]


def test_fused_adamw_gates_follow_the_wheels():
    intel = load_facts("intel_mac")   # torch 2.2.2
    assert not C.applies("fused-adamw", "cpu", intel)[0] and not C.applies("fused-adamw", "mps", intel)[0]
    assert C.applies("fused-adamw", "mps", load_facts("apple_silicon_native"))[0]


def test_pin_memory_and_deepspeed_do_not_apply_on_mps():
    mac = _facts("apple_silicon_native", deepspeed="0.16.0")
    assert not C.applies("pin-memory", "mps", mac)[0]
    ok, reason = C.applies("deepspeed-zero", "mps", mac)
    assert not ok and "MPS" in reason
    assert not C.applies("deepspeed-zero", "cpu", _facts("linux_x86_64", deepspeed="0.16.0"))[0]
    assert C.applies("deepspeed-zero", "cuda", _facts("linux_x86_64", deepspeed="0.16.0"))[0]
    ok, reason = C.applies("deepspeed-zero", "cuda", _facts("apple_silicon_native", deepspeed="0.16.0"))
    assert not ok and "Linux" in reason


def test_peft_needs_the_package():
    assert C.applies("peft-lora", "mps", _facts("apple_silicon_native", peft="0.14.0"))[0]
    ok, reason = C.applies("peft-lora", "cpu", _facts("linux_x86_64", peft=None))
    assert not ok and "pip install peft" in reason


def test_workers_need_two_cores():
    f = _facts("linux_x86_64")
    f["cpu"]["usable"] = 1
    ok, reason = C.applies("dataloader-workers", "cpu", f)
    assert not ok and "1 usable" in reason
    assert C.applies("dataloader-workers", "cpu", load_facts("linux_x86_64"))[0]


def test_the_cuda_amp_advice_is_checked_where_it_is_given():
    assert C.applies("torch-cuda-amp-on-mac", "mps", load_facts("apple_silicon_native"))[0]
    assert not C.applies("torch-cuda-amp-on-mac", "cpu", load_facts("linux_x86_64"))[0]
    assert C.by_name("torch-cuda-amp-on-mac").memory["mps"].kind == "lower"   # the claim as the seed states it


@pytest.mark.parametrize("machine", sorted(p.stem for p in (Path(__file__).parent / "fixtures" / "facts").glob("*.json")))
def test_every_gate_evaluates_on_every_recorded_machine(machine):
    f = load_facts(machine)
    for claim in C.CLAIMS:
        for target in C.TARGET_CLASSES:
            for via in ("trainer", "torch"):
                ok, reason = C.applies(claim, target, f, via=via)
                assert isinstance(ok, bool) and reason.startswith(claim.name)
                if not ok:
                    assert "Fix:" in reason


# --------------------------------------------------------------------------- what users read

MACHINES = sorted(p.stem for p in (Path(__file__).parent / "fixtures" / "facts").glob("*.json"))
# Fields in the original language or naming the file: where a claim's words are looked up,
# never shown as they are (a quote is shown through C.quoted, which the walk checks too).
ORIGINAL = {(C.Claim, "source"), (C.Claim, "section"), (C.Claim, "quote"), (C.SeedPath, "source"),
            (C.SeedPath, "section"), (C.PathStep, "row"), (C.PathStep, "target_object")}


def _strings(obj, where: str):
    """Every string reachable from ``obj`` (dataclass fields, tuples, mappings), with where it is."""
    if isinstance(obj, str):
        yield where, obj
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            if (type(obj), f.name) not in ORIGINAL:
                yield from _strings(getattr(obj, f.name), f"{where}.{f.name}")
    elif isinstance(obj, (tuple, list)):
        for i, item in enumerate(obj):
            yield from _strings(item, f"{where}[{i}]")
    elif hasattr(obj, "items"):
        for key, item in obj.items():
            yield from _strings(item, f"{where}[{key!r}]")


def _problems(pairs) -> list[str]:
    return [f"{where}: {problem} in {text!r}" for where, text in pairs for problem in D.problems(text)]


def _shown(claim: C.Claim):
    """What a user can read of ``claim``: every string of its table row but the original-language
    fields, its quote as shown, and for each of its cases on each target the record's metrics, the
    skip message on every recorded machine, and the verdict's message had it been measured."""
    yield from _strings(claim, claim.name)
    yield f"{claim.name} quoted", C.quoted(claim)
    for case in (c for c in C.CASES if c.subject == claim.name):
        for target in C.TARGET_CLASSES:
            yield from _strings(case.metrics(target), f"{case.id} {target} metrics")
            if case.known is not None:
                yield from _strings(case.known, f"{case.id} known")
            for machine in MACHINES:
                skip = case.not_measured(target, C.with_extra_packages(load_facts(machine)))
                if skip is not None:
                    yield f"{case.id} {target} on {machine} skip", skip.message
            expect = case.expect(target)
            if expect.kind != "none":
                run = techniques.ClaimRun(claim.name, case.quantity, expect.kind, 1.0, expect.ratio, expect.source,
                                          "baseline", "variant", 1.5, 1.4, 1.6, 5, Category.DOES_NOT_HOLD)
                verdict = techniques.claim_verdict(run, case.document)
                yield f"{case.id} {target} verdict", verdict.message


@pytest.mark.parametrize("stopped, lead", [
    ("zone", "inconclusive, too close to the bound to call (its interval lies inside the 5% zone around it"),
    ("budget", "inconclusive within the time budget: "),
    ("max-rounds", "inconclusive after the most rounds: ")])
def test_an_inconclusive_time_verdict_says_why_its_rounds_stopped(stopped, lead):
    run = techniques.ClaimRun("torch-compile", "time", "lower", 1.0, 0.95, "the guide", "eager", "compiled",
                              0.99, 0.97, 1.01, 6, Category.INCONCLUSIVE, measured={"stopped": stopped, "zone": 0.05})
    verdict = techniques.claim_verdict(run, "the guide")
    assert verdict.message.startswith(lead) and "time_ratio 0.990 [0.970, 1.010] against < 1.000" in verdict.message
    assert verdict.metrics["stopped"] == stopped


@pytest.mark.parametrize("loss_b", [float("nan"), "nan", float("inf")], ids=["nan", "nan-as-recorded", "inf"])
def test_a_technique_whose_loss_is_not_finite_does_not_hold_whatever_its_ratio(loss_b):
    """Memory that halves while the step's loss turns NaN is no help: the claim does not hold
    (an xfail), the reason says why first, and the record keeps what the ratio alone said."""
    run = techniques.ClaimRun("gradient-checkpointing", "memory", "lower", 0.9, 0.6, "the guide", "plain",
                              "checkpointed", 0.55, 0.55, 0.55, 1, Category.HOLDS,
                              measured={"loss_a": 0.6931, "loss_b": loss_b})
    verdict = techniques.claim_verdict(run, "the guide")
    assert (verdict.status, verdict.category) == (Status.XFAIL, Category.DOES_NOT_HOLD), verdict
    assert verdict.message.startswith("the claim does not hold here: with it the training step's loss is ")
    assert "where without it it is 0.6931: it breaks training here" in verdict.message
    assert "mem_ratio 0.550" in verdict.message and verdict.metrics["ratio_category"] == Category.HOLDS
    fine = techniques.claim_verdict(dataclasses.replace(run, measured={"loss_a": 0.69, "loss_b": 0.7}), "g")
    assert (fine.status, fine.category, fine.message) == (Status.PASS, Category.HOLDS, "")
    unknown = techniques.claim_verdict(dataclasses.replace(run, measured={}), "g")   # an older record: no losses
    assert (unknown.category, unknown.message) == (Category.HOLDS, "")
    both = techniques.claim_verdict(dataclasses.replace(run, measured={"loss_a": "nan", "loss_b": loss_b}), "g")
    assert both.category == Category.HOLDS and "does not train on this device at all" in both.message


def test_a_claim_that_breaks_training_is_a_regression_that_says_so_in_the_upgrade_check():
    from harness.report import compare

    def rec(category, **metrics):
        return {"check": "optim/gradient-checkpointing/memory", "suite": "optim", "target": "mps",
                "subject": "gradient-checkpointing", "variant": "memory", "status": "pass", "category": category,
                "reason": "the claim does not hold here: with it the training step's loss is nan" if metrics else "",
                "metrics": {"mem_ratio": 0.55, "ci_low": 0.55, "ci_high": 0.55, "bound": 0.9, **metrics}}
    (kind, rule, detail), = compare.compare_records(rec(Category.HOLDS),
                                                    rec(Category.DOES_NOT_HOLD, ratio_category=Category.HOLDS))
    assert (kind, rule) == ("regression", "claim") and detail == (
        "the claim held and no longer holds: with it the training step's loss is nan"), detail


@pytest.mark.parametrize("claim", C.CLAIMS, ids=NAMES)
def test_what_users_read_of_a_claim_names_no_file_and_glosses_every_chinese_quote(claim):
    """Every user-facing string of every claim (source, basis, technique, gates' reasons, fixes and
    sources, notes, the quote as shown, the record's metrics, the skip and verdict messages): no seed
    file name, no "seed" for a document, no Chinese without its English beside it."""
    assert _problems(_shown(claim)) == []


def test_what_users_read_of_seed_003s_table_names_no_file_and_glosses_every_chinese_quote():
    assert _problems(_strings(C.SEED_003_PATH, "SEED_003_PATH")) == []
    assert "macbert-large" in C.SEED_003_PATH.title and "32" in C.SEED_003_PATH.title


def test_the_walk_reaches_every_field_a_planted_leak_hides_in():
    claim = C.by_name("bf16-autocast")
    gate = dataclasses.replace(claim.gates[0], reason="see 002_30922ac40e33578f.txt")
    planted = dataclasses.replace(claim, notes="梯度累积 helps", gates=(gate,) + claim.gates[1:],
                                  tolerance=dataclasses.replace(claim.tolerance, source="seed 003's figure"))
    found = _problems(_strings(planted, "planted"))
    assert any(".notes: no English beside '梯度累积'" in p for p in found)
    assert any(".gates[0].reason: file name 002_30922ac40e33578f.txt" in p for p in found)
    assert any(".tolerance.source: jargon 'seed'" in p for p in found)
    assert not _problems(_strings(claim, "clean"))


@pytest.mark.parametrize("text, found", [
    ('"梯度累积" (gradient accumulation)', []),
    ('row "梯度累积" (gradient accumulation), column "提高训练速度" (speeds up training): "否" (no)', []),
    ('"(否)" (no, qualified by a note)', []),
    ('the memory for "优化器状态" (optimizer state (fp32))', []),
    ("梯度累积 (gradient accumulation)", ["no English beside '梯度累积'"]),
    ('"梯度累积"', ["no English beside '梯度累积'"]),
    ('"梯度累积" (梯度)', ["no English beside '梯度累积'", "no English beside '梯度'"]),
    ('"梯度累积" and then (gradient accumulation)', ["no English beside '梯度累积'"]),
    ('"GA" (gradient accumulation) 否', ["no English beside '否'"]),
    ("（", ["no English beside '（'"]),
    ("002_30922ac40e33578f.txt makes no memory claim", ["file name 002_30922ac40e33578f.txt"]),
    ("as seed 003 measured", ["jargon 'seed'"]),
    ("the Seeds' name", ["jargon 'Seeds'"]),
    ("weights seeded, a seedless run", []),
])
def test_the_text_rule_finds_file_names_jargon_and_chinese_without_english(text, found):
    assert D.problems(text) == found


def test_a_quote_is_shown_with_its_english_beside_it():
    assert D.glossed("梯度累积", "gradient accumulation") == '"梯度累积" (gradient accumulation)'
    assert D.glossed('padding="max_length"', "pads to max_length") == "'padding=\"max_length\"' (pads to max_length)"
    with pytest.raises(ValueError, match="must be English"):
        D.glossed("梯度累积", "梯度累积")
    with pytest.raises(ValueError, match="must be English"):
        D.glossed("梯度累积", "...")
    claim = C.by_name("gradient-accumulation")
    assert C.quoted(claim) == f'"{claim.quote}" ({claim.quote_en})'


def test_every_document_has_a_title_and_the_file_names_none():
    assert tuple(D.DOCUMENTS) == C.SEED_FILES
    for doc in D.DOCUMENTS.values():
        for text in (doc.short, doc.title, doc.cited()):
            assert D.problems(text) == [], text
        assert doc.short.split('"')[1] in doc.title   # the short name is the title's own words
        assert D.CJK.search(doc.original) and doc.original_en
    assert D.title(C.SEED_002) == ('Hugging Face guide "Efficient training on a single GPU" (Chinese translation of '
                                   'perf_train_gpu_one, v4.37.2)')
    case = next(c for c in C.CASES if c.subject == "larger-batch" and c.quantity == "memory")
    skip = case.not_measured("cuda", load_facts("linux_x86_64"))
    assert skip.message == (f"{D.title(C.SEED_002)} makes no memory claim for cuda (batch size choice: a larger "
                            "batch for throughput): a larger batch holds more activations: memory rises; the guide's "
                            "'yes' for memory means choosing a batch that fills memory, not a reduction.")
    assert case.metrics("cuda")["document"] == D.title(C.SEED_002)


def test_a_check_without_a_claim_says_the_tables_cause_and_the_gates_reason_and_fix():
    """A check skipped because the document makes no claim for the target says why, as the table
    has it, and where a gate keeps the technique away there, that gate's reason and its fix:
    pinned memory on a Mac is turned off by the DataLoader, and the switch is
    dataloader_pin_memory=False."""
    case = next(c for c in C.CASES if c.id == "pin-memory-time-trainer")
    skip = case.not_measured("mps", load_facts("apple_silicon_native"))
    assert skip.status == Status.SKIP
    assert skip.message.startswith(f"{D.title(C.SEED_002)} makes no time claim for mps (data preloading: pinned host "
                                   "memory): DataLoader turns pin_memory off on MPS. pin-memory on mps: torch's "
                                   "DataLoader disables pin_memory on MPS"), skip.message
    assert skip.message.endswith("Fix: set dataloader_pin_memory=False on a Mac to silence the warning"), skip.message
    assert D.problems(skip.message) == []   # (without a gate that bites, the table's cause alone: the test above)


@pytest.mark.parametrize("file", C.SEED_FILES)
def test_each_documents_original_title_stands_in_its_first_lines(file):
    head = "\n".join(_seed_text(file).splitlines()[:60])
    assert D.document(file).original in head


# --------------------------------------------------------------------------- an emulated device

class _RecordedMac(devices.StandIn):
    """An emulating stand-in whose machine is a recorded Mac (macOS ``version``)."""
    name, emulates = "standin-claims-mac", "mps"

    def __init__(self, version: str):
        self.version = version

    def facts(self):
        f = load_facts("apple_silicon_native")
        f["mac"]["version"] = self.version
        f["packages"] = {"torch": f["packages"]["torch"], "peft": None}   # the recorded Mac had no peft
        return f


@pytest.mark.parametrize("version, applies", [("14.5", True), ("13.6", False)])
def test_an_emulated_mac_is_gated_by_its_recorded_machine_and_this_environments_packages(monkeypatch, version,
                                                                                          applies):
    """The emulated Mac's gates read the recorded Mac (its macOS decides bf16) and the packages
    that really run here (the live ones, not the recorded machine's list); a target that is
    not emulating reads this machine's facts."""
    mac = _RecordedMac(version)
    monkeypatch.setitem(devices.STAND_INS, mac.name, mac)
    live = {**load_facts("linux_x86_64"), "packages": {"torch": "2.15.0", "peft": "0.21.0"}}
    facts = C.gate_facts(mac.name, live)
    assert facts["mac"]["version"] == version and facts["packages"]["peft"] == "0.21.0"
    assert facts["cpu"] == live["cpu"]
    ok, reason = C.applies("bf16-autocast", devices.rules_of(mac.name), facts, via="torch")
    assert ok is applies and (applies or "this is 13.6" in reason)
    assert C.applies("peft-lora", "mps", facts, via="torch")[0]   # peft is installed here
    assert C.gate_facts("cpu", live)["mac"] is None   # not emulating: this machine's facts


def test_the_optimization_cases_run_on_a_registered_emulated_device(monkeypatch):
    """Every optimization case names the emulating stand-ins registered for its target class
    (read when the suite collects), and no stand-in that only stands in for the CPU."""
    mac = _RecordedMac("14.5")
    monkeypatch.setitem(devices.STAND_INS, mac.name, mac)
    plain = type("Plain", (devices.StandIn,), {"name": "standin-claims-plain"})()
    monkeypatch.setitem(devices.STAND_INS, plain.name, plain)
    assert all(mac.name in case.targets and plain.name not in case.targets for case in C.CASES)
    assert all(set(C.TARGET_CLASSES) <= set(case.targets) for case in C.CASES)
