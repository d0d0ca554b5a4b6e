"""matrix.json: every column and every record, for other tools."""
from __future__ import annotations

import dataclasses
import json

from harness.core import journal
from harness.report.matrix import LEGEND, SYMBOL, Matrix, cell_key, version_history


REPORT_SCHEMA = 1


def render_json(m: Matrix, sources: list[str], errors: list[str], kernel_tables: list[dict]) -> str:
    doc = {
        "report_schema": REPORT_SCHEMA, "record_schema": journal.SCHEMA, "generated": journal.now_iso(),
        "sources": sources, "errors": errors,
        "legend": [{"key": k, "symbol": s, "meaning": t} for k, s, t in LEGEND],
        "columns": [{"id": c.id, "label": c.label, "host": c.host_label, "env_id": c.env_id, "target": c.target,
                     "workload": c.workload,
                     "runs": c.runs, "complete": c.complete, "summary": dict(m.summary(c)), "facts": c.facts,
                     "targets": c.header.get("targets"), "mps_fallback": c.header.get("mps_fallback")}
                    for c in m.columns],
        "suites": m.suites,
        "cells": {check: {col.id: {**{k: rec[k] for k in ("status", "category", "metrics", "reason", "duration_s")},
                                   "key": cell_key(rec), "symbol": SYMBOL[cell_key(rec)]}
                          for col in m.columns if (rec := m.cells.get((check, col.id)))}
                  for check in m.rows},
        "history": [dataclasses.asdict(h) for h in version_history(m)],
        "predicted": [{k: t.get(k) for k in ("torch_version", "source", "counts", "caveat")} | {
            "mps_op_count": len(t["mps_ops"])} for t in kernel_tables],
    }
    return json.dumps(doc, indent=1, ensure_ascii=False)
