"""Decode rate of stoker and Pillow on the same WebP and TIFF files.

    PYTHONPATH=build/python python3 bench/formats.py [--images 200] [--size 500x375] [--threads 2]

Writes photo-like images (smooth gradients, soft blobs, noise) in each
format to a temporary folder, then decodes every file to 8-bit RGB, whole,
with `threads` workers: stoker through stoker.check_file() in threads (the
C decode runs without the GIL), Pillow through Image.open(f).convert("RGB")
in as many processes (a DataLoader's workers). Both read the file each
time. Prints images/s for each and their ratio. docs/BENCHMARKS.md has the
figures.
"""
import argparse
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
from conftest import photo  # noqa: E402

import stoker  # noqa: E402

FORMATS = [
    ("WebP lossy q90", "webp", dict(quality=90)),
    ("WebP lossless", "webp", dict(lossless=True)),
    ("TIFF raw", "tif", dict()),
    ("TIFF LZW", "tif", dict(compression="tiff_lzw")),
    ("TIFF deflate", "tif", dict(compression="tiff_adobe_deflate")),
    ("TIFF JPEG q90", "tif", dict(compression="jpeg", quality=90)),
]


def pil_decode(path):
    with Image.open(path) as im:
        return im.convert("RGB").size


def rate(fn, paths, pool_map, repeats=3):
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        list(pool_map(fn, paths))
        best = max(best, len(paths) / (time.perf_counter() - t))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--size", default="500x375")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    base = [photo(w, h, s) for s in range(min(args.images, 20))]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{args.threads} workers, {args.images} images of {w}x{h}, Pillow {Image.__version__}")
    print(f"{'format':<16} {'KB/image':>9} {'stoker img/s':>13} {'Pillow img/s':>13} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp, \
            mp.get_context("fork").Pool(args.threads) as procs, \
            ThreadPoolExecutor(args.threads) as threads:
        for name, ext, kw in FORMATS:
            d = os.path.join(tmp, name.replace(" ", "_"))
            os.makedirs(d)
            paths = []
            for i in range(args.images):
                p = os.path.join(d, f"{i:05d}.{ext}")
                Image.fromarray(base[i % len(base)]).save(p, **kw)
                paths.append(p)
            kb = sum(os.path.getsize(p) for p in paths) / len(paths) / 1024
            # the same pixels, or the comparison means nothing
            a = np.asarray(Image.open(paths[0]).convert("RGB"))
            assert stoker.check_file(paths[0]) == (w, h) and a.shape == (h, w, 3)
            s = rate(stoker.check_file, paths, threads.map)
            p = rate(pil_decode, paths, procs.map)
            print(f"{name:<16} {kb:9.1f} {s:13.0f} {p:13.0f} {s / p:6.2f}")


if __name__ == "__main__":
    main()
