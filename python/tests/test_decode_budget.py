"""One memory bound for the loader: max_decode_bytes is the decode memory of
all the loader's threads together (issue 32, item 2).

A child interpreter (its own peak: VmHWM, not ru_maxrss, which exec carries
over from pytest) reads, with 2, 8 and 16 threads, a folder of the four
decode-budget bombs, two pixel bombs just under max_pixels (a 13376x13376
JPEG of 2.8 MB and a PNG of 0.5 MB) and real-sized photos (24 MP
progressive 4:4:4 JPEGs, whose coefficient buffers alone take 137 MiB, a 50
MP baseline JPEG and a 24 MP PNG). Every photo must decode with the default
budget, every bomb over it must be refused naming max_decode_bytes, and the
peak must stay under the bound docs/python.md gives:

    RSS before the loader + max_decode_bytes
        + threads x (32 MiB + the largest file) + the batch slots

Before the budget was shared, each thread could take a whole budget (and
kept its buffers at their largest until the loader closed): 16 threads on
these files went past 1.5 GB, and the 24 MP progressive photos were refused.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("PIL.Image")
import stoker  # noqa: F401,E402

from test_hostile_budget import PEAK_FN, _jpeg_bomb, _png_bomb  # noqa: E402

MAKE = textwrap.dedent("""
    import sys
    import numpy as np
    from PIL import Image
    root = sys.argv[1]
    rng = np.random.default_rng(5)
    def photo(w, h):
        # a smooth field with detail: upscaled noise plus fine noise
        small = Image.fromarray(rng.integers(0, 256, (h // 64, w // 64, 3), dtype=np.uint8))
        im = np.asarray(small.resize((w, h), Image.BILINEAR), dtype=np.int16)
        im = im + rng.integers(-12, 13, (h, w, 1), dtype=np.int16)
        return Image.fromarray(np.clip(im, 0, 255).astype(np.uint8))
    for k in range(3):
        photo(6000, 4000).save(f"{root}/photo24-prog444-{k}.jpg", quality=90, progressive=True,
                               subsampling=0)
    photo(8192, 6144).save(f"{root}/photo50-base420.jpg", quality=90, subsampling=2)
    photo(6000, 4000).save(f"{root}/photo24.png", compress_level=1)
    flat = Image.new("RGB", (13376, 13376), (120, 130, 140))
    flat.save(f"{root}/pixels-13376.jpg", quality=20)
    flat.save(f"{root}/pixels-13376.png", compress_level=9)
""")

CHILD = textwrap.dedent("""
    import json, sys, time
    import torch  # what a training process has loaded
    import stoker

    PEAK_FN
    def rss_kb():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    base = peak_kb()
    threads = int(sys.argv[2])
    t0 = time.perf_counter()
    with stoker.ImageLoader(sys.argv[1], batch_size=2, threads=threads, pipeline="eval",
                            size=64, on_error="skip", max_skipped_fraction=1,
                            max_consecutive_failures=0) as ld:
        n = sum(len(labels) for _, labels in ld)
        skipped = ld.stats()["skipped_files"]
        after = rss_kb()
    print(json.dumps({"images": n, "skipped": skipped, "s": time.perf_counter() - t0,
                      "base_kb": base, "peak_kb": peak_kb(), "after_kb": after}))
""").replace("PEAK_FN", PEAK_FN)

PHOTOS = 5


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    d = root / "c"
    d.mkdir()
    (d / "ztxt.png").write_bytes(_png_bomb(b"zTXt", 1 << 30))
    (d / "iccp.png").write_bytes(_png_bomb(b"iCCP", 1 << 30))
    (d / "prog444.jpg").write_bytes(_jpeg_bomb(13000, 1))
    (d / "prog420.jpg").write_bytes(_jpeg_bomb(13000, 2))
    subprocess.run([sys.executable, "-c", MAKE, str(d)], check=True, timeout=600)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("threads", [2, 8, 16])
def test_decode_memory_is_one_bound(mixed, threads):
    r = subprocess.run([sys.executable, "-c", CHILD, str(mixed), str(threads)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    files = [os.path.join(mixed, "c", f) for f in os.listdir(os.path.join(mixed, "c"))]
    largest = max(os.path.getsize(f) for f in files)
    budget = 384 << 20
    slots = 2 * 2 * 64 * 64 * 3 * 4 * 4  # generous: batches of 2 float32 64x64 images
    bound = out["base_kb"] * 1024 + budget + threads * ((32 << 20) + largest) + slots
    print(f"\n{threads} threads: peak RSS {out['peak_kb'] / 1024:.0f} MB "
          f"(before the loader {out['base_kb'] / 1024:.0f} MB; bound {bound / 2**20:.0f} MiB), "
          f"after the epoch {out['after_kb'] / 1024:.0f} MB, {out['s']:.1f} s")
    skipped = dict(out["skipped"])
    assert out["images"] == PHOTOS, skipped
    # the bombs, and both 13376x13376 files: eval decodes the JPEG at 1/1,
    # 11,700 of its rows over 13,376 columns, 393 MiB of pixels
    assert len(skipped) == 6, skipped
    for path, reason in skipped.items():
        assert "max_decode_bytes" in reason, (path, reason)
    assert out["peak_kb"] * 1024 < bound
