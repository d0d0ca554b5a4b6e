import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

FACTS_DIR = Path(__file__).parent / "fixtures" / "facts"
ROOT = Path(__file__).resolve().parent.parent


def load_facts(name: str) -> dict:
    return json.loads((FACTS_DIR / f"{name}.json").read_text())


@pytest.fixture
def recorded():
    """Load a recorded fact set by name (tests/fixtures/facts/NAME.json)."""
    return load_facts
