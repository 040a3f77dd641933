import numpy as np

from dlbench.measure.stats import bootstrap_ci, ratio_ci, summarize


def test_summary_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0] * 4)
    assert s.n == 20 and s.median == 3.0 and s.min == 1.0 and s.max == 100.0
    assert s.p5 <= s.median <= s.p95
    assert s.ci_low <= s.median <= s.ci_high


def test_ci_is_deterministic_and_covers_the_median():
    rng = np.random.default_rng(0)
    v = rng.normal(10, 1, 200)
    assert bootstrap_ci(v) == bootstrap_ci(v)
    lo, hi = bootstrap_ci(v)
    assert lo < np.median(v) < hi and hi - lo < 1.0


def test_warnings():
    quiet = summarize([10.0 + 0.01 * i for i in range(30)])
    assert quiet.warnings == []
    noisy = summarize([10.0, 14.0] * 15)
    assert any(w.startswith("noisy") for w in noisy.warnings)
    outlier = summarize([10.0] * 29 + [40.0])
    assert any(w.startswith("outlier") for w in outlier.warnings)
    few = summarize([1.0, 1.0, 1.0])
    assert any(w.startswith("too few") for w in few.warnings)


def test_ratio_ci():
    a = np.full(50, 10.0) + np.linspace(0, 0.1, 50)
    r, lo, hi = ratio_ci(a, a * 1.3)
    assert abs(r - 1.3) < 1e-9 and lo <= r <= hi
