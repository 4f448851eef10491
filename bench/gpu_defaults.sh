#!/usr/bin/env bash
# The GPU path at its defaults, side by side with DALI, in one run: the
# loader alone (two interleaved rounds against DALI's ResNet pipeline at 12
# threads, then DALI at 16), ResNet-18 fed from JPEGs (synthetic data, then
# stoker three times, then DALI), and the cache pack on the CPU against
# `--device 0`. Every stoker setting is its default; STOKER_GPU_PROFILE=1
# adds the GPU profile lines.
#
# usage: bench/gpu_defaults.sh DIR [STOKER]
#   DIR: an ImageFolder of JPEGs (bench/prepare_cache_data.py makes one);
#   STOKER: the command-line tool (build/stoker).
# Needs torch and torchvision, and nvidia-dali for its rows (skipped without).
set -u
cd "$(dirname "$0")/.."
D=${1:?usage: bench/gpu_defaults.sh DIR [STOKER]}
S=${2:-build/stoker}
PY=${PYTHON:-python3}
export PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH}
json() { "$@" 2>&1 | grep -E '^\{|profile'; }
dali=1
"$PY" -c "import nvidia.dali" 2>/dev/null || { dali=0; echo "(no nvidia.dali: its rows are skipped)"; }
for r in 1 2; do
  echo "== round $r: stoker, defaults"
  json "$S" bench "$D" --device 0 --batch 256 --epochs 6 --json
  [ $dali = 1 ] && { echo "== round $r: DALI, 12 threads, hw_decoder_load 0.65"
    json "$PY" bench/dali_jpeg.py --data "$D" --threads 12 --hw-load 0.65 --epochs 4; }
done
[ $dali = 1 ] && { echo "== DALI, 16 threads, hw_decoder_load 0.75"
  json "$PY" bench/dali_jpeg.py --data "$D" --threads 16 --hw-load 0.75 --epochs 4; }
TR="$PY examples/reference/train.py --amp --channels-last --batch-size 256 --json"
TA="--epochs 3 --steps 110 --warmup-steps 30"
classes=$(find "$D" -mindepth 1 -maxdepth 1 -type d | wc -l)
echo "== ResNet-18, synthetic data"
json $TR --arch resnet18 --synthetic --num-classes "$classes" --steps 80 --warmup-steps 20
for r in 1 2 3; do
  echo "== ResNet-18 fed by stoker, defaults, run $r"
  json $TR --arch resnet18 --data "$D" --loader stoker $TA
done
[ $dali = 1 ] && { echo "== ResNet-18 fed by DALI, 12 threads"
  json "$PY" bench/dali_jpeg.py --train resnet18 --data "$D" --threads 12 --amp --channels-last --json $TA; }
out=$(mktemp -d)
for dev in "" "--device 0"; do
  echo "== pack --cache --max-side 256 $dev"
  /usr/bin/time -f "%e s, %M KB peak RSS" "$S" pack "$D" "$out/p.stkc" --cache --max-side 256 $dev --json 2>&1 |
    grep -E '^\{|RSS' | sed -E 's/, "left_out.*//'
  rm -f "$out/p.stkc"
done
rmdir "$out"
