#!/usr/bin/env python3
"""The Python loader against `stoker bench` on the same cache, GPU loader,
side by side in one run: images/s of each and the ratio.

usage: bench/python_vs_cli.py CACHE [--threads 2,4] [--epochs 3] [--batch 256]

CACHE is a pre-decoded cache (`stoker pack DIR --cache CACHE`). The CLI runs
`stoker bench CACHE --device 0 --threads T --epochs E --batch B --json`
(its figure includes the first epoch; the loader's start is excluded). The
Python side runs a warm-up epoch, then E epochs of `for x, y in
ImageLoader(CACHE, device="cuda", ...)` and `torch.cuda.synchronize()`, once
touching nothing and once with `x.sum()` per batch, as a consumer would.
Needs a built tree (make), torch and a GPU.
"""
import argparse
import json
import os
import subprocess
import time

import torch

import stoker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(cache, threads, epochs, batch):
    cmd = [os.path.join(ROOT, "build", "stoker"), "bench", cache, "--device", "0", "--threads",
           str(threads), "--epochs", str(epochs), "--batch", str(batch), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])["images_per_s"]


def python(cache, threads, epochs, batch, consume):
    with stoker.ImageLoader(cache, batch_size=batch, device="cuda", threads=threads) as ld:
        for _ in ld:  # warm-up epoch
            pass
        torch.cuda.synchronize()
        t = time.perf_counter()
        n = 0
        for _ in range(epochs):
            for x, _y in ld:
                n += x.shape[0]
                if consume:
                    x.sum()
        torch.cuda.synchronize()
        return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache")
    ap.add_argument("--threads", default="2,4")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    print("| threads | CLI img/s | Python, loop only | Python, `x.sum()` per batch |")
    print("|---|---|---|---|")
    for t in [int(x) for x in a.threads.split(",")]:
        c = cli(a.cache, t, a.epochs, a.batch)
        p = python(a.cache, t, a.epochs, a.batch, False)
        s = python(a.cache, t, a.epochs, a.batch, True)
        print(f"| {t} | {c:,.0f} | {p:,.0f} ({100 * p / c:.0f}%) | {s:,.0f} ({100 * s / c:.0f}%) |",
              flush=True)


if __name__ == "__main__":
    main()
