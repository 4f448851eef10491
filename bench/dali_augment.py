#!/usr/bin/env python3
"""NVIDIA DALI running torchvision's new training recipe over JPEGs: the loader
alone, beside stoker's (bench/augment_gpu.py) in one call.

DALI's pipeline, as its documentation builds TrivialAugment:

  fn.readers.file -> fn.decoders.image_random_crop(device="mixed", area [0.08, 1],
  aspect [3/4, 4/3], hw_decoder_load) -> fn.resize(SIZE x SIZE, linear, antialias)
  -> fn.flip(horizontal=coin_flip) -> auto_aug.trivial_augment.trivial_augment_wide
  -> fn.erase with probability 0.1 (torchvision's RandomErasing area [0.02, 1/3],
     log-uniform aspect [0.3, 3.3]; filled with the mean, which normalises to 0,
     as its value 0 does: DALI erases 8-bit images)
  -> fn.crop_mirror_normalize(float16, ImageNet mean/std)
  -> DALIGenericIterator -> MixUp(0.2) or CutMix(1.0) per batch in torch ops on the
     GPU (DALI has no batch mixing of its own; this is what torchvision v2 does)

  python3 bench/dali_augment.py --data DATA --threads 12 --hw-load 0.65 --size 176

prints one JSON line: images/s over every batch after the warm-up batches, the
mixing included (the batch is synchronised at the end of the timing). When
nvidia.dali cannot be imported it prints {"skipped": "..."} and exits 0.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dali_cache as common  # noqa: E402  (the skip rules, the DALI import)

common.NAME = "dali-augment"
MEAN, STD = common.MEAN, common.STD


def build_pipeline(dali, data, *, batch, threads, device_id, seed, size, hw_load, layout):
    fn, types = dali.fn, dali.types
    from nvidia.dali import math as dmath
    from nvidia.dali.auto_aug import trivial_augment

    @dali.pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id, seed=seed,
                       enable_conditionals=True)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=data, shuffle_after_epoch=True,
                                        pad_last_batch=True, name="Reader")
        images = fn.decoders.image_random_crop(
            jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=hw_load,
            random_aspect_ratio=[0.75, 4.0 / 3.0], random_area=[0.08, 1.0], num_attempts=10)
        images = fn.resize(images, device="gpu", resize_x=size, resize_y=size,
                           interp_type=types.INTERP_LINEAR, antialias=True)
        images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
        images = trivial_augment.trivial_augment_wide(images, num_magnitude_bins=31)
        if fn.random.coin_flip(probability=0.1):
            area = fn.random.uniform(range=[0.02, 1.0 / 3.0])
            ratio = dmath.exp(fn.random.uniform(range=[math.log(0.3), math.log(1 / 0.3)]))
            h = dmath.min(dmath.sqrt(area * ratio), 1.0)
            w = dmath.min(dmath.sqrt(area / ratio), 1.0)
            ay = fn.random.uniform(range=[0.0, 1.0]) * (1.0 - h)
            ax = fn.random.uniform(range=[0.0, 1.0]) * (1.0 - w)
            images = fn.erase(images, anchor=fn.stack(ay, ax), shape=fn.stack(h, w),
                              axis_names="HW", normalized_anchor=True, normalized_shape=True,
                              fill_value=[round(m * 255) for m in MEAN])
        images = fn.crop_mirror_normalize(images, device="gpu", dtype=types.FLOAT16,
                                          output_layout=layout, mean=[m * 255 for m in MEAN],
                                          std=[s * 255 for s in STD])
        return images, labels.gpu()

    p = pipe()
    p.build()
    return p


def mix(torch, x, y, classes, gen):
    """torchvision v2's RandomChoice([MixUp(0.2), CutMix(1.0)]) on a GPU batch."""
    onehot = torch.nn.functional.one_hot(y.long().view(-1), classes).float()
    if torch.rand(1, generator=gen).item() < 0.5:
        lam = float(torch.distributions.Beta(0.2, 0.2).sample())
        x = x.roll(1, 0).mul_(1.0 - lam).add_(x.mul(lam))
    else:
        lam = float(torch.distributions.Beta(1.0, 1.0).sample())
        hw = x.shape[1:3] if x.shape[-1] == 3 else x.shape[2:4]
        H, W = int(hw[0]), int(hw[1])
        r = 0.5 * math.sqrt(1.0 - lam)
        cx, cy = int(torch.randint(W, (1,), generator=gen)), int(torch.randint(H, (1,), generator=gen))
        x1, x2 = max(cx - int(r * W), 0), min(cx + int(r * W), W)
        y1, y2 = max(cy - int(r * H), 0), min(cy + int(r * H), H)
        x = x.clone()
        if x.shape[-1] == 3:
            x[:, y1:y2, x1:x2] = x[:, y1:y2, x1:x2].roll(1, 0)
        else:
            x[..., y1:y2, x1:x2] = x[..., y1:y2, x1:x2].roll(1, 0)
        lam = 1.0 - (x2 - x1) * (y2 - y1) / (W * H)
    return x, onehot.roll(1, 0).mul_(1.0 - lam).add_(onehot.mul(lam))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--data", required=True, help="an ImageFolder of JPEGs")
    p.add_argument("--threads", type=int, default=12)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=40, help="timed batches")
    p.add_argument("--warmup-batches", type=int, default=5)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--hw-load", type=float, default=0.65)
    p.add_argument("--layout", choices=["nchw", "nhwc"], default="nhwc")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    dali, Iterator, Policy = common.import_dali()
    import torch

    classes = sorted(e.name for e in os.scandir(a.data) if e.is_dir())
    pipe = build_pipeline(dali, a.data, batch=a.batch, threads=a.threads, device_id=0, seed=a.seed,
                          size=a.size, hw_load=a.hw_load,
                          layout="CHW" if a.layout == "nchw" else "HWC")
    it = Iterator([pipe], ["data", "label"], reader_name="Reader",
                  last_batch_policy=Policy.DROP, auto_reset=True)
    gen = torch.Generator().manual_seed(a.seed)
    seen = timed = 0
    t0 = None
    while timed < a.batches:
        for out in it:
            x, y = out[0]["data"], out[0]["label"]
            x, soft = mix(torch, x, y, len(classes), gen)
            seen += 1
            if seen == a.warmup_batches:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            elif seen > a.warmup_batches:
                timed += 1
                if timed == a.batches:
                    break
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    print(json.dumps({"loader": common.NAME, "dali_version": dali.__version__,
                      "threads": a.threads, "hw_decoder_load": a.hw_load, "size": a.size,
                      "batch": a.batch, "batches": timed,
                      "images_per_s": round(timed * a.batch / secs, 1),
                      "work_queues": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "default")}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
