#!/usr/bin/env python3
"""`stoker pack DIR s3://... --tar`: two builds side by side against a local
SeaweedFS (python/tests/servers.py: 127.0.0.1 only, with credentials).

Each round packs the same folder once with every binary given (in turn,
the order alternating between rounds), each into a prefix of its own, and
times the whole command (listing, packing, uploading, classes.txt). The
table gives each binary's median over the rounds and the ratio to the
first binary, with the CPU seconds (user + system) of the pack and of the
server during the run: other work on a shared machine changes the times,
not these. Each run's line also gives the load average (1 min) and how
idle the CPUs were in the second before it; --settle S makes each run
first wait (up to S seconds) for a second with the CPUs at least 75% idle,
so that a burst of other work does not fall on one binary's runs only.
The objects of the first round are read back (GET) and must be the same
bytes, by SHA-256, for every binary.

usage: bench/pack_s3.py DIR BIN [BIN ...] [--rounds 3] [--shard-size S]
  DIR  an image folder, e.g. made by
       build/stoker synth DIR --images 4000 --classes 40 --seed 0
  BIN  a stoker CLI: the first is the baseline (e.g. a build of the commit
       before a change, from a git worktree), the others are compared to it
`weed` comes from scripts/install-deps.sh --python (.venv-tools), or $STOKER_WEED.
"""
import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python", "tests"))

import servers  # noqa: E402


def proc_cpu(pid):
    """CPU seconds (user + system) of process pid so far."""
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def cpu_idle(seconds=1.0):
    """The fraction of CPU time idle over the next `seconds` (/proc/stat)."""
    def sample():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return v[3] + v[4], sum(v)
    i0, t0 = sample()
    time.sleep(seconds)
    i1, t1 = sample()
    return (i1 - i0) / max(1, t1 - t0)


def settle(limit):
    """Waits up to `limit` s for a second with the CPUs 75% idle; the idle
    fraction of the last second."""
    end = time.monotonic() + limit
    idle = cpu_idle()
    while idle < 0.75 and time.monotonic() < end:
        idle = cpu_idle()
    return idle


def digests(srv, prefix):
    """{name: sha256} of every object under prefix."""
    out = {}
    for key in srv.list(srv.bucket, prefix):
        out[key[len(prefix):]] = hashlib.sha256(srv.get(srv.bucket, key)).hexdigest()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("bins", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shard-size", default=None, help="--shard-size of stoker pack (its default)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait for idle CPUs before each run (0: none)")
    a = ap.parse_args()
    srv = servers.S3Server().start()
    try:
        env = {k: v for k, v in os.environ.items() if k not in servers.S3Server.CLEARED}
        env.update(srv.env())
        times = {b: [] for b in a.bins}
        cpu = {b: [] for b in a.bins}
        server = {b: [] for b in a.bins}
        first = {}
        for r in range(a.rounds):
            order = a.bins if r % 2 == 0 else list(reversed(a.bins))
            for i, b in enumerate(order):
                prefix = f"bench-r{r}-b{a.bins.index(b)}/"
                cmd = [b, "pack", a.dir, f"s3://{srv.bucket}/{prefix}", "--tar"]
                if a.shard_size:
                    cmd += ["--shard-size", a.shard_size]
                idle = settle(a.settle) if a.settle > 0 else cpu_idle()
                load = os.getloadavg()[0]
                r0, s0 = resource.getrusage(resource.RUSAGE_CHILDREN), proc_cpu(srv.proc.pid)
                t0 = time.perf_counter()
                p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                dt = time.perf_counter() - t0
                r1, s1 = resource.getrusage(resource.RUSAGE_CHILDREN), proc_cpu(srv.proc.pid)
                c = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
                if p.returncode:
                    sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr.decode()[-2000:]}")
                times[b].append(dt)
                cpu[b].append(c)
                server[b].append(s1 - s0)
                print(f"round {r + 1}  {b}: {dt:.2f} s, pack CPU {c:.2f} s, server CPU "
                      f"{s1 - s0:.2f} s, load {load:.1f}, idle before {idle:.0%}", flush=True)
                if r == 0:
                    first[b] = digests(srv, prefix)
        ref = first[a.bins[0]]
        for b in a.bins[1:]:
            if first[b] != ref:
                sys.exit(f"{b} uploaded other bytes than {a.bins[0]}: {first[b]} vs {ref}")
        print(f"\nsame objects from every binary: {sorted(ref)}")
        base = statistics.median(times[a.bins[0]])
        print(f"\n{'binary':44s} {'median s':>9s} {'rounds':>20s} {'speedup':>8s} "
              f"{'pack CPU s':>10s} {'server CPU s':>12s}")
        for b in a.bins:
            m = statistics.median(times[b])
            rounds = " ".join(f"{t:.2f}" for t in times[b])
            print(f"{b:44s} {m:9.2f} {rounds:>20s} {base / m:7.2f}x "
                  f"{statistics.median(cpu[b]):10.2f} {statistics.median(server[b]):12.2f}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
