"""One case shape (harness.core.cases): every suite's table yields it, the ``cases`` marker
refuses anything else with one clear line, and what is known beside a case has one form."""
import pytest

from harness.core import cases
from harness.core.cases import Known


def tables():
    from harness.ops import opsweep
    from harness.optim import claims
    from harness.parity.known_bugs import cases as known_bugs
    from harness.parity.ops import check
    from harness.parity.properties import cases as property_cases
    return {"ops sweep": opsweep.cases(("cpu",)), "op parity": check.cases(("cpu",)),
            "properties": property_cases.dtype_cases("softmax"), "known bugs": known_bugs.checks("known-bug"),
            "claims": claims.CASES}


@pytest.mark.parametrize("name", ["ops sweep", "op parity", "properties", "known bugs", "claims"])
def test_every_suites_table_yields_the_one_case_shape(name):
    table = cases.check_table(tables()[name], name)
    assert table and all(isinstance(c, cases.Case) and c.targets for c in table)


def test_a_row_that_is_not_a_case_or_a_repeated_id_is_refused_by_name():
    good = tables()["properties"]
    with pytest.raises(TypeError, match=r"t\.py: case 1 \(dict\) is not a Case: it lacks subject, variant, id, targets"):
        cases.check_table([good[0], {"name": "x"}], "t.py")
    with pytest.raises(ValueError, match="share the id"):
        cases.check_table([good[0], good[0]], "t.py")


def test_known_has_one_form_and_needs_its_reason():
    assert Known("limit", "a long float32 reduction").outcome == "limit"
    with pytest.raises(ValueError, match="outcome"):
        Known("maybe", "why")
    with pytest.raises(ValueError, match="reason"):
        Known("skip", "")


def test_op_paritys_known_limits_are_known_limits_with_their_source():
    from harness.parity.ops import check
    assert check.KNOWN_LIMITS
    for key, known in check.KNOWN_LIMITS.items():
        assert isinstance(known, Known) and known.outcome == "limit" and known.source, key
    # beside its case: the case says what is known of it, the judge reads it from there
    svd = next(c for c in check.cases(("cpu",)) if (c.op_key, c.dtype, c.pass_) == ("linalg.svd", "float32", "backward"))
    assert svd.known is check.KNOWN_LIMITS["linalg.svd", "float32", "backward"]


def test_the_cpu_checks_the_half_precision_dtypes_its_table_names():
    from harness.parity.properties import cases as property_cases
    def on_cpu(subject):
        return [c.dtype for c in property_cases.dtype_cases(subject) if "cpu" in c.targets]
    assert on_cpu("softmax") == ["float32", "float16", "bfloat16"]
    assert on_cpu("cross_entropy") == ["float32", "bfloat16"]
    assert on_cpu("embedding") == ["float32"]
    assert all(halves.reason for halves in property_cases.CPU_HALF_PRECISION.values())


def test_the_cases_marker_refuses_a_table_that_is_not_cases(pytester):
    pytester.makeconftest('pytest_plugins = ["harness.plugin.hooks"]')
    pytester.makepyfile(test_bad="""
        import pytest
        @pytest.mark.cases([object()])
        def test_x(case, target):
            pass
        """)
    result = pytester.runpytest("--device", "cpu", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*is not a Case: it lacks subject, variant, id, targets*"])
    assert result.ret != 0
