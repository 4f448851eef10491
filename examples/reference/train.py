#!/usr/bin/env python3
"""Train a torchvision classifier on an ImageFolder, fed by stoker or by torchvision.

An ordinary PyTorch training loop in the style of pytorch/examples' ImageNet
script (CrossEntropyLoss, SGD with momentum and weight decay, the learning
rate divided by 10 every 30 epochs or --lr-scheduler cosine, optional bf16 autocast and channels-last),
which also measures what the input pipeline costs: images/s after the warm-up
steps, and the fraction of the step time spent blocked waiting for the next
batch. Each epoch ends with a validation pass (top-1/top-5 on val/, stoker's
eval pipeline) and a checkpoint of the model, the optimizer and the loader's
position, from which --resume continues exactly.

  DIR                   a dataset root holding train/ and val/ (ImageFolder trees);
                        a folder without train/ is itself the training set
  --loader stoker       stoker.ImageLoader(pipeline=[stoker.transforms ...], mix=...);
                        on CUDA the batches (images and labels) arrive on the device.
                        --data may also be a pre-decoded cache file (stoker pack
                        --cache) or a folder of WebDataset tar shards: stoker detects
                        the kind; --cache PATH trains from a cache of the folder,
                        packed on first use
  --loader torchvision  DataLoader(ImageFolder(the same recipe in torchvision's
                        transforms)) with worker processes and pinned memory; MixUp and
                        CutMix in the collate_fn, as torchvision's reference does
  --synthetic           one fixed batch already on the device: the model's ceiling

The recipe takes torchvision's classification-reference flags: the train pipeline is
RandomResizedCrop(--train-crop-size, --interpolation), RandomHorizontalFlip, the
--auto-augment policy (ta_wide, ra with --ra-magnitude, imagenet), ToTensor, Normalize,
RandomErasing(--random-erase); then, per batch, MixUp (--mixup-alpha) and/or CutMix
(--cutmix-alpha), one of the two at random when both are given, which turns the labels
into soft labels; the loss is CrossEntropyLoss(label_smoothing=--label-smoothing).
--ra-sampler repeats each image --ra-reps times per epoch (torchvision's RASampler).
Validation is Resize(--val-resize-size), CenterCrop(--val-crop-size); the resize defaults
to round(val_crop_size * 256 / 224), as stoker's eval pipeline computes it.

Examples (from the repository root, after `make`, or anywhere after `pip install .`):

  torchrun --nproc_per_node=gpu examples/reference/train.py /data/imagenet -a resnet50 -b 256 \\
      --amp --channels-last --checkpoint-dir runs/resnet50 --tensorboard runs/resnet50
  torchrun --nproc_per_node=gpu examples/reference/train.py /data/imagenet -a resnet50 -b 128 \\
      --lr 0.5 --wd 2e-5 --epochs 600 --auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2 \\
      --cutmix-alpha 1.0 --label-smoothing 0.1 --train-crop-size 176 --val-resize-size 232 \\
      --ra-sampler --ra-reps 4 --amp --channels-last --checkpoint-dir runs/resnet50-new
  PYTHONPATH=python python3 examples/reference/train.py --data DIR --steps 200
  PYTHONPATH=python python3 examples/reference/train.py --data DIR --loader torchvision --steps 200
  PYTHONPATH=python python3 examples/reference/train.py DIR --evaluate --resume runs/model_best.pth.tar

Under torchrun (WORLD_SIZE > 1) each process trains a DDP replica on its
shard; --batch-size and --workers are per process, images/s is the total.

Other scripts can train with their own loader through the same loop: import
this file, add a builder to LOADERS and call main(argv) (bench/dali_cache.py
does so for DALI).
"""
import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SYNTHETIC_EPOCH_STEPS = 100  # --synthetic has no dataset: an "epoch" is this many steps
LR_STEP_EPOCHS, LR_GAMMA = 30, 0.1  # pytorch/examples' schedule


def parse_args(argv=None):
    # allow_abbrev=False: pytorch/examples' --gpu 0 must not pass for --gpu-cpu-share 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("root", nargs="?", metavar="DIR",
                   help="dataset root holding train/ and val/; without train/ the folder is "
                        "the training set")
    p.add_argument("--data", help="the training set instead of DIR: an ImageFolder root; for "
                                  "--loader stoker also a cache file or a folder of tar shards")
    p.add_argument("--val", help="the validation ImageFolder (default: DIR/val when it exists)")
    p.add_argument("--cache", metavar="PATH",
                   help="--loader stoker: train from this pre-decoded cache of the training "
                        "folder, packed there on first use (ImageLoader(cache=PATH))")
    p.add_argument("--cache-max-side", type=int, default=512,
                   help="the longer side the --cache keeps (0: full size)")
    p.add_argument("--loader", choices=sorted(LOADERS), default="stoker")
    p.add_argument("--synthetic", action="store_true",
                   help="feed one fixed batch already on the device (no data loading)")
    p.add_argument("-a", "--arch", default="resnet18",
                   help="torchvision model name (resnet50, ...), or tiny: a small CNN for "
                        "quick checks")
    p.add_argument("--num-classes", type=int, default=1000,
                   help="classes for --synthetic (else the dataset's)")
    p.add_argument("--image-size", type=int, default=None,
                   help="shorthand for --train-crop-size and --val-crop-size")
    # torchvision's classification-reference recipe flags
    p.add_argument("--train-crop-size", type=int, default=None,
                   help="RandomResizedCrop size (default 224, or --image-size)")
    p.add_argument("--val-crop-size", type=int, default=None,
                   help="validation CenterCrop size (default 224, or --image-size)")
    p.add_argument("--val-resize-size", type=int, default=None,
                   help="validation Resize (shorter side); default round(val_crop_size * "
                        "256 / 224): 256 at 224")
    p.add_argument("--interpolation", choices=["bilinear", "bicubic"], default="bilinear",
                   help="resampling of RandomResizedCrop, Resize and the policy")
    p.add_argument("--auto-augment", type=_auto_augment_arg, default=None,
                   help="policy after the flip: ta_wide (TrivialAugmentWide), ra "
                        "(RandAugment), imagenet (AutoAugment(IMAGENET)), or a timm "
                        "RandAugment string such as rand-m9-mstd0.5-inc1 (the torchvision "
                        "loader needs timm installed for it)")
    p.add_argument("--ra-magnitude", type=int, default=9, help="RandAugment's magnitude")
    p.add_argument("--random-erase", type=float, default=0.0,
                   help="RandomErasing probability, after Normalize (0: off)")
    p.add_argument("--mixup-alpha", type=float, default=0.0, help="MixUp alpha (0: off)")
    p.add_argument("--cutmix-alpha", type=float, default=0.0,
                   help="CutMix alpha (0: off); with --mixup-alpha too, one of the two per "
                        "batch at random")
    p.add_argument("--label-smoothing", type=float, default=0.0,
                   help="CrossEntropyLoss(label_smoothing=...)")
    p.add_argument("--ra-sampler", action="store_true",
                   help="repeated augmentation: torchvision's RASampler (each image --ra-reps "
                        "times an epoch; stoker: ImageLoader(ra_reps=...))")
    p.add_argument("--ra-reps", type=int, default=3, help="repetitions of --ra-sampler")
    p.add_argument("-b", "--batch-size", type=int, default=256, help="per process")
    p.add_argument("-j", "--workers", "--threads", dest="workers", type=int, default=None,
                   help="DataLoader worker processes / stoker threads per process "
                        "(default: the CPUs available divided by the processes on this host)")
    p.add_argument("--epochs", type=int, default=90, help="total epochs (a resumed run "
                                                          "counts the ones done)")
    p.add_argument("--steps", type=int, default=None,
                   help="stop after this many steps of this run (a checkpoint is saved where "
                        "it stops)")
    p.add_argument("--warmup-steps", type=int, default=10,
                   help="steps left out of the measurement")
    p.add_argument("--lr", "--learning-rate", dest="lr", type=float, default=None,
                   help="default: 0.1 per 256 images of global batch (the linear scaling rule)")
    p.add_argument("--lr-scheduler", choices=["step", "cosine"], default="step",
                   help="step: divided by 10 every 30 epochs; cosine: to 0 over --epochs after "
                        "--lr-warmup-epochs of linear warm-up (torchvision's reference)")
    p.add_argument("--lr-warmup-epochs", type=int, default=0)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--wd", "--weight-decay", dest="weight_decay", type=float, default=1e-4)
    p.add_argument("--resume", metavar="PATH", help="continue from this checkpoint")
    p.add_argument("-e", "--evaluate", action="store_true",
                   help="only validate (the model of --resume, else a fresh one)")
    p.add_argument("--checkpoint-dir", metavar="DIR",
                   help="write checkpoint.pth.tar after each epoch (and where --steps stops) "
                        "and model_best.pth.tar; default: no checkpoints")
    p.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard events there")
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
    p.add_argument("-p", "--print-freq", "--log-every", dest="print_freq", type=int,
                   default=100, help="print a Time/Data/Loss line every N steps (0: never)")
    p.add_argument("--log-indices", metavar="FILE",
                   help="each rank writes the dataset indices of its batches and a checksum "
                        "of its weights to FILE.rankN (JSON lines; stoker only)")
    p.add_argument("--json", action="store_true", help="print a final JSON line")
    a = p.parse_args(argv)
    size = a.image_size if a.image_size is not None else 224
    a.train_crop_size = a.train_crop_size if a.train_crop_size is not None else size
    a.val_crop_size = a.val_crop_size if a.val_crop_size is not None else size
    if a.val_resize_size is None:
        a.val_resize_size = eval_resize_size(a.val_crop_size)
    a.image_size = a.train_crop_size  # the train size, for builders added to LOADERS
    for name in ("train_crop_size", "val_crop_size", "val_resize_size", "ra_reps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.val_resize_size < a.val_crop_size:
        p.error(f"--val-resize-size {a.val_resize_size} is smaller than --val-crop-size "
                f"{a.val_crop_size}")
    if not 0.0 <= a.random_erase <= 1.0:
        p.error("--random-erase is a probability in [0, 1]")
    if a.mixup_alpha < 0 or a.cutmix_alpha < 0:
        p.error("--mixup-alpha and --cutmix-alpha must be >= 0")
    if not 0.0 <= a.label_smoothing <= 1.0:
        p.error("--label-smoothing must be in [0, 1]")
    if a.root is not None:
        if a.data is not None:
            p.error("give the dataset root DIR or --data, not both")
        if not os.path.isdir(a.root):
            p.error(f"{a.root}: no such folder")
        train = os.path.join(a.root, "train")
        if os.path.isdir(train):
            a.data = train
            if a.val is None and os.path.isdir(os.path.join(a.root, "val")):
                a.val = os.path.join(a.root, "val")
        else:
            a.data = a.root
    if a.data is None and not a.synthetic:
        p.error("give a dataset root DIR or --data, unless --synthetic")
    if not a.synthetic and not os.path.exists(a.data):
        p.error(f"--data {a.data}: no such file or folder")
    if not a.synthetic and a.loader == "torchvision" and not os.path.isdir(a.data):
        p.error(f"--loader torchvision reads an image folder; {a.data} is a file "
                f"(a stoker cache is read by --loader stoker)")
    if a.val is not None and not os.path.isdir(a.val):
        p.error(f"--val {a.val}: no such folder")
    if a.evaluate and a.val is None:
        p.error("--evaluate needs a validation set: DIR/val or --val")
    if a.resume is not None and not os.path.isfile(a.resume):
        p.error(f"--resume {a.resume}: no such file")
    if a.log_indices and (a.synthetic or a.loader != "stoker"):
        p.error("--log-indices needs --loader stoker (it reports each batch's indices)")
    if a.cache and (a.synthetic or a.loader != "stoker"):
        p.error("--cache needs --loader stoker")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available")
    return a


def eval_resize_size(crop_size):
    """The validation resize for a crop size: round(crop * 256 / 224), as stoker's C eval
    pipeline computes it (183 at 160, where flooring would give 182)."""
    return int(math.floor(crop_size * 256 / 224 + 0.5))


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


class TinyNet(nn.Module):
    """-a tiny: two convolutions and a linear layer, for checks that must run in seconds.
    No BatchNorm, so every tensor of the model is a parameter that DDP keeps in step."""

    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc(self.features(x))


def build_model(args, num_classes, device):
    models = torchvision.models
    if args.arch == "tiny":
        model = TinyNet(num_classes)
    elif hasattr(models, "get_model"):  # torchvision >= 0.14
        try:
            model = models.get_model(args.arch, weights=None, num_classes=num_classes)
        except ValueError:
            sys.exit(f"unknown --arch {args.arch!r}; try: tiny, {', '.join(models.list_models())}")
    else:
        if not callable(models.__dict__.get(args.arch)):
            sys.exit(f"unknown --arch {args.arch!r}")
        model = models.__dict__[args.arch](weights=None, num_classes=num_classes)
    model = model.to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _auto_augment_arg(v):
    if v in ("ta_wide", "ra", "imagenet") or v == "rand" or v.startswith("rand-"):
        return v
    raise argparse.ArgumentTypeError(f"invalid choice: {v!r} (ta_wide, ra, imagenet, or a timm "
                                     "RandAugment string rand-m9-mstd0.5-inc1)")


def _timm_hparams(args):
    """timm's create_transform hparams for its RandAugment: the fill is the mean
    in 0..255, translate_const 45% of the crop; no interpolation (timm's 'random':
    bilinear or bicubic drawn per warp, by stoker too)."""
    return {"translate_const": int(args.train_crop_size * 0.45),
            "img_mean": tuple(min(255, round(255 * x)) for x in MEAN)}


def _timm_rand_augment(args, T):
    if hasattr(T, "TimmRandAugment"):  # stoker.transforms
        return T.TimmRandAugment(args.auto_augment, _timm_hparams(args))
    try:
        from timm.data.auto_augment import rand_augment_transform
    except ImportError as e:
        sys.exit(f"--auto-augment {args.auto_augment} with --loader torchvision needs timm "
                 f"(pip install timm): {e}")
    return rand_augment_transform(args.auto_augment, _timm_hparams(args))


def recipe_transforms(args, T, train):
    """The train or eval transform list of the recipe in the transforms module T
    (stoker.transforms or torchvision.transforms: the same names and arguments)."""
    interp = getattr(T.InterpolationMode, args.interpolation.upper())
    if not train:
        return [T.Resize(args.val_resize_size, interpolation=interp),
                T.CenterCrop(args.val_crop_size), T.ToTensor(), T.Normalize(MEAN, STD)]
    steps = [T.RandomResizedCrop(args.train_crop_size, interpolation=interp),
             T.RandomHorizontalFlip()]
    # the policy gets the recipe's interpolation, as in torchvision's reference presets
    if args.auto_augment == "ta_wide":
        steps.append(T.TrivialAugmentWide(interpolation=interp))
    elif args.auto_augment == "ra":
        steps.append(T.RandAugment(magnitude=args.ra_magnitude, interpolation=interp))
    elif args.auto_augment == "imagenet":
        steps.append(T.AutoAugment(T.AutoAugmentPolicy.IMAGENET, interpolation=interp))
    elif args.auto_augment:
        steps.append(_timm_rand_augment(args, T))
    steps += [T.ToTensor(), T.Normalize(MEAN, STD)]
    if args.random_erase > 0:
        steps.append(T.RandomErasing(p=args.random_erase))
    return steps


def describe_recipe(args):
    """One line naming the recipe (printed at the start of a run)."""
    aa = {"ta_wide": "TrivialAugmentWide", "imagenet": "AutoAugment(IMAGENET)",
          "ra": f"RandAugment(magnitude={args.ra_magnitude})"}
    parts = [f"RandomResizedCrop({args.train_crop_size}, {args.interpolation})",
             "RandomHorizontalFlip"]
    if args.auto_augment:
        parts.append(aa.get(args.auto_augment, f"timm RandAugment({args.auto_augment})"))
    parts += ["ToTensor", "Normalize"]
    if args.random_erase > 0:
        parts.append(f"RandomErasing({args.random_erase})")
    mixes = [f"{n}({a})" for n, a in (("MixUp", args.mixup_alpha), ("CutMix", args.cutmix_alpha))
             if a > 0]
    if mixes:
        parts.append("per batch " + (" or ".join(mixes)))
    if args.ra_sampler:
        parts.append(f"repeated augmentation x{args.ra_reps}")
    return (f"train: {', '.join(parts)}; loss: CrossEntropyLoss(label_smoothing="
            f"{args.label_smoothing}); val: Resize({args.val_resize_size}), "
            f"CenterCrop({args.val_crop_size})")


def stoker_mix(args):
    """ImageLoader(mix=...) for --mixup-alpha / --cutmix-alpha, or None."""
    from stoker import transforms as T

    mixes = []
    if args.mixup_alpha > 0:
        mixes.append(T.MixUp(alpha=args.mixup_alpha))
    if args.cutmix_alpha > 0:
        mixes.append(T.CutMix(alpha=args.cutmix_alpha))
    if not mixes:
        return None
    return mixes[0] if len(mixes) == 1 else T.RandomChoice(mixes)


def _not_available(what, err):
    sys.exit(f"{what} is not available in this build of stoker: {err}; "
             f"--loader torchvision runs it")


def _interpolation_refused(args, err):
    """Exits naming what of --interpolation stoker refused (the resize or the policy)."""
    what = f"--interpolation {args.interpolation}"
    policy = {"ta_wide": "TrivialAugmentWide", "ra": "RandAugment",
              "imagenet": "AutoAugment"}.get(args.auto_augment)
    if policy and str(err).startswith(policy):
        what += f" for the --auto-augment {args.auto_augment} policy's warps"
    _not_available(what, err)


def build_stoker(args, device, dtype, workers, world_size):
    import inspect

    import stoker
    from stoker import transforms as T

    extra = {}
    if args.cache:
        extra.update(cache=args.cache, cache_max_side=args.cache_max_side)
    if args.ra_sampler:
        if "ra_reps" not in inspect.signature(stoker.ImageLoader).parameters:
            _not_available("--ra-sampler", "ImageLoader has no ra_reps")
        extra["ra_reps"] = args.ra_reps
    # rank and world_size come from torch.distributed when it is initialised. args.data
    # is a folder, a cache file or a folder of tar shards.
    try:
        loader = stoker.ImageLoader(args.data, args.batch_size,
                                    pipeline=recipe_transforms(args, T, train=True),
                                    threads=workers, device=device, seed=args.seed,
                                    drop_last=True, dtype=dtype,
                                    channels_last=args.channels_last,
                                    gpu_cpu_share=args.gpu_cpu_share, mix=stoker_mix(args),
                                    **extra)
    except TypeError as e:
        if "ra_reps" in str(e):
            _not_available("--ra-sampler", e)
        raise
    except ValueError as e:
        if args.interpolation != "bilinear" and args.interpolation in str(e).lower():
            _interpolation_refused(args, e)
        sys.exit(f"stoker cannot run this recipe: {e}")
    return loader, None, len(loader.classes)


class RASampler(torch.utils.data.Sampler):
    """torchvision's classification reference's RASampler (repeated augmentation): each
    index of the epoch's permutation repeated `repetitions` times in a row, padded, split
    across ranks by stride, cut to len(dataset) // 256 * 256 / num_replicas per rank."""

    def __init__(self, dataset, num_replicas=1, rank=0, shuffle=True, seed=0, repetitions=3):
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.epoch, self.shuffle, self.seed, self.repetitions = 0, shuffle, seed, repetitions
        self.num_samples = int(math.ceil(len(dataset) * float(repetitions) / num_replicas))
        self.total_size = self.num_samples * num_replicas
        self.num_selected_samples = int(math.floor(len(dataset) // 256 * 256 / num_replicas))

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(len(self.dataset), generator=g).tolist()
        else:
            indices = list(range(len(self.dataset)))
        indices = [i for i in indices for _ in range(self.repetitions)]
        indices += indices[: (self.total_size - len(indices))]
        indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(indices[: self.num_selected_samples])

    def __len__(self):
        return self.num_selected_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


class BatchMix:
    """torchvision.transforms.v2's RandomChoice([MixUp(alpha), CutMix(alpha)]) (or one of
    them) for a torchvision without v2: each image mixed with the one before it
    (roll(1)), one lambda ~ Beta(alpha, alpha) per batch, CutMix's box and its lambda
    correction; the labels become float soft labels [B, num_classes]."""

    def __init__(self, num_classes, mixup_alpha=0.0, cutmix_alpha=0.0):
        self.num_classes = num_classes
        self.alphas = [(m, a) for m, a in (("mixup", mixup_alpha), ("cutmix", cutmix_alpha))
                       if a > 0]

    def __call__(self, images, labels):
        mode, alpha = self.alphas[int(torch.randint(len(self.alphas), ()))]
        lam = float(torch.distributions.Beta(torch.tensor([alpha]),
                                             torch.tensor([alpha])).sample())
        rolled = images.roll(1, 0)
        if mode == "mixup":
            images = rolled.mul_(1.0 - lam).add_(images.mul(lam))
        else:
            H, W = images.shape[-2:]
            r_x, r_y = int(torch.randint(W, ())), int(torch.randint(H, ()))
            r = 0.5 * math.sqrt(1.0 - lam)
            r_w_half, r_h_half = int(r * W), int(r * H)
            x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
            x2, y2 = min(r_x + r_w_half, W), min(r_y + r_h_half, H)
            images = images.clone()
            images[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]
            lam = 1.0 - float((x2 - x1) * (y2 - y1)) / (W * H)
        soft = F.one_hot(labels, self.num_classes).to(images.dtype)
        soft = soft.roll(1, 0).mul_(1.0 - lam).add_(soft.mul(lam))
        return images, soft


def torchvision_mix(args, num_classes):
    """The batch mix for --loader torchvision: transforms.v2's MixUp/CutMix/RandomChoice when
    this torchvision has them, else BatchMix (the same semantics); None without mixing."""
    if args.mixup_alpha <= 0 and args.cutmix_alpha <= 0:
        return None
    try:
        from torchvision.transforms import v2

        mixes = []
        if args.mixup_alpha > 0:
            mixes.append(v2.MixUp(alpha=args.mixup_alpha, num_classes=num_classes))
        if args.cutmix_alpha > 0:
            mixes.append(v2.CutMix(alpha=args.cutmix_alpha, num_classes=num_classes))
        return mixes[0] if len(mixes) == 1 else v2.RandomChoice(mixes)
    except (ImportError, AttributeError):
        return BatchMix(num_classes, args.mixup_alpha, args.cutmix_alpha)


class MixCollate:
    """default_collate, then the batch mix, in the DataLoader's workers (as the reference's
    collate_fn)."""

    def __init__(self, mix):
        self.mix = mix

    def __call__(self, batch):
        from torch.utils.data.dataloader import default_collate

        return self.mix(*default_collate(batch))


def build_torchvision(args, device, dtype, workers, world_size):
    import torchvision.transforms as T
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(args.data, T.Compose(recipe_transforms(args, T, train=True)))
    rank = dist.get_rank() if world_size > 1 else 0
    if args.ra_sampler:
        sampler = RASampler(ds, num_replicas=world_size, rank=rank, seed=args.seed,
                            repetitions=args.ra_reps)
    else:
        sampler = DistributedSampler(ds, seed=args.seed) if world_size > 1 else None
    mix = torchvision_mix(args, len(ds.classes))
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, generator=gen, num_workers=workers,
                        pin_memory=device.type == "cuda", persistent_workers=workers > 0,
                        drop_last=True, collate_fn=MixCollate(mix) if mix else None)
    return loader, sampler, len(ds.classes)


# --loader NAME: builder(args, device, dtype, workers, world_size) -> (loader, sampler or
# None, num_classes). The loader has len() (batches per epoch) and yields (images, labels);
# set_epoch(), stats(), state_dict()/load_state_dict() and close() are used when it has them.
LOADERS = {"stoker": build_stoker, "torchvision": build_torchvision}


class ValSet:
    """A validation loader: batches() yields (images, labels, dataset indices); the indices
    let the ranks count each image once although their shards are padded to equal length."""

    def __init__(self, loader, num_samples, classes, batches):
        self.loader, self.num_samples, self.classes = loader, num_samples, classes
        self.batches = batches

    def close(self):
        if hasattr(self.loader, "close"):
            self.loader.close()


def build_stoker_val(args, device, dtype, workers, world_size):
    import stoker
    from stoker import transforms as T

    try:
        loader = stoker.ImageLoader(args.val, args.batch_size,
                                    pipeline=recipe_transforms(args, T, train=False),
                                    threads=workers, device=device, dtype=dtype,
                                    channels_last=args.channels_last, shuffle=False)
    except ValueError as e:
        if args.interpolation != "bilinear" and args.interpolation in str(e).lower():
            _interpolation_refused(args, e)
        sys.exit(f"stoker cannot run this validation pipeline: {e}")

    def batches():
        for b in loader.iter_batches():
            yield b.images, b.labels, b.indices
    return ValSet(loader, loader.num_samples, loader.classes, batches)


class _Indexed(torch.utils.data.Dataset):
    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        x, y = self.ds[i]
        return x, y, i


def build_torchvision_val(args, device, dtype, workers, world_size):
    import torchvision.transforms as T
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision.datasets import ImageFolder

    # the same sizes as stoker's: --val-resize-size defaults to round(crop * 256 / 224)
    ds = _Indexed(ImageFolder(args.val, T.Compose(recipe_transforms(args, T, train=False))))
    sampler = DistributedSampler(ds, shuffle=False) if world_size > 1 else None
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=workers,
                        pin_memory=device.type == "cuda")

    def batches():
        for images, labels, idx in loader:
            yield images, labels, idx
    return ValSet(loader, len(ds), ds.ds.classes, batches)


# Validation loaders by --loader name; a loader without one trains without validation.
VAL_LOADERS = {"stoker": build_stoker_val, "torchvision": build_torchvision_val}


class SyntheticLoader:
    """--synthetic: the same batch, SYNTHETIC_EPOCH_STEPS times an epoch."""

    def __init__(self, images, labels):
        self.batch = (images, labels)

    def __len__(self):
        return SYNTHETIC_EPOCH_STEPS

    def __iter__(self):
        return iter([self.batch] * SYNTHETIC_EPOCH_STEPS)


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


def weights_sha256(model):
    """A checksum of the parameters (BatchNorm's running statistics are left out: under DDP
    each rank updates them from its own batches)."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def validate(model, val, criterion_dtype, device, autocast, memory_format, world_size):
    """(loss, top-1 %, top-5 %, images) over the whole validation set, every image once."""
    n = val.num_samples
    # Per-image results indexed by the dataset index; the ranks' tables are combined with
    # MAX (a padded duplicate gives the same result on every replica).
    seen = torch.zeros(n, dtype=torch.int64, device=device)
    top1 = torch.zeros(n, dtype=torch.int64, device=device)
    top5 = torch.zeros(n, dtype=torch.int64, device=device)
    losses = torch.zeros(n, dtype=criterion_dtype, device=device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for images, labels, idx in val.batches():
            images = images.to(device, non_blocking=True, memory_format=memory_format)
            labels = labels.to(device, non_blocking=True)
            idx = torch.as_tensor(idx, dtype=torch.int64).to(device)
            with autocast():
                out = model(images)
            out = out.float()
            k = min(5, out.shape[1])
            pred = out.topk(k, 1).indices
            seen[idx] = 1
            top1[idx] = (pred[:, 0] == labels).long()
            top5[idx] = (pred == labels[:, None]).any(1).long()
            losses[idx] = F.cross_entropy(out, labels, reduction="none").to(criterion_dtype)
    model.train(was_training)
    if world_size > 1:
        for t in (seen, top1, top5, losses):
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
    count = int(seen.sum())
    if count == 0:
        return float("nan"), float("nan"), float("nan"), 0
    return (float(losses.sum()) / count, 100.0 * float(top1.sum()) / count,
            100.0 * float(top5.sum()) / count, count)


def gather(obj, world_size):
    if world_size == 1:
        return [obj]
    out = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def save_checkpoint(directory, state, is_best):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "checkpoint.pth.tar")
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash while saving leaves the previous checkpoint whole
    if is_best:
        shutil.copyfile(path, os.path.join(directory, "model_best.pth.tar"))
    return path


class TensorBoard:
    """Scalars to TensorBoard (rank 0 only); a no-op without --tensorboard."""

    def __init__(self, logdir):
        self.w = None
        if logdir:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                sys.exit(f"--tensorboard needs the tensorboard package (pip install "
                         f"tensorboard): {e}")
            self.w = SummaryWriter(logdir)

    def scalars(self, values, step):
        if self.w is not None:
            for k, v in values.items():
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    self.w.add_scalar(k, v, step)

    def close(self):
        if self.w is not None:
            self.w.close()


def loader_scalars(loader):
    """The loader's counters as loader/NAME scalars (stoker: stats())."""
    if loader is None or not hasattr(loader, "stats"):
        return {}
    return {f"loader/{k}": v for k, v in loader.stats().items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def gpu_scalars(device):
    if device.type != "cuda":
        return {}
    mib = 1 << 20
    return {"gpu/memory_allocated_mib": torch.cuda.memory_allocated(device) / mib,
            "gpu/max_memory_allocated_mib": torch.cuda.max_memory_allocated(device) / mib,
            "gpu/memory_reserved_mib": torch.cuda.memory_reserved(device) / mib}


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

    # The data: a loader of (images, labels) batches, one pass per epoch.
    sampler = None
    val = None
    if args.synthetic:
        num_classes = args.num_classes
        images = torch.randn(args.batch_size, 3, args.train_crop_size, args.train_crop_size,
                             device=device).to(dtype=in_dtype, memory_format=memory_format)
        labels = torch.randint(0, num_classes, (args.batch_size,), device=device)
        loader = SyntheticLoader(images, labels)
        workers = 0
    else:
        if args.evaluate:
            loader = None
        else:
            loader, sampler, num_classes = LOADERS[args.loader](args, device, in_dtype,
                                                                workers, world_size)
            if len(loader) == 0:
                sys.exit(f"--batch-size {args.batch_size} is larger than this process's share "
                         f"of the dataset")
        if args.val is not None:
            if args.loader in VAL_LOADERS:
                val = VAL_LOADERS[args.loader](args, device, in_dtype, workers, world_size)
                if loader is None:
                    num_classes = len(val.classes)
                elif val.classes != (loader.classes if hasattr(loader, "classes")
                                     else val.classes):
                    sys.exit(f"--val {args.val}: its classes differ from the training set's")
            elif rank == 0:
                print(f"--loader {args.loader} has no validation loader: no validation",
                      flush=True)
    steps_per_epoch = len(loader) if loader is not None else 0

    model = build_model(args, num_classes, device)
    # with MixUp/CutMix the targets are probabilities [B, C], which CrossEntropyLoss takes
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    lr = args.lr if args.lr is not None else 0.1 * args.batch_size * world_size / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    if args.lr_scheduler == "cosine":
        # torchvision's reference: linear warm-up from lr * 0.01, then cosine to 0, per epoch
        warm = min(args.lr_warmup_epochs, args.epochs)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(1, args.epochs - warm))
        if warm:
            scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [
                torch.optim.lr_scheduler.LinearLR(optimizer, 0.01, total_iters=warm), scheduler],
                milestones=[warm])
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, LR_STEP_EPOCHS, LR_GAMMA)

    # --resume: the model, the optimizer, the schedule and where the data stood.
    start_epoch, start_batch, global_step, best_acc1 = 0, 0, 0, None
    if args.resume:
        ckpt = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(ckpt["state_dict"])
        if not args.evaluate:
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
            start_epoch, start_batch = ckpt["epoch"], ckpt.get("batch", 0)
            global_step, best_acc1 = ckpt.get("step", 0), ckpt.get("best_acc1")
            states = ckpt.get("loader")
            if states is not None and len(states) == world_size and \
                    hasattr(loader, "load_state_dict"):
                loader.load_state_dict(states[rank])  # this rank's shard, mid-epoch too
            elif start_batch:
                if rank == 0:
                    print(f"--resume: this loader cannot seek (or the world size changed): "
                          f"epoch {start_epoch} restarts from its first batch", flush=True)
                start_batch = 0
        if rank == 0:
            print(f"=> resumed {args.resume}: epoch {ckpt['epoch']}, batch "
                  f"{ckpt.get('batch', 0)}, step {ckpt.get('step', 0)}", flush=True)

    if world_size > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None)
        # Kept past main()'s return: freeing a DDP model can deadlock (its
        # process group joins a thread that waits for the GIL the freeing
        # thread holds, seen with gloo at the end of a run), so the script
        # ends the process without freeing it (see the bottom of this file).
        _DDP_MODELS.append(model)
    bare = model.module if world_size > 1 else model

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if args.evaluate:
        vloss, acc1, acc5, n = validate(bare, val, torch.float32, device, autocast,
                                        memory_format, world_size)
        if rank == 0:
            print(f" * Acc@1 {acc1:.3f} Acc@5 {acc5:.3f} Loss {vloss:.4f} ({n} images)",
                  flush=True)
            if args.json:
                print(json.dumps({"arch": args.arch, "evaluate": True, "world_size": world_size,
                                  "val_images": n, "val_loss": round(vloss, 6),
                                  "val_acc1": round(acc1, 4), "val_acc5": round(acc5, 4)}),
                      flush=True)
        val.close()
        if world_size > 1:
            dist.destroy_process_group()
        return 0

    total_steps = steps_per_epoch * max(0, args.epochs - start_epoch) - start_batch
    total_steps = max(0, total_steps)
    if args.steps is not None:
        total_steps = min(total_steps, args.steps)
    # Measure at least one step, even when the run is shorter than the warm-up.
    warmup = min(args.warmup_steps, max(total_steps - 1, 0))

    tb = TensorBoard(args.tensorboard if rank == 0 else None)
    index_log = None
    if args.log_indices:
        name = (args.log_indices.format(rank=rank) if "{rank}" in args.log_indices
                else f"{args.log_indices}.rank{rank}")
        index_log = open(name, "w")

    if rank == 0:
        source = "synthetic" if args.synthetic else f"{args.loader}, {workers} workers"
        print(f"{args.arch} on {device.type} x{world_size} ({source}), batch {args.batch_size} "
              f"per process, {total_steps} steps ({warmup} warm-up), amp={amp}, "
              f"channels_last={args.channels_last}", flush=True)
        if not args.synthetic:
            print(describe_recipe(args), flush=True)

    if args.side_stream and device.type == "cuda":
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        torch.cuda.set_stream(side)

    model.train()
    waited = 0.0  # seconds blocked in next() during the measured steps
    paused = 0.0  # seconds of validation and checkpoints inside the measured window
    t_start = None
    step = 0      # steps of this run
    loss = None
    steps_by_epoch = {}
    last_val = (None, None, None, None)
    checkpoint_path = None
    with_indices = index_log is not None
    soft_labels = False  # whether the last batch came with soft labels (MixUp/CutMix)

    def checkpoint(epoch, batch, is_best):
        """Every rank takes part (the loaders' positions are gathered); rank 0 writes."""
        nonlocal checkpoint_path
        states = None
        if hasattr(loader, "state_dict"):
            states = gather(loader.state_dict(), world_size)
        if rank == 0:
            checkpoint_path = save_checkpoint(args.checkpoint_dir, {
                "epoch": epoch, "batch": batch, "step": global_step, "arch": args.arch,
                "num_classes": num_classes, "world_size": world_size,
                "state_dict": bare.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "best_acc1": best_acc1, "loader": states,
            }, is_best)

    epoch = start_epoch
    while epoch < args.epochs and step < total_steps:
        if sampler is not None:
            sampler.set_epoch(epoch)
        elif hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)  # the epoch a loader resumes keeps its position
        batch_in_epoch = start_batch if epoch == start_epoch else 0
        it = loader.iter_batches() if with_indices else iter(loader)
        # Meters of this epoch: time per step, time in next(), loss and top-1 (summed on the
        # device, read only when printed: no synchronisation per step).
        n_ep, t_step_sum, t_data_sum = 0, 0.0, 0.0
        loss_sum = torch.zeros((), device=device)
        correct_sum = torch.zeros((), dtype=torch.int64, device=device)
        t_mark, mark_steps, mark_data = time.perf_counter(), 0, 0.0
        stopped = False
        t_prev = time.perf_counter()
        while True:
            if step >= total_steps and batch_in_epoch < steps_per_epoch:
                stopped = True  # --steps ends the run mid-epoch
                break
            if step == warmup and t_start is None:  # measure once the warm-up work is done
                sync()
                t_start = time.perf_counter()
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                break
            t_data = time.perf_counter() - t0
            if t_start is not None:
                waited += t_data
            if with_indices:
                images, labels = b.images, b.labels
                index_log.write(json.dumps({"epoch": epoch, "batch": b.batch_index,
                                            "indices": list(b.indices)}) + "\n")
            else:
                images, labels = b
            # No-ops for batches already there (stoker on CUDA, --synthetic); torchvision's
            # pinned batches are copied asynchronously.
            images = images.to(device, non_blocking=True, memory_format=memory_format)
            labels = labels.to(device, non_blocking=True)

            with autocast():
                output = model(images)
                loss = criterion(output, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach().float()
            # soft labels (MixUp/CutMix): top-1 against the dominant class of each target
            soft_labels = labels.dim() == 2
            hard = labels.argmax(1) if soft_labels else labels
            correct_sum += (output.detach().argmax(1) == hard).sum()
            step += 1
            global_step += 1
            batch_in_epoch += 1
            n_ep += 1
            now = time.perf_counter()
            t_step = now - t_prev
            t_prev = now
            t_step_sum += t_step
            t_data_sum += t_data
            mark_steps += 1
            mark_data += t_data
            if args.print_freq and step % args.print_freq == 0 and rank == 0:
                cur = loss.item()
                avg = loss_sum.item() / n_ep
                acc = 100.0 * correct_sum.item() / (n_ep * args.batch_size)
                span = now - t_mark
                ips = mark_steps * args.batch_size * world_size / span if span > 0 else 0.0
                print(f"Epoch: [{epoch}][{batch_in_epoch:>{len(str(steps_per_epoch))}}/"
                      f"{steps_per_epoch}]  Time {t_step:.3f} ({t_step_sum / n_ep:.3f})  "
                      f"Data {t_data:.3f} ({t_data_sum / n_ep:.3f})  Loss {cur:.4f} "
                      f"({avg:.4f})  Acc@1 {acc:.2f}  {ips:.1f} images/s", flush=True)
                tb.scalars({"train/loss": cur, "train/loss_avg": avg, "train/acc1": acc,
                            "train/lr": optimizer.param_groups[0]["lr"],
                            "perf/images_per_s": ips,
                            "perf/data_wait_fraction": mark_data / span if span > 0 else 0.0,
                            "perf/step_seconds": span / mark_steps,
                            **loader_scalars(loader), **gpu_scalars(device)}, global_step)
                t_mark, mark_steps, mark_data = now, 0, 0.0
        steps_by_epoch[epoch] = steps_by_epoch.get(epoch, 0) + n_ep
        if stopped:
            if args.checkpoint_dir:
                t0 = time.perf_counter()
                checkpoint(epoch, batch_in_epoch, False)
                paused += time.perf_counter() - t0 if t_start is not None else 0.0
            break
        # The epoch is over: validate, step the schedule, checkpoint.
        t0 = time.perf_counter()
        scheduler.step()
        epoch_scalars = {}
        if n_ep:
            epoch_scalars = {"epoch/train_loss": loss_sum.item() / n_ep,
                             "epoch/train_acc1": 100.0 * correct_sum.item() /
                             (n_ep * args.batch_size)}
        is_best = False
        if val is not None:
            last_val = validate(bare, val, torch.float32, device, autocast, memory_format,
                                world_size)
            vloss, acc1, acc5, nval = last_val
            is_best = best_acc1 is None or acc1 > best_acc1
            best_acc1 = acc1 if is_best else best_acc1
            if rank == 0:
                print(f" * Epoch {epoch}: Acc@1 {acc1:.3f} Acc@5 {acc5:.3f} Loss {vloss:.4f} "
                      f"({nval} images)", flush=True)
            epoch_scalars.update({"val/loss": vloss, "val/acc1": acc1, "val/acc5": acc5})
        tb.scalars({**epoch_scalars, "epoch/epoch": epoch}, global_step)
        if args.checkpoint_dir:
            checkpoint(epoch + 1, 0, is_best)
        if t_start is not None:
            paused += time.perf_counter() - t0
        epoch += 1
        it = None
    sync()
    elapsed = time.perf_counter() - t_start - paused if t_start is not None else 0.0
    measured = step - warmup if t_start is not None else 0

    # Every rank's figures; images/s is the total over the ranks, over the slowest rank's time.
    mine = {"images": measured * args.batch_size, "seconds": elapsed, "wait_seconds": waited}
    ranks = gather(mine, world_size)
    images = sum(r["images"] for r in ranks)
    seconds = max(r["seconds"] for r in ranks)
    wait_fraction = (sum(r["wait_seconds"] / r["seconds"] for r in ranks if r["seconds"] > 0)
                     / world_size)
    final_loss = loss.item() if loss is not None else float("nan")
    digest = weights_sha256(bare)
    if index_log is not None:
        index_log.write(json.dumps({"rank": rank, "world_size": world_size, "steps": step,
                                    "steps_by_epoch": steps_by_epoch,
                                    "weights_sha256": digest}) + "\n")
        index_log.close()
    ips = images / seconds if seconds > 0 else 0.0
    tb.scalars({"perf/run_images_per_s": ips, "perf/run_data_wait_fraction": wait_fraction},
               global_step)
    tb.close()

    if rank == 0:
        print(f"{args.arch} {'synthetic' if args.synthetic else args.loader} {device.type} "
              f"x{world_size}: {ips:.1f} images/s over {measured} steps, data wait "
              f"{100 * wait_fraction:.1f}% of step time, loss {final_loss:.4f}", flush=True)
        if args.json:
            vloss, acc1, acc5, nval = last_val
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
                "epoch": epoch, "global_step": global_step,
                "val_images": nval, "val_loss": None if vloss is None else round(vloss, 6),
                "val_acc1": None if acc1 is None else round(acc1, 4),
                "val_acc5": None if acc5 is None else round(acc5, 4),
                "best_acc1": best_acc1, "checkpoint": checkpoint_path,
                "weights_sha256": digest, "soft_labels": soft_labels,
                "recipe": None if args.synthetic else describe_recipe(args),
            }), flush=True)
    if loader is not None and hasattr(loader, "close"):
        it = b = images = labels = output = None  # let go of the last batch
        loader.close()
    if val is not None:
        val.close()
    if world_size > 1:
        dist.destroy_process_group()
    return 0


_DDP_MODELS = []

if __name__ == "__main__":
    rc = main()
    if _DDP_MODELS:  # everything is written and closed; skip the teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc or 0)
    sys.exit(rc)
