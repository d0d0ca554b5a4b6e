"""Hypothesis profiles for the property suites: "ci", the default, and "deep".

  ci    derandomized: the same examples on every run, so two runs of one torch give the
        same records and a failure seen in CI reproduces anywhere; few examples per
        property, so suites/parity/test_properties.py stays under a minute on a CPU.
  deep  random and many examples, for hunting: ``pytest suites/parity --hypothesis-profile=deep``
        (failures are kept in .hypothesis/ and replayed first on the next run). The
        strategies of the training ops then also draw sides at size edges (2^15 and 2^16,
        give or take one: harness.parity.properties.strategies.EDGES), where real MPS bugs
        live and which ci's minute cannot afford; see ``deep_loaded``.

Both print the reproduction blob of a failure and do not time examples (a kernel's first
call may compile or warm up; its duration is no property of its numbers).

Registered on import: harness.plugin.hooks imports this module and the root conftest loads
that plugin, all before hypothesis's own pytest plugin reads ``--hypothesis-profile`` in
pytest_configure and loads the profile it names. "ci" is loaded here, so it holds unless
that option names another. This module imports hypothesis alone.
"""
from hypothesis import HealthCheck, settings

CI_EXAMPLES = 20
DEEP_EXAMPLES = 500

_COMMON = {"deadline": None, "print_blob": True, "suppress_health_check": (HealthCheck.too_slow,)}

settings.register_profile("ci", max_examples=CI_EXAMPLES, derandomize=True, database=None, **_COMMON)
settings.register_profile("deep", max_examples=DEEP_EXAMPLES, derandomize=False, **_COMMON)
settings.load_profile("ci")


def deep_loaded() -> bool:
    """Whether the loaded profile is "deep" (the strategies then draw size edges too).

    Asked when an example is drawn, never at import: hypothesis's pytest plugin loads the
    profile that ``--hypothesis-profile`` names in pytest_configure, after this module has
    loaded "ci". The loaded profile is looked up by name, with
    ``settings.get_current_profile_name()`` (public API in hypothesis 6.140 and later;
    6.130 lacks it), not read from ``settings.default``, which inside a test is that test's
    own settings; so a test's @settings, or the settings given to ``find``, do not change
    the answer. It counts as deep when it draws like deep (as many examples, not
    derandomized), which also holds for the copies the plugin derives from it:
    ``--hypothesis-verbosity=verbose`` loads "deep-with-verbose-verbosity". On an older
    hypothesis ``settings.default`` stands in for the profile, and a test whose @settings
    override those two is then not seen as deep.
    """
    current_name = getattr(settings, "get_current_profile_name", None)
    loaded = settings.get_profile(current_name()) if current_name is not None else settings.default
    deep = settings.get_profile("deep")
    return (loaded.max_examples, loaded.derandomize) == (deep.max_examples, deep.derandomize)


# Importing torch.testing._internal.common_utils (OpInfo does) loads PyTorch's own
# hypothesis profile ("dev", or "pytorch_ci" where the CI variable is set), replacing the
# one this session chose. The pytest plugin remembers the session's profile once the
# options are read and loads it again after collection and before each test.
_SESSION_PROFILE: list[str] = []


def remember_session_profile() -> None:
    current = getattr(settings, "get_current_profile_name", None)
    _SESSION_PROFILE[:] = [current()] if current is not None else []


def restore_session_profile() -> None:
    current = getattr(settings, "get_current_profile_name", None)
    if _SESSION_PROFILE and current is not None and current() != _SESSION_PROFILE[0]:
        settings.load_profile(_SESSION_PROFILE[0])
