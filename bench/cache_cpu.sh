#!/usr/bin/env bash
# The pre-decoded cache on the CPU, side by side with the JPEG folder it was
# packed from, in one run: the train pipeline (RandomResizedCrop 224, flip,
# float32 NCHW), batch 256, on THREADS worker threads.
#
# usage: bench/cache_cpu.sh [DIR] [THREADS] [EPOCHS]
#   DIR      an ImageFolder of JPEGs; default: a synthetic set of 2,000
#            ImageNet-like images written to data/synth (stoker synth)
#   THREADS  default 2; EPOCHS default 3
# Prints one JSON line per source and the ratios to the folder.
set -eu
cd "$(dirname "$0")/.."
DIR=${1:-}
T=${2:-2}
E=${3:-3}
S=build/stoker
[ -x "$S" ] || make >/dev/null
if [ -z "$DIR" ]; then
  DIR=data/synth
  [ -f "$DIR/.complete" ] || { $S synth "$DIR" --images 2000 --classes 100 --seed 0 && touch "$DIR/.complete"; }
fi
OUT=data/cache-cpu
mkdir -p "$OUT"
echo "dataset: $DIR, $(find -L "$DIR" -type f | wc -l) files; $(nproc) CPUs; $T threads"
t0=$(date +%s.%N)
$S pack "$DIR" "$OUT/raw256.stkc" --cache --max-side 256 --threads "$(nproc)" >/dev/null
t1=$(date +%s.%N)
$S pack "$DIR" "$OUT/jpeg256.stkc" --cache --encoding jpeg --quality 90 --max-side 256 \
  --threads "$(nproc)" >/dev/null
t2=$(date +%s.%N)
echo "pack: raw $(echo "$t1 - $t0" | bc) s, $(du -h "$OUT/raw256.stkc" | cut -f1); jpeg $(echo "$t2 - $t1" | bc) s, $(du -h "$OUT/jpeg256.stkc" | cut -f1)"
cat "$OUT"/*.stkc >/dev/null # into the page cache, as the folder is after its first epoch
run() { $S bench "$1" --threads "$T" --batch 256 --epochs "$E" --json | tail -n 1; }
F=$(run "$DIR"); R=$(run "$OUT/raw256.stkc"); J=$(run "$OUT/jpeg256.stkc")
echo "folder     $F"
echo "cache raw  $R"
echo "cache jpeg $J"
ips() { echo "$1" | sed 's/.*"images_per_s": \([0-9.]*\).*/\1/'; }
f=$(ips "$F"); r=$(ips "$R"); j=$(ips "$J")
echo "images/s: folder $f, cache raw $r ($(echo "scale=2; $r / $f" | bc)x), cache jpeg $j ($(echo "scale=2; $j / $f" | bc)x)"
