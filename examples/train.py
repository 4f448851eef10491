#!/usr/bin/env python3
"""Train a torchvision classifier on an image folder with stoker.ImageLoader.

  python3 examples/train.py DIR [--arch resnet18] [--epochs 10] [--batch-size 64]

DIR holds train/ and val/ ImageFolder trees (DIR/train/<class>/<image>), or
is itself one tree, which then serves for validation too (a smoke test, not
a measure). With CUDA the images are decoded and augmented on the GPU and
arrive there; otherwise C threads do it on the CPU.

Try it on the built-in synthetic dataset (from the repository root, after `make`):

  build/stoker synth synth-data --images 200 --classes 10
  PYTHONPATH=python python3 examples/train.py synth-data --size 64 --epochs 2

examples/reference/train.py is the full trainer: torchvision's reference recipe
flags, DDP under torchrun, checkpoints with the loader's position, AMP.
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F
import torchvision

import stoker


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", metavar="DIR")
    p.add_argument("-a", "--arch", default="resnet18", help="a torchvision model name")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("-b", "--batch-size", type=int, default=64)
    p.add_argument("--size", type=int, default=224, help="side of the train crop and val crop")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("-j", "--threads", type=int, default=None, help="decoding threads")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)

    train_dir = os.path.join(args.root, "train")
    val_dir = os.path.join(args.root, "val")
    if not os.path.isdir(train_dir):
        train_dir = val_dir = args.root
    device = torch.device(args.device)
    common = dict(batch_size=args.batch_size, size=args.size, threads=args.threads,
                  device=device, seed=0)
    # RandomResizedCrop + flip + normalise; Resize + CenterCrop + normalise.
    train = stoker.ImageLoader(train_dir, pipeline="train", drop_last=True, **common)
    val = stoker.ImageLoader(val_dir, pipeline="eval", **common)

    model = torchvision.models.get_model(args.arch, num_classes=len(train.classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train))

    with train, val:
        for epoch in range(args.epochs):
            train.set_epoch(epoch)  # a new shuffle and new crops, as DistributedSampler.set_epoch
            model.train()
            t0, seen, loss_sum = time.perf_counter(), 0, 0.0
            for images, labels in train:  # already on `device` when it is a GPU
                images, labels = images.to(device), labels.to(device)
                loss = F.cross_entropy(model(images), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                seen += images.shape[0]
                loss_sum += loss.item() * images.shape[0]
            rate = seen / (time.perf_counter() - t0)

            model.eval()
            correct = total = 0
            with torch.no_grad():
                for images, labels in val:
                    images, labels = images.to(device), labels.to(device)
                    correct += (model(images).argmax(1) == labels).sum().item()
                    total += labels.numel()
            print(f"epoch {epoch}: train loss {loss_sum / max(seen, 1):.3f} "
                  f"({rate:.0f} img/s), val acc {100.0 * correct / max(total, 1):.1f}% "
                  f"on {total} images", flush=True)


if __name__ == "__main__":
    main()
