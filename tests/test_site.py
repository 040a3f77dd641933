"""``dlbench site DIR``: the static history pages, checked as files (every link resolves, steps marked,
bisections listed, a foreign directory refused) and in headless Chromium like the report (no console
error, every plot decodes)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dlbench.cli.main import main
from dlbench.engines import bisect
from dlbench.storage.store import Store
from tests.conftest import requires
from tests.test_changes import _runs

pytestmark = requires("matplotlib")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Twelve nightly runs of one figure with a planted 35% step from the eighth, and a stored bisection."""
    tmp = tmp_path_factory.mktemp("site")
    db = tmp / "r.db"
    rng = np.random.default_rng(3)
    _runs(db, [5.0 * (1 + 0.02 * rng.standard_normal()) * (1.35 if i >= 7 else 1.0) for i in range(12)])
    b = bisect.Bisection("b-test", 1.7e9, bisect.Settings("jax", "0.4.38", "0.10.2", "fcn-r", "train_step"),
                         ["0.4.38", "0.5.0", "0.10.2"], [bisect.Step("0.5.0", "skip", "pip: <b>no</b>")],
                         built=["0.4.38", "0.10.2"], status="found",
                         result={"first_bad": "0.10.2", "last_good": "0.4.38",
                                 "ratio": {"ratio": 1.377, "ci_low": 1.334, "ci_high": 1.423}})
    store = Store(db)
    store.save_bisection(b.id, b.started_at, b.status, b.to_dict())
    store.close()
    assert main(["site", str(tmp / "site"), "--db", str(db)]) == 0
    return tmp / "site"


def test_every_link_resolves_and_the_step_is_marked(site):
    index = (site / "index.html").read_text()
    pages = re.findall(r'class="group" href="([^"]+)"|href="([^"]+)" class="group"', index)
    (group,) = [a or b for a, b in pages]
    text = (site / group).read_text()
    assert "step +" in text and "1 step change(s)" in index
    assert "b-test" in index and "0.10.2" in index and "&lt;b&gt;" not in index  # skipped releases named, not reasons
    links = re.findall(r'href="(runs/[^"#]+)#([^"]+)"', text)
    assert len(links) == 12
    for path, anchor in links:
        assert f'id="{anchor}"' in (site / path).read_text()
    for path in re.findall(r'href="(runs/[^"]+)"', index):
        assert (site / path).is_file()


def test_a_directory_with_other_files_is_refused(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep me")
    db = tmp_path / "r.db"
    _runs(db, [5.0, 5.1, 5.0])
    assert main(["site", str(tmp_path), "--db", str(db)]) == 2
    assert "did not write" in capsys.readouterr().err and (tmp_path / "mine.txt").read_text() == "keep me"
    assert main(["site", str(tmp_path / "mine.txt"), "--db", str(db)]) == 2
    assert main(["site", str(tmp_path / "out"), "--db", str(tmp_path / "none.db")]) == 2
    assert main(["site", str(tmp_path / "out"), "--db", str(db)]) == 0
    assert main(["site", str(tmp_path / "out"), "--db", str(db)]) == 0  # its own directory: rewritten


def test_the_site_opens_in_a_browser_with_its_plots(site, tmp_path):
    from tests.test_report_browser import CHROMIUM, chromium, console_messages, probe

    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed")
    group = next(p for p in site.glob("fig-*.html"))
    for page in (site / "index.html", group, next((site / "runs").glob("*.html"))):
        out = chromium(tmp_path, page.stem, "--dump-dom", page.as_uri())
        assert out.returncode == 0 and console_messages(out.stderr) == [], out.stderr[-2000:]
    result = probe(tmp_path, group, "group")
    assert result["plots"] == 1 and result["broken"] == [] and result["errors"] == []
    assert "step +" in result["text"]
