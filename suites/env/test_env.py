"""Is this environment fit for each target? One row of harness.env_checks per test.

not applicable -> skipped with the reason; misconfigured -> fails with the fix;
a known limitation of this version or OS -> xfail with what would lift it.
"""
import pytest

from harness import env_checks


@pytest.mark.cases(env_checks.CHECKS)
def test_environment_is_fit_for_target(case, target, env_facts, record):
    verdict = env_checks.evaluate(case, target, env_facts)
    record.category = "n/a"
    record.metric(**verdict.metrics)
    if verdict.outcome == "na":
        pytest.skip(verdict.summary)
    if verdict.outcome == "limit":
        pytest.xfail(verdict.message())
    if verdict.outcome == "fail":
        pytest.fail(verdict.message(), pytrace=False)
    assert verdict.outcome == "ok", verdict
