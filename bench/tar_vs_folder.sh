#!/usr/bin/env bash
# Tar shards against the image folder they were packed from: `stoker bench`
# on both, side by side (train pipeline, the same threads and epochs), with
# the ratio tar / folder. Both are read from the page cache (each is read
# once before the runs), and the runs alternate so that a slow spell of the
# machine falls on both.
#
# usage: bench/tar_vs_folder.sh [IMAGES] [THREADS] [EPOCHS] [ROUNDS]
#   IMAGES   synthetic images (2000), THREADS loader threads (2),
#   EPOCHS   epochs per run (3), ROUNDS alternating runs of each (3)
# Environment: STOKER (build/stoker), WORK (data/tar-vs-folder; regenerated
# when its image count differs).
# Needs a built tree (make) and python3 (to read the JSON lines).
set -eu
IMAGES=${1:-2000}
THREADS=${2:-2}
EPOCHS=${3:-3}
ROUNDS=${4:-3}
cd "$(dirname "$0")/.."
S=${STOKER:-build/stoker}
W=${WORK:-data/tar-vs-folder}
PY=${PYTHON:-python3}

if [ ! -f "$W/count" ] || [ "$(cat "$W/count")" != "$IMAGES" ]; then
  rm -rf "$W"
  mkdir -p "$W"
  "$S" synth "$W/folder" --images "$IMAGES" --classes 20 --seed 1 >/dev/null
  "$S" pack "$W/folder" "$W/shards" --tar --shard-size 64M >/dev/null
  echo "$IMAGES" >"$W/count"
fi
echo "dataset: $IMAGES images, $(du -sh "$W/folder" | cut -f1) in $(find "$W/folder" -type f | wc -l) files;" \
  "$(ls "$W/shards"/*.tar | wc -l) shards of $(du -sh "$W/shards" | cut -f1); $(nproc) CPUs"
cat "$W"/folder/*/* "$W"/shards/*.tar >/dev/null # into the page cache

run() { # SOURCE -> "images/s read-us-per-image" of one run
  "$S" bench "$1" --pipeline train --threads "$THREADS" --epochs "$EPOCHS" --json | tail -n 1 |
    "$PY" -c 'import json, sys; j = json.loads(sys.stdin.read())
print("%.1f %.1f" % (j["images_per_s"], 1e6 * j["read_s"] / j["images"]))'
}

folder=()
tar=()
for r in $(seq 1 "$ROUNDS"); do
  read -r f fr <<<"$(run "$W/folder")"
  read -r t tr <<<"$(run "$W/shards")"
  folder+=("$f/$fr")
  tar+=("$t/$tr")
  echo "round $r: folder $f img/s (read $fr us/image), tar $t img/s (read $tr us/image)"
done
# The read time (summed over threads, per image) is what the storage format
# itself costs; images/s also carries the decoder's share of the CPUs.
"$PY" - "${folder[*]}" "${tar[*]}" <<'EOF'
import statistics, sys
f = [tuple(map(float, x.split("/"))) for x in sys.argv[1].split()]
t = [tuple(map(float, x.split("/"))) for x in sys.argv[2].split()]
mf, mt = statistics.median(x[0] for x in f), statistics.median(x[0] for x in t)
rf, rt = statistics.median(x[1] for x in f), statistics.median(x[1] for x in t)
print(f"median: folder {mf:.1f} img/s, tar {mt:.1f} img/s, tar / folder = {mt / mf:.3f}")
print(f"median read time: folder {rf:.1f} us/image, tar {rt:.1f} us/image")
EOF
