#!/usr/bin/env python3
"""Opening a large ImageFolder: stoker's scan and index against torchvision.

Generates (once, then reuses) a tree of --files tiny distinct JPEGs in
--classes class folders, then measures in one run:

  (a) cold scan: stoker's folder scan with no index, against the
      construction of torchvision's datasets.ImageFolder(root) (os.scandir);
      "cold" means no index: the page cache is warm for both, alternately;
  (b) with a warm index: stk_loader_create() to the first stk_loader_next();
  (c) the stat validation of the index alone (every recorded folder's mtime),
      and the whole open from the index (validation, read, checksum, table).

Each file is the same 16x16 JPEG of its class with a comment segment naming
the file, so every file is distinct (no hard-link limit) and still decodes.

usage: bench/scan_bench.py [--files 1280000] [--classes 1000] [--root DIR]
                           [--build build] [--repeat 3] [--clean] [--json]

Run it with a Python that has torchvision (otherwise (a) measures stoker only)
after building (cmake --build BUILD). --clean deletes the tree at the end.
"""
import argparse
import io
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The helper: times the internal scan, the index open and a loader's first
# batch. It links the static archive, as the tests do, to reach the scan.
HELPER_C = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/common.h"
#include "sources/index.h"
#include "sources/source.h"
#include "stoker.h"

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  const char *mode = argv[1], *root = argv[2], *idx = argv[3];
  char msg[1024];
  stk_options o;
  stk_options_init(&o);
  o.root = root;
  o.index_dir = idx;
  if (!strcmp(mode, "scan")) {           /* the scan alone, no index */
    int threads = argc > 4 ? atoi(argv[4]) : 0;
    stk__dataset ds;
    double t = stk__now();
    int rc = stk__folder_scan(&ds, root, threads, NULL, NULL, msg, sizeof msg);
    t = stk__now() - t;
    if (rc) { fprintf(stderr, "%s\n", msg); return 1; }
    printf("{\"seconds\": %.6f, \"samples\": %lld}\n", t, (long long)ds.n);
    stk__dataset_free(&ds);
    return 0;
  }
  if (!strcmp(mode, "open")) {           /* stk__folder_open with index=1 */
    o.index = 1;
    stk__source s;
    memset(&s, 0, sizeof s);
    double t = stk__now();
    int rc = stk__folder_open(&s, &o, msg, sizeof msg);
    t = stk__now() - t;
    if (rc) { fprintf(stderr, "%s\n", msg); return 1; }
    const stk__folder_stats *st = stk__folder_last();
    printf("{\"seconds\": %.6f, \"samples\": %lld, \"from_index\": %d, \"check_s\": %.6f, "
           "\"load_s\": %.6f, \"scan_s\": %.6f, \"write_s\": %.6f, \"dirs\": %lld, "
           "\"index_bytes\": %lld, \"written\": %d}\n",
           t, (long long)s.ds.n, st->from_index, st->check_s, st->load_s, st->scan_s,
           st->write_s, (long long)st->dirs, (long long)st->index_bytes, st->written);
    stk__source_close(&s);
    return 0;
  }
  if (!strcmp(mode, "loader")) {         /* create + first batch, index=1 */
    o.index = 1;
    o.threads = 2;
    o.batch_size = 256;
    o.pipeline = STK_PIPELINE_EVAL;
    stk_loader *l = NULL;
    stk_batch b;
    double t = stk__now();
    int rc = STK_LOADER_CREATE(&o, &l, msg, sizeof msg);
    double tc = stk__now() - t;
    if (!rc) rc = stk_loader_next(l, &b);
    t = stk__now() - t;
    if (rc) { fprintf(stderr, "%s\n", l ? stk_loader_error(l) : msg); return 1; }
    printf("{\"seconds\": %.6f, \"create_s\": %.6f, \"from_index\": %d, \"samples\": %lld}\n",
           t, tc, stk__folder_last()->from_index, (long long)stk_loader_num_samples(l));
    stk_batch_release(l, &b);
    stk_loader_destroy(l);
    return 0;
  }
  return 2;
}
"""


def class_jpeg(c):
    """A 16x16 JPEG of one colour per class."""
    from PIL import Image
    img = Image.new("RGB", (16, 16), ((c * 37) % 256, (c * 91) % 256, (c * 53) % 256))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def write_class(args):
    root, c, count, first = args
    base = class_jpeg(c)
    d = os.path.join(root, f"n{c:08d}")
    os.makedirs(d, exist_ok=True)
    for i in range(first, first + count):
        name = f"n{c:08d}_{i}.JPEG"
        com = name.encode()
        # SOI, then a COM segment (FF FE, big-endian length including itself)
        data = base[:2] + b"\xff\xfe" + (len(com) + 2).to_bytes(2, "big") + com + base[2:]
        fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)
    return count


def generate(root, files, classes, procs):
    marker = root.rstrip("/") + ".complete"  # beside the tree: not a file of it
    want = f"{files} {classes}\n"
    if os.path.exists(marker) and open(marker).read() == want:
        return False
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(root)
    per, extra = divmod(files, classes)
    jobs = [(root, c, per + (c < extra), 0) for c in range(classes)]
    t = time.perf_counter()
    with multiprocessing.Pool(procs) as pool:
        done = 0
        for n in pool.imap_unordered(write_class, jobs, chunksize=4):
            done += n
            if sys.stderr.isatty():
                print(f"\rgenerating {done}/{files}", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"generated {files} files in {classes} classes under {root} in "
          f"{time.perf_counter() - t:.1f} s", file=sys.stderr)
    with open(marker, "w") as f:
        f.write(want)
    return True


def build_helper(build, work):
    src = os.path.join(work, "scan_helper.c")
    exe = os.path.join(work, "scan_helper")
    with open(src, "w") as f:
        f.write(HELPER_C)
    lib = os.path.join(build, "libstoker_static.a")
    if not os.path.exists(lib):
        sys.exit(f"{lib} not found: build first (cmake -S . -B {build} && cmake --build {build})")
    cc = os.environ.get("CC", "cc")
    # the archive's dependencies, as CMake links them
    libs = subprocess.run(["pkg-config", "--libs", "spng"], capture_output=True,
                          text=True).stdout.split()
    cmd = [cc, "-O2", "-std=c11", "-I", os.path.join(REPO, "include"), "-I",
           os.path.join(REPO, "src"), src, lib, *libs, "-ljpeg", "-lpthread", "-lm", "-ldl",
           "-o", exe]
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.exists(cache) and "STK_SANITIZE:BOOL=ON" in open(cache).read():
        cmd.insert(1, "-fsanitize=address,undefined")
    subprocess.run(cmd, check=True)
    return exe


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


TV_CODE = r"""
import sys, time, json
from torchvision import datasets
t = time.perf_counter()
d = datasets.ImageFolder(sys.argv[1])
t = time.perf_counter() - t
print(json.dumps({"seconds": t, "samples": len(d.samples)}))
"""


def have_torchvision():
    return subprocess.run([sys.executable, "-c", "import torchvision"],
                          capture_output=True).returncode == 0


def summary(xs):
    return {"min": min(xs), "median": statistics.median(xs), "runs": xs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=1_280_000)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--root", default=None,
                    help="where the tree goes (default: data/scan-bench-FILES in the repository)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="scan threads (0 = the default)")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 2,
                    help="processes writing the tree")
    ap.add_argument("--clean", action="store_true", help="delete the tree at the end")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root or os.path.join(REPO, "data", f"scan-bench-{a.files}"))
    if generate(root, a.files, a.classes, a.procs):
        time.sleep(2.5)  # let the newest folder mtimes age past the index's racy window
    work = tempfile.mkdtemp(prefix="stoker-scan-bench-")
    res = {"files": a.files, "classes": a.classes, "root": root, "cpus": os.cpu_count()}
    try:
        exe = build_helper(os.path.abspath(a.build), work)
        idx = os.path.join(work, "index")
        tv = have_torchvision()
        scan, tvs = [], []
        # (a) alternately, so that both see the same page cache; a first
        # untimed pass warms it
        run_json([exe, "scan", root, idx, str(a.threads)])
        for _ in range(a.repeat):
            r = run_json([exe, "scan", root, idx, str(a.threads)])
            scan.append(r["seconds"])
            res["samples"] = r["samples"]
            if tv:
                r2 = run_json([sys.executable, "-c", TV_CODE, root])
                tvs.append(r2["seconds"])
                if r2["samples"] != r["samples"]:
                    sys.exit(f"torchvision finds {r2['samples']} samples, stoker {r['samples']}")
        res["stoker_scan_s"] = summary(scan)
        if a.threads == 0:
            res["stoker_scan_1thread_s"] = summary(
                [run_json([exe, "scan", root, idx, "1"])["seconds"] for _ in range(a.repeat)])
        if tv:
            res["torchvision_imagefolder_s"] = summary(tvs)
        # the first open writes the index (scan + write), later ones read it
        first = run_json([exe, "open", root, idx])
        res["index_write"] = first
        opens = [run_json([exe, "open", root, idx]) for _ in range(a.repeat)]
        if not all(o["from_index"] for o in opens):
            sys.exit(f"the index was not reused: {opens}")
        res["index_open_s"] = summary([o["seconds"] for o in opens])
        res["index_check_s"] = summary([o["check_s"] for o in opens])
        res["index_dirs"] = opens[0]["dirs"]
        res["index_bytes"] = opens[0]["index_bytes"]
        lds = [run_json([exe, "loader", root, idx]) for _ in range(a.repeat)]
        res["loader_first_batch_s"] = summary([x["seconds"] for x in lds])
        res["loader_create_s"] = summary([x["create_s"] for x in lds])
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if a.clean:
            shutil.rmtree(root, ignore_errors=True)
            try:
                os.remove(root.rstrip("/") + ".complete")
            except OSError:
                pass
    if a.json:
        print(json.dumps(res))
        return
    f = lambda s: f"{s['median']:.3f} s (min {s['min']:.3f})"
    print(f"{res['samples']} files in {a.classes} classes, {res['cpus']} CPUs, medians of "
          f"{a.repeat}")
    print(f"  (a) stoker scan, no index            {f(res['stoker_scan_s'])}")
    if "stoker_scan_1thread_s" in res:
        print(f"      stoker scan, 1 thread            {f(res['stoker_scan_1thread_s'])}")
    if tv:
        print(f"      torchvision ImageFolder(root)    {f(res['torchvision_imagefolder_s'])}")
    w = res["index_write"]
    print(f"      first open with index=1          {w['seconds']:.3f} s (scan {w['scan_s']:.3f}, "
          f"write {w['write_s']:.3f}, {w['index_bytes']} bytes)")
    print(f"  (b) warm index: create + 1st batch   {f(res['loader_first_batch_s'])} "
          f"(create {f(res['loader_create_s'])})")
    print(f"  (c) index stat validation            {f(res['index_check_s'])} "
          f"({res['index_dirs']} folders)")
    print(f"      whole open from the index        {f(res['index_open_s'])}")


if __name__ == "__main__":
    main()
