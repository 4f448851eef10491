#!/usr/bin/env bash
# JPEGs on the GPU, side by side in one run: stoker, NVIDIA DALI's standard
# ResNet pipeline (bench/dali_jpeg.py) and torchvision's DataLoader, on the
# same ImageFolder. The loader alone at several thread counts and splits,
# then ResNet-18 and ResNet-50 training steps fed by each, with synthetic
# data as the ceiling. Every result is one JSON line, tagged, in RESULTS
# (default data/jpeg-suite.jsonl); a summary table with the ratios follows.
#
# usage: bench/jpeg_suite.sh SRC [COPIES]
#   SRC     a flat folder of JPEGs; it is linked COPIES times (default 34)
#           into an ImageFolder under data/jpeg-suite (one class per copy)
# Needs a built tree (make), python3 with torch and torchvision, and a GPU.
# DALI is used where `import nvidia.dali` works (PYTHONPATH); otherwise its
# rows say why they were skipped. Environment: STOKER_THREADS (default
# "2 4 8 14"), DALI_THREADS ("4 8 12"), DALI_HW_LOADS ("0.65 0.9"),
# TRAIN=0 to measure the loaders alone, R18_REPEAT=N to run the ResNet-18
# step fed by stoker (14 threads) N times, to show its run-to-run spread.
set -u
SRC=${1:?usage: bench/jpeg_suite.sh SRC [COPIES]}
COPIES=${2:-34}
cd "$(dirname "$0")/.."
D=$PWD/data/jpeg-suite
RESULTS=${RESULTS:-data/jpeg-suite.jsonl}
mkdir -p "$D" "$(dirname "$RESULTS")"
: >"$RESULTS"
for c in $(seq -w 1 "$COPIES"); do
  mkdir -p "$D/c$c"
  for f in "$SRC"/*; do ln -sf "$(readlink -f "$f")" "$D/c$c/$(basename "${f%.*}")_$c.${f##*.}"; done
done
N=$(find "$D" -type l | wc -l)
echo "dataset: $N files in $COPIES classes; $(nproc) CPUs; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
cat "$D"/*/* >/dev/null # into the page cache

PY=${PYTHON:-python3}
export PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH}
S=build/stoker
# record TAG CMD...: runs CMD, keeps its last JSON line with "tag" added
record() {
  local tag=$1 line
  shift
  line=$("$@" 2>/dev/null | grep '^{' | tail -n 1)
  [ -z "$line" ] && line='{"failed": true}'
  echo "{\"tag\": \"$tag\", ${line#\{}" >>"$RESULTS"
  echo "$tag: $line" | cut -c 1-220
}

echo "== loader alone: train pipeline, batch 256, float32 NCHW on the GPU"
for t in ${STOKER_THREADS:-2 4 8 14}; do
  record "stoker t$t share0" $S bench "$D" --device 0 --threads "$t" --batch 256 --epochs 4 --cpu-share 0 --json
  record "stoker t$t adaptive" $S bench "$D" --device 0 --threads "$t" --batch 256 --epochs 4 --json
  # a fixed share needs the workers to run ahead of the engines: two more slots
  record "stoker t$t share0.2 pf4" $S bench "$D" --device 0 --threads "$t" --batch 256 --epochs 4 \
    --cpu-share 0.2 --prefetch 4 --json
  # the engines' batched call: slower beside a model, faster alone (docs/gpu.md)
  record "stoker t$t share0 batched" env STOKER_GPU_ENGINE_STATES=0 $S bench "$D" --device 0 \
    --threads "$t" --batch 256 --epochs 4 --cpu-share 0 --json
done
for t in ${DALI_THREADS:-4 8 12}; do
  for h in ${DALI_HW_LOADS:-0.65 0.9}; do
    record "dali t$t hw$h" $PY bench/dali_jpeg.py --data "$D" --threads "$t" --hw-load "$h" --epochs 4
  done
done
record "torchvision w16" $PY bench/compare.py "$D" --device cuda --workers 16 --rounds 1 --epochs 1 \
  --fidelity-images 0 --work data/jpeg-suite-compare --json

if [ "${TRAIN:-1}" = 1 ]; then
  echo "== training steps: bf16 autocast, channels_last, batch 256"
  TR="$PY examples/reference/train.py --amp --channels-last --batch-size 256 --json"
  TA="--epochs 3 --steps 110 --warmup-steps 30"
  record "r18 synthetic" $TR --arch resnet18 --synthetic --num-classes "$COPIES" --steps 80 --warmup-steps 20
  record "r18 stoker t4" $TR --arch resnet18 --data "$D" --loader stoker --workers 4 $TA
  for r in $(seq 1 "${R18_REPEAT:-1}"); do
    record "r18 stoker t14 run$r" $TR --arch resnet18 --data "$D" --loader stoker --workers 14 $TA
  done
  record "r18 stoker t14 share0.3" $TR --arch resnet18 --data "$D" --loader stoker --workers 14 \
    --gpu-cpu-share 0.3 $TA
  record "r18 dali t12" $PY bench/dali_jpeg.py --train resnet18 --data "$D" --threads 12 \
    --amp --channels-last --json $TA
  record "r18 torchvision w16" $TR --arch resnet18 --data "$D" --loader torchvision --workers 16 $TA
  record "r50 synthetic" $TR --arch resnet50 --synthetic --num-classes "$COPIES" --steps 60 --warmup-steps 15
  record "r50 stoker t4" $TR --arch resnet50 --data "$D" --loader stoker --workers 4 --epochs 2 --steps 70 --warmup-steps 20
  record "r50 dali t4" $PY bench/dali_jpeg.py --train resnet50 --data "$D" --threads 4 \
    --amp --channels-last --json --epochs 2 --steps 70 --warmup-steps 20
fi

echo "== summary"
$PY - "$RESULTS" <<'EOF'
import json, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    tag = r["tag"]
    if r.get("skipped") or r.get("failed"):
        print(f"{tag:24s} {'skipped: ' + r['skipped'] if r.get('skipped') else 'failed'}")
        continue
    if "results" in r:  # bench/compare.py: torchvision's DataLoader (and stoker, 16 threads)
        v = r["results"]["train"]["best_torchvision"]
    else:
        v = r["images_per_s"]
    print(f"{tag:24s} {v:10.1f} img/s")
    words = tag.split()
    kind = " ".join(words[:2]) if words[0] in ("r18", "r50") else words[0]
    best[kind] = max(best.get(kind, 0.0), v)
if best.get("stoker") and best.get("dali"):
    print(f"loader alone, each at its best: stoker {best['stoker']:.0f}, DALI {best['dali']:.0f} "
          f"img/s: {best['stoker'] / best['dali']:.2f}x")
if best.get("stoker") and best.get("torchvision"):
    print(f"loader alone: stoker {best['stoker'] / best['torchvision']:.2f}x torchvision")
for arch in ("r18", "r50"):
    syn = best.get(f"{arch} synthetic")
    for k in ("stoker", "dali", "torchvision"):
        v = best.get(f"{arch} {k}")
        if syn and v:
            print(f"{arch} fed by {k}: {v:.0f} img/s, {100 * v / syn:.1f}% of synthetic ({syn:.0f})")
EOF
