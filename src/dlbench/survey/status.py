"""One row per framework: is it benchmarked here, succeeded by one that is, installable, or not?

The categories (``status``):

* ``benchmarked here``: a registered dlbench backend whose framework is installed;
* ``installed, not benchmarked``: installed here, but no dlbench backend is registered for it;
* ``not installed``: one of today's frameworks that is not installed in this Python;
* ``successor benchmarked``: a paper's framework whose named successor is benchmarked here;
* ``successor not benchmarked``: its successor exists but has no backend here (Theano -> PyTensor);
* ``installable, not benchmarked`` / ``not installable here`` / ``not a pip package`` / ``not checked``:
  a paper's framework, from the measured ``--check-installable`` results (with pip's exact error).
"""

from __future__ import annotations

from typing import Any

from dlbench.survey.catalog import (
    Target,
    display_name,
    env_version,
    features_data,
    installable_data,
    installed_distribution,
    registered,
)

#: successors that are not dlbench frameworks, by display name
SUCCESSOR_NAMES = {"pytensor": "PyTensor"}


def _installable(key: str) -> tuple[str, str]:
    data = installable_data()
    entry = (data.get("frameworks") or {}).get(key)
    if entry is None:
        return "not checked", "run dlbench survey --check-installable"
    when = f" ({data.get('date')}, Python {data.get('python')}, {data.get('pip')})"
    if entry["status"] == "downloadable":
        md = entry.get("metadata") or {}
        fetched = f"pip download --no-deps {entry['pip_name']} fetched {entry['file']} [summary: {md.get('summary', '')}]"
        if entry.get("official") is False:
            return "not installable here", (f"no pip distribution of this framework: the PyPI name "
                                            f"'{entry['pip_name']}' belongs to another package; {fetched}{when}")
        if entry.get("official") is None:
            return "pip name resolves, not confirmed as the framework", f"{fetched}{when}; install not attempted"
        return "installable, not benchmarked", f"{fetched}{when}; install not attempted"
    if entry["status"] == "not_a_pip_package":
        return "not a pip package", entry["note"]
    return "not installable here", f"pip download --no-deps {entry['pip_name']}: {entry.get('error', '')}{when}"


def framework_row(key: str, targets: dict[str, Target]) -> dict[str, Any]:
    entry = features_data()["frameworks"].get(key) or {}
    row: dict[str, Any] = {"framework": key, "name": display_name(key), "era": entry.get("era", "today"),
                           "named_in": entry.get("named_in", []), "version": None}
    if key in targets:
        found = installed_distribution(targets[key])
        in_env = None if found else env_version(key)
        row["version"] = f"{found[0]} {found[1]}" if found else (f"{in_env[1]} (own environment)" if in_env else None)
        if found and registered(key):
            row["status"], row["detail"] = "benchmarked here", "registered dlbench backend, installed"
        elif in_env and registered(key):
            row["status"], row["detail"] = "benchmarked here", ("registered dlbench backend, installed in its own "
                                                                "environment (dlbench envs); live checks not run")
        elif found:
            row["status"], row["detail"] = "installed, not benchmarked", "no dlbench backend registered for it"
        else:
            row["status"], row["detail"] = "not installed", f"pip install {targets[key].distributions[0]}"
        return row
    successor = entry.get("successor")
    if successor:
        benchmarked = successor in targets and registered(successor) and bool(
            installed_distribution(targets[successor]) or env_version(successor))
        name = display_name(successor) if successor in targets else SUCCESSOR_NAMES.get(successor, successor)
        row["successor"] = name
        row["status"] = "successor benchmarked" if benchmarked else "successor not benchmarked"
        row["detail"] = f"{name}: {entry.get('successor_note', '')}".strip()
        inst_status, inst_detail = _installable(key)
        row["installable"] = {"status": inst_status, "detail": inst_detail}
        return row
    row["status"], row["detail"] = _installable(key)
    return row


def rows(keys: list[str], targets: dict[str, Target]) -> list[dict[str, Any]]:
    return [framework_row(k, targets) for k in keys]
