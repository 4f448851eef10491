#!/usr/bin/env python3
"""Train a torchvision classifier on an ImageFolder, fed by stoker or by torchvision.

An ordinary PyTorch training loop (CrossEntropyLoss, SGD with momentum and
weight decay, optional bf16 autocast and channels-last) that measures what
the input pipeline costs: images/s after the warm-up steps, and the fraction
of the step time spent blocked waiting for the next batch.

  --loader stoker       stoker.ImageLoader(pipeline="train"); on CUDA the batches
                        (images and labels) arrive on the device. --data may also be
                        a pre-decoded cache file (stoker pack --cache) or a folder of
                        WebDataset tar shards: stoker detects the kind
  --loader torchvision  DataLoader(ImageFolder(RandomResizedCrop, RandomHorizontalFlip,
                        ToTensor, Normalize)) with worker processes and pinned memory
  --synthetic           one fixed batch already on the device: the model's ceiling

Examples (from the repository root, after `make`):

  PYTHONPATH=python python3 examples/train.py --data DIR --steps 200
  PYTHONPATH=python python3 examples/train.py --data DIR --loader torchvision --steps 200
  PYTHONPATH=python torchrun --nproc_per_node 8 examples/train.py --data DIR --amp --channels-last

Under torchrun (WORLD_SIZE > 1) each process trains a DDP replica on its
shard; --batch-size and --workers are per process, images/s is the total.

Other scripts can train with their own loader through the same loop: import
this file, add a builder to LOADERS and call main(argv) (bench/dali_cache.py
does so for DALI).
"""
import argparse
import contextlib
import itertools
import json
import math
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SYNTHETIC_EPOCH_STEPS = 100  # --synthetic has no dataset: an "epoch" is this many steps


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="ImageFolder root (class sub-folders of images); for "
                                  "--loader stoker also a cache file or a folder of tar shards")
    p.add_argument("--loader", choices=sorted(LOADERS), default="stoker")
    p.add_argument("--synthetic", action="store_true",
                   help="feed one fixed batch already on the device (no data loading)")
    p.add_argument("--arch", default="resnet18", help="torchvision model name (resnet50, ...)")
    p.add_argument("--num-classes", type=int, default=1000,
                   help="classes for --synthetic (else the dataset's)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=256, help="per process")
    p.add_argument("--workers", "--threads", dest="workers", type=int, default=None,
                   help="DataLoader worker processes / stoker threads per process "
                        "(default: the CPUs available divided by the processes on this host)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--warmup-steps", type=int, default=10,
                   help="steps left out of the measurement")
    p.add_argument("--lr", type=float, default=None,
                   help="default: 0.1 per 256 images of global batch (the linear scaling rule)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--amp", action="store_true",
                   help="bf16 autocast (CUDA, and the CPU where supported); stoker then "
                        "produces bf16 images")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--side-stream", action="store_true",
                   help="run the training steps on a CUDA stream of their own instead of the "
                        "default stream")
    p.add_argument("--gpu-cpu-share", type=float, default=None,
                   help="stoker on CUDA: fixed share of each batch decoded by the worker "
                        "threads (0..1); adaptive when not given")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100,
                   help="print the loss every N steps (0: never)")
    p.add_argument("--json", action="store_true", help="print a final JSON line")
    a = p.parse_args(argv)
    if a.data is None and not a.synthetic:
        p.error("--data is required unless --synthetic")
    if not a.synthetic and not os.path.exists(a.data):
        p.error(f"--data {a.data}: no such file or folder")
    if not a.synthetic and a.loader == "torchvision" and not os.path.isdir(a.data):
        p.error(f"--loader torchvision reads an image folder; {a.data} is a file "
                f"(a stoker cache is read by --loader stoker)")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available")
    return a


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def setup_distributed(args):
    """(rank, world_size, local_rank, device); init_process_group under torchrun."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        # torchrun sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE for env://.
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank = dist.get_rank() if world_size > 1 else 0
    return rank, world_size, local_rank, device


def bf16_autocast_works(device):
    """Whether bf16 autocast can run on this device (--amp falls back to float32 if not)."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return True
        warnings.warn("--amp: this GPU has no bf16 support; training in float32")
        return False
    try:  # CPU bf16 autocast depends on the torch version and build
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            nn.functional.conv2d(torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3))
        return True
    except (RuntimeError, TypeError) as e:
        warnings.warn(f"--amp: no bf16 autocast on this CPU ({e}); training in float32")
        return False


def build_model(args, num_classes, device):
    models = torchvision.models
    if hasattr(models, "get_model"):  # torchvision >= 0.14
        try:
            model = models.get_model(args.arch, weights=None, num_classes=num_classes)
        except ValueError:
            sys.exit(f"unknown --arch {args.arch!r}; try: {', '.join(models.list_models())}")
    else:
        if not callable(models.__dict__.get(args.arch)):
            sys.exit(f"unknown --arch {args.arch!r}")
        model = models.__dict__[args.arch](weights=None, num_classes=num_classes)
    model = model.to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def build_stoker(args, device, dtype, workers, world_size):
    import stoker

    # rank and world_size come from torch.distributed when it is initialised. args.data
    # is a folder, a cache file or a folder of tar shards.
    loader = stoker.ImageLoader(args.data, args.batch_size, pipeline="train",
                                size=args.image_size, threads=workers, device=device,
                                seed=args.seed, drop_last=True, dtype=dtype,
                                channels_last=args.channels_last,
                                gpu_cpu_share=args.gpu_cpu_share)
    return loader, None, len(loader.classes)


def build_torchvision(args, device, dtype, workers, world_size):
    import torchvision.transforms as T
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision.datasets import ImageFolder

    tf = T.Compose([T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(),
                    T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = ImageFolder(args.data, tf)
    sampler = DistributedSampler(ds, seed=args.seed) if world_size > 1 else None
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, generator=gen, num_workers=workers,
                        pin_memory=device.type == "cuda", persistent_workers=workers > 0,
                        drop_last=True)
    return loader, sampler, len(ds.classes)


# --loader NAME: builder(args, device, dtype, workers, world_size) -> (loader, sampler or
# None, num_classes). The loader has len() (batches per epoch) and yields (images, labels);
# set_epoch(), stats() and close() are used when it has them.
LOADERS = {"stoker": build_stoker, "torchvision": build_torchvision}


def loader_summary(loader):
    """What a stoker loader says about itself (None for the others)."""
    if loader is None or not hasattr(loader, "stats"):
        return None
    st = loader.stats()
    keys = ("images", "batches", "decoded_hw", "decoded_cuda", "decoded_cpu", "cpu_share",
            "submit_seconds", "wait_seconds", "late_allocs")
    out = {k: st[k] for k in keys if k in st}
    if st.get("batches"):
        out["submit_ms_per_batch"] = round(1e3 * st["submit_seconds"] / st["batches"], 3)
    return out


def epochs_of(loader, sampler, epochs):
    """Batches of `epochs` passes, setting each pass's epoch (shuffle, augmentation)."""
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        elif hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        yield from loader


def main(argv=None):
    args = parse_args(argv)
    rank, world_size, local_rank, device = setup_distributed(args)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    workers = args.workers if args.workers is not None else max(1, cpu_count() // local_world)
    amp = args.amp and bf16_autocast_works(device)
    # Under autocast the first convolution runs in bf16 anyway: stoker can write bf16
    # batches directly (half the bytes). torchvision's stay float32 (ToTensor's output).
    in_dtype = torch.bfloat16 if amp else torch.float32
    # (torch 1.13 refuses a bf16 autocast on a GPU without bf16 even when disabled.)
    autocast = ((lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16))
                if amp else contextlib.nullcontext)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format

    # The data: an iterator of (images, labels) over every epoch.
    if args.synthetic:
        num_classes = args.num_classes
        images = torch.randn(args.batch_size, 3, args.image_size, args.image_size,
                             device=device).to(dtype=in_dtype, memory_format=memory_format)
        labels = torch.randint(0, num_classes, (args.batch_size,), device=device)
        steps_per_epoch = SYNTHETIC_EPOCH_STEPS
        batches = itertools.repeat((images, labels), steps_per_epoch * args.epochs)
        workers = 0
        loader = None
    else:
        loader, sampler, num_classes = LOADERS[args.loader](args, device, in_dtype, workers,
                                                            world_size)
        steps_per_epoch = len(loader)
        if steps_per_epoch == 0:
            sys.exit(f"--batch-size {args.batch_size} is larger than this process's share of "
                     f"the dataset")
        batches = epochs_of(loader, sampler, args.epochs)
    total_steps = steps_per_epoch * args.epochs
    if args.steps is not None:
        total_steps = min(total_steps, args.steps)
    # Measure at least one step, even when the run is shorter than the warm-up.
    warmup = min(args.warmup_steps, max(total_steps - 1, 0))

    model = build_model(args, num_classes, device)
    if world_size > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None)
    criterion = nn.CrossEntropyLoss()
    lr = args.lr if args.lr is not None else 0.1 * args.batch_size * world_size / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    model.train()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if rank == 0:
        source = "synthetic" if args.synthetic else f"{args.loader}, {workers} workers"
        print(f"{args.arch} on {device.type} x{world_size} ({source}), batch {args.batch_size} "
              f"per process, {total_steps} steps ({warmup} warm-up), amp={amp}, "
              f"channels_last={args.channels_last}", flush=True)

    if args.side_stream and device.type == "cuda":
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        torch.cuda.set_stream(side)

    waited = 0.0  # seconds blocked in next() during the measured steps
    t_start = None
    step = 0
    loss = None
    while step < total_steps:
        if step == warmup:  # the measurement starts once the warm-up work has finished
            sync()
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        try:
            images, labels = next(batches)
        except StopIteration:
            break
        if t_start is not None:
            waited += time.perf_counter() - t0
        # No-ops for batches already there (stoker on CUDA, --synthetic); torchvision's
        # pinned batches are copied asynchronously.
        images = images.to(device, non_blocking=True, memory_format=memory_format)
        labels = labels.to(device, non_blocking=True)

        with autocast():
            loss = criterion(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if args.log_every and step % args.log_every == 0 and rank == 0:
            print(f"step {step}/{total_steps} loss {loss.item():.4f}", flush=True)
    sync()
    elapsed = time.perf_counter() - t_start if t_start is not None else 0.0
    measured = step - warmup if t_start is not None else 0

    # Every rank's figures; images/s is the total over the ranks, over the slowest rank's time.
    mine = {"images": measured * args.batch_size, "seconds": elapsed, "wait_seconds": waited}
    if world_size > 1:
        ranks = [None] * world_size
        dist.all_gather_object(ranks, mine)
    else:
        ranks = [mine]
    images = sum(r["images"] for r in ranks)
    seconds = max(r["seconds"] for r in ranks)
    wait_fraction = (sum(r["wait_seconds"] / r["seconds"] for r in ranks if r["seconds"] > 0)
                     / world_size)
    final_loss = loss.item() if loss is not None else float("nan")

    if rank == 0:
        ips = images / seconds if seconds > 0 else 0.0
        print(f"{args.arch} {'synthetic' if args.synthetic else args.loader} {device.type} "
              f"x{world_size}: {ips:.1f} images/s over {measured} steps, data wait "
              f"{100 * wait_fraction:.1f}% of step time, loss {final_loss:.4f}", flush=True)
        if args.json:
            print(json.dumps({
                "arch": args.arch, "loader": "synthetic" if args.synthetic else args.loader,
                "device": device.type, "world_size": world_size,
                "batch_size": args.batch_size, "workers": workers,
                "amp": amp, "channels_last": args.channels_last,
                "steps": step, "warmup_steps": warmup, "measured_steps": measured,
                "images": images, "seconds": round(seconds, 4),
                "images_per_s": round(ips, 2), "data_wait_fraction": round(wait_fraction, 4),
                "final_loss": None if math.isnan(final_loss) else round(final_loss, 4),
                "loader_stats": loader_summary(loader),
            }), flush=True)
    if loader is not None and hasattr(loader, "close"):
        batches = images = labels = None  # let go of the last batch
        loader.close()
    if world_size > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
