#!/usr/bin/env python3
"""device="cuda" from remote shards (HTTP, a local server with ranges) and
from a folder of the formats the GPU does not decode (BMP, PPM, WebP, TIFF,
PNG beside JPEG), each against the CPU loader on the same samples.

usage: bench/remote_gpu.py SHARD_DIR FORMATS_DIR

SHARD_DIR holds tar shards (stoker pack --tar); they are served over HTTP on
127.0.0.1 and read by brace range. Prints one JSON line per check; exits 1
when one fails.
"""
import glob
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import servers  # noqa: E402

import stoker  # noqa: E402


def batches(root, device, **kw):
    out = []
    if device != "cpu":
        kw["gpu_cpu_share"] = 1.0
    with stoker.ImageLoader(root, batch_size=32, size=64, threads=4, pipeline="eval",
                            device=device, seed=0, **kw) as ld:
        for b in ld.iter_batches():
            out.append((b.images.float().cpu().clone(), b.labels.cpu().clone()))
        st = ld.stats()
    return out, st


def compare(a, b):
    same = len(a) == len(b) and all(torch.equal(x[1], y[1]) for x, y in zip(a, b))
    diff = max((float((x[0] - y[0]).abs().max()) for x, y in zip(a, b)), default=0.0)
    return same, diff


def main():
    shard_dir, formats = sys.argv[1], sys.argv[2]
    ok = True
    srv = servers.HTTPFileServer(shard_dir).start()
    try:
        n = len(glob.glob(os.path.join(shard_dir, "*.tar")))
        url = f"{srv.url}/shard-{{000000..{n - 1:06d}}}.tar"
        cpu, _ = batches(shard_dir, "cpu")
        gpu, st = batches(url, "cuda")
        labels_same, diff = compare(cpu, gpu)
        # gpu_cpu_share=1: every image decoded by the CPU workers, bit-identical
        r = {"check": "cuda from http:// shards", "labels_same": labels_same,
             "max_abs_diff": diff, "remote_requests": st["remote_requests"],
             "remote_bytes": st["remote_bytes"]}
        ok &= labels_same and diff == 0.0
        print(json.dumps(r), flush=True)
    finally:
        srv.stop()
    cpu, _ = batches(formats, "cpu")
    gpu, st = batches(formats, "cuda")
    labels_same, diff = compare(cpu, gpu)
    r = {"check": "cuda from BMP/PPM/WebP/TIFF/PNG/JPEG", "labels_same": labels_same,
         "max_abs_diff": diff, "decoded_cpu": st["decoded_cpu"], "decoded_hw": st["decoded_hw"]}
    ok &= labels_same and diff == 0.0
    print(json.dumps(r), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
