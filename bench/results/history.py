#!/usr/bin/env python3
"""Prints the superseded benchmark runs of bench/results/history.jsonl.

Each line of history.jsonl is one run: {"benchmark", "date", "machine",
"command", "figures", "note"}. docs/BENCHMARKS.md holds the current figures
of each benchmark; this file keeps the earlier runs it replaced.

  python3 bench/results/history.py                 # every run, oldest first
  python3 bench/results/history.py recipe-cpu      # the runs of one benchmark
  python3 bench/results/history.py --list          # the benchmarks and their run counts
"""
import argparse
import collections
import json
import os


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def flat(figures, prefix=""):
    """{"a": {"b": 1}} -> [("a.b", 1)]."""
    out = []
    for k, v in figures.items():
        if isinstance(v, dict):
            out += flat(v, f"{prefix}{k}.")
        else:
            out.append((prefix + k, v))
    return out


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("benchmark", nargs="?", help="only the runs of this benchmark")
    p.add_argument("--list", action="store_true", help="the benchmarks and their run counts")
    p.add_argument("--file", default=os.path.join(here, "history.jsonl"))
    a = p.parse_args(argv)
    runs = sorted(load(a.file), key=lambda r: r["date"])
    if a.list:
        for name, n in sorted(collections.Counter(r["benchmark"] for r in runs).items()):
            print(f"{name:32s} {n}")
        return 0
    for r in runs:
        if a.benchmark and r["benchmark"] != a.benchmark:
            continue
        print(f"{r['date']}  {r['benchmark']}  ({r['machine']})")
        print(f"  $ {r['command']}")
        if r.get("note"):
            print(f"  note: {r['note']}")
        for k, v in flat(r["figures"]):
            print(f"  {k}: {v}")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
