"""The report page in a real browser (headless Chromium, offline): no console error, every plot
loaded, injected text shown as text; a screenshot is saved next to the report.

Two runs of Chromium: the page as written (console messages read from Chromium's log on stderr:
a CSP violation or a script error would show there) with a screenshot, and a copy with a small
probe script (the page's own CSP forbids scripts, so the copy swaps it for one that allows the
probe) that reports, after the load event, which plots decoded and what the page's text is.
Control pages check that both detectors do detect a broken image and a console error.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dlbench import api
from dlbench.report.build import write_report
from dlbench.report.html import CSP
from tests.conftest import requires
from tests.synthetic_runs import report_run

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed "
                                                          "(apt-get install chromium, or .ci/install-system.sh)"),
              requires("matplotlib")]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0"]

PROBE = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(e.message || ("failed to load " + e.target.tagName)), true);
window.addEventListener("load", () => {
  const plots = [...document.querySelectorAll("img, svg")];
  const loaded = p => p.tagName.toLowerCase() === "img" ? p.complete && p.naturalWidth > 0
                                                        : p.getBoundingClientRect().width > 0;
  const out = document.createElement("pre");
  out.id = "dlbench-probe";
  out.textContent = JSON.stringify({plots: plots.length, broken: plots.filter(p => !loaded(p)).map(p => p.alt || p.id),
                                    errors: window.__errors, scripts: document.scripts.length,
                                    text: document.body.innerText});
  document.body.appendChild(out);
});
</script>"""


def chromium(tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"chromium-profile-{name}"  # a fresh profile per launch
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=180)


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def probe(tmp: Path, page: Path, name: str) -> dict:
    text = page.read_text()
    text = text.replace(f'<meta http-equiv="Content-Security-Policy" content="{html.escape(CSP)}">', "")
    copy = tmp / f"{name}-probe.html"
    copy.write_text(text.replace("<head>", "<head>" + PROBE, 1))
    out = chromium(tmp, name, "--dump-dom", "--virtual-time-budget=10000", copy.as_uri())
    found = re.search(r'<pre id="dlbench-probe">(.*?)</pre>', out.stdout, re.S)
    assert found, f"the probe did not report; stderr: {out.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("browser")
    run_id = report_run(tmp / "r.db")
    return write_report(api.results(run_id, tmp / "r.db"), tmp / "report").html


def test_page_loads_clean_and_screenshot(report_page, tmp_path):
    shot = report_page.parent / "screenshot.png"
    out = chromium(tmp_path, "page", f"--screenshot={shot}", "--window-size=1400,3000", report_page.as_uri())
    assert out.returncode == 0, out.stderr[-2000:]
    assert console_messages(out.stderr) == []
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    shutil.copy(shot, tmp_path / "screenshot.png")  # also in this test's own output dir


def test_every_plot_loads_and_injection_is_text(report_page, tmp_path):
    result = probe(tmp_path, report_page, "report")
    assert result["plots"] == 4 and result["broken"] == [] and result["errors"] == []
    assert result["scripts"] == 1  # the probe alone: the stored <script> reason is text, not an element
    assert "<script>alert(1)</script>" in result["text"] and "Test CPU <b>9000</b>" in result["text"]


def test_detectors_detect(report_page, tmp_path):
    """Controls: the report with a remote image slipped in logs a console message (its own CSP blocks
    the load: the policy is in force); a broken image is reported by the probe."""
    bad = tmp_path / "bad.html"
    bad.write_text(report_page.read_text().replace("<body>", '<body><img src="https://example.invalid/x.png">', 1))
    messages = console_messages(chromium(tmp_path, "bad", "--dump-dom", bad.as_uri()).stderr)
    assert any("Content Security Policy" in m for m in messages), messages
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><head></head><body><img src="data:image/png;base64,AAAA" alt="broken">'
                      '</body></html>')
    assert probe(tmp_path, broken, "broken")["broken"] == ["broken"]
