"""matrix.json's layout as a JSON Schema (matrix.schema.json beside this module, described in
docs/report.md): ``problem`` says, in one line, where a document departs from it."""
from __future__ import annotations

import functools
import json
from pathlib import Path

SCHEMA_FILE = Path(__file__).resolve().parent / "matrix.schema.json"


@functools.lru_cache(maxsize=1)
def validator():
    import jsonschema
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def problem(doc) -> str | None:
    """None when ``doc`` matches the schema; else the first departure, with its path."""
    error = next(iter(sorted(validator().iter_errors(doc), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(the document)"
    message = error.message if len(error.message) <= 200 else error.message[:199] + "…"
    return f"at {where}: {message}"
