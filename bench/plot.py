#!/usr/bin/env python3
"""Draws benchmark results as PNG files: images/s per loader, side by side, and
training speed as a fraction of the synthetic-data ceiling per model.

Input: result files of TAG<TAB>JSON lines, as bench/cache_suite.sh writes
(data/cache-suite-results.tsv); bench/results/recorded-benchmarks.tsv holds the
figures of docs/BENCHMARKS.md in the same form. A line whose JSON has "arch"
(examples/reference/train.py's result) is a training figure, any other with
"images_per_s" a loader figure; skipped runs and lines without images/s are
left out. Optional JSON fields steer the drawing: "figure" (which PNG),
"group" (a cluster of bars), "series" (a bar's label and colour), "model".
Without them: loaders go to "loaders", grouped by the tag's _tN thread count
(stoker_t2: series stoker, group "2 threads"); training runs go to
"training", per model, the series from the tag (r18_stoker_t1: stoker, 1
thread), the ceiling being the run whose loader is "synthetic".

  python3 bench/plot.py data/cache-suite-results.tsv --out docs/img --prefix cache-suite-
  python3 bench/plot.py bench/results/recorded-benchmarks.tsv --out docs/img

Writes OUT/PREFIX<figure>.png for each figure and prints the paths.
"""
import argparse
import json
import os
import re
import sys


def read_results(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line.strip() or line.startswith("#"):
                    continue
                tag, sep, js = line.partition("\t")
                if not sep:
                    sys.exit(f"{path}:{n}: not TAG<TAB>JSON")
                try:
                    rows.append((tag, json.loads(js)))
                except ValueError as e:
                    sys.exit(f"{path}:{n}: bad JSON ({e})")
    return rows


def pretty_arch(arch):
    m = re.fullmatch(r"resnet(\d+)", arch or "")
    return f"ResNet-{m.group(1)}" if m else (arch or "?")


def threads_label(n):
    return f"{n} thread" + ("" if n == "1" else "s")


def split_tag(tag):
    """stoker_t2 -> ("stoker", "2"); dali -> ("dali", None)."""
    m = re.fullmatch(r"(.*)_t(\d+)", tag)
    return (m.group(1), m.group(2)) if m else (tag, None)


def collect(rows):
    """{figure: {"kind": "loader"|"training", "rows": [(group, series, images/s, json)]}}"""
    figs = {}
    for tag, js in rows:
        ips = js.get("images_per_s")
        if js.get("skipped") or not isinstance(ips, (int, float)) or ips <= 0:
            continue
        training = "arch" in js
        fig = js.get("figure") or ("training" if training else "loaders")
        if training:
            group = js.get("model") or pretty_arch(js["arch"])
            if js.get("loader") == "synthetic":
                series = js.get("series") or "synthetic"
            else:
                rest = tag.split("_", 1)[1] if "_" in tag else tag
                name, t = split_tag(rest)
                series = js.get("series") or (f"{name}, {threads_label(t)}" if t else name)
        else:
            name, t = split_tag(tag)
            series = js.get("series") or name
            group = js.get("group") or (threads_label(t) if t else "")
        figs.setdefault(fig, {"kind": "training" if training else "loader", "rows": []})
        figs[fig]["rows"].append((group, series, float(ips), js))
    return figs


def ordered(items):
    seen = []
    for x in items:
        if x not in seen:
            seen.append(x)
    return seen


def bars(ax, groups, series, value, fmt, colours):
    """Grouped bars: one cluster per group, one bar per series present in it."""
    width = 0.8 / max(1, len(series))
    for j, s in enumerate(series):
        xs, ys = [], []
        for i, g in enumerate(groups):
            v = value(g, s)
            if v is not None:
                xs.append(i + (j - (len(series) - 1) / 2) * width)
                ys.append(v)
        if not xs:
            continue
        b = ax.bar(xs, ys, width * 0.95, label=s, color=colours[j % len(colours)])
        ax.bar_label(b, labels=[fmt(y) for y in ys], fontsize=8, padding=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.spines[["top", "right"]].set_visible(False)


def draw(name, fig_data, out, title_prefix, file_prefix=""):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    rows = fig_data["rows"]
    groups = ordered(g for g, _, _, _ in rows)
    series = ordered(s for _, s, _, _ in rows)
    table = {(g, s): v for g, s, v, _ in rows}
    title = title_prefix + name.replace("-", " ") + (
        ": images/s per loader" if fig_data["kind"] == "loader" else "")
    if fig_data["kind"] == "loader":
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) * max(1, len(series)) ** 0.5),
                                        4.2))
        bars(ax, groups, series, lambda g, s: table.get((g, s)), lambda v: f"{v:,.0f}",
             colours)
        ax.set_ylabel("images/s")
        ax.set_ylim(0, max(table.values()) * 1.15)
        ax.legend(fontsize=8, frameon=False)
        ax.set_title(title)
    else:
        ceiling = {g: v for g, s, v, js in rows if js.get("loader") == "synthetic"}
        feeds = [s for s in series if not any(js.get("loader") == "synthetic" and s2 == s
                                              for _, s2, _, js in rows)]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
        bars(a1, groups, series, lambda g, s: table.get((g, s)), lambda v: f"{v:,.0f}",
             colours)
        a1.set_ylabel("images/s")
        a1.set_ylim(0, max(table.values()) * 1.15)
        a1.set_title("training speed")
        a1.legend(fontsize=8, frameon=False)

        def frac(g, s):
            v = table.get((g, s))
            return 100.0 * v / ceiling[g] if v is not None and g in ceiling else None
        offset = len(series) - len(feeds)  # the same colour per series in both panels
        bars(a2, groups, feeds, frac, lambda v: f"{v:.1f}%", colours[offset:] + colours)
        a2.axhline(100, color="grey", lw=0.8, ls="--")
        a2.set_ylim(0, 115)
        a2.set_ylabel("% of synthetic-data speed")
        a2.set_title("fraction of the ceiling (synthetic data)")
        fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, file_prefix + name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="TAG<TAB>JSON result files")
    p.add_argument("--out", default="docs/img", help="folder of the PNG files")
    p.add_argument("--prefix", default="", help="start of each PNG file's name")
    p.add_argument("--title", default="", help="start of each figure's title")
    a = p.parse_args(argv)
    figs = collect(read_results(a.results))
    if not figs:
        sys.exit("no result with images_per_s in " + ", ".join(a.results))
    for name, data in figs.items():
        print(draw(name, data, a.out, a.title, a.prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
