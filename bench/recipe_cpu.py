#!/usr/bin/env python3
"""torchvision's ResNet-50 "new recipe" on the CPU: torchvision's DataLoader against
stoker.ImageLoader, side by side in one run, on the same ImageFolder.

Recipes (both loaders run the same transforms and produce float32 NCHW batches):

  new      RandomResizedCrop(176), RandomHorizontalFlip, TrivialAugmentWide,
           PILToTensor + ConvertImageDtype(float), Normalize, RandomErasing(0.1),
           then per batch RandomChoice([MixUp(alpha=0.2), CutMix(alpha=1.0)])
           (soft labels [B, num_classes])
  classic  RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize

  torchvision: DataLoader(ImageFolder(root, transform), batch_size, shuffle=True,
               num_workers=N, persistent_workers=True), MixUp/CutMix in
               the collate_fn (as torchvision's classification reference does). The
               torchvision here may predate transforms.v2, so MixUp and CutMix are
               implemented below with v2's semantics in torch ops: roll(1) pairing, one
               lambda ~ Beta(alpha, alpha) per batch, CutMix's box and lambda correction.
  stoker:      stoker.ImageLoader(root, batch_size, pipeline=[...], threads=N,
               mix=RandomChoice([MixUp, CutMix]))

Neither drops the last, partial batch (torchvision's reference does not): DataLoader
hands out an epoch's batches to its workers in turn, so an epoch of 3 batches with
drop_last and 2 workers would leave one worker idle a third of the time (1,000 files
in batches of 256 are 4 batches, 2 for each worker). --drop-last drops it on both.

Each measurement takes --warmup batches (1 by default: worker start-up, the first decode;
4 reaches the steady state, stoker's batch buffers written once), then times --images
images (crossing epochs as needed). Rounds alternate the loaders; the best round of each
is reported with the ratio stoker / torchvision.

  PYTHONPATH=python python3 bench/recipe_cpu.py DATA [--workers 2] [--batch 256]
      [--images 2000] [--warmup 1] [--rounds 2] [--recipes new classic] [--json]
  PYTHONPATH=python python3 bench/recipe_cpu.py DATA --make-from JPEG_DIR --files 1000

--make-from builds DATA first: the JPEGs found under JPEG_DIR copied (--link: linked)
round-robin into --files files spread over --classes class folders.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
IMAGE_EXT = (".jpg", ".jpeg", ".png")


# ---- data ------------------------------------------------------------------------------

def make_dataset(src, dst, files, classes, link=False):
    """dst/<class>/<i>_<name>: `files` files, the images under src round-robin."""
    images = []
    for d, _, fs in os.walk(src):
        images += [os.path.join(d, f) for f in sorted(fs) if f.lower().endswith(IMAGE_EXT)]
    images.sort()
    if not images:
        sys.exit(f"--make-from {src}: no JPEG or PNG files found")
    marker = os.path.join(dst, f".made-{files}-{classes}-{len(images)}")
    if os.path.exists(marker):
        return dst
    if os.path.isdir(dst) and os.listdir(dst):
        sys.exit(f"{dst} exists and was not made by --make-from with these settings; "
                 "give an empty or new folder")
    for i in range(files):
        path = images[i % len(images)]
        cdir = os.path.join(dst, f"class{i % classes:04d}")
        os.makedirs(cdir, exist_ok=True)
        out = os.path.join(cdir, f"{i:06d}_{os.path.basename(path)}")
        if link:
            os.symlink(os.path.abspath(path), out)
        else:
            shutil.copyfile(path, out)
    open(marker, "w").close()
    return dst


from cpu_vs_torchvision import warm_cache as warm_page_cache  # noqa: E402 (bench/ is on the path)


# ---- MixUp / CutMix with torchvision v2's semantics, in torch ops -----------------------

class BatchMix:
    """RandomChoice([MixUp(alpha=mixup_alpha), CutMix(alpha=cutmix_alpha)]) of
    torchvision.transforms.v2 for (images [B, C, H, W] float, labels int64 [B]):
    pairs each image with the one before it (roll(1)), draws one lambda per batch,
    returns float soft labels [B, num_classes]. An alpha of 0 leaves that one out."""

    def __init__(self, num_classes, mixup_alpha=0.0, cutmix_alpha=0.0):
        import torch

        self.num_classes = num_classes
        self.modes = []
        if mixup_alpha > 0:
            self.modes.append(("mixup", torch.distributions.Beta(
                torch.tensor([mixup_alpha]), torch.tensor([mixup_alpha]))))
        if cutmix_alpha > 0:
            self.modes.append(("cutmix", torch.distributions.Beta(
                torch.tensor([cutmix_alpha]), torch.tensor([cutmix_alpha]))))

    def __call__(self, images, labels):
        import torch

        soft = torch.nn.functional.one_hot(labels, self.num_classes).to(images.dtype)
        if not self.modes:
            return images, soft
        mode, beta = self.modes[int(torch.randint(len(self.modes), ()))]
        lam = float(beta.sample())
        rolled = images.roll(1, 0)
        if mode == "mixup":
            images = rolled.mul_(1.0 - lam).add_(images.mul(lam))
        else:
            H, W = images.shape[-2:]
            r_x = int(torch.randint(W, ()))
            r_y = int(torch.randint(H, ()))
            r = 0.5 * math.sqrt(1.0 - lam)
            r_w_half, r_h_half = int(r * W), int(r * H)
            x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
            x2, y2 = min(r_x + r_w_half, W), min(r_y + r_h_half, H)
            images = images.clone()
            images[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]
            lam = 1.0 - (x2 - x1) * (y2 - y1) / (W * H)
        soft = soft.roll(1, 0).mul_(1.0 - lam).add_(soft.mul(lam))
        return images, soft


class MixCollate:
    """default_collate, then the batch mix (runs in the DataLoader's workers)."""

    def __init__(self, mix):
        self.mix = mix

    def __call__(self, batch):
        from torch.utils.data import default_collate

        images, labels = default_collate(batch)
        return self.mix(images, labels)


# ---- the two loaders -----------------------------------------------------------------------

def torchvision_loader(root, recipe, workers, batch, drop_last):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    if recipe == "new":
        tf = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                        T.TrivialAugmentWide(), T.PILToTensor(),
                        T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD),
                        T.RandomErasing(0.1)])
    else:
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(MEAN, STD)])
    ds = ImageFolder(root, tf)
    collate = None
    if recipe == "new":
        collate = MixCollate(BatchMix(len(ds.classes), mixup_alpha=0.2, cutmix_alpha=1.0))
    return torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                       persistent_workers=workers > 0, drop_last=drop_last,
                                       collate_fn=collate)


def stoker_loader(root, recipe, workers, batch, drop_last):
    import stoker
    from stoker import transforms as T

    mix = None
    if recipe == "new":
        pipeline = [T.RandomResizedCrop(176), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
                    T.PILToTensor(), T.Normalize(MEAN, STD), T.RandomErasing(0.1)]
        mix = T.RandomChoice([T.MixUp(alpha=0.2), T.CutMix(alpha=1.0)])
    else:
        pipeline = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)]
    return stoker.ImageLoader(root, batch, pipeline=pipeline, threads=workers,
                              drop_last=drop_last, mix=mix)


def measure(make, images_wanted, warmup=1):
    """(images/s, images, seconds, shape, label shape) after `warmup` batches."""
    t_build = time.perf_counter()
    loader = make()
    it = iter(loader)
    x, y = next(it)  # warm-up: start-up and the first batch
    shape, lshape = tuple(x.shape), tuple(y.shape)
    del x, y
    # Further warm-up batches, the same for both loaders: stoker writes into
    # prefetch + 2 = 4 batch buffers it keeps, whose pages the kernel maps on
    # first write, once per loader; a short timed window would count that
    # start-up cost as throughput.
    for _ in range(warmup - 1):
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
            next(it)
    warm = time.perf_counter() - t_build
    n = 0
    t0 = time.perf_counter()
    while n < images_wanted:
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        n += x.shape[0]
        del x, y
    dt = time.perf_counter() - t0
    del it
    if hasattr(loader, "close"):
        loader.close()
    del loader
    return {"images_per_s": n / dt, "images": n, "seconds": dt, "warmup_seconds": warm,
            "shape": shape, "label_shape": lshape}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data", help="an ImageFolder tree (made first with --make-from)")
    p.add_argument("--make-from", metavar="JPEG_DIR",
                   help="build DATA from the images under this folder")
    p.add_argument("--files", type=int, default=1000, help="--make-from: files to make")
    p.add_argument("--classes", type=int, default=100, help="--make-from: class folders")
    p.add_argument("--link", action="store_true", help="--make-from: symlinks, not copies")
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader worker processes = stoker threads")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--drop-last", action="store_true",
                   help="drop each epoch's last, partial batch (both loaders)")
    p.add_argument("--images", type=int, default=2000, help="images timed per measurement")
    p.add_argument("--warmup", type=int, default=1,
                   help="batches taken before the timing starts, for both loaders (1)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--recipes", nargs="+", choices=["new", "classic"], default=["new", "classic"])
    p.add_argument("--loaders", nargs="+", choices=["torchvision", "stoker"],
                   default=["torchvision", "stoker"])
    p.add_argument("--json", action="store_true", help="also print the results as JSON")
    a = p.parse_args(argv)

    if a.make_from:
        make_dataset(a.make_from, a.data, a.files, a.classes, a.link)
    if not os.path.isdir(a.data):
        sys.exit(f"{a.data}: no such folder")
    nbytes = warm_page_cache(a.data)
    import torch

    nfiles = sum(len(fs) for _, _, fs in os.walk(a.data, followlinks=True)
                 if fs) - sum(1 for f in os.listdir(a.data) if f.startswith(".made-"))
    print(f"{a.data}: {nfiles} files, {nbytes / 1e6:.1f} MB (in the page cache); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; torch "
          f"{torch.__version__}; batch {a.batch}, {a.workers} workers/threads, "
          f"{a.images} images per measurement after 1 warm-up batch, {a.rounds} rounds, "
          f"drop_last={a.drop_last}",
          flush=True)
    makers = {"torchvision": torchvision_loader, "stoker": stoker_loader}
    results = {}
    for rnd in range(a.rounds):
        for recipe in a.recipes:
            for name in a.loaders:
                r = measure(lambda: makers[name](a.data, recipe, a.workers, a.batch,
                                                   a.drop_last), a.images, a.warmup)
                results.setdefault((recipe, name), []).append(r)
                print(f"round {rnd + 1} {recipe:7s} {name:11s} {r['images_per_s']:8.1f} img/s "
                      f"({r['images']} images in {r['seconds']:.2f} s; warm-up "
                      f"{r['warmup_seconds']:.2f} s; images {r['shape']}, labels "
                      f"{r['label_shape']}; load {os.getloadavg()[0]:.2f})", flush=True)
    print()
    print("| recipe | torchvision DataLoader | stoker.ImageLoader | ratio |")
    print("|---|---|---|---|")
    summary = []
    for recipe in a.recipes:
        best = {n: max(r["images_per_s"] for r in results[(recipe, n)]) for n in a.loaders
                if (recipe, n) in results}
        tv, st = best.get("torchvision"), best.get("stoker")
        ratio = st / tv if tv and st else None
        print(f"| {recipe} | {tv or 0:.1f} img/s | {st or 0:.1f} img/s | "
              f"{'-' if ratio is None else f'{ratio:.2f}x'} |")
        summary.append({"recipe": recipe, "torchvision": tv, "stoker": st, "ratio": ratio,
                        "rounds": {n: [round(r["images_per_s"], 1)
                                       for r in results[(recipe, n)]] for n in a.loaders}})
    if a.json:
        print(json.dumps({"workers": a.workers, "batch": a.batch, "images": a.images,
                          "files": nfiles, "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
