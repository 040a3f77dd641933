"""The survey's data as Markdown, CSV and JSON tables (one file per table under ``--out``).

Every string from the data (framework and plugin names, versions, reasons, a survey.json read back
by ``dlbench report --survey``) is escaped with :func:`~dlbench.report.markdown.md` in Markdown: it
renders as the text it is, never as HTML, a link or a table column."""

from __future__ import annotations

import csv
import io
from typing import Any

from dlbench.report.markdown import md
from dlbench.survey.api_coverage import CATEGORIES, LIU_COLUMNS

MARK = {"verified": "✓", "declared": "(declared)", "failed": "✗ FAILED", "unknown": "?"}


def _md(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return "-" if v is None or v == "" else md(v)
    lines = ["| " + " | ".join(md(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _csv(headers: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(headers)
    w.writerows([["" if v is None else v for v in r] for r in rows])
    return buf.getvalue()


# --- each table as (headers, rows) ------------------------------------------------------------
def frameworks_table(data: dict) -> tuple[list[str], list[list]]:
    heads = ["framework", "name", "named in", "status", "version here", "detail"]
    rows = []
    for r in data["frameworks"]:
        detail = r.get("detail", "")
        if r.get("installable"):
            detail += f" | itself: {r['installable']['status']}: {r['installable']['detail']}"
        rows.append([r["framework"], r["name"], ", ".join(r["named_in"]), r["status"], r["version"], detail])
    return heads, rows


def feature_cell_text(cell: dict) -> str:
    text = f"{cell['value']} {MARK.get(cell['status'], cell['status'])}"
    return text + (" (not verified here)" if cell.get("not_verified") and cell["status"] == "declared" else "")


def features_long(data: dict) -> tuple[list[str], list[list]]:
    heads = ["framework", "feature", "value", "status", "source", "date", "what ran / reason"]
    rows = []
    for key, cells in data["features"]["matrix"].items():
        for row, c in cells.items():
            parts = [c.get("what") or "", f"reason: {c['reason']}" if c.get("reason") else "",
                     f"not verified here: {c['not_verified']}" if c.get("not_verified") else "",
                     f"note: {c['note']}" if c.get("note") else ""]
            how = "; ".join(p for p in parts if p)
            src = c.get("source") or (c.get("declared") or {}).get("source")
            date = c.get("date") or (c.get("declared") or {}).get("date")
            rows.append([key, row, c["value"], c["status"], src, date, how.strip()])
    return heads, rows


FEATURE_LEGEND = ("✓ verified on this machine (what ran is listed below); (declared) from the dated, sourced data "
                  "file, not verified here; ✗ a live check ran and failed; ? unknown (no sourced value).")


def feature_matrices(data: dict) -> list[tuple[str, list[str], list[list]]]:
    """The feature matrix as wide tables (features down, frameworks across), one per era."""
    labels = data["features"]["rows"]
    matrix = data["features"]["matrix"]
    eras = {r["framework"]: r["era"] for r in data["frameworks"]}
    out = []
    for era, title in (("today", "Today's frameworks"),
                       ("paper", "The papers' frameworks (values as the papers state them)")):
        keys = [k for k in matrix if eras.get(k) == era]
        if keys:
            out.append((title, ["feature", *keys],
                        [[labels[r], *(feature_cell_text(matrix[k][r]) for k in keys)] for r in labels]))
    return out


def what_ran(data: dict) -> list[tuple[str, str, str]]:
    """(framework / feature, verdict, what ran or why) for every cell a live check touched."""
    labels = data["features"]["rows"]
    out = []
    for k, cells in data["features"]["matrix"].items():
        for r, c in cells.items():
            if c["status"] == "verified":
                out.append((f"{k} / {labels[r]}", "verified", c["what"]))
            elif c["status"] == "failed":
                out.append((f"{k} / {labels[r]}", "FAILED", f"{c['what']} -- {c['reason']}"))
            elif c.get("not_verified"):
                out.append((f"{k} / {labels[r]}", "not verified here", c["not_verified"]))
    return out


def features_md(data: dict) -> str:
    out = ["## Feature matrix\n", FEATURE_LEGEND + "\n"]
    for title, heads, rows in feature_matrices(data):
        out.append(f"\n### {title}\n\n")
        out.append(_md(heads, rows))
    checked = what_ran(data)
    if checked:
        out.append("\n### What ran\n\n")
        out += [f"- **{md(where)}** {md(verdict)}: {md(what)}\n" for where, verdict, what in checked]
    return "".join(out)


def api_table(data: dict) -> tuple[list[str], list[list]]:
    heads = ["framework", "versions", *(LIU_COLUMNS[c] for c in CATEGORIES), "source"]
    rows = []
    for key, res in data["api_coverage"].items():
        if "error" in res:
            rows.append([key, "", *["error"] * len(CATEGORIES), res["error"]])
        elif "not_applicable" in res:
            rows.append([key, _versions(res), *["n/a"] * len(CATEGORIES), res["not_applicable"]])
        else:
            rows.append([key, _versions(res), *(res[c]["count"] for c in CATEGORIES),
                         "introspected here (rules and names in api_coverage.json)"])
    for key, snap in data.get("api_2018", {}).items():
        rows.append([key, "(2018)", *("None" if snap.get(c) is None else snap[c] for c in CATEGORIES),
                     f"{snap['source']}, {snap['date']}"])
    return heads, rows


def _versions(res: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in (res.get("versions") or {}).items())


def zoo_table(data: dict) -> tuple[list[str], list[list]]:
    heads = ["framework", "package", "architectures", "pretrained", "source", "date"]
    rows = []
    for key, z in data["zoo"].items():
        i = z.get("introspected")
        if i and "architectures" in i:
            rows.append([key, f"{i['package']} {i.get('version', '')}".strip(), i["architectures"], i["pretrained"],
                         "introspected here: " + i["rule"], data["date"]])
        elif i:
            rows.append([key, "-", None, None, "introspection: " + next(iter(i.values())), data["date"]])
        if z.get("declared"):
            d = z["declared"]
            rows.append([key, "(declared)", d["value"] if isinstance(d["value"], int) else None, None,
                         (d["value"] if not isinstance(d["value"], int) else "") + f" [{d['source']}]", d["date"]])
    return heads, rows


def setup_table(data: dict) -> tuple[list[str], list[list]]:
    heads = ["framework", "install", "multi-node install", "multi-node launch", "single->distributed code",
             "download MB", "installed MB", "install s", "import s", "source"]
    rows = []
    for key, s in data["setup"].items():
        d, conv, m = s.get("declared") or {}, s.get("conversion"), s.get("measured")
        if conv and conv["status"] == "measured":
            code = f"diff {conv['added']}+/{conv['removed']}- lines ({conv['distributed']})"
        elif conv:
            code = conv["status"]
        else:
            code = d.get("code_conversion")
        nums = [None] * 4
        if m and m.get("status") == "ok":
            nums = [round(m["download_bytes"] / 1e6, 1), round(m["installed_bytes"] / 1e6, 1), m["install_s"],
                    m["import_s"]]
        elif m:
            nums = [f"failed at {m['step']}: {m['error']}", None, None, None]
        install = (m or {}).get("install_command") or d.get("install")
        if not (d or conv or m):
            continue
        rows.append([key, install, d.get("multi_node_install"), d.get("launch"), code, *nums,
                     f"{d.get('source', '')} {d.get('date', '')}".strip()])
    return heads, rows


def popularity_table(data: dict) -> tuple[list[str], list[list]]:
    heads = ["framework", "repo", "stars", "watchers", "forks", "contributors", "google group members", "created",
             "source", "date", "note"]
    return heads, [[r["framework"], r["repo"], r["stars"], r["watchers"], r["forks"], r["contributors"],
                    r["google_group_members"], r["created"], r["source"], r["date"], r["note"]]
                   for r in data["popularity"]]


TABLES = {"frameworks": frameworks_table, "features": features_long, "api_coverage": api_table, "zoo": zoo_table,
          "setup": setup_table, "popularity": popularity_table}
TITLES = {"frameworks": "Frameworks and their status here", "api_coverage": "API coverage (Liu et al. Table 1)",
          "zoo": "Model zoo (Liu et al. Table 2)", "setup": "Setup (Liu et al. Table 4)",
          "popularity": "Popularity (Liu et al. Table 3, Bahrampour et al. Table 1)"}


def sections(data: dict) -> list[tuple[str, list[str], list[list]]]:
    """Every table but the feature matrix, titled, in the order the survey shows them."""
    return [(TITLES[name], *TABLES[name](data)) for name in ("frameworks", "api_coverage", "zoo", "setup", "popularity")]


def markdown(data: dict) -> str:
    parts = [f"# dlbench survey ({md(data['date'])})\n\n{md(data['machine'])}\n\n"]
    for name in ("frameworks", "features", "api_coverage", "zoo", "setup", "popularity"):
        if name == "features":
            parts.append(features_md(data) + "\n")
            continue
        heads, rows = TABLES[name](data)
        parts.append(f"## {TITLES[name]}\n\n" + _md(heads, rows) + "\n")
    return "".join(parts)
