#!/usr/bin/env python3
"""Remote tar shards: stoker from S3 against the same shards on local disk and
against WebDataset, on 2 cores, in one run.

A synthetic ImageFolder (`stoker synth`) is packed into WebDataset shards
(`stoker pack --tar`), uploaded to a local SeaweedFS (python/tests/servers.py:
127.0.0.1 only, with credentials), and read with the classic train recipe
(RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize):

  stoker local     ImageLoader(SHARD_DIR, B, pipeline="train", threads=T)
  stoker s3        ImageLoader("s3://bench/shards/", ...)  (AWS_* variables of the server)
  stoker s3+lat    the same through a proxy adding each of --latency's delays (s,
                   comma-separated) to every request
  stoker foreign   the same shards without their .stkidx (as written by other
                   tools), a fresh index folder: the first epoch streams them
                   (timed alone), then the later epochs read the index it kept
  webdataset s3    DataLoader(wds.WebDataset("pipe:curl -s --aws-sigv4 ... URL{..}")
                   .shuffle(1000).decode("pil").to_tuple("jpg", "cls")
                   .map_tuple(transform, int), batch_size=B, num_workers=T)

Each variant runs in a child process pinned to the same --cores (2 by
default: the first two CPUs this process may use), first a warm-up epoch,
then --epochs timed epochs; --rounds rounds run every variant in turn
(interleaved, so that a change of the machine's load hits them all), and
the table gives the median img/s, its ratio to the median of stoker on
local disk, the requests and bytes per timed epoch, and the peak RSS of the
child and its workers together. --rss-epochs N adds a run of N epochs of
stoker s3:// that reports the RSS after each.

usage: bench/remote.py [--images 4000] [--shard-size 8000000] [--threads 2]
                       [--batch 64] [--epochs 2] [--latency 0.02,0.05]
                       [--rounds 3] [--rss-epochs 10] [--work DIR]
The tools come from scripts/install-deps.sh --python (.venv-tools: weed,
webdataset): when webdataset is not importable, the virtualenv's packages
are added after this interpreter's own if it was made by the same Python
version, else the run re-executes itself under .venv-tools/bin/python.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
if "stoker" not in sys.modules:
    try:
        import stoker  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))

import servers  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def tree_cpu(pid):
    """CPU seconds (user + system) of process pid and its children, from /proc:
    the S3 server shares the cores with the loader, and this says how much
    of them it took."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(p) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tck
    return total


def peak_rss_mb():
    """Peak RSS of this process plus the largest of its waited-for children (DataLoader workers), MB."""
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (me + kids) / 1024.0


# ---- the children: one variant each -------------------------------------------------

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def child_stoker(a):
    import tempfile

    import stoker

    kw = {}
    if a.child == "foreign":  # a fresh index folder: the first epoch streams the shards
        kw["index_dir"] = tempfile.mkdtemp(prefix="stoker-bench-idx-")
        kw["stream_first_epoch"] = True
    t0 = time.monotonic()
    ld = stoker.ImageLoader(a.source, batch_size=a.batch, pipeline="train", threads=a.threads, seed=0,
                            remote_memory=a.remote_memory, **kw)
    opened = time.monotonic() - t0
    out = dict(open_seconds=opened)
    if a.child == "foreign":  # the streamed first epoch, timed alone
        t0 = time.monotonic()
        first = sum(x.shape[0] for x, _ in ld)
        sf = ld.stats()
        out.update(first_images=first, first_seconds=time.monotonic() - t0,
                   first_streaming=bool(sf.get("remote_streaming")),
                   first_requests=sf.get("remote_requests", 0), first_bytes=sf.get("remote_bytes", 0))
    else:
        for x, _ in ld:  # warm-up epoch
            pass
    st0 = ld.stats()
    t0 = time.monotonic()
    images, rss = 0, []
    for _ in range(a.epochs):
        for x, _ in ld:
            images += x.shape[0]
        rss.append(round(rss_mb()))
    secs = time.monotonic() - t0
    st = ld.stats()  # (the foreign loader reopened after its first epoch: its counters restarted)
    base = st0 if a.child != "foreign" else {}
    ld.close()
    out.update(images=images, seconds=secs, rss_per_epoch_mb=rss,
               remote_requests=(st.get("remote_requests", 0) - base.get("remote_requests", 0)) / a.epochs,
               remote_bytes=(st.get("remote_bytes", 0) - base.get("remote_bytes", 0)) / a.epochs,
               remote_retries=st.get("remote_retries", 0), remote_part_peak=st.get("remote_part_peak", 0))
    return out


def child_wds(a):
    import torch
    import webdataset as wds
    from torchvision import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = (wds.WebDataset(a.source, shardshuffle=100, empty_check=False)
          .shuffle(1000).decode("pil").to_tuple("jpg;png", "cls").map_tuple(tf, int))
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.threads)
    t0 = time.monotonic()
    for _ in dl:  # warm-up epoch
        pass
    warm = time.monotonic() - t0
    t0 = time.monotonic()
    images = 0
    for _ in range(a.epochs):
        for x, _ in dl:
            images += x.shape[0]
    secs = time.monotonic() - t0
    return dict(images=images, seconds=secs, open_seconds=None, warmup_seconds=warm)


def run_child(a):
    if os.environ.get("STOKER_BENCH_SITE"):
        sys.path.append(os.environ["STOKER_BENCH_SITE"])
    os.sched_setaffinity(0, [int(c) for c in a.cores.split(",")])
    import torch

    torch.set_num_threads(1)
    r = child_wds(a) if a.child == "wds" else child_stoker(a)
    r["load_avg"] = os.getloadavg()[0]
    r["rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(r), flush=True)


# ---- the parent --------------------------------------------------------------------------

def stoker_bin():
    from stoker.cli import binary

    exe = os.environ.get("STOKER_BIN") or binary()
    if not exe:
        sys.exit("no stoker executable: build it with make")
    return exe


def prepare(a):
    work = a.work
    os.makedirs(work, exist_ok=True)
    folder = os.path.join(work, f"synth-{a.images}")
    shards = os.path.join(work, f"shards-{a.images}-{a.shard_size}")
    exe = stoker_bin()
    if not os.path.isdir(folder):
        subprocess.run([exe, "synth", folder + ".tmp", "--images", str(a.images), "--classes", "10",
                        "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
        os.rename(folder + ".tmp", folder)
    if not os.path.isdir(shards):
        subprocess.run([exe, "pack", folder, shards, "--tar", "--shard-size", str(a.shard_size)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    names = sorted(f for f in os.listdir(shards) if f.endswith(".tar"))
    return shards, names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--shard-size", type=int, default=8_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--latency", default="0.02,0.05",
                    help="comma-separated delays (s) the proxy adds to every request, one variant each")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every variant this many times, interleaved; the table gives medians")
    ap.add_argument("--rss-epochs", type=int, default=0,
                    help="also run stoker s3:// for this many epochs, with the RSS after each")
    ap.add_argument("--remote-memory", type=int, default=0,
                    help="stoker's remote_memory in bytes (0: the default, 256 MiB)")
    ap.add_argument("--cores", default=None, help="CPUs of the children (default: the first 2 allowed)")
    ap.add_argument("--work", default=os.path.join(REPO, "data", "bench-remote"))
    ap.add_argument("--only", default=None,
                    help="comma-separated variants: local,s3,s3lat20,s3lat50,... (ms),foreign,wds")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--source", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return run_child(a)

    try:
        import webdataset  # noqa: F401
    except ImportError:
        # the tools' virtualenv, when made by a Python of this version: its
        # packages after this interpreter's own (torch stays the system's)
        site = os.path.join(servers.TOOLS_VENV, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
        if os.path.isdir(site):
            # after this interpreter's own packages in the children too (a
            # PYTHONPATH entry would come first, and the virtualenv's numpy
            # would shadow the one torch was built with)
            sys.path.append(site)
            os.environ["STOKER_BENCH_SITE"] = site
    try:
        import webdataset  # noqa: F401,F811
    except ImportError:
        py = servers.tools_python()
        if py and not os.environ.get("STOKER_BENCH_REEXEC"):
            os.environ["STOKER_BENCH_REEXEC"] = "1"
            os.execv(py, [py, *sys.argv])
        sys.exit("webdataset is not installed: scripts/install-deps.sh --python puts it in .venv-tools")
    if a.cores is None:
        a.cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:2])
    curl = shutil.which("curl")
    if not curl:
        sys.exit("no curl (WebDataset's pipe: URLs use it)")

    shards, names = prepare(a)
    n_images = a.images
    s3 = servers.S3Server().start()
    proxy = None
    try:
        t0 = time.monotonic()
        for name in names:
            s3.put("stoker", f"bench/{name}", os.path.join(shards, name))
            s3.put("stoker", f"foreign/{name}", os.path.join(shards, name))  # no .stkidx
            idx = os.path.join(shards, name + ".stkidx")
            if os.path.exists(idx):
                s3.put("stoker", f"bench/{name}.stkidx", idx)
        upload = time.monotonic() - t0
        proxy = servers.FaultProxy(s3.port).start()
        last = len(names) - 1
        width = len(names[0]) - len("shard-.tar")
        brace = "{%0*d..%0*d}" % (width, 0, width, last)
        auth = f"--aws-sigv4 aws:amz:{s3.region}:s3 --user {s3.access_key}:{s3.secret_key}"
        lats = [float(x) for x in a.latency.split(",") if float(x) > 0]
        variants = [
            ("local", "stoker local disk", "stoker", shards, {}, 0),
            ("s3", "stoker s3://", "stoker", "s3://stoker/bench/", s3.env(), 0),
            *[(f"s3lat{lat * 1000:.0f}", f"stoker s3:// +{lat * 1000:.0f} ms/request", "stoker",
               "s3://stoker/bench/", s3.env(endpoint=proxy.url), lat) for lat in lats],
            ("foreign", "stoker s3:// foreign, later epochs", "foreign", "s3://stoker/foreign/",
             s3.env(), 0),
            ("wds", "webdataset pipe:curl s3", "wds",
             f"pipe:{curl} -s -f {auth} {s3.endpoint}/stoker/bench/shard-{brace}.tar", s3.env(), 0),
        ]
        if a.only:
            keep = a.only.split(",")
            variants = [v for v in variants if v[0] in keep]
        runs = [v for _ in range(a.rounds) for v in variants]
        if a.rss_epochs:
            runs.append(("rss", f"stoker s3:// over {a.rss_epochs} epochs", "stoker", "s3://stoker/bench/",
                         s3.env(), 0))
        results = {}
        for key, label, kind, source, env_extra, lat in runs:
            proxy.latency = lat
            epochs = a.rss_epochs if key == "rss" else a.epochs
            env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
            env.update(env_extra)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(
                os.path.abspath(sys.modules["stoker"].__file__))) if "stoker" in sys.modules else None,
                os.path.join(REPO, "python"), env.get("PYTHONPATH")) if p)
            cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--source", source,
                   "--threads", str(a.threads), "--batch", str(a.batch), "--epochs", str(epochs),
                   "--remote-memory", str(a.remote_memory),
                   "--cores", a.cores]
            proxy.reset_counts()
            srv0, me0 = tree_cpu(s3.proc.pid), resource.getrusage(resource.RUSAGE_SELF)
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            me1 = resource.getrusage(resource.RUSAGE_SELF)
            srv_cpu = tree_cpu(s3.proc.pid) - srv0
            # the proxy's threads are this process's: its CPU while the child ran
            proxy_cpu = (me1.ru_utime + me1.ru_stime) - (me0.ru_utime + me0.ru_stime)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if r.returncode != 0 or not line:
                print(f"{label}: failed (status {r.returncode})\n{r.stderr[-3000:]}", file=sys.stderr)
                continue
            res = json.loads(line[-1][7:])
            res["img_s"] = res["images"] / res["seconds"]
            res["server_cpu_s"] = srv_cpu
            res["proxy_cpu_s"] = proxy_cpu if lat else 0.0
            if lat:
                res["proxy_requests"] = proxy.requests
            if "first_seconds" in res:
                res["first_img_s"] = res["first_images"] / res["first_seconds"]
            results.setdefault(key, (label, []))[1].append(res)
            print(f"  {label}: {res['img_s']:.0f} img/s"
                  + (f" (first epoch {res['first_img_s']:.0f})" if "first_img_s" in res else "")
                  + f", load {res['load_avg']:.1f}", file=sys.stderr, flush=True)
    finally:
        if proxy:
            proxy.stop()
        s3.stop()

    report(a, results, n_images, names, upload)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2 if n else float("nan")


def report(a, results, n_images, names, upload):
    med = {k: median([r["img_s"] for r in rs]) for k, (_, rs) in results.items()}
    base = med.get("local")
    print(f"\n{n_images} synthetic images in {len(names)} shards, batch {a.batch}, {a.threads} threads/workers, "
          f"cores {a.cores}, {a.epochs} timed epochs after a warm-up, {a.rounds} interleaved round(s), "
          f"medians; upload took {upload:.1f} s")
    print(f"{'variant':<36} {'img/s':>7} {'vs local':>9} {'rounds':>22} {'req/epoch':>10} {'MB/epoch':>9}"
          f" {'peak RSS MB':>12} {'server CPU s':>13} {'load':>5}")
    for key, (label, rs) in results.items():
        if key == "rss":
            continue
        ratio = f"{med[key] / base:.2f}x" if base else "-"
        each = ",".join(f"{r['img_s']:.0f}" for r in rs)
        req = f"{median([r.get('remote_requests', 0) for r in rs]):.0f}" if key not in ("wds", "local") else ""
        mb = f"{median([r.get('remote_bytes', 0) for r in rs]) / 1e6:.0f}" if key not in ("wds", "local") else ""
        print(f"{label:<36} {med[key]:>7.0f} {ratio:>9} {each:>22} {req:>10} {mb:>9}"
              f" {median([r['rss_mb'] for r in rs]):>12.0f} {median([r['server_cpu_s'] for r in rs]):>13.1f}"
              f" {median([r['load_avg'] for r in rs]):>5.1f}")
        if key == "foreign":
            first = median([r["first_img_s"] for r in rs])
            ratio1 = f"{first / base:.2f}x" if base else "-"
            each1 = ",".join("%.0f" % r["first_img_s"] for r in rs)
            print(f"{'stoker s3:// foreign, first epoch':<36} {first:>7.0f} {ratio1:>9} {each1:>22} "
                  f"{median([r['first_requests'] for r in rs]):>10.0f} "
                  f"{median([r['first_bytes'] for r in rs]) / 1e6:>9.0f}   "
                  f"(first/later {first / med[key]:.2f}x; streamed: "
                  f"{all(r['first_streaming'] for r in rs)})")
    if "rss" in results:
        r = results["rss"][1][0]
        print(f"RSS after each of {a.rss_epochs} epochs of stoker s3:// (MB): {r['rss_per_epoch_mb']}; "
              f"parts peak {r['remote_part_peak'] / 2**20:.0f} MiB; {r['img_s']:.0f} img/s")
    print("(req/epoch, MB/epoch: stoker's remote statistics over the timed epochs; the foreign first"
          " epoch's include the open; server CPU: over each whole run, warm-up included, on the same"
          " cores; load: the 1-minute load average at the end of each run)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({k: v[1] for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
