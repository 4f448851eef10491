#!/usr/bin/env python3
"""Remote tar shards at scale: requests, bytes and memory per epoch for W ranks,
measured on one machine and set beside the model docs/remote.md extrapolates
from (section "At scale").

A synthetic ImageFolder (`stoker synth`, about 110 KB a photo) is packed into
--shards tar shards (`stoker pack --tar`, which writes each shard's index
beside it), uploaded to a local SeaweedFS (python/tests/servers.py: 127.0.0.1
only, with credentials), and read from s3:// by W processes at once for each
W of --ranks, each with rank= and world_size= set explicitly (as torchrun's
ranks would be), shuffle on, a cheap pipeline (the counters do not depend on
the decode), and an index folder of its own that starts empty (a cold open:
every rank on its own machine). Each rank reports the loader's remote
statistics after the open and after each epoch (stats(): remote_requests,
remote_bytes, remote_retries, remote_part_peak) and its peak RSS. A last
open of one rank with an index folder already filled gives a warm open.

The model (per rank r of W, per epoch; docs/remote.md has it in full):
  open, cold   ceil(O / 1000) listing pages + 1 (classes.txt) + 1 (a HEAD of
               the first index) + S index GETs,
               bytes: the listing (about 180 B an object) + every index (X)
  open, warm   the listing and classes.txt only (indexes from index_dir)
  epoch        every rank reads its 1/W of the samples, a run of shards in
               the epoch's shard order: the 8 MiB parts that hold them, one
               GET each, and one range GET per straggler (a sample that left
               the shuffle buffer after its part was let go), so over all ranks
               requests = sum over shards of ceil(size / P) + (W - 1) + g,
               bytes    = D + g * b, and up to (W - 1) * P more (a part a
               boundary between two ranks cuts is read by both),
               g = N * exp(-R / (2 * b * K)) (the read-ahead takes up to
               half of R, the rest keeps the parts of the buffer's samples)
with O objects listed, S shards, D their bytes, b = D / N, P = 8 MiB,
R = remote_memory, K = shuffle_buffer.

usage: bench/remote_scale.py [--images 4800] [--shards 16] [--ranks 1,2,4,8]
                             [--epochs 2] [--batch 32] [--remote-memory BYTES]
                             [--shuffle-buffer N] [--work DIR] [--json FILE]
"""
import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
sys.path.insert(0, os.path.join(REPO, "python"))

import servers  # noqa: E402

PART = 8 << 20  # tar.c's PART_SIZE
LIST_PAGE = 1000  # keys per ListObjectsV2 page
LIST_BYTES = 180  # a listing's bytes an object (SeaweedFS's; S3's are alike)


def child(a):
    """One rank: open, then --epochs epochs; a JSON line of counters."""
    import torch

    torch.set_num_threads(1)
    import stoker

    keys = ("remote_requests", "remote_bytes", "remote_retries", "remote_failures")
    t0 = time.monotonic()
    ld = stoker.ImageLoader(a.source, batch_size=a.batch, pipeline="eval", size=32, threads=1,
                            seed=0, shuffle=True, rank=a.rank, world_size=a.world,
                            index_dir=a.index_dir, remote_memory=a.remote_memory,
                            shuffle_buffer=a.shuffle_buffer)
    st = ld.stats()
    out = {"rank": a.rank, "open_s": time.monotonic() - t0, "len": len(ld),
           "open": {k: st.get(k, 0) for k in keys}, "epochs": []}
    prev = dict(out["open"])
    for _ in range(a.epochs):
        n = 0
        for x, _ in ld:
            n += x.shape[0]
        st = ld.stats()
        cur = {k: st.get(k, 0) for k in keys}
        ep = {k: cur[k] - prev[k] for k in keys}
        ep["images"] = n
        ep["part_peak"] = st.get("remote_part_peak", 0)
        out["epochs"].append(ep)
        prev = cur
    ld.close()
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("RESULT " + json.dumps(out), flush=True)


def stoker_bin():
    from stoker.cli import binary

    exe = os.environ.get("STOKER_BIN") or binary()
    if not exe:
        sys.exit("no stoker executable: build it with make")
    return exe


def prepare(a):
    os.makedirs(a.work, exist_ok=True)
    exe = stoker_bin()
    folder = os.path.join(a.work, f"synth-{a.images}")
    if not os.path.isdir(folder):
        subprocess.run([exe, "synth", folder + ".tmp", "--images", str(a.images), "--classes", "10",
                        "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
        os.rename(folder + ".tmp", folder)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    # tar adds a 512-byte header and padding a member: shards of about total / S
    size = int((total + a.images * 1024) / a.shards) + 1
    shards = os.path.join(a.work, f"shards-{a.images}-{a.shards}")
    if not os.path.isdir(shards):
        subprocess.run([exe, "pack", folder, shards + ".tmp", "--tar", "--shard-size", str(size)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.rename(shards + ".tmp", shards)
    return shards


def classify(log, part=PART):
    """The proxy's log [(method, path, range, status)] by kind of request."""
    kinds = {"list": 0, "classes": 0, "index": 0, "head": 0, "part": 0, "sample": 0, "other": 0}
    for method, path, rng, _ in log:
        if method == "HEAD":
            kinds["head"] += 1
        elif "list-type" in path:
            kinds["list"] += 1
        elif path.split("?")[0].endswith("classes.txt"):
            kinds["classes"] += 1
        elif path.split("?")[0].endswith(".stkidx"):
            kinds["index"] += 1
        elif path.split("?")[0].endswith(".tar"):
            # a part: from a multiple of P ("bytes=K*P-..."); a sample: elsewhere
            start = rng.split("=")[1].split("-")[0] if rng and "=" in rng else "0"
            kinds["part" if start.isdigit() and int(start) % part == 0 else "sample"] += 1
        else:
            kinds["other"] += 1
    return kinds


def model(N, shard_sizes, X, W, objects, remote_memory, shuffle_buffer, list_bytes_per_object=LIST_BYTES):
    """The model's counters for N samples in shards of these sizes (X bytes of
    indexes beside them) read by W ranks: per rank (open) and over all ranks
    (epoch). See the module's docstring and docs/remote.md."""
    S, D = len(shard_sizes), sum(shard_sizes)
    b = D / N  # bytes a sample takes in a shard (header and padding included)
    pages = math.ceil(objects / LIST_PAGE)
    parts = sum(math.ceil(z / PART) for z in shard_sizes)
    # samples that leave the shuffle buffer after their part was let go: a
    # sample waits in the buffer a geometric time of mean K, and the parts
    # kept for it span R' / b samples, R' what the read-ahead leaves of
    # remote_memory (at least half of it; half when it runs at its most)
    g = N * math.exp(-remote_memory / 2 / (b * shuffle_buffer))
    return {
        "open_requests_cold": pages + 1 + 1 + S,
        "open_requests_warm": pages + 1,
        "open_bytes_cold": objects * list_bytes_per_object + X,
        "parts": parts + (W - 1),
        "stragglers": g,
        "epoch_requests": parts + (W - 1) + g,
        "epoch_bytes_min": D + g * b,
        "epoch_bytes_max": D + g * b + (W - 1) * PART,
    }


# List prices of S3 Standard in US East (N. Virginia), as AWS publishes them
# (aws.amazon.com/s3/pricing) at the time of writing; they change, and
# other regions, tiers and agreements differ.
PRICE_GET = 0.0004 / 1000  # GET, HEAD: USD a request
PRICE_LIST = 0.005 / 1000  # LIST (priced as PUT, COPY, POST): USD a request
PRICE_OUT = {"same region (EC2)": 0.0, "other region": 0.02, "internet": 0.09}  # USD a GB
PREFIX_GET_RATE = 5500  # GET/HEAD a second a partitioned prefix (S3's documented rate)


def project(N, S, b, x, list_b, ranks, remote_memory, shuffle_buffer, rate):
    """The model at scale: N samples of b bytes (x bytes of index a sample) in
    S shards of equal size, per W of ranks; rate: images a second a rank."""
    size = N * b / S
    rows = []
    for W in ranks:
        m = model(N, [size] * S, N * x, W, 2 * S + 1, remote_memory, shuffle_buffer, list_b)
        # a rank's share under the window the parts kept span: fewer stragglers
        # (the measured W = 8 point, share 1.3 windows, had 0.63 of W = 1's)
        epoch_s = N / (W * rate)
        rows.append(dict(
            W=W, open_req=W * m["open_requests_cold"], open_gb=W * m["open_bytes_cold"] / 1e9,
            warm_req=W * m["open_requests_warm"], lists=W * math.ceil((2 * S + 1) / LIST_PAGE),
            parts=m["parts"], stragglers=m["stragglers"], epoch_req=m["epoch_requests"],
            epoch_gb=m["epoch_bytes_min"] / 1e9, epoch_gb_max=m["epoch_bytes_max"] / 1e9,
            rank_gb=m["epoch_bytes_min"] / W / 1e9, epoch_s=epoch_s,
            get_rate=m["epoch_requests"] / epoch_s, get_rate_parts=m["parts"] / epoch_s,
            cost_get=m["epoch_requests"] * PRICE_GET,
            cost_out={k: v * m["epoch_bytes_min"] / 1e9 for k, v in PRICE_OUT.items()},
            open_cost_get=W * (m["open_requests_cold"] - math.ceil((2 * S + 1) / LIST_PAGE)) * PRICE_GET
            + W * math.ceil((2 * S + 1) / LIST_PAGE) * PRICE_LIST))
    return rows


def print_projection(rows, N, S, b, x, remote_memory, shuffle_buffer, rate):
    print(f"\nat scale: {N:,} images of {b / 1e3:.0f} KB in {S} shards of {N * b / S / 1e6:.0f} MB, "
          f"indexes {x:.0f} B a sample, remote_memory {remote_memory >> 20} MiB, shuffle_buffer "
          f"{shuffle_buffer}, {rate} img/s a rank")
    print(f"{'W':>4} {'open GETs':>10} {'open GB':>8} {'warm':>6} {'parts':>7} {'stragglers':>10}"
          f" {'epoch GETs':>10} {'epoch GB':>9} {'GB/rank':>8} {'epoch s':>8} {'GET/s':>8}"
          f" {'parts/s':>8} {'$ GET':>7} {'$ out other':>11} {'$ out net':>10}")
    for r in rows:
        print(f"{r['W']:>4} {r['open_req']:>10,} {r['open_gb']:>8.1f} {r['warm_req']:>6,} {r['parts']:>7,}"
              f" {r['stragglers']:>10,.0f} {r['epoch_req']:>10,.0f} {r['epoch_gb']:>9.1f}"
              f" {r['rank_gb']:>8.2f} {r['epoch_s']:>8.1f} {r['get_rate']:>8,.0f} {r['get_rate_parts']:>8,.0f}"
              f" {r['cost_get']:>7.3f} {r['cost_out']['other region']:>11.2f}"
              f" {r['cost_out']['internet']:>10.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=4800)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--remote-memory", type=int, default=48 << 20,
                    help="remote_memory of each rank (default 48 MiB: below a rank's share, as at scale)")
    ap.add_argument("--shuffle-buffer", type=int, default=200,
                    help="shuffle_buffer (default 200: its window spans about 2.5 parts fewer than "
                         "remote_memory holds, as the defaults 1000 and 256 MiB do for 110 KB photos)")
    ap.add_argument("--work", default=os.path.join(REPO, "data", "bench-remote-scale"))
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--scale", default="1281167,1000",
                    help="the dataset the model is projected to: images,shards (ImageNet-1k's train set)")
    ap.add_argument("--scale-ranks", default="1,8,64,512")
    ap.add_argument("--rank-rate", type=int, default=2500,
                    help="images a second a rank consumes, for the request rate (default 2500)")
    ap.add_argument("--project-only", action="store_true",
                    help="print the tables from --json's earlier results, measure nothing")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--source", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--index-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if a.project_only:
        with open(a.json) as f:
            return report(a, json.load(f))

    shards = prepare(a)
    names = sorted(os.listdir(shards))
    tars = [n for n in names if n.endswith(".tar")]
    S = len(tars)
    sizes = [os.path.getsize(os.path.join(shards, n)) for n in tars]
    D = sum(sizes)
    X = sum(os.path.getsize(os.path.join(shards, n)) for n in names if n.endswith(".stkidx"))
    objects = len(names)
    N = a.images
    ranks = [int(w) for w in a.ranks.split(",")]
    s3 = servers.S3Server().start()
    proxy = servers.FaultProxy(s3.port, lifetime=7200.0).start()
    tmp = tempfile.mkdtemp(prefix="stoker-scale-")
    results = {"images": N, "shards": S, "shard_bytes": D, "shard_sizes": sizes, "index_bytes": X,
               "objects": objects, "part": PART, "epochs": a.epochs, "remote_memory": a.remote_memory,
               "shuffle_buffer": a.shuffle_buffer, "runs": {}}
    try:
        for n in names:
            s3.put("stoker", f"scale/{n}", os.path.join(shards, n))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        env.update(s3.env(endpoint=proxy.url))  # the proxy counts the requests by kind
        # the ranks import a copy of the package made now, so that a rebuild of
        # python/stoker/ during the run changes nothing they load
        pkg = os.path.join(tmp, "pkg")
        for attempt in range(5):
            shutil.rmtree(pkg, ignore_errors=True)
            shutil.copytree(os.path.join(REPO, "python", "stoker"), os.path.join(pkg, "stoker"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            if subprocess.run([sys.executable, "-c", "import stoker"], cwd=tmp,
                              env={**env, "PYTHONPATH": pkg}).returncode == 0:
                break
            time.sleep(10)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, env.get("PYTHONPATH")) if p)

        def launch(W, r, index_dir, epochs=a.epochs):
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--source", "s3://stoker/scale/",
                   "--rank", str(r), "--world", str(W), "--index-dir", index_dir,
                   "--batch", str(a.batch), "--epochs", str(epochs),
                   "--remote-memory", str(a.remote_memory), "--shuffle-buffer", str(a.shuffle_buffer)]
            return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def collect(p):
            out, err = p.communicate(timeout=3600)
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
            if p.returncode != 0 or not line:
                sys.exit(f"a rank failed (status {p.returncode}):\n{err[-3000:]}")
            return json.loads(line[-1][7:])

        for W in ranks:
            proxy.reset_counts()
            procs = [launch(W, r, os.path.join(tmp, f"w{W}-r{r}")) for r in range(W)]
            results["runs"][W] = [collect(p) for p in procs]
            results.setdefault("kinds", {})[W] = classify(list(proxy.log))
            print(f"  W={W}: done", file=sys.stderr, flush=True)
        # a warm open: rank 0 of W=1 again, its index folder filled
        proxy.reset_counts()
        warm = collect(launch(1, 0, os.path.join(tmp, f"w{ranks[0]}-r0"), epochs=0))
        results["warm_open"] = warm["open"]
        results["warm_kinds"] = classify(list(proxy.log))
    finally:
        proxy.stop()
        s3.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    report(a, results)


def report(a, results):
    """The measured table beside the model's figures, then the projection."""
    N, S, D, X = results["images"], results["shards"], results["shard_bytes"], results["index_bytes"]
    sizes, objects = results["shard_sizes"], results["objects"]
    a.remote_memory, a.shuffle_buffer = results["remote_memory"], results["shuffle_buffer"]
    a.epochs = results["epochs"]
    # (keys are numbers as measured, strings when read back from JSON)
    results["runs"] = {int(w): v for w, v in results["runs"].items()}
    results["kinds"] = {int(w): v for w, v in results["kinds"].items()}
    print(f"\n{N} images ({D / N / 1e3:.0f} KB each) in {S} shards of {D / S / 1e6:.1f} MB, "
          f"{objects} objects listed, indexes {X / N:.0f} B a sample; {a.epochs} epochs")
    print(f"{'W':>3} {'open req/rank':>14} {'model':>6} {'open KB/rank':>13} {'model':>7}"
          f" {'epoch req (all)':>16} {'model':>6} {'parts':>6} {'model':>6} {'samples':>8} {'model':>6}"
          f" {'epoch MB (all)':>15} {'model MB':>13} {'part peak MB/rank':>18} {'RSS MB/rank':>12}")
    for W, rs in results["runs"].items():
        m = model(N, sizes, X, W, objects, a.remote_memory, a.shuffle_buffer)
        k = results["kinds"][W]
        # the open's requests by kind (the loader starts the first batch's
        # parts as soon as it is open, so its own count may hold one more)
        o_req = (k["list"] + k["classes"] + k["index"] + k["head"]) / W
        o_kb = min(r["open"]["remote_bytes"] for r in rs) / 1e3
        # per epoch: the mean over the epochs (the next epoch's first parts are
        # requested while one ends, so a single epoch's delta is blurred)
        E = max(1, a.epochs)
        e_req = sum(e["remote_requests"] for r in rs for e in r["epochs"]) / E
        e_mb = sum(e["remote_bytes"] for r in rs for e in r["epochs"]) / E / 1e6
        peak = max(e["part_peak"] for r in rs for e in r["epochs"]) / 2**20
        rss = max(r["rss_mb"] for r in rs)
        print(f"{W:>3} {o_req:>14.0f} {m['open_requests_cold']:>6} {o_kb:>13.0f} "
              f"{m['open_bytes_cold'] / 1e3:>7.0f} {e_req:>16.0f} {m['epoch_requests']:>6.0f}"
              f" {k['part'] / E:>6.0f} {m['parts']:>6} {k['sample'] / E:>8.0f} {m['stragglers']:>6.0f}"
              f" {e_mb:>15.1f}"
              f" {m['epoch_bytes_min'] / 1e6:>6.1f}-{m['epoch_bytes_max'] / 1e6:<6.1f}"
              f" {peak:>18.1f} {rss:>12.0f}")
        for i, r in enumerate(rs):
            eps = ", ".join(f"{e['remote_requests']} req {e['remote_bytes'] / 1e6:.1f} MB"
                            f" {e['images']} img" for e in r["epochs"])
            print(f"      rank {i}: open {r['open']['remote_requests']} req "
                  f"{r['open']['remote_bytes'] / 1e3:.0f} KB; epochs: {eps}")
    print("requests by kind, all ranks, open and every epoch (the proxy's log):")
    for W, k in results["kinds"].items():
        print(f"  W={W}: " + ", ".join(f"{n} {v}" for n, v in k.items() if v))
    w = results["warm_open"]
    print(f"warm open (index folder filled): {w['remote_requests']} requests, "
          f"{w['remote_bytes'] / 1e3:.0f} KB (model "
          f"{model(N, sizes, X, 1, objects, a.remote_memory, a.shuffle_buffer)['open_requests_warm']}); "
          + ", ".join(f"{n} {v}" for n, v in results["warm_kinds"].items() if v))
    project_from(a, results)


def project_from(a, r):
    """The projection at --scale with what was measured: a sample's bytes in
    a shard and in its index, the listing's bytes an object."""
    N, S = (int(v) for v in a.scale.split(","))
    b = r["shard_bytes"] / r["images"]
    x = r["index_bytes"] / r["images"]
    # a listing's bytes an object: about 180 (a run whose open count came
    # before the first part: 457 KB, 451 KB of it the indexes, 35 objects)
    list_b = LIST_BYTES
    ranks = [int(w) for w in a.scale_ranks.split(",")]
    # remote_memory's default is 1/32 of the machine's memory, at least
    # 256 MiB and at most 4 GiB: both ends
    for R in (256 << 20, 4 << 30):
        rows = project(N, S, b, x, list_b, ranks, R, 1000, a.rank_rate)
        print_projection(rows, N, S, b, x, R, 1000, a.rank_rate)


if __name__ == "__main__":
    main()
