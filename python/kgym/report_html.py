"""report.html of `kgym report` (docs/report.md): report.json drawn by
matplotlib into SVG, every chart inline in one self-contained page whose
Content-Security-Policy forbids any load (no scripts, fonts or images from
anywhere: the SVG text is drawn as paths).

    python -m kgym.report_html DIR/report.json DIR/report.html

The C command (src/cli/cmd_report.c) runs this after writing
report.json; it can be run again on a report.json by hand.
"""

import html
import io
import json
import math
import re
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

matplotlib.rcParams.update({"svg.fonttype": "path", "svg.hashsalt": "kgym",
                            "figure.dpi": 72, "font.size": 9})

CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       "font-src 'none'; script-src 'none'; connect-src 'none'; "
       "form-action 'none'; base-uri 'none'")

P_KEYS = ["0.0", "1.0", "1.2", "1.5", "2.0", "3.0"]


def p_label(k):
    return "p=0 (correct)" if k == "0.0" else "p=%g" % float(k)


def turn_axis(ax, turns):
    """An x axis of turns: a tick at each turn of the data, none between
    (with one turn a locator would tick fractions of it), and half a turn
    of room either side."""
    ts = sorted({int(t) for t in turns})
    if not ts:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        return
    ax.set_xticks(ts)
    ax.set_xlim(ts[0] - 0.5, ts[-1] + 0.5)


def all_turns(report, lv):
    return [t for r in report["runs"] if lv in r["levels"]
            for t in r["levels"][lv]["turns"]]


def svg_of(fig):
    """The figure as an inline <svg> element: no XML prolog, no RDF
    metadata (its namespace URLs are not loads, but nothing need name a
    host)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Date": None, "Creator": None, "Format": None,
                          "Type": None})
    plt.close(fig)
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r"<metadata>.*?</metadata>", "", s, flags=re.S)
    return s


def levels_of(report):
    seen = []
    for run in report["runs"]:
        for lv in run["levels"]:
            if lv not in seen:
                seen.append(lv)
    return seen


def turns_of(level):
    return sorted(level["turns"], key=int)


def log_or_note(ax, values):
    """A log y axis when there are values to put on it; else a note in the
    panel (an empty chart is still drawn, so every chart is present)."""
    if any(v > 0 for v in values):
        ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no correct attempt with a speedup",
                transform=ax.transAxes, ha="center", va="center")


def chart_fastp(report, lv):
    """Fast@p against turn, one curve per p (solid: last turn, dashed:
    best of history), one panel per run side by side."""
    runs = [r for r in report["runs"] if lv in r["levels"]]
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.2),
                             squeeze=False, sharey=True)
    for ax, run in zip(axes[0], runs):
        level = run["levels"][lv]
        ts = turns_of(level)
        x = [int(t) for t in ts]
        for i, k in enumerate(P_KEYS):
            c = "C%d" % i
            last = [level["turns"][t]["fast_p"][k] for t in ts]
            best = [level["turns"][t]["fast_p_best"][k] for t in ts]
            ax.plot(x, last, "-o", color=c, ms=3, label=p_label(k))
            ax.plot(x, best, "--", color=c, lw=1)
        ax.set_title("%s, %s" % (run["name"], lv))
        ax.set_xlabel("turn")
        turn_axis(ax, x)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("Fast@p (solid: last turn, dashed: best)")
    axes[0][-1].legend(fontsize=7, loc="best")
    return svg_of(fig)


def chart_speedups(report, lv):
    """Distribution of correct attempts' speedups (log scale), one box per
    turn and run."""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    runs = [r for r in report["runs"] if lv in r["levels"]]
    pos, data, labels = [], [], []
    width = 0.8 / max(1, len(runs))
    for j, run in enumerate(runs):
        level = run["levels"][lv]
        for t in turns_of(level):
            sp = [s for s in level["turns"][t]["speedups"] if s > 0]
            pos.append(int(t) + (j - (len(runs) - 1) / 2) * width)
            data.append(sp if sp else [math.nan])
            labels.append(run["name"])
    if data:
        bp = ax.boxplot(data, positions=pos, widths=width * 0.9,
                        patch_artist=True, manage_ticks=False)
        names = [r["name"] for r in runs]
        for patch, name in zip(bp["boxes"], labels):
            patch.set_facecolor("C%d" % names.index(name))
            patch.set_alpha(0.6)
        for j, name in enumerate(names):
            ax.plot([], [], "s", color="C%d" % j, label=name)
        ax.legend(fontsize=7)
    log_or_note(ax, [v for d in data for v in d if v == v])
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    turn_axis(ax, all_turns(report, lv))
    ax.set_xlabel("turn")
    ax.set_ylabel("speedup of correct attempts")
    ax.set_title("speedup distribution, %s (%s)" % (lv, runs[0]["baseline"]))
    ax.grid(alpha=0.3)
    return svg_of(fig)


def share_chart(report, lv, key, ylabel, title):
    """One share per turn (0..1), one line per run."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for j, run in enumerate(report["runs"]):
        if lv not in run["levels"]:
            continue
        level = run["levels"][lv]
        ts = turns_of(level)
        v = [level["turns"][t].get(key) for t in ts]
        ax.plot([int(t) for t in ts], [math.nan if h is None else h for h in v],
                "-o", color="C%d" % j, ms=3, label=run["name"])
    ax.set_ylim(-0.02, 1.02)
    turn_axis(ax, all_turns(report, lv))
    ax.set_xlabel("turn")
    ax.set_ylabel(ylabel)
    ax.set_title("%s, %s" % (title, lv))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return svg_of(fig)


def chart_hacking(report, lv):
    """Hacking ratio per turn (hacked / valid attempts), one line per run."""
    return share_chart(report, lv, "hacked_ratio", "hacked / scored attempts",
                       "hacking ratio per turn")


def chart_flat(report, lv):
    """Share of the (problem, turn) groups without gradient (all rewards
    equal), one line per run: a training signal, apart from hacking."""
    return share_chart(report, lv, "flat_share", "groups with all-equal rewards",
                       "groups without gradient per turn")


def chart_coverage(report, lv):
    """Coverage (share of device time in the candidate's kernels) against
    speedup, every correct attempt, one colour per run."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    every = []
    for j, run in enumerate(report["runs"]):
        if lv not in run["levels"]:
            continue
        pts = [p for t in run["levels"][lv]["turns"].values()
               for p in t["coverage_speedup"]]
        every += [p[1] for p in pts]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12,
                   color="C%d" % j, alpha=0.7, label=run["name"])
    log_or_note(ax, every)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("coverage")
    ax.set_ylabel("speedup")
    ax.set_title("coverage against speedup, %s" % lv)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return svg_of(fig)


def from_zero(ax, values):
    """y from 0 to the largest value plus 15%: a range of 2.71-2.75 s
    autoscaled alone would fill the panel and look like a cliff."""
    top = max((v for v in values if v == v), default=0.0)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)


def chart_cost(report, lv):
    """Mean evaluation seconds and mean generated tokens per attempt, per
    turn: the price of the environment's feedback beside the policy's."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax2 = ax.twinx()
    secs, toks = [], []
    for j, run in enumerate(report["runs"]):
        if lv not in run["levels"]:
            continue
        level = run["levels"][lv]
        ts = turns_of(level)
        x = [int(t) for t in ts]

        def mean(key):
            v = [level["turns"][t][key]["mean"] for t in ts]
            return [math.nan if m is None else m for m in v]
        secs += mean("eval_s")
        toks += mean("tokens")
        ax.plot(x, mean("eval_s"), "-o", color="C%d" % j, ms=3,
                label="%s eval s" % run["name"])
        ax2.plot(x, mean("tokens"), "--s", color="C%d" % j, ms=3,
                 label="%s tokens" % run["name"])
    from_zero(ax, secs)
    from_zero(ax2, toks)
    turn_axis(ax, all_turns(report, lv))
    ax.set_xlabel("turn")
    ax.set_ylabel("evaluation seconds (solid)")
    ax2.set_ylabel("generated tokens (dashed)")
    ax.set_title("cost per attempt, %s" % lv)
    ax.grid(alpha=0.3)
    return svg_of(fig)


CHARTS = [("fastp", "Fast@p against turn", chart_fastp),
          ("speedup", "Speedup distribution", chart_speedups),
          ("hacking", "Hacking ratio per turn", chart_hacking),
          ("nograd", "Groups without gradient per turn", chart_flat),
          ("coverage", "Coverage against speedup", chart_coverage),
          ("cost", "Cost of feedback", chart_cost)]


def fmt(x, plus=False):
    if x is None:
        return "-"
    return ("%+.3f" if plus else "%.3f") % x


def table(run, lv):
    level = run["levels"][lv]
    head = "".join("<th>%s</th>" % html.escape(p_label(k)) for k in P_KEYS)
    rows = []
    for t in turns_of(level):
        tt = level["turns"][t]
        for i, (key, name) in enumerate([("fast_p", "last"),
                                         ("fast_p_best", "best"),
                                         ("fast_p_correct", "correct")]):
            cells = "".join("<td>%s</td>" % fmt(tt[key][k]) for k in P_KEYS)
            extra = ""
            if i == 0:
                extra = "".join("<td rowspan=3>%s</td>" % v for v in (
                    fmt(tt["hacked_ratio"]), fmt(tt["mean_reward"]),
                    fmt(tt["mean_coverage"]), fmt(tt["geomean_speedup"])))
            lead = ("<td rowspan=3>%s</td><td rowspan=3>%d</td>" % (t, tt["n"])
                    if i == 0 else "")
            rows.append("<tr>%s<td>%s</td>%s%s</tr>" % (lead, name, cells,
                                                         extra))
    fg = level["flat_groups"]
    flat = ", ".join("%s [%s]" % (html.escape(p), " ".join(map(str, ts)))
                     for p, ts in fg["problems"].items())
    return ("<table><tr><th>turn</th><th>n</th><th>Fast@p</th>%s<th>hacked"
            "</th><th>reward</th><th>coverage</th><th>gmean</th></tr>%s"
            "</table><p>Groups with all rewards equal (no GRPO/TRLOO "
            "gradient): %d of %d%s</p>" % (
                head, "".join(rows), fg["flat"], fg["groups"],
                (": " + flat) if flat else ""))


def render(report):
    comp = report["comparison"]
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta http-equiv="Content-Security-Policy" content="%s">' % CSP,
        "<title>kgym report</title><style>body{font-family:sans-serif;"
        "margin:1.5em;max-width:1400px}table{border-collapse:collapse;"
        "font-size:12px;margin:.5em 0}td,th{border:1px solid #bbb;"
        "padding:2px 6px;text-align:right}figure{margin:1em 0}"
        "svg{max-width:100%;height:auto}</style></head><body>",
        "<h1>kgym report</h1>",
        "<p>Fast@p counts a correct, unhacked attempt whose speedup is "
        "<b>%s p</b> (p=0: correct). Baseline: %s. Runs: %s.</p>" % (
            html.escape(comp), html.escape(report["baseline_note"]),
            html.escape(", ".join("%s (%s)" % (r["name"], r["baseline"])
                                  for r in report["runs"]))),
    ]
    for lv in levels_of(report):
        parts.append("<h2>%s</h2>" % html.escape(lv))
        for key, title, fn in CHARTS:
            parts.append('<figure data-chart="%s-%s"><figcaption>%s, %s'
                         '</figcaption>%s</figure>' % (
                             html.escape(key), html.escape(lv),
                             html.escape(title), html.escape(lv),
                             fn(report, lv)))
        for run in report["runs"]:
            if lv in run["levels"]:
                parts.append("<h3>%s, %s</h3>%s" % (
                    html.escape(run["name"]), html.escape(lv),
                    table(run, lv)))
    for d in report.get("diffs", []):
        parts.append("<h2>%s &minus; %s</h2>" % (html.escape(d["b"]),
                                                 html.escape(d["a"])))
        for lv, level in d["levels"].items():
            rows = "".join(
                "<tr><td>%s</td>%s<td>%s</td><td>%s</td></tr>" % (
                    t, "".join("<td>%s</td>" % fmt(v["fast_p"][k], True)
                               for k in P_KEYS),
                    fmt(v["hacked_ratio"], True),
                    fmt(v["mean_reward"], True))
                for t, v in sorted(level["turns"].items(),
                                   key=lambda kv: int(kv[0])))
            parts.append("<h3>%s</h3><table><tr><th>turn</th>%s<th>hacked"
                         "</th><th>reward</th></tr>%s</table>" % (
                             html.escape(lv), "".join(
                                 "<th>%s</th>" % html.escape(p_label(k))
                                 for k in P_KEYS), rows))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def main(argv):
    if len(argv) != 2:
        print("usage: python -m kgym.report_html REPORT.json OUT.html",
              file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as f:
            report = json.load(f)
        if not isinstance(report, dict) or not isinstance(
                report.get("runs"), list):
            raise ValueError("not a kgym report (no \"runs\" list)")
    except (OSError, ValueError) as e:
        print("kgym.report_html: %s: %s" % (argv[0], e), file=sys.stderr)
        return 2
    page = render(report)
    with open(argv[1] + ".tmp", "w", encoding="utf-8") as f:
        f.write(page)
    import os
    os.replace(argv[1] + ".tmp", argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
