#!/usr/bin/env python3
"""Write the images of a stoker cache as .npy files, for DALI's numpy reader.

bench/cache_suite.sh compares stoker reading its pre-decoded cache (.stkc,
written by `stoker pack --cache`) with DALI reading pre-decoded images. So
that both read the very same pixels, this script takes them from the cache
itself (raw encoding only): each sample becomes one uint8 HWC array, written
with np.save, and its label a second, tiny int64 array:

  OUT/images/<class>/<index>_<name>.npy   uint8 [h, w, 3], the cached pixels
  OUT/labels/<class>/<index>_<name>.npy   int64 [2]: label, index in the cache
  OUT/files.txt                           one line per sample, in cache order:
                                          "<class>/<index>_<name>.npy label index h w"

(fn.readers.numpy yields arrays only, no labels: bench/dali_cache.py reads
the labels with a second numpy reader over OUT/labels in the same order; the
index and h, w let it check that the two readers stay in step.)

The layout read here is documented in src/sources/cache_format.h. A second
run over the same cache finds OUT/done.json and writes nothing.

usage: python3 bench/prepare_cache_data.py CACHE.stkc OUT [--threads N] [--check N|all]
  --check N   afterwards, load N samples (spread over the set; "all": every
              one) back from OUT and compare them with the cache, byte for byte
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import struct
import sys
import time

import numpy as np

# struct stk__cache_header, little-endian (src/sources/cache_format.h)
HEADER = struct.Struct("<8sIIIIQIIQQQQQQQQQQ")
HEADER_FIELDS = ("magic", "version", "encoding", "max_side", "quality", "n", "nclasses",
                 "source_kind", "list_fp", "reserved", "data_end", "meta_off", "meta_len",
                 "names_len", "classes_len", "source_len", "meta_hash", "header_hash")
# struct stk__cache_entry: 40 bytes
ENTRY = np.dtype([("off", "<u8"), ("len", "<u8"), ("w", "<u4"), ("h", "<u4"), ("label", "<i4"),
                  ("reserved", "<u4"), ("hash", "<u8")])
assert ENTRY.itemsize == 40
MAGIC = b"STKCACHE"
VERSION = 1
ENCODING_RAW = 0


class Cache:
    """A raw stoker cache, mapped read-only: header, index, names, classes."""

    def __init__(self, path):
        self.path = path
        self.map = np.memmap(path, dtype=np.uint8, mode="r")
        if self.map.size < 4096:
            sys.exit(f"{path}: {self.map.size} bytes, shorter than a cache header")
        hd = dict(zip(HEADER_FIELDS, HEADER.unpack_from(self.map[:HEADER.size].tobytes())))
        if hd["magic"] != MAGIC:
            sys.exit(f"{path} is not a stoker cache (no {MAGIC.decode()} magic)")
        if hd["version"] != VERSION:
            sys.exit(f"{path}: cache format version {hd['version']}, this script reads {VERSION}")
        if hd["encoding"] != ENCODING_RAW:
            sys.exit(f"{path}: encoding {hd['encoding']} is not raw pixels; pack it with --cache "
                     f"and the raw encoding")
        if hd["meta_off"] + hd["meta_len"] > self.map.size:
            sys.exit(f"{path} is truncated: {self.map.size} bytes, its header expects "
                     f"{hd['meta_off'] + hd['meta_len']}")
        self.header = hd
        n = hd["n"]
        m0 = hd["meta_off"]
        self.entries = np.frombuffer(self.map, dtype=ENTRY, count=n, offset=m0)
        p = m0 + n * ENTRY.itemsize
        names = self.map[p:p + hd["names_len"]].tobytes().split(b"\0")[:-1]
        p += hd["names_len"]
        classes = self.map[p:p + hd["classes_len"]].tobytes().split(b"\0")[:-1]
        if len(names) != n or len(classes) != hd["nclasses"]:
            sys.exit(f"{path}: {len(names)} names and {len(classes)} class names, the header says "
                     f"{n} and {hd['nclasses']}")
        self.names = [s.decode("utf-8", "surrogateescape") for s in names]
        self.classes = [s.decode("utf-8", "surrogateescape") for s in classes]
        e = self.entries
        if np.any(e["len"] != e["w"].astype(np.uint64) * e["h"] * 3):
            sys.exit(f"{path}: an index entry's length is not w*h*3")
        if np.any(e["off"] + e["len"] > hd["data_end"]) or np.any(e["label"] < 0) or \
                np.any(e["label"] >= hd["nclasses"]):
            sys.exit(f"{path}: an index entry points outside the data or has a bad label")

    def __len__(self):
        return len(self.entries)

    def pixels(self, i):
        """Sample i as a read-only uint8 [h, w, 3] view into the map."""
        e = self.entries[i]
        off, ln = int(e["off"]), int(e["len"])
        return self.map[off:off + ln].reshape(int(e["h"]), int(e["w"]), 3)

    def relpath(self, i):
        """Where sample i goes under OUT/images and OUT/labels."""
        stem = os.path.splitext(os.path.basename(self.names[i]))[0]
        cls = self.classes[int(self.entries[i]["label"])]
        safe = lambda s: "".join(c if c.isalnum() or c in "-_." else "_" for c in s)
        return f"{safe(cls)}/{i:07d}_{safe(stem)}.npy"


def stamp_of(cache):
    hd = cache.header
    st = os.stat(cache.path)
    return {"cache": os.path.abspath(cache.path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "header_hash": hd["header_hash"], "n": hd["n"], "max_side": hd["max_side"]}


def write_all(cache, out, threads):
    rels = [cache.relpath(i) for i in range(len(cache))]
    for sub in ("images", "labels"):
        for d in sorted({os.path.dirname(r) for r in rels}):
            os.makedirs(os.path.join(out, sub, d), exist_ok=True)

    def one(i):
        r = rels[i]
        np.save(os.path.join(out, "images", r), cache.pixels(i), allow_pickle=False)
        lab = np.array([int(cache.entries[i]["label"]), i], dtype=np.int64)
        np.save(os.path.join(out, "labels", r), lab, allow_pickle=False)
        return i

    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as ex:
        for _ in ex.map(one, range(len(cache)), chunksize=64):
            pass
    with open(os.path.join(out, "files.txt"), "w") as f:
        for i, r in enumerate(rels):
            e = cache.entries[i]
            f.write(f"{r} {int(e['label'])} {i} {int(e['h'])} {int(e['w'])}\n")


def check(cache, out, count):
    """Loads samples back from OUT and compares them with the cache."""
    n = len(cache)
    idx = range(n) if count >= n else np.unique(np.linspace(0, n - 1, count).astype(np.int64))
    with open(os.path.join(out, "files.txt")) as f:
        lines = f.read().splitlines()
    if len(lines) != n:
        sys.exit(f"check: {out}/files.txt has {len(lines)} lines, the cache {n} samples")
    bad = 0
    for i in idx:
        i = int(i)
        rel, label, index, h, w = lines[i].split()
        img = np.load(os.path.join(out, "images", rel))
        lab = np.load(os.path.join(out, "labels", rel))
        ref = cache.pixels(i)
        ok = (img.dtype == np.uint8 and img.shape == ref.shape and np.array_equal(img, ref)
              and lab.tolist() == [int(cache.entries[i]["label"]), i]
              and (int(label), int(index), int(h), int(w)) ==
              (int(cache.entries[i]["label"]), i, ref.shape[0], ref.shape[1]))
        if not ok:
            bad += 1
            if bad <= 5:
                print(f"check: sample {i} ({rel}) differs from the cache", file=sys.stderr)
    return len(idx), bad


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cache", help="a raw stoker cache (stoker pack --cache)")
    p.add_argument("out", help="output folder")
    p.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--check", default="0", help="samples to compare afterwards (N or all)")
    p.add_argument("--force", action="store_true", help="write even when OUT is up to date")
    a = p.parse_args()
    t0 = time.perf_counter()
    cache = Cache(a.cache)
    stamp = stamp_of(cache)
    done_path = os.path.join(a.out, "done.json")
    up_to_date = False
    if not a.force and os.path.exists(done_path):
        with open(done_path) as f:
            up_to_date = json.load(f) == stamp
    if up_to_date:
        print(f"{a.out}: up to date with {a.cache} ({len(cache)} samples)")
    else:
        if os.path.exists(a.out):
            shutil.rmtree(a.out)
        os.makedirs(a.out)
        write_all(cache, a.out, max(1, a.threads))
        with open(done_path, "w") as f:
            json.dump(stamp, f)
        e = cache.entries
        print(f"{a.out}: {len(cache)} samples in {len(cache.classes)} classes, "
              f"{int(e['len'].sum()) / 1e6:.1f} MB of pixels (max side {cache.header['max_side']}, "
              f"mean {e['w'].mean():.0f}x{e['h'].mean():.0f}), written in "
              f"{time.perf_counter() - t0:.1f} s with {a.threads} threads")
    count = len(cache) if a.check == "all" else int(a.check)
    result = {"samples": len(cache), "classes": len(cache.classes), "seconds":
              round(time.perf_counter() - t0, 3), "checked": 0, "mismatches": 0}
    if count > 0:
        result["checked"], result["mismatches"] = check(cache, a.out, count)
        print(f"check: {result['checked']} samples compared with the cache, "
              f"{result['mismatches']} differ")
    print(json.dumps(result))
    return 1 if result["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
