"""The modern recipe on a GPU: the loader alone and a model fed by it, with and
without the augmentations, from JPEGs and from a pre-decoded cache, side by
side in one run.

    python3 bench/augment_gpu.py DATA CACHE [--threads 14] [--json]

DATA is an ImageFolder tree of JPEGs, CACHE a cache packed from it
(stoker pack DATA CACHE --cache --max-side 256). Rows:

* loader alone: images/s of ImageLoader(device="cuda"), batch 256, for the
  classic train pipeline (RandomResizedCrop(176) + flip + normalise) and for
  torchvision's new recipe (+ TrivialAugmentWide, RandomErasing(0.1),
  RandomChoice(MixUp(0.2), CutMix(1.0)));
* fed: a ResNet training step (bf16 autocast, channels_last, SGD, batch 256)
  fed by each loader, as a share of the same step fed by one synthetic batch
  already on the GPU (the ceiling).
"""
import argparse
import json
import time

import torch
import torchvision

import stoker
from stoker import transforms as T

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def recipe(new, size=176):
    steps = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
    if new:
        steps.append(T.TrivialAugmentWide())
    steps += [T.ToTensor(), T.Normalize(MEAN, STD)]
    if new:
        steps.append(T.RandomErasing(0.1))
    mix = T.RandomChoice([T.MixUp(alpha=0.2), T.CutMix(alpha=1.0)]) if new else None
    return steps, mix


def loader(root, new, threads, size=176):
    steps, mix = recipe(new, size)
    return stoker.ImageLoader(root, 256, pipeline=steps, mix=mix, device="cuda", threads=threads,
                              drop_last=True, channels_last=True, dtype="bfloat16")


def loader_alone(root, new, threads, batches):
    ld = loader(root, new, threads)
    n, seen, t0 = 0, 0, None
    while n < batches:
        for x, _ in ld:
            seen += 1
            if seen == 3:  # after the warm-up
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            elif seen > 3:
                n += 1
                if n == batches:
                    break
    torch.cuda.synchronize()
    rate = n * 256 / (time.perf_counter() - t0)
    ld.close()
    return rate


def step_fn(arch, classes):
    model = getattr(torchvision.models, arch)(num_classes=classes).cuda().to(
        memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def fed(root, new, threads, arch, steps, classes):
    step = step_fn(arch, classes)
    if root is None:
        x = torch.randn(256, 3, 176, 176, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, classes, (256,), device="cuda")
        src = iter(lambda: (x, y), None)
    else:
        ld = loader(root, new, threads)

        def gen():
            while True:
                for b in ld:
                    yield b
        src = gen()
    n, t0 = 0, None
    for x, y in src:
        if y.dtype != torch.int64 and y.dim() == 1:
            y = y.long()
        step(x, y)
        n += 1
        if n == 15:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if n == 15 + steps:
            break
    torch.cuda.synchronize()
    return steps * 256 / (time.perf_counter() - t0)


def profile(root, new, classes, steps=10):
    """Device time per training step of each kernel or copy that is not the
    model's (torch.profiler, CUDA activities), ResNet-18 fed from `root`."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    ld = loader(root, new, 2)
    step = step_fn("resnet18", classes)
    it = iter(ld)
    for _ in range(10):  # warm-up
        step(*next(it))
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            step(*next(it))
        torch.cuda.synchronize()
    ld.close()
    rows = [(e.key, e.self_device_time_total / steps) for e in p.key_averages()
            if e.self_device_time_total > 0 and not e.key.startswith("aten::")]
    return sorted(rows, key=lambda r: -r[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("cache")
    ap.add_argument("--threads", type=int, default=14)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--arch", default="resnet18,resnet50")
    ap.add_argument("--cache-threads", type=int, default=2,
                    help="loader threads for the rows fed from the cache")
    ap.add_argument("--cache-only", action="store_true",
                    help="only the training rows fed from the cache (and synthetic)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the fed rows, alternating classic and new")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="instead: the device time per step of every kernel and copy that is "
                         "not torch's own operator, ResNet-18 fed from the cache")
    a = ap.parse_args()
    out = {"device": torch.cuda.get_device_name(), "threads": a.threads}
    classes = len(stoker.ImageLoader(a.data, 256, threads=1).classes)
    if a.profile:
        for new in (False, True):
            print("new recipe" if new else "classic recipe", "(us per step)")
            for key, us in profile(a.cache, new, classes):
                print(f"  {us:9.1f}  {key[:90]}")
        return
    for src, root in (() if a.cache_only else (("jpeg", a.data), ("cache", a.cache))):
        for new in (False, True):
            key = f"alone_{src}_{'new' if new else 'classic'}"
            out[key] = round(loader_alone(root, new, a.threads, a.batches))
            print(key, out[key], flush=True)
    for arch in a.arch.split(","):
        syn = fed(None, False, 0, arch, a.steps, classes)
        out[f"{arch}_synthetic"] = round(syn)
        print(f"{arch}_synthetic", round(syn), flush=True)
        rows = [("cache", a.cache, a.cache_threads)]
        if not a.cache_only:
            rows.insert(0, ("jpeg", a.data, a.threads))
        runs = [(row, rnd, new) for row in rows for rnd in range(a.rounds) for new in (False, True)]
        for (src, root, threads), rnd, new in runs:
            r = fed(root, new, threads, arch, a.steps, classes)
            key = f"{arch}_{src}_{'new' if new else 'classic'}" + (f"_{rnd}" if rnd else "")
            out[key] = round(r)
            out[key + "_share"] = round(r / syn, 4)
            print(key, round(r), f"{r / syn:.1%}", flush=True)
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
