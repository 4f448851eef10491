#!/usr/bin/env python3
"""NVIDIA DALI's pre-decoded pipeline, the counterpart of stoker's cache in bench/cache_suite.sh.

DALI reads the images that bench/prepare_cache_data.py wrote from a stoker
cache (the same pixels, one uint8 HWC .npy file each) and applies the train
pipeline on the GPU:

  fn.readers.numpy (CPU, shuffled) -> .gpu() -> fn.random_resized_crop(224)
  -> fn.crop_mirror_normalize(mirror=coin_flip, ImageNet mean/std) -> DALIGenericIterator

Modes (from the repository root; DATA is prepare_cache_data.py's output folder):

  python3 bench/dali_cache.py --data DATA --threads 4 --batch 256 --epochs 4
      the loader alone: images/s over every batch after the warm-up batches,
      float32 NCHW on the GPU (as `stoker bench CACHE --device 0`); one JSON line
  python3 bench/dali_cache.py --data DATA --threads 2 --verify
      two epochs checking that the labels read beside the images belong to
      them, and that each epoch holds every sample once
  python3 bench/dali_cache.py --train resnet18 --data DATA --threads 2 [train.py options]
      training steps fed by DALI, through examples/reference/train.py's own loop (the
      same model, optimizer, autocast, channels_last, loss and measurement,
      the same JSON line); options it does not know go to train.py, e.g.
      --amp --channels-last --batch-size 256 --epochs 3 --steps 110 --warmup-steps 30 --json
      (with train.py's --device cpu, DALI's operators run on the CPU too)

When nvidia.dali cannot be imported, every mode prints why on stderr, one
JSON line {"skipped": "..."} on stdout, and exits with status 0.

Labels: fn.readers.numpy yields arrays only. A second numpy reader, over the
label files (int64 [label, index]) listed in the same order and configured
identically (same seed, same shuffling, same padding), yields each image's
label: both readers draw the same order. The shuffle is by default
shuffle_after_epoch (a fresh permutation of the whole set every epoch, as
stoker's and DistributedSampler's order; its order depends only on the seed
and the epoch); --shuffle buffer uses random_shuffle (DALI's prefetch-buffer
sampling) instead. --verify checks the pairing either way.
"""
import argparse
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_PY = os.path.join(HERE, "..", "examples", "reference", "train.py")
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


NAME = "dali-cache"  # the loader's name in the JSON lines (bench/dali_jpeg.py sets its own)


def skip(reason):
    print(f"{NAME}: skipped: {reason}", file=sys.stderr, flush=True)
    print(json.dumps({"loader": NAME, "skipped": reason}), flush=True)
    sys.exit(0)


def import_dali():
    """(dali, DALIGenericIterator, LastBatchPolicy), or skip() saying why not."""
    try:
        import torch  # noqa: F401  (before DALI's torch plugin)
    except ImportError as e:
        skip(f"cannot import torch ({e})")
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn  # noqa: F401
        import nvidia.dali.types  # noqa: F401
        from nvidia.dali.plugin.pytorch import DALIGenericIterator
    except Exception as e:  # ImportError, or a missing shared library (OSError)
        skip(f"cannot import nvidia.dali ({type(e).__name__}: {e}); put DALI on PYTHONPATH")
    try:
        from nvidia.dali.plugin.pytorch import LastBatchPolicy
    except ImportError:
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
    return dali, DALIGenericIterator, LastBatchPolicy


def read_file_list(data):
    """files.txt of prepare_cache_data.py: [(rel, label, index, h, w)] in cache order."""
    path = os.path.join(data, "files.txt")
    if not os.path.exists(path):
        sys.exit(f"dali_cache: {path} not found; write DATA with bench/prepare_cache_data.py")
    rows = []
    with open(path) as f:
        for line in f:
            rel, label, index, h, w = line.split()
            rows.append((rel, int(label), int(index), int(h), int(w)))
    if not rows:
        sys.exit(f"dali_cache: {path} lists no samples")
    return rows


def build_pipeline(dali, data, rows, *, batch, threads, device_id, seed, size, dtype, layout,
                   shuffle, with_shapes):
    """The DALI pipeline: (images on the GPU, labels [B, 2] on the GPU[, shapes [B, 3]]).
    device_id None: every operator on the CPU (a check of the pipeline without a GPU)."""
    gpu = device_id is not None
    dev = "gpu" if gpu else "cpu"
    to_dev = (lambda x: x.gpu()) if gpu else (lambda x: x)
    fn, types = dali.fn, dali.types
    files = [r[0] for r in rows]
    out_type = {"float32": types.FLOAT, "float16": types.FLOAT16}[dtype]
    # Both readers get the same arguments but their root: the same order.
    reader = dict(device="cpu", files=files, seed=seed, pad_last_batch=True,
                  cache_header_information=True)
    if shuffle == "epoch":
        reader["shuffle_after_epoch"] = True
    else:
        reader["random_shuffle"] = True

    @dali.pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id, seed=seed)
    def pipe():
        images = fn.readers.numpy(file_root=os.path.join(data, "images"), name="Reader", **reader)
        labels = fn.readers.numpy(file_root=os.path.join(data, "labels"), name="Labels", **reader)
        images = fn.reshape(images, layout="HWC")  # .npy files carry no layout
        shapes = None
        if with_shapes:  # DataNode.shape() in recent DALI, fn.shapes before
            shapes = images.shape() if callable(getattr(images, "shape", None)) else \
                fn.shapes(images)
        images = fn.random_resized_crop(to_dev(images), size=[size, size], device=dev)
        images = fn.crop_mirror_normalize(images, device=dev, dtype=out_type,
                                          output_layout=layout, mean=MEAN, std=STD,
                                          mirror=fn.random.coin_flip(probability=0.5))
        if with_shapes:
            return images, to_dev(labels), shapes
        return images, to_dev(labels)

    p = pipe()
    p.build()
    return p


def device_id_now(args):
    """DALI's device_id: torch's current GPU, or None under --device cpu."""
    import torch

    if args.device == "cpu":
        return None  # DALI without a GPU: every operator on the CPU
    if not torch.cuda.is_available():
        skip("CUDA is not available to torch")
    return torch.cuda.current_device()


def sync(dev):
    if dev is not None:
        import torch

        torch.cuda.synchronize()


def time_epochs(it, epochs, warmup_batches, dev):
    """(images, seconds, last batch) over every batch after the warm-up ones."""
    batches = images = 0
    t_start = None
    x = None
    if warmup_batches <= 0:
        sync(dev)
        t_start = time.perf_counter()
    for _ in range(epochs):
        for out in it:
            x = out[0]["data"]
            batches += 1
            if batches == warmup_batches:
                sync(dev)
                t_start = time.perf_counter()
            elif batches > warmup_batches:
                images += x.shape[0]
    sync(dev)
    return images, time.perf_counter() - t_start if t_start is not None else 0.0, x


def run_loader(args):
    """The loader alone: images/s after the warm-up batches."""
    import torch

    dali, Iterator, Policy = import_dali()
    rows = read_file_list(args.data)
    dev = device_id_now(args)
    t0 = time.perf_counter()
    pipe = build_pipeline(dali, args.data, rows, batch=args.batch, threads=args.threads,
                          device_id=dev, seed=args.seed, size=args.size, dtype=args.dtype,
                          layout="CHW" if args.layout == "nchw" else "HWC",
                          shuffle=args.shuffle, with_shapes=False)
    # PARTIAL: an epoch's last batch holds only the samples left (its padding is cut off).
    it = Iterator([pipe], ["data", "label"], reader_name="Reader",
                  last_batch_policy=Policy.PARTIAL, auto_reset=True)
    build_s = time.perf_counter() - t0
    images, secs, x = time_epochs(it, args.epochs, args.warmup_batches, dev)
    shape = list(x.shape) if x is not None else None
    del it, pipe
    print(json.dumps({
        "loader": "dali-cache", "dali_version": dali.__version__, "threads": args.threads,
        "batch": args.batch, "epochs": args.epochs, "warmup_batches": args.warmup_batches,
        "images": images, "seconds": round(secs, 6),
        "images_per_s": round(images / secs, 3) if secs > 0 else 0.0,
        "build_s": round(build_s, 3), "dtype": args.dtype, "layout": args.layout,
        "batch_shape": shape, "shuffle": args.shuffle, "samples": len(rows),
        "device": args.device or "gpu",
    }), flush=True)
    return 0


def run_verify(args):
    """Two epochs: labels paired with their images, every sample once per epoch."""
    dali, Iterator, Policy = import_dali()
    rows = read_file_list(args.data)
    dev = device_id_now(args)
    pipe = build_pipeline(dali, args.data, rows, batch=args.batch, threads=args.threads,
                          device_id=dev, seed=args.seed, size=args.size, dtype="float32",
                          layout="CHW", shuffle=args.shuffle, with_shapes=True)
    it = Iterator([pipe], ["data", "label", "shape"], reader_name="Reader",
                  last_batch_policy=Policy.PARTIAL, auto_reset=True)
    checked = misaligned = 0
    coverage_ok = True
    orders = []
    for _ in range(2):
        seen = []
        for out in it:
            lab = out[0]["label"].cpu().view(-1, 2).tolist()
            shp = out[0]["shape"].cpu().view(-1, 3).tolist()
            for (label, index), (h, w, c) in zip(lab, shp):
                checked += 1
                ok = 0 <= index < len(rows) and rows[index][1] == label and \
                    (rows[index][3], rows[index][4], 3) == (h, w, c)
                misaligned += not ok
                seen.append(index)
        coverage_ok &= sorted(seen) == list(range(len(rows)))
        orders.append(seen)
    del it, pipe
    shuffled = orders[0] != sorted(orders[0]) and orders[1] != sorted(orders[1])
    res = {"loader": "dali-cache", "verify": True, "dali_version": dali.__version__,
           "shuffle": args.shuffle, "checked": checked, "misaligned": misaligned,
           "each_epoch_covers_every_sample_once": coverage_ok, "shuffled": shuffled,
           "epochs_differ": orders[0] != orders[1]}
    print(json.dumps(res), flush=True)
    # (under --shuffle buffer an epoch need not hold every sample exactly once)
    return 1 if misaligned or (args.shuffle == "epoch" and not coverage_ok) else 0


class DaliTrainLoader:
    """What examples/reference/train.py needs of a loader, over a built DALI pipeline whose
    outputs are (images, labels) and whose reader is named "Reader".
    channels_last: the pipeline writes NHWC, seen as NCHW with channels_last
    strides (no copy), as stoker's channels_last batches are."""

    def __init__(self, pipe, Iterator, Policy, classes, channels_last):
        self.channels_last = channels_last
        self.pipe = pipe
        # DROP: full batches only, as train.py's drop_last=True for the other loaders.
        self.it = Iterator([self.pipe], ["data", "label"], reader_name="Reader",
                           last_batch_policy=Policy.DROP, auto_reset=True)
        self.classes = classes

    def __len__(self):
        return len(self.it)

    def __iter__(self):  # one epoch; auto_reset readies the next
        for out in self.it:
            images, labels = out[0]["data"], out[0]["label"]
            if self.channels_last:
                images = images.permute(0, 3, 1, 2)
            # int64 class indices, as cross_entropy wants (fn.readers.file gives int32)
            yield images, labels[:, 0].long()

    def close(self):
        self.it = self.pipe = None


def train_device_id(device):
    """DALI's device_id for train.py's torch.device (None: the CPU)."""
    import torch

    if device.type == "cpu":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


def load_train_py():
    spec = importlib.util.spec_from_file_location("stoker_example_train", TRAIN_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_train(args, rest):
    import torch

    dali, Iterator, Policy = import_dali()
    rows = read_file_list(args.data)
    train = load_train_py()

    def build_dali(targs, device, dtype, workers, world_size):
        if world_size > 1:
            sys.exit("dali_cache --train: one process only")
        # bf16 under --amp: DALI writes float16 (the same bytes per image; autocast turns it
        # into bf16 in the first convolution, as it would stoker's bf16).
        dt = "float32" if dtype == torch.float32 else "float16"
        pipe = build_pipeline(dali, targs.data, rows, batch=targs.batch_size, threads=workers,
                              device_id=train_device_id(device), seed=targs.seed,
                              size=targs.image_size, dtype=dt,
                              layout="HWC" if targs.channels_last else "CHW",
                              shuffle=args.shuffle, with_shapes=False)
        loader = DaliTrainLoader(pipe, Iterator, Policy, sorted({r[0].split("/")[0] for r in rows}),
                                 targs.channels_last)
        return loader, None, len(loader.classes)

    train.LOADERS["dali-cache"] = build_dali
    argv = train_argv(args, "dali-cache")
    if args.device is not None:
        argv += ["--device", "cpu" if args.device == "cpu" else "cuda"]
    argv += rest
    return train.main(argv)


def add_common_args(p, data_help, threads):
    """The options bench/dali_cache.py and bench/dali_jpeg.py share."""
    p.add_argument("--data", required=True, help=data_help)
    p.add_argument("--threads", type=int, default=threads, help="DALI's num_threads")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=None,
                   help="loader mode: epochs to run (4); --train: passed to train.py")
    p.add_argument("--warmup-batches", type=int, default=5,
                   help="loader mode: batches left out of the measurement")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    p.add_argument("--layout", choices=["nchw", "nhwc"], default="nchw")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", metavar="ARCH",
                   help="train ARCH through examples/reference/train.py fed by DALI; other options go "
                        "to train.py")


def train_argv(args, loader):
    """train.py's options from this script's: `rest` goes after them and wins."""
    argv = ["--arch", args.train, "--data", args.data, "--loader", loader,
            "--workers", str(args.threads), "--seed", str(args.seed),
            "--batch-size", str(args.batch), "--image-size", str(args.size)]
    if args.epochs is not None:
        argv += ["--epochs", str(args.epochs)]
    return argv


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    add_common_args(p, "prepare_cache_data.py's output folder", 4)
    p.add_argument("--shuffle", choices=["epoch", "buffer"], default="epoch",
                   help="epoch: shuffle_after_epoch (a permutation of the set per epoch); "
                        "buffer: random_shuffle (DALI's prefetch-buffer sampling)")
    p.add_argument("--device", choices=["gpu", "cpu"], default=None,
                   help="gpu (default) or cpu: every DALI operator on the CPU, to check the "
                        "pipeline on a machine without a GPU (--train: train.py's --device)")
    p.add_argument("--verify", action="store_true", help="check the label pairing and exit")
    args, rest = p.parse_known_args()
    if args.train:
        return run_train(args, rest)
    if rest:
        p.error(f"unknown options {' '.join(rest)} (only --train passes options on)")
    if args.verify:
        return run_verify(args)
    if args.epochs is None:
        args.epochs = 4
    return run_loader(args)


if __name__ == "__main__":
    sys.exit(main())
