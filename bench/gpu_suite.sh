#!/usr/bin/env bash
# The GPU measurements of docs/BENCHMARKS.md, in one run, on a machine with a
# CUDA GPU: loader throughput (stoker on the GPU, stoker on the CPU) and
# real training steps fed by stoker, by torchvision's DataLoader and by
# synthetic data (the ceiling).
#
# usage: bench/gpu_suite.sh SRC [COPIES]
#   SRC     a flat folder of JPEGs; it is linked COPIES times (default 34)
#           into an ImageFolder under data/gpu-suite (one class per copy)
# Needs a built tree (make) and python3 with torch and torchvision.
set -u
SRC=${1:?usage: bench/gpu_suite.sh SRC [COPIES]}
COPIES=${2:-34}
cd "$(dirname "$0")/.."
D=data/gpu-suite
mkdir -p "$D"
for c in $(seq -w 1 "$COPIES"); do
  mkdir -p "$D/c$c"
  for f in "$SRC"/*; do ln -sf "$(readlink -f "$f")" "$D/c$c/$(basename "${f%.*}")_$c.${f##*.}"; done
done
echo "dataset: $(find "$D" -type l | wc -l) files in $COPIES classes; $(nproc) CPUs"
cat "$D"/*/* >/dev/null  # into the page cache

PY=${PYTHON:-python3}
S=build/stoker
echo "== loader alone: train pipeline, batch 256, float32 NCHW"
echo "-- GPU, adaptive CPU share; GPU with no CPU share (engines only); eval; CPU only"
$S bench "$D" --device 0 --threads 14 --batch 256 --epochs 4 --json | tail -n 1
$S bench "$D" --device 0 --threads 14 --batch 256 --epochs 4 --cpu-share 0 --json | tail -n 1
$S bench "$D" --device 0 --threads 14 --batch 256 --epochs 4 --pipeline eval --json | tail -n 1
$S bench "$D" --threads "$(nproc)" --batch 256 --epochs 2 --json | tail -n 1

echo "== training steps: bf16 autocast, channels_last, batch 256"
TR="$PY examples/reference/train.py --amp --channels-last --batch-size 256 --json"
export PYTHONPATH=python
$TR --arch resnet18 --synthetic --num-classes "$COPIES" --steps 80 --warmup-steps 20 | tail -n 1
$TR --arch resnet18 --data "$D" --loader stoker --workers 14 --epochs 3 --steps 110 --warmup-steps 30 | tail -n 1
$TR --arch resnet18 --data "$D" --loader torchvision --workers 16 --epochs 3 --steps 110 --warmup-steps 30 | tail -n 1
$TR --arch resnet50 --synthetic --num-classes "$COPIES" --steps 60 --warmup-steps 15 | tail -n 1
$TR --arch resnet50 --data "$D" --loader stoker --workers 4 --epochs 2 --steps 70 --warmup-steps 20 | tail -n 1
