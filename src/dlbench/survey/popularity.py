"""Popularity (Liu et al. Table 3, Bahrampour et al. Table 1) from a dated snapshot file.

The shipped file holds the papers' own numbers, labelled as theirs, and nulls for today's.
``--refresh-popularity`` asks the GitHub REST API for today's and rewrites the file with the
fetch date; offline it changes nothing and says so in one line. The opener is a parameter so
tests run it against a fake.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dlbench.core.outputs import write_file
from dlbench.survey.catalog import POPULARITY_FILE, clear_cache, popularity_data

API = "https://api.github.com"
FIELDS = ("stars", "watchers", "forks", "contributors", "created")

Opener = Callable[[urllib.request.Request, float], Any]


class OfflineError(Exception):
    """GitHub could not be reached at all."""


def _default_opener(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 (fixed https URL)


def _get(url: str, opener: Opener, timeout: float) -> tuple[Any, dict[str, str]]:
    headers = {"Accept": "application/vnd.github+json", "User-Agent": "dlbench-survey"}
    if os.environ.get("GITHUB_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['GITHUB_TOKEN']}"
    with opener(urllib.request.Request(url, headers=headers), timeout) as resp:
        return json.loads(resp.read().decode()), dict(resp.headers.items())


def _contributors(repo: str, opener: Opener, timeout: float) -> int:
    """Contributors (anonymous included) from the last page number of a one-per-page listing."""
    body, headers = _get(f"{API}/repos/{repo}/contributors?per_page=1&anon=1", opener, timeout)
    link = headers.get("Link") or headers.get("link") or ""
    match = re.search(r"[?&]page=(\d+)>;\s*rel=\"last\"", link)
    return int(match.group(1)) if match else len(body)


def fetch_repo(repo: str, opener: Opener = _default_opener, timeout: float = 20) -> dict[str, Any]:
    body, _ = _get(f"{API}/repos/{repo}", opener, timeout)
    return {"stars": body["stargazers_count"], "watchers": body["subscribers_count"], "forks": body["forks_count"],
            "created": body["created_at"][:10], "contributors": _contributors(repo, opener, timeout),
            "full_name": body.get("full_name", repo), "archived": body.get("archived")}


def refresh(path: Path = POPULARITY_FILE, opener: Opener | None = None, today: str | None = None,
            timeout: float = 20) -> dict[str, Any]:
    """Fetch every repository and rewrite ``path``; raise :class:`OfflineError` (file untouched)
    when GitHub cannot be reached. A single repository's HTTP error is recorded in its entry."""
    opener = opener or _default_opener
    with open(path) as f:
        data = yaml.safe_load(f)
    fetched: dict[str, dict] = {}
    for key, entry in data["frameworks"].items():
        repo = entry.get("repo")
        if not repo:
            continue
        try:
            fetched[key] = fetch_repo(repo, opener, timeout)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403) and not fetched:
                raise OfflineError(f"GitHub refused the request (HTTP {exc.code}; rate limit? set GITHUB_TOKEN)") from exc
            fetched[key] = {"error": f"HTTP {exc.code} {exc.reason}"}
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise OfflineError(f"cannot reach {API}: {getattr(exc, 'reason', exc)}") from exc
    date = today or dt.date.today().isoformat()
    for key, values in fetched.items():
        data["frameworks"][key]["current"] = {"date": date, "source": f"GitHub REST API {API}/repos/"
                                              f"{data['frameworks'][key]['repo']}", **values}
    data["date"] = date
    data["note"] = f"current values fetched from the GitHub REST API on {date}"
    write_file(path, _header(path) + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    clear_cache()
    return data


def _header(path: Path) -> str:
    """The file's leading comment block, kept across rewrites."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#") and line.strip():
            break
        lines.append(line)
    return "\n".join(lines) + "\n"


def rows(keys: list[str], path: Path | None = None) -> list[dict[str, Any]]:
    """One row per framework and source: today's (or a null row saying it was not refreshed),
    then each paper snapshot."""
    data = popularity_data(path)
    out = []
    for key in keys:
        entry = data["frameworks"].get(key)
        if entry is None:
            continue
        current = entry.get("current")
        if current:
            out.append({"framework": key, "repo": entry.get("repo"), **{f: current.get(f) for f in FIELDS},
                        "google_group_members": None, "source": current["source"], "date": current["date"],
                        "note": current.get("error", "")})
        else:
            note = entry.get("note") or data.get("note") or "not refreshed: run --refresh-popularity online"
            out.append({"framework": key, "repo": entry.get("repo"), **dict.fromkeys(FIELDS),
                        "google_group_members": None, "source": "today", "date": None,
                        "note": note if entry.get("repo") else entry.get("note", "")})
        for snap in entry.get("snapshots", []):
            out.append({"framework": key, "repo": entry.get("repo"), **{f: snap.get(f) for f in FIELDS},
                        "google_group_members": snap.get("google_group_members"),
                        "source": f"{snap['source']} (the paper's snapshot)", "date": snap["date"],
                        "note": snap.get("note", "")})
    return out
