"""Is this environment fit for each target? One row of harness.env.checks per test.

not applicable -> skipped with the reason; misconfigured -> fails with the fix;
a known limitation of this version or OS -> xfail with what would lift it.
"""
import pytest

from harness.env import checks


@pytest.mark.cases(checks.cases())
def test_environment_is_fit_for_target(case, target, env_facts, record):
    record.conclude(checks.judge(case, target, env_facts))
