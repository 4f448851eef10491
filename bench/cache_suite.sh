#!/usr/bin/env bash
# stoker's pre-decoded cache against NVIDIA DALI's pre-decoded pipeline, side
# by side in one run, on a machine with a CUDA GPU:
#
#   a. stoker pack: the ImageFolder into one cache file of raw RGB images
#      bounded to max side 256 (timed);
#   b. the same pixels, read back from that cache, as one .npy file per image
#      for DALI's numpy reader (bench/prepare_cache_data.py, checked against
#      the cache), and a check that DALI pairs each image with its label;
#   c. the loader alone, train pipeline (RandomResizedCrop 224, flip,
#      normalise, float32 NCHW on the GPU), batch 256: `stoker bench CACHE
#      --device 0` with 1, 2, 4 and 8 threads; bench/dali_cache.py with 2 and
#      4 threads;
#   d. training steps (bf16 autocast, channels_last, batch 256) through
#      examples/reference/train.py's loop: synthetic data (the ceiling), stoker's cache,
#      DALI's pipeline; ResNet-18 and ResNet-50;
#   e. a summary: every figure, stoker/DALI at the same thread count, and the
#      training figures as fractions of the synthetic speed.
#
# usage: bench/cache_suite.sh SRC [COPIES]
#   SRC     a flat folder of JPEGs; it is linked COPIES times (default 34)
#           into an ImageFolder under data/cache-suite (one class per copy)
# Needs a built tree (make), python3 with torch, torchvision and numpy, and
# for the DALI lines nvidia.dali importable (e.g. on PYTHONPATH); without it
# they are skipped with a message and the stoker lines still run.
# Environment: PYTHON (default python3), STOKER (the stoker command, default
# build/stoker), EPOCHS (loader runs, default 4), PREPARE_ONLY=1 (stop after
# stage b: the data only, e.g. to measure in a later call), R18_ARGS and R50_ARGS
# (the train.py flags of the ResNet-18 and ResNet-50 runs).
# Every stage prints the time it started; the whole run takes a few minutes.
set -u
SRC=${1:?usage: bench/cache_suite.sh SRC [COPIES]}
COPIES=${2:-34}
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
S=${STOKER:-build/stoker}
EPOCHS=${EPOCHS:-4}
D=data/cache-suite
CACHE=data/cache-suite.stkc
NPY=data/cache-suite-npy
OUT=data/cache-suite-results.tsv   # every JSON result line, tagged, for the summary
LOG=data/cache-suite-last.log      # the output of the command running now
export PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH}
T0=$(date +%s)
stage() { echo; echo "== [$(date +%H:%M:%S), +$(( $(date +%s) - T0 ))s] $*"; }

# Runs a command, shows its output, and files its last JSON line under a tag.
#   record TAG CMD...
record() {
  local tag=$1 line
  shift
  echo "\$ $*"
  "$@" 2>&1 | tee "$LOG" | grep -v '^{' | tail -n 6
  line=$(grep '^{' "$LOG" | tail -n 1)
  if [ -n "$line" ]; then
    echo "$line"
    printf '%s\t%s\n' "$tag" "$line" >>"$OUT"
  else
    echo "($tag: no result line)"
  fi
  rm -f "$LOG"
}

[ -x "$S" ] || { echo "no $S: run make first"; exit 1; }
if ! $S pack --help >/dev/null 2>&1; then
  echo "$S has no pack command: this build cannot write caches"; exit 1
fi
: >"$OUT"

stage "dataset: $SRC linked $COPIES times into $D"
mkdir -p "$D"
for c in $(seq -w 1 "$COPIES"); do
  mkdir -p "$D/c$c"
  for f in "$SRC"/*; do ln -sf "$(readlink -f "$f")" "$D/c$c/$(basename "${f%.*}")_$c.${f##*.}"; done
done
echo "dataset: $(find "$D" -type l | wc -l) files in $COPIES classes; $(nproc) CPUs; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
cat "$D"/*/* >/dev/null  # into the page cache

stage "a. stoker pack --cache --max-side 256, $(nproc) threads"
rm -f "$CACHE"
t=$(date +%s%N)
$S pack "$D" "$CACHE" --cache --max-side 256 --threads "$(nproc)" || { echo "pack failed"; exit 1; }
ms=$(( ($(date +%s%N) - t) / 1000000 ))
PACK_S=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
echo "packed in ${PACK_S} s: $(du -h "$CACHE" | cut -f1) ($CACHE)"
printf 'pack\t{"seconds": %s, "bytes": %s}\n' "$PACK_S" "$(stat -c %s "$CACHE")" >>"$OUT"
cat "$CACHE" >/dev/null

stage "b. the cache's pixels as .npy files for DALI ($NPY)"
HAVE_NPY=0
if ! $PY -c "import numpy" 2>/dev/null; then
  echo "SKIPPED: $PY cannot import numpy; no DALI data (the DALI lines are skipped)"
elif $PY bench/prepare_cache_data.py "$CACHE" "$NPY" --threads "$(nproc)" --check 600; then
  HAVE_NPY=1
  cat "$NPY"/images/*/* >/dev/null
else
  echo "SKIPPED: the .npy files could not be written or do not match the cache"
fi
HAVE_DALI=0
if [ "$HAVE_NPY" = 1 ]; then
  if why=$($PY -c "import torch, nvidia.dali, nvidia.dali.plugin.pytorch; print(nvidia.dali.__version__)" 2>&1); then
    HAVE_DALI=1
    echo "DALI $(echo "$why" | tail -n 1)"
    record dali_verify $PY bench/dali_cache.py --data "$NPY" --threads 2 --verify
  else
    echo "SKIPPED: every DALI line: $PY cannot import nvidia.dali ($(echo "$why" | tail -n 1)); put DALI on PYTHONPATH"
  fi
fi
if [ "${PREPARE_ONLY:-0}" = 1 ]; then
  stage "PREPARE_ONLY=1: data ready, nothing measured"
  exit 0
fi

dali() {  # dali TAG ARGS...: a DALI line, or a message saying why not
  local tag=$1
  shift
  if [ "$HAVE_DALI" = 1 ]; then record "$tag" $PY bench/dali_cache.py --data "$NPY" "$@"
  else echo "SKIPPED ($tag): no DALI"; fi
}

stage "c. loader alone: train pipeline, batch 256, float32 NCHW on the GPU, $EPOCHS epochs"
for t in 1 2 4 8; do
  record "stoker_t$t" $S bench "$CACHE" --device 0 --threads $t --batch 256 --epochs "$EPOCHS" --json
done
for t in 2 4; do
  dali "dali_t$t" --threads $t --batch 256 --epochs "$EPOCHS"
done

stage "d. training steps: bf16 autocast, channels_last, batch 256"
TR="$PY examples/reference/train.py --amp --channels-last --batch-size 256 --json"
DT="--amp --channels-last --batch-size 256 --json"
R18=${R18_ARGS:-"--epochs 3 --steps 110 --warmup-steps 30"}
R50=${R50_ARGS:-"--epochs 2 --steps 70 --warmup-steps 20"}
record r18_synthetic $TR --arch resnet18 --synthetic --num-classes "$COPIES" --steps 80 --warmup-steps 20
record r18_stoker_t1 $TR --arch resnet18 --data "$CACHE" --loader stoker --workers 1 $R18
record r18_stoker_t2 $TR --arch resnet18 --data "$CACHE" --loader stoker --workers 2 $R18
dali r18_dali_t2 --threads 2 --train resnet18 $DT $R18
record r50_synthetic $TR --arch resnet50 --synthetic --num-classes "$COPIES" --steps 60 --warmup-steps 15
record r50_stoker_t1 $TR --arch resnet50 --data "$CACHE" --loader stoker --workers 1 $R50
dali r50_dali_t2 --threads 2 --train resnet50 $DT $R50

stage "e. summary"
$PY - "$OUT" <<'EOF'
import json, sys
res = {}
for line in open(sys.argv[1]):
    tag, js = line.rstrip("\n").split("\t", 1)
    try:
        res[tag] = json.loads(js)
    except ValueError:
        pass
def ips(tag):
    r = res.get(tag)
    if not r or r.get("skipped") or r.get("ok") is False:
        return None
    return r.get("images_per_s")
fmt = lambda v: f"{v:,.0f}" if v else "-"
if "pack" in res:
    p = res["pack"]
    print(f"pack: {p['seconds']:.1f} s, {p['bytes'] / 1e9:.2f} GB")
v = res.get("dali_verify")
if v and not v.get("skipped"):
    print(f"DALI label pairing: {v['checked']} samples checked, {v['misaligned']} misaligned, "
          f"each epoch complete: {v['each_epoch_covers_every_sample_once']}")
print()
print("loader alone, images/s (train pipeline, float32 NCHW on the GPU, batch 256)")
print(f"| threads | stoker cache | DALI numpy | stoker/DALI |")
print(f"|---|---|---|---|")
for t in (1, 2, 4, 8):
    s, d = ips(f"stoker_t{t}"), ips(f"dali_t{t}")
    ratio = f"{s / d:.2f}x" if s and d else "-"
    print(f"| {t} | {fmt(s)} | {fmt(d) if t in (2, 4) else 'not run'} | {ratio} |")
print("(stoker bench times every batch after the loader is built; DALI's figure leaves out "
      "its first 5 batches)")
print()
print("training, images/s (bf16 autocast, channels_last, batch 256); % of synthetic; data wait")
print("| model | feed | images/s | of synthetic | data wait |")
print("|---|---|---|---|---|")
for arch, tags in (("ResNet-18", ("r18_synthetic", "r18_stoker_t1", "r18_stoker_t2", "r18_dali_t2")),
                   ("ResNet-50", ("r50_synthetic", "r50_stoker_t1", "r50_dali_t2"))):
    ceil = ips(tags[0])
    for tag in tags:
        v = ips(tag)
        feed = tag.split("_", 1)[1].replace("_t", ", threads ")
        frac = f"{100 * v / ceil:.1f}%" if v and ceil else "-"
        w = res.get(tag, {}).get("data_wait_fraction")
        wait = f"{100 * w:.1f}%" if v and w is not None and "synthetic" not in tag else "-"
        print(f"| {arch} | {feed} | {fmt(v)} | {frac} | {wait} |")
s, d = ips("r18_stoker_t2"), ips("r18_dali_t2")
if s and d:
    print(f"\nResNet-18 at 2 threads, stoker/DALI: {s / d:.2f}x")
EOF
echo
echo "all result lines: $OUT; total $(( $(date +%s) - T0 )) s"
