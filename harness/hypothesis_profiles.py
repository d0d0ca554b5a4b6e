"""Hypothesis profiles for the property suites: "ci", the default, and "deep".

  ci    derandomized: the same examples on every run, so two runs of one torch give the
        same records and a failure seen in CI reproduces anywhere; few examples per
        property, so suites/parity/test_properties.py stays under a minute on a CPU.
  deep  random and many examples, for hunting: ``pytest suites/parity --hypothesis-profile=deep``
        (failures are kept in .hypothesis/ and replayed first on the next run).

Both print the reproduction blob of a failure and do not time examples (a kernel's first
call may compile or warm up; its duration is no property of its numbers).

Registered on import: harness.pytest_plugin imports this module and the root conftest
loads that plugin, all before hypothesis's own pytest plugin reads ``--hypothesis-profile``
in pytest_configure and loads the profile it names. "ci" is loaded here, so it holds
unless that option names another.
"""
from hypothesis import HealthCheck, settings

CI_EXAMPLES = 20
DEEP_EXAMPLES = 500

_COMMON = {"deadline": None, "print_blob": True, "suppress_health_check": (HealthCheck.too_slow,)}

settings.register_profile("ci", max_examples=CI_EXAMPLES, derandomize=True, database=None, **_COMMON)
settings.register_profile("deep", max_examples=DEEP_EXAMPLES, derandomize=False, **_COMMON)
settings.load_profile("ci")
