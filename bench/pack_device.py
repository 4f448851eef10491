#!/usr/bin/env python3
"""`stoker pack --device N` against the CPU pack, side by side in one run, on
the same ImageFolder: the rate of each, their ratio, and how far the GPU's
pixels are from the CPU's (values equal, at most one level off, more).

usage: bench/pack_device.py SRC [--copies 34] [--max-side 512] [--threads 16]
                            [--device-threads 4,8] [--encoding raw] [--device 0]
                            [--plain-chroma] [--out DIR]

SRC is a flat folder of JPEGs, linked COPIES times into an ImageFolder under
data/pack-device (one class per copy), read once into the page cache before
anything is timed. Each pack is `build/stoker pack ... --json`; its
"seconds" is the whole pack, the output synced and renamed. One JSON line per
pack, then a summary. Needs a built tree (make) and a GPU.
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dataset(src, copies):
    d = os.path.join(ROOT, "data", "pack-device")
    files = sorted(f for f in os.listdir(src) if not f.startswith("."))
    for c in range(copies):
        cd = os.path.join(d, f"c{c:03d}")
        os.makedirs(cd, exist_ok=True)
        for f in files:
            stem, ext = os.path.splitext(f)
            link = os.path.join(cd, f"{stem}_{c}{ext}")
            if not os.path.lexists(link):
                os.symlink(os.path.realpath(os.path.join(src, f)), link)
    for c in range(copies):  # into the page cache
        cd = os.path.join(d, f"c{c:03d}")
        for f in os.listdir(cd):
            with open(os.path.join(cd, f), "rb") as fh:
                fh.read()
    return d, copies * len(files)


def pack(folder, out, threads, max_side, encoding, device, plain_chroma=False):
    cmd = [os.path.join(ROOT, "build", "stoker"), "pack", folder, "--cache", out, "--json",
           "--threads", str(threads), "--max-side", str(max_side), "--encoding", encoding]
    if device is not None:
        cmd += ["--device", str(device)] + (["--plain-chroma"] if plain_chroma else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        sys.exit(f"pack failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def entries(path):
    """(off, len, w, h) of each sample of a cache (src/sources/cache_format.h)."""
    with open(path, "rb") as f:
        hd = f.read(120)
        n = struct.unpack_from("<Q", hd, 24)[0]
        meta_off = struct.unpack_from("<Q", hd, 64)[0]
        f.seek(meta_off)
        meta = f.read(40 * n)
    return [struct.unpack_from("<QQII", meta, 40 * i) for i in range(n)]


def compare(a, b, every):
    """Counts of values equal, one level off and more, over every `every`-th
    sample of two raw caches packed from the same folder."""
    ea, eb = entries(a), entries(b)
    assert len(ea) == len(eb), (len(ea), len(eb))
    hist = np.zeros(256, np.int64)
    samples = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        for i in range(0, len(ea), every):
            (oa, la, wa, ha), (ob, lb, wb, hb) = ea[i], eb[i]
            assert (wa, ha) == (wb, hb), i
            fa.seek(oa)
            fb.seek(ob)
            pa = np.frombuffer(fa.read(la), np.uint8).astype(np.int16)
            pb = np.frombuffer(fb.read(lb), np.uint8).astype(np.int16)
            hist += np.bincount(np.abs(pa - pb), minlength=256)
            samples += 1
    total = int(hist.sum())
    return {"samples": samples, "values": total, "equal": int(hist[0]) / total,
            "within1": int(hist[:2].sum()) / total, "beyond1": int(hist[2:].sum()) / total,
            "max": int(np.nonzero(hist)[0].max())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("--copies", type=int, default=34)
    ap.add_argument("--max-side", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device-threads", default="4,8")
    ap.add_argument("--encoding", default="raw", choices=["raw", "jpeg"])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--plain-chroma", action="store_true",
                    help="the device packs with the engines' plain chroma upsampling")
    ap.add_argument("--out", default=os.path.join(ROOT, "data", "pack-device-out"),
                    help="where the caches go (a tmpfs: the packs without the disk)")
    a = ap.parse_args()
    folder, n = dataset(a.src, a.copies)
    os.makedirs(a.out, exist_ok=True)
    print(f"dataset: {n} files; {os.cpu_count()} CPUs; max_side {a.max_side}; {a.encoding}")
    rows = []
    cpu_out = os.path.join(a.out, "cpu.stkc")
    r = pack(folder, cpu_out, a.threads, a.max_side, a.encoding, None)
    r.update(tag=f"cpu pack, {a.threads} threads", rate=r["packed"] / r["seconds"])
    print(json.dumps(r | {"left_out": len(r["left_out"])}), flush=True)
    rows.append(r)
    for t in [int(x) for x in a.device_threads.split(",")]:
        out = os.path.join(a.out, f"gpu{t}.stkc")
        r = pack(folder, out, t, a.max_side, a.encoding, a.device, a.plain_chroma)
        plain = ", plain chroma" if a.plain_chroma else ""
        r.update(tag=f"device {a.device} pack, {t} threads{plain}", rate=r["packed"] / r["seconds"])
        if a.encoding == "raw":
            r["pixels"] = compare(cpu_out, out, max(1, n // 1500))
        print(json.dumps(r | {"left_out": len(r["left_out"])}), flush=True)
        rows.append(r)
        if t != int(a.device_threads.split(",")[-1]):
            os.unlink(out)
    print("\n| pack | img/s | vs CPU pack | decoded on the GPU | pixels > 1 level off | max |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        px = r.get("pixels")
        off = f"{100 * px['beyond1']:.4f}% of {px['values']}" if px else "-"
        print(f"| {r['tag']} | {r['rate']:,.0f} | {r['rate'] / rows[0]['rate']:.2f}x | "
              f"{r['device_packed']} of {r['packed']} | {off} | {px['max'] if px else '-'} |")


if __name__ == "__main__":
    main()
