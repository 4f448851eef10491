#!/usr/bin/env python3
"""Real photos saved by Pillow as WebP (lossy, lossless), BMP, TIFF (LZW), PNG
and JPEG, one class folder per format: stoker's eval pipeline against
torchvision's ImageFolder with Resize(256), CenterCrop(224) on the same
files. Prints the classes check and, per format, the largest difference and
the PSNR.

usage: bench/formats_fidelity.py PHOTOS_DIR [--per-format 10]
"""
import argparse
import glob
import os
import tempfile

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms as T

import stoker

FORMATS = [("webp_lossy", "WEBP", {"quality": 90}, "webp"),
           ("webp_lossless", "WEBP", {"lossless": True}, "webp"),
           ("bmp", "BMP", {}, "bmp"), ("tiff_lzw", "TIFF", {"compression": "tiff_lzw"}, "tif"),
           ("png", "PNG", {}, "png"), ("jpeg", "JPEG", {"quality": 90}, "jpg")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("photos")
    ap.add_argument("--per-format", type=int, default=10)
    a = ap.parse_args()
    src = sorted(glob.glob(os.path.join(a.photos, "*")))[:a.per_format]
    root = tempfile.mkdtemp(prefix="stoker-formats-")
    for cls, fmt, kw, ext in FORMATS:
        os.makedirs(os.path.join(root, cls))
        for i, p in enumerate(src):
            Image.open(p).convert("RGB").save(os.path.join(root, cls, f"{i:02d}.{ext}"), fmt, **kw)
    ref = torchvision.datasets.ImageFolder(root, transform=T.Compose([T.Resize(256), T.CenterCrop(224),
                                                                       T.ToTensor()]))
    with stoker.ImageLoader(root, batch_size=a.per_format, threads=2, pipeline="eval",
                            dtype="uint8") as ld:
        same = ld.classes == ref.classes and [s for s, _ in ld.samples] == [s for s, _ in ref.samples]
        got = torch.cat([x.clone() for x, _ in ld]).double()
    print(f"classes and samples equal to ImageFolder's: {same}")
    want = torch.stack([(ref[i][0] * 255).round() for i in range(len(ref))]).double()
    n = a.per_format
    for c, name in enumerate(ref.classes):
        g, w = got[c * n:(c + 1) * n], want[c * n:(c + 1) * n]
        mse = ((g - w) ** 2).mean().item()
        psnr = float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)
        print(f"{name:14s} max |diff| {int((g - w).abs().max()):3d}   PSNR {psnr:.1f} dB")


if __name__ == "__main__":
    main()
