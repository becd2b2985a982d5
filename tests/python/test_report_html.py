"""report.html's charts (python/kgym/report_html.py) on a report with one
turn of data: the turn axes tick whole turns only, the groups without
gradient have a chart of their own (not a line in the hacking chart), and
the cost chart starts at 0 (a 2.71-2.75 s range is not a cliff). The
figures are inspected before they become SVG."""
from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from kgym import report_html as R  # noqa: E402


def turn(eval_s, tokens, hacked):
    return {"speedups": [1.2, 1.5], "hacked_ratio": hacked, "flat_share": 0.5,
            "eval_s": {"mean": eval_s}, "tokens": {"mean": tokens},
            "fast_p": {k: 0.5 for k in R.P_KEYS}, "fast_p_best": {k: 0.5 for k in R.P_KEYS},
            "coverage_speedup": [[0.5, 1.2]]}


REPORT = {"runs": [
    {"name": "a", "baseline": "eager", "levels": {"level1": {"turns": {"0": turn(2.71, 100, 0.1)}}}},
    {"name": "b", "baseline": "eager", "levels": {"level1": {"turns": {"0": turn(2.75, 120, 0.2)}}}},
]}


@pytest.fixture
def figs(monkeypatch):
    monkeypatch.setattr(R, "svg_of", lambda fig, *a, **k: fig)
    return {key: fn(REPORT, "level1") for key, _, fn in R.CHARTS}


def test_one_turn_axes_tick_whole_turns(figs):
    for key in ("fastp", "speedup", "hacking", "nograd", "cost"):
        for ax in figs[key].axes[:1]:
            assert list(ax.get_xticks()) == [0], (key, list(ax.get_xticks()))


def test_no_gradient_share_is_not_in_the_hacking_chart(figs):
    labels = [ln.get_label() for ln in figs["hacking"].axes[0].get_lines()]
    assert labels == ["a", "b"], labels
    assert "hacked" in figs["hacking"].axes[0].get_ylabel()
    ys = [ln.get_ydata()[0] for ln in figs["nograd"].axes[0].get_lines()]
    assert ys == [0.5, 0.5]


def test_cost_axes_start_at_zero(figs):
    secs, toks = figs["cost"].axes[:2]
    lo, hi = secs.get_ylim()
    assert lo == 0 and 2.75 < hi < 3.5, (lo, hi)
    assert toks.get_ylim()[0] == 0 and toks.get_ylim()[1] > 120
