#!/usr/bin/env python3
"""Remote shards over many epochs, and the time to the first batch.

usage: bench/remote_soak.py [--images 2000] [--epochs 10] [--latency 0.05]

Shards of a synthetic folder are uploaded to a local SeaweedFS (127.0.0.1);
then, in this process:
  - RSS after each of --epochs train epochs from s3:// (2 threads): it
    must stay flat (the parts are bounded, nothing accumulates);
  - the time from ImageLoader(...) to the first batch, with the shards'
    index cached, without and with --latency s added to every request by
    the proxy: the difference over the latency is the round trips on the
    way to the first byte (listing and classes.txt together, then a part).
Prints one JSON line per measurement.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import servers  # noqa: E402

import stoker  # noqa: E402


def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--latency", type=float, default=0.05)
    a = ap.parse_args()
    from stoker.cli import binary

    exe = os.environ.get("STOKER_BIN") or binary()
    work = tempfile.mkdtemp(prefix="stoker-soak-")
    subprocess.run([exe, "synth", f"{work}/img", "--images", str(a.images), "--classes", "10",
                    "--seed", "0"], check=True, capture_output=True)
    subprocess.run([exe, "pack", f"{work}/img", f"{work}/shards", "--tar", "--shard-size", "8M"],
                   check=True, capture_output=True)
    s3 = servers.S3Server().start()
    proxy = servers.FaultProxy(s3.port).start()
    try:
        s3.put_tree(f"{work}/shards", s3.bucket, "soak")
        os.environ.update(s3.env())
        os.environ["XDG_CACHE_HOME"] = f"{work}/cache"
        kw = dict(batch_size=64, threads=2, pipeline="train", seed=0)
        with stoker.ImageLoader("s3://stoker/soak/", **kw) as ld:
            for e in range(a.epochs):
                ld.set_epoch(e)
                n = sum(len(y) for _, y in ld)
                st = ld.stats()
                print(json.dumps({"epoch": e, "images": n, "rss_mb": round(rss_mb(), 1),
                                  "remote_part_bytes_mb": round(st["remote_part_bytes"] / 2**20, 1),
                                  "remote_part_peak_mb": round(st["remote_part_peak"] / 2**20, 1),
                                  "remote_requests": st["remote_requests"]}), flush=True)
        for lat in (0.0, a.latency):
            proxy.latency = lat
            os.environ["AWS_ENDPOINT_URL"] = proxy.url
            times = []
            for _ in range(3):
                t0 = time.monotonic()
                with stoker.ImageLoader("s3://stoker/soak/", prefetch=1, **kw) as ld:
                    next(iter(ld))
                    times.append(time.monotonic() - t0)
            print(json.dumps({"latency_s": lat, "first_batch_s": [round(t, 3) for t in times]}),
                  flush=True)
    finally:
        proxy.stop()
        s3.stop()


if __name__ == "__main__":
    main()
