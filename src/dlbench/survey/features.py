"""The feature matrix: declared values from ``data/features.yaml``, replaced by live results
wherever the machine can check a cell (see :mod:`dlbench.survey.live_checks`).

A cell's ``status`` is one of: ``verified`` (a process here ran it; ``what`` says what),
``declared`` (from the data file, with its source and date; not verified here), ``failed``
(the live check ran and did not pass; the reason is kept), ``unknown`` (no sourced value).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from dlbench.survey.catalog import Target, features_data, installable_data, installed_distribution

LIVE_ROWS = ("single_node", "distributed", "cpu", "gpu", "fault_tolerance", "onnx_export")


def rows() -> dict[str, str]:
    return dict(features_data()["rows"])


def declared_cell(key: str, row: str) -> dict[str, Any]:
    entry = features_data()["frameworks"].get(key) or {}
    value = (entry.get("features") or {}).get(row)
    if value is None:
        why = "not described in the papers that name it" if entry.get("era") == "paper" else "no sourced value recorded"
        return {"value": "unknown", "status": "unknown", "note": why}
    status = "unknown" if value["value"] == "unknown" else "declared"
    return {"value": value["value"], "status": status, "source": value.get("source"), "date": value.get("date"),
            **({"note": value["note"]} if value.get("note") else {})}


def licence_from_metadata(target: Target) -> dict[str, Any] | None:
    """Licence of the installed distribution(s), read from their metadata (no import)."""
    found = installed_distribution(target)
    if found is None:
        return None
    parts = []
    for dist in (found[0], *target.companions):
        try:
            md = importlib.metadata.metadata(dist)
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        field, text = next(((f, md.get(f)) for f in ("License-Expression", "License") if (md.get(f) or "").strip()),
                           (None, None))
        if text is None:
            classifiers = [c.split("::")[-1].strip() for c in md.get_all("Classifier") or [] if c.startswith("License")]
            field, text = ("Classifier", "; ".join(classifiers)) if classifiers else (None, "not stated")
        parts.append({"distribution": dist, "version": version, "field": field, "licence": text.strip().splitlines()[0]})
    main = parts[0]
    value = "; ".join(f"{p['distribution']}: {p['licence']}" for p in parts) if len(parts) > 1 else main["licence"]
    what = "importlib.metadata of " + ", ".join(f"{p['distribution']} {p['version']} ({p['field']})" for p in parts)
    return {"value": value, "status": "verified", "what": what, "evidence": parts}


def licence_from_download(key: str) -> dict[str, Any] | None:
    data = installable_data()
    entry = (data.get("frameworks") or {}).get(key) or {}
    md = entry.get("metadata") or {}
    text = md.get("licence") or "; ".join(c.split("::")[-1].strip() for c in md.get("licence_classifiers") or [])
    if entry.get("status") != "downloadable" or entry.get("official") is not True or not text:
        return None
    return {"value": text, "status": "verified", "what": f"metadata of {entry['file']} fetched by pip download on "
                                                          f"{data.get('date')} (name in file: {md.get('name')})"}


def cell_from_live(declared: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """A live result laid over the declared cell (which stays inside as ``declared``)."""
    status = live["status"]
    if status == "verified":
        value = declared["value"] if declared["status"] == "declared" else "yes"
        return {"value": value, "status": "verified", "what": live["what"], "evidence": live.get("evidence"),
                "declared": declared}
    if status == "failed":
        return {"value": declared["value"], "status": "failed", "what": live["what"], "reason": live["reason"],
                "evidence": live.get("evidence"), "declared": declared}
    # not verified here (no GPU, exporter not installed, ...): the declared value stands
    return {**declared, "not_verified": live.get("reason", "")}


def matrix(keys: list[str], targets: dict[str, Target], live: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """framework key -> row -> cell."""
    out: dict[str, dict] = {}
    for key in keys:
        cells = {}
        for row in rows():
            cell = declared_cell(key, row)
            if row in live.get(key, {}):
                cell = cell_from_live(cell, live[key][row])
            if row == "licence":
                found = licence_from_metadata(targets[key]) if key in targets else licence_from_download(key)
                if found:
                    cell = {**found, "declared": cell}
            cells[row] = cell
        out[key] = cells
    return out
