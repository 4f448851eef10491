"""What the GPU does per training step when stoker feeds it: a torch.profiler
trace (CPU and CUDA activities) of a ResNet training loop (bf16 autocast,
channels_last, SGD) fed by stoker.ImageLoader(device="cuda"), summarised per
step by kind of work: the model's kernels, stoker's fused kernel, nvJPEG's
kernels, host-to-device copies (pageable and pinned), and the host-side
synchronisation calls, with counts and device time.

usage: python3 bench/profile_gpu.py DATA [--arch resnet18] [--threads 4]
           [--cpu-share 0] [--steps 20] [--warmup 30] [--batch 256] [--json]
DATA is an image folder, a cache file or a folder of tar shards.
Needs a CUDA GPU, torch and torchvision.
"""
import argparse
import json
import re
import sys
import time

import torch
import torchvision

import stoker

KINDS = [
    ("stoker kernel", re.compile(r"stk_")),
    ("nvjpeg kernel", re.compile(r"nvjpeg", re.I)),
    ("HtoD pageable", re.compile(r"Memcpy HtoD \(Pageable")),
    ("HtoD pinned", re.compile(r"Memcpy HtoD \(Pinned")),
    ("DtoH", re.compile(r"Memcpy DtoH")),
    ("DtoD", re.compile(r"Memcpy DtoD")),
    ("memset", re.compile(r"Memset")),
    ("event sync (host)", re.compile(r"(cu|cuda)EventSynchronize")),
    ("stream sync (host)", re.compile(r"(cu|cuda)StreamSynchronize")),
    ("event record (host)", re.compile(r"(cu|cuda)EventRecord")),
    ("stream wait event (host)", re.compile(r"(cu|cuda)StreamWaitEvent")),
    ("memcpy call (host)", re.compile(r"^(cu|cuda)Memcpy")),
    # allocation in the loop would stall the device (an implicit sync); the
    # setup counts show how many streams and buffers stoker and nvJPEG make
    ("device alloc (host)", re.compile(r"^(cudaMalloc(Async|Pitch)?|cuMemAlloc(Async|Pitch)?(_v2)?)$")),
    ("device free (host)", re.compile(r"^(cudaFree(Async)?|cuMemFree(Async)?(_v2)?)$")),
    ("pinned alloc/free (host)", re.compile(
        r"^(cudaMallocHost|cudaHostAlloc|cudaFreeHost|cudaHostRegister|cudaHostUnregister|"
        r"cuMemHostAlloc|cuMemAllocHost(_v2)?|cuMemFreeHost|cuMemHostRegister(_v2)?|cuMemHostUnregister)$")),
    ("stream create (host)", re.compile(r"^(cu|cuda)StreamCreate")),
    ("stream destroy (host)", re.compile(r"^(cu|cuda)StreamDestroy")),
]


def kind_of(name):
    for k, rx in KINDS:
        if rx.search(name):
            return k
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--cpu-share", type=float, default=0.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    dev = torch.device("cuda")
    model = getattr(torchvision.models, a.arch)(num_classes=1000).to(dev)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    # the loader's setup, traced apart: the streams and buffers it creates
    setup = torch.profiler.profile(activities=acts)
    setup.start()
    ld = stoker.ImageLoader(a.data, batch_size=a.batch, device="cuda", threads=a.threads,
                            gpu_cpu_share=a.cpu_share, dtype="bfloat16", channels_last=True,
                            drop_last=True)

    def batches():
        epoch = 0
        while True:
            ld.set_epoch(epoch)
            for b in ld:
                yield b
            epoch += 1

    it = batches()

    def step():
        x, y = next(it)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    setup.stop()
    setup_calls = {}
    for e in setup.events():
        k = kind_of(e.name)
        if k and k.endswith("(host)"):
            setup_calls[k] = setup_calls.get(k, 0) + 1
    for _ in range(a.warmup - 1):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    stats = ld.stats()
    ld.close()

    agg = {}
    other_kernels = 0.0
    for e in prof.events():
        name = e.name
        k = kind_of(name)
        dev_us = getattr(e, "device_time_total", None)
        if dev_us is None:
            dev_us = getattr(e, "cuda_time_total", 0.0)
        cpu_us = e.cpu_time_total
        if k is None:
            if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
                other_kernels += dev_us
            continue
        d = agg.setdefault(k, {"count": 0, "device_ms": 0.0, "host_ms": 0.0})
        d["count"] += 1
        d["device_ms"] += dev_us / 1e3
        d["host_ms"] += cpu_us / 1e3
    per = {k: {"per_step": round(v["count"] / a.steps, 1),
               "device_ms_per_step": round(v["device_ms"] / a.steps, 3),
               "host_ms_per_step": round(v["host_ms"] / a.steps, 3)} for k, v in agg.items()}
    out = {"data": a.data, "arch": a.arch, "threads": a.threads, "cpu_share": a.cpu_share,
           "steps": a.steps, "ms_per_step": round(wall * 1e3 / a.steps, 2),
           "images_per_s": round(a.steps * a.batch / wall, 1),
           "model_and_other_kernels_ms_per_step": round(other_kernels / 1e3 / a.steps, 3),
           "kinds": per, "setup_host_calls": setup_calls, "decoded_hw": stats.get("decoded_hw"),
           "decoded_cpu": stats.get("decoded_cpu")}
    if a.json:
        print(json.dumps(out))
        return
    print(f"{a.arch} fed by stoker from {a.data}: {out['ms_per_step']} ms/step, "
          f"{out['images_per_s']} images/s (profiled)")
    print(f"{'kind':28s} {'per step':>9s} {'device ms':>10s} {'host ms':>9s}")
    for k, _ in KINDS:
        if k in per:
            v = per[k]
            print(f"{k:28s} {v['per_step']:9.1f} {v['device_ms_per_step']:10.3f} "
                  f"{v['host_ms_per_step']:9.3f}")
    print(f"{'model and other kernels':28s} {'':9s} {out['model_and_other_kernels_ms_per_step']:10.3f}")
    print("host calls while the loader opened and the first step ran (the model's too): " +
          ", ".join(f"{k} {v}" for k, v in sorted(setup_calls.items())))
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
