"""Is this environment fit for each target? One row of harness.env.env_checks per test.

not applicable -> skipped with the reason; misconfigured -> fails with the fix;
a known limitation of this version or OS -> xfail with what would lift it.
"""
import pytest

from harness.env import env_checks


@pytest.mark.cases(env_checks.CHECKS)
def test_environment_is_fit_for_target(case, target, env_facts, record):
    record.conclude(env_checks.judge(case, target, env_facts))
