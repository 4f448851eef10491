#!/usr/bin/env python3
"""A pinned batch copied with non_blocking=True and freed at once must reach
the GPU as it was: the loader may not refill its slot while the copy waits.

usage: bench/pinned_reuse.py FOLDER [--without-guard]

The steps: take ref = x.clone(); queue a long kernel (torch.cuda._sleep) so
the copy waits; g = x.cuda(non_blocking=True); del x, y; pull three more
batches; synchronise; g must equal ref. --without-guard turns the loader's
guard off (ImageLoader._guard_pinned), to show the same steps fail without
it. Prints one JSON line; exits 1 when a copy read another batch's pixels.
"""
import json
import sys

import torch

import stoker


def main():
    folder = sys.argv[1]
    if "--without-guard" in sys.argv:
        stoker.ImageLoader._guard_pinned = lambda self, images: None
    bad = checked = 0
    with stoker.ImageLoader(folder, batch_size=64, size=64, threads=4, pin_memory=True,
                            prefetch=1, seed=3) as ld:
        it = iter(ld)
        for _ in range(8):
            x, y = next(it)
            ref = x.clone()
            torch.cuda._sleep(10**9)  # the copy below waits behind this
            g = x.cuda(non_blocking=True)
            del x, y
            for _ in range(3):
                next(it)
            torch.cuda.synchronize()
            checked += 1
            bad += not torch.equal(g.cpu(), ref)
    print(json.dumps({"guard": "--without-guard" not in sys.argv, "checked": checked,
                      "rewritten_under_copy": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
