#!/usr/bin/env python3
"""NVIDIA DALI's standard ResNet training pipeline over JPEGs, beside stoker in bench/jpeg_suite.sh.

DALI reads an ImageFolder (labels are the sorted class folders, as in
torchvision and stoker) and decodes with its mixed decoder (nvJPEG: the
hardware engines for hw_decoder_load of each batch, the CUDA decoder for the
rest), as DALI's ResNet-50 example does:

  fn.readers.file(file_root, shuffle_after_epoch) -> fn.decoders.image_random_crop(
  device="mixed", area [0.08, 1], aspect [3/4, 4/3]) -> fn.resize(224x224, linear)
  -> fn.crop_mirror_normalize(mirror=coin_flip, ImageNet mean/std) -> DALIGenericIterator

Modes (from the repository root; DATA is an ImageFolder):

  python3 bench/dali_jpeg.py --data DATA --threads 12 --hw-load 0.65 --batch 256 --epochs 4
      the loader alone: images/s over every batch after the warm-up batches,
      float32 NCHW on the GPU (as `stoker bench DATA --device 0`); one JSON line
  python3 bench/dali_jpeg.py --train resnet18 --data DATA --threads 12 [train.py options]
      training steps fed by DALI through examples/reference/train.py's own loop (the same
      model, optimizer, autocast, channels_last, loss and measurement, the same
      JSON line); options it does not know go to train.py

When nvidia.dali cannot be imported, every mode prints why on stderr, one
JSON line {"skipped": "..."} on stdout, and exits with status 0.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dali_cache as common  # noqa: E402  (the iterator, train.py hook, skip rules)

common.NAME = "dali-jpeg"
MEAN, STD = common.MEAN, common.STD


def classes_of(data):
    if not os.path.isdir(data):
        sys.exit(f"dali_jpeg: {data} is not a folder")
    classes = sorted(e.name for e in os.scandir(data) if e.is_dir())
    if not classes:
        sys.exit(f"dali_jpeg: {data} holds no class folders")
    return classes


def build_pipeline(dali, data, *, batch, threads, device_id, seed, size, dtype, layout, hw_load):
    """(images on the GPU, labels on the GPU), the reader named "Reader"."""
    fn, types = dali.fn, dali.types
    out_type = {"float32": types.FLOAT, "float16": types.FLOAT16}[dtype]

    # The paddings and preallocation are those of DALI's own ResNet-50
    # example: they keep the decoder from reallocating in the first epochs.
    @dali.pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id, seed=seed)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=data, shuffle_after_epoch=True, pad_last_batch=True,
                                        name="Reader")
        images = fn.decoders.image_random_crop(
            jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=hw_load,
            device_memory_padding=211025920, host_memory_padding=140544512,
            preallocate_width_hint=5980, preallocate_height_hint=6430,
            random_aspect_ratio=[0.75, 4.0 / 3.0], random_area=[0.08, 1.0], num_attempts=100)
        images = fn.resize(images, device="gpu", resize_x=size, resize_y=size,
                           interp_type=types.INTERP_LINEAR, antialias=True)
        images = fn.crop_mirror_normalize(images, device="gpu", dtype=out_type,
                                          output_layout=layout, mean=MEAN, std=STD,
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels.gpu()

    p = pipe()
    p.build()
    return p


def run_loader(args):
    dali, Iterator, Policy = common.import_dali()
    classes_of(args.data)
    if args.device == "cpu":
        common.skip("the mixed decoder needs a GPU")
    dev = common.device_id_now(args)
    t0 = time.perf_counter()
    pipe = build_pipeline(dali, args.data, batch=args.batch, threads=args.threads, device_id=dev,
                          seed=args.seed, size=args.size, dtype=args.dtype,
                          layout="CHW" if args.layout == "nchw" else "HWC", hw_load=args.hw_load)
    it = Iterator([pipe], ["data", "label"], reader_name="Reader",
                  last_batch_policy=Policy.PARTIAL, auto_reset=True)
    build_s = time.perf_counter() - t0
    images, secs, x = common.time_epochs(it, args.epochs, args.warmup_batches, dev)
    shape = list(x.shape) if x is not None else None
    samples = it.size if hasattr(it, "size") else None
    del it, pipe
    print(json.dumps({
        "loader": common.NAME, "dali_version": dali.__version__, "threads": args.threads,
        "hw_decoder_load": args.hw_load, "batch": args.batch, "epochs": args.epochs,
        "warmup_batches": args.warmup_batches, "images": images, "seconds": round(secs, 6),
        "images_per_s": round(images / secs, 3) if secs > 0 else 0.0,
        "build_s": round(build_s, 3), "dtype": args.dtype, "layout": args.layout,
        "batch_shape": shape, "samples": samples,
    }), flush=True)
    return 0


def run_train(args, rest):
    import torch

    dali, Iterator, Policy = common.import_dali()
    classes = classes_of(args.data)
    train = common.load_train_py()

    def build_dali(targs, device, dtype, workers, world_size):
        if world_size > 1:
            sys.exit("dali_jpeg --train: one process only")
        if device.type == "cpu":
            sys.exit("dali_jpeg --train: the mixed decoder needs a GPU")
        # bf16 under --amp: DALI writes float16 (the same bytes per image; autocast turns it
        # into bf16 in the first convolution, as it would stoker's bf16).
        dt = "float32" if dtype == torch.float32 else "float16"
        pipe = build_pipeline(dali, targs.data, batch=targs.batch_size, threads=workers,
                              device_id=common.train_device_id(device), seed=targs.seed,
                              size=targs.image_size, dtype=dt,
                              layout="HWC" if targs.channels_last else "CHW",
                              hw_load=args.hw_load)
        loader = common.DaliTrainLoader(pipe, Iterator, Policy, classes, targs.channels_last)
        return loader, None, len(classes)

    train.LOADERS["dali-jpeg"] = build_dali
    argv = common.train_argv(args, "dali-jpeg") + rest
    return train.main(argv)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    common.add_common_args(p, "an ImageFolder of JPEGs", 12)
    p.add_argument("--hw-load", type=float, default=0.65,
                   help="hw_decoder_load: the share of each batch for the hardware engines")
    p.add_argument("--device", choices=["gpu", "cpu"], default=None,
                   help="cpu: skips (the mixed decoder needs a GPU)")
    args, rest = p.parse_known_args()
    if args.train:
        return run_train(args, rest)
    if rest:
        p.error(f"unknown options {' '.join(rest)} (only --train passes options on)")
    if args.epochs is None:
        args.epochs = 4
    return run_loader(args)


if __name__ == "__main__":
    sys.exit(main())
