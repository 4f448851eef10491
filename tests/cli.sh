#!/bin/sh
# The `stoker` command end to end: synth, check, bench --json, pack (cache and
# tar shards, read back by bench and check), info, --help, and the exit codes
# and messages a script relies on.
# usage: cli.sh PATH/TO/stoker [STK_GPU: ON or OFF, how it was built]
set -u
STK=$1
GPU_OPTION=${2:-ON}
T=$(mktemp -d /tmp/stoker-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
expect() { # expect CODE DESCRIPTION -- command...
  want=$1; what=$2; shift 3
  "$@" >"$T/out" 2>"$T/err"; got=$?
  if [ "$got" -eq "$want" ]; then ok; else bad "$what: exit $got, want $want"; cat "$T/err" >&2; fi
}

for c in "" bench check pack synth info; do
  expect 0 "$c --help" -- "$STK" $c --help
  grep -q "usage: stoker" "$T/out" && ok || bad "$c --help prints usage"
done
expect 2 "no command" -- "$STK"
expect 2 "unknown command" -- "$STK" frobnicate
expect 2 "bad option" -- "$STK" bench "$T" --frob
expect 2 "bad number" -- "$STK" bench "$T" --batch abc
# the loader's flags come from the options table, with its ranges and names
expect 2 "index out of range" -- "$STK" bench "$T" --index 5
grep -q -e "--index 5: index must be in -1..1, got 5" "$T/err" && ok || bad "index range message: $(cat "$T/err")"
expect 2 "unknown dtype" -- "$STK" bench "$T" --dtype int8
grep -q "float32, float16, bfloat16 or uint8, got 'int8'" "$T/err" && ok || bad "dtype message: $(cat "$T/err")"
expect 2 "negative shuffle buffer" -- "$STK" bench "$T" --shuffle-buffer -1
grep -q "shuffle_buffer must be at least 0" "$T/err" && ok || bad "shuffle_buffer message: $(cat "$T/err")"
expect 2 "flag without value" -- "$STK" bench "$T" --index-dir
grep -q -e "--index-dir needs a value" "$T/err" && ok || bad "missing value message: $(cat "$T/err")"
expect 2 "scale needs two numbers" -- "$STK" bench "$T" --scale 0.5
grep -q "scale expects 2 comma-separated numbers" "$T/err" && ok || bad "scale message: $(cat "$T/err")"
for f in --index --index-dir --shuffle-buffer --allow-stale-cache --cpu-share --batch; do
  "$STK" bench --help | grep -q -e "^  $f" && ok || bad "bench --help lists $f"
done
expect 2 "pack without a format" -- "$STK" pack "$T" "$T/out.stkc"
grep -q "choose one of --cache and --tar" "$T/err" && ok || bad "pack format message"
expect 2 "pack with both formats" -- "$STK" pack "$T" "$T/out" --cache --tar
expect 2 "pack bad shard size" -- "$STK" pack "$T" "$T/out" --tar --shard-size 12Q
grep -q -e "--shard-size 12Q: shard_bytes expects a non-negative integer" "$T/err" && ok || bad "shard-size message: $(cat "$T/err")"
expect 2 "pack shard size with cache" -- "$STK" pack "$T" "$T/out" --cache --shard-size 1G
grep -q "applies to --tar only" "$T/err" && ok || bad "shard-size --cache message"
expect 2 "pack quality with tar" -- "$STK" pack "$T" "$T/out" --tar --quality 80
grep -q -e "--quality applies to --cache only" "$T/err" && ok || bad "quality --tar message"
expect 2 "pack bad encoding" -- "$STK" pack "$T" "$T/out" --cache --encoding png
grep -q "raw or jpeg" "$T/err" && ok || bad "encoding message"
expect 2 "pack bad quality" -- "$STK" pack "$T" "$T/out" --cache --quality 101
# the flag's range is the library's: 65500 is taken, 65501 refused as a usage error
expect 2 "pack max-side above the library's" -- "$STK" pack "$T" "$T/out" --cache --max-side 65501
grep -q -e "--max-side 65501: max_side must be in 0..65500" "$T/err" && ok || bad "max-side message: $(cat "$T/err")"
expect 1 "pack max-side at the library's bound" -- "$STK" pack "$T/missing" "$T/out" --cache --max-side 65500
"$STK" pack --help | grep -q -e "^  --check" && ok || bad "pack --help lists --check"
# the command is an example of the public API: stoker.h and system headers only
src=$(dirname "$0")/../tools/stoker.c
if [ -f "$src" ]; then
  [ -z "$(grep '^#include "' "$src" | grep -v '^#include "stoker.h"')" ] && ok || bad "tools/stoker.c includes internal headers: $(grep '^#include "' "$src")"
fi
expect 2 "pack --device with tar" -- "$STK" pack "$T" "$T/out" --tar --device 0
grep -q -- "--device applies to --cache only" "$T/err" && ok || bad "pack --device tar message"
expect 1 "pack --device unbounded" -- "$STK" pack "$T" "$T/out.stkc" --cache --device 0 --max-side 0
grep -q "needs max_side in 1..8192" "$T/err" && ok || bad "pack --device max-side message"
expect 1 "pack --plain-chroma on the CPU" -- "$STK" pack "$T" "$T/out.stkc" --cache --plain-chroma
grep -q "plain_chroma applies to a pack on a device" "$T/err" && ok || bad "plain-chroma message"
[ ! -e "$T/out.stkc" ] && ok || bad "a refused device pack leaves no output"
expect 2 "pack without output" -- "$STK" pack "$T" --cache
expect 1 "pack of a missing folder" -- "$STK" pack "$T/missing" "$T/out.stkc" --cache
grep -q "$T/missing" "$T/err" && ok || bad "pack names the missing folder: $(cat "$T/err")"
[ ! -e "$T/out.stkc" ] && ok || bad "a failed pack leaves no output"

expect 0 "info" -- "$STK" info
grep -q "^simd: " "$T/out" && grep -q "^jpeg: " "$T/out" && ok || bad "info lists simd and jpeg"
grep -q "^webp: libwebp [0-9]" "$T/out" && grep -q "^tiff: libtiff [0-9]" "$T/out" &&
  grep -q "^bmp, ppm/pgm/pbm: " "$T/out" && ok || bad "info lists webp, tiff, bmp and netpbm"

expect 0 "synth" -- "$STK" synth "$T/ds" --images 24 --classes 3 --seed 5
[ "$(find "$T/ds" -name '*.JPEG' | wc -l)" -eq 24 ] && ok || bad "synth wrote 24 files"
expect 0 "synth again" -- "$STK" synth "$T/ds2" --images 24 --classes 3 --seed 5
diff -r "$T/ds" "$T/ds2" >/dev/null && ok || bad "synth is deterministic"
expect 2 "synth without --images" -- "$STK" synth "$T/x" --classes 3

expect 0 "check clean" -- "$STK" check "$T/ds"
grep -q "24 files checked, 0 failed" "$T/out" && ok || bad "check counts 24 files"

expect 0 "bench json" -- "$STK" bench "$T/ds" --batch 5 --threads 2 --epochs 2 --json
last=$(tail -n 1 "$T/out")
for k in '"images": 48' '"seconds": ' '"images_per_s": ' '"skipped": 0'; do
  echo "$last" | grep -q "$k" && ok || bad "bench json has $k: $last"
done
expect 0 "bench eval nhwc uint8" -- "$STK" bench "$T/ds" --pipeline eval --layout nhwc --dtype uint8 --batch 7 --json
tail -n 1 "$T/out" | grep -q '"images": 24' && ok || bad "eval bench counts 24"

# broken files: check lists them and exits 1; bench raises by default, skips when asked
printf 'not an image' >"$T/ds/n0000/broken.jpg"
: >"$T/ds/n0001/empty.JPEG"
head -c 3000 "$(find "$T/ds/n0002" -name '*.JPEG' | head -n 1)" >"$T/ds/n0002/truncated.jpg"
expect 1 "check broken" -- "$STK" check "$T/ds" --json
for f in broken.jpg empty.JPEG truncated.jpg; do
  grep -q "$f" "$T/out" && ok || bad "check lists $f"
done
grep -q '"failed": 3' "$T/out" && ok || bad "check json counts 3 failures"
expect 1 "bench raise" -- "$STK" bench "$T/ds" --batch 4 --threads 2
grep -q -e "broken.jpg" -e "empty.JPEG" -e "truncated.jpg" "$T/err" && ok || bad "raise names the file"
expect 0 "bench skip" -- "$STK" bench "$T/ds" --batch 4 --threads 2 --on-error skip --max-skipped-fraction 1 --json
tail -n 1 "$T/out" | grep -q '"skipped": 3' && ok || bad "skip counts 3"
tail -n 1 "$T/out" | grep -q '"images": 24' && ok || bad "skip still delivers the 24 good images"
grep -q "skipped: .*truncated.jpg" "$T/out" && ok || bad "skip lists the files"

# pack: a cache and tar shards of the folder with its three broken files;
# each broken file is left out and listed, the rest reads back in full
expect 0 "pack cache" -- "$STK" pack "$T/ds" "$T/ds.stkc" --cache --threads 2 --json
for f in broken.jpg empty.JPEG truncated.jpg; do
  grep -q "^left out: .*$f: " "$T/out" && ok || bad "pack lists $f"
done
last=$(tail -n 1 "$T/out")
for k in '"ok": true' '"format": "cache"' '"packed": 24' '"failed": 3' '"shards": 0' \
  '"device_packed": 0' 'truncated.jpg'; do
  echo "$last" | grep -q "$k" && ok || bad "pack json has $k: $last"
done
[ -s "$T/ds.stkc" ] && ok || bad "pack wrote the cache"
expect 0 "pack jpeg cache" -- "$STK" pack "$T/ds" "$T/ds-jpeg.stkc" --cache --encoding jpeg --max-side 64 --quality 80
grep -q "packed 24 samples into .*ds-jpeg.stkc (cache), 3 left out" "$T/out" && ok || bad "jpeg pack summary: $(cat "$T/out")"
[ "$(wc -c <"$T/ds-jpeg.stkc")" -lt "$(wc -c <"$T/ds.stkc")" ] && ok || bad "a bounded jpeg cache is smaller than the raw one"
# tar shards keep each file's bytes: the pack vets headers only, so the
# truncated JPEG goes in, and check (a full decode) finds it in its shard
expect 0 "pack tar" -- "$STK" pack "$T/ds" "$T/shards" --tar --shard-size 512K --json
last=$(tail -n 1 "$T/out")
for k in '"ok": true' '"format": "tar"' '"packed": 25' '"failed": 2' 'broken.jpg' 'empty.JPEG'; do
  echo "$last" | grep -q "$k" && ok || bad "pack tar json has $k: $last"
done
nshards=$(ls "$T/shards" | grep -c '\.tar$')
[ "$nshards" -ge 2 ] && ok || bad "512K shards of ~2.5 MB make several shards, got $nshards"
echo "$last" | grep -q "\"shards\": $nshards," && ok || bad "pack reports the $nshards shards it wrote: $last"

for src in ds.stkc ds-jpeg.stkc; do
  expect 0 "check $src" -- "$STK" check "$T/$src"
  grep -q "^24 files checked, 0 failed" "$T/out" && ok || bad "check $src counts 24: $(cat "$T/out")"
  expect 0 "bench $src" -- "$STK" bench "$T/$src" --batch 5 --threads 2 --epochs 2 --json
  tail -n 1 "$T/out" | grep -q '"images": 48' && ok || bad "bench $src delivers 48: $(tail -n 1 "$T/out")"
  grep -q "^source: " "$T/out" && ok || bad "bench $src names its source"
done
tail -n 1 "$T/out" | grep -q '"source": "cache"' && ok || bad "bench calls a cache a cache"
expect 1 "check shards" -- "$STK" check "$T/shards"
grep -q "shard-[0-9]*\.tar:.*truncated\.jpg: " "$T/out" && ok || bad "check names the member in its shard: $(cat "$T/out")"
grep -q "^25 files checked, 1 failed (tar)" "$T/out" && ok || bad "check shards counts 25: $(tail -n 1 "$T/out")"
expect 0 "bench shards" -- "$STK" bench "$T/shards" --batch 5 --threads 2 --epochs 2 --on-error skip --shuffle-buffer 4 --json
last=$(tail -n 1 "$T/out")
for k in '"images": 48' '"skipped": 2' '"source": "tar"' '"samples": 25'; do
  echo "$last" | grep -q "$k" && ok || bad "bench shards json has $k: $last"
done
expect 0 "bench cache eval" -- "$STK" bench "$T/ds.stkc" --pipeline eval --size 32 --batch 7 --json
tail -n 1 "$T/out" | grep -q '"images": 24' && ok || bad "eval bench of a cache counts 24"
# a damaged cache: check finds the entry whose checksum no longer matches
cp "$T/ds.stkc" "$T/bad.stkc"
size=$(wc -c <"$T/bad.stkc")
printf '\377\377\377\377\377\377\377\377' | dd of="$T/bad.stkc" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
expect 1 "check damaged cache" -- "$STK" check "$T/bad.stkc" --json
grep -q '"failed": 1' "$T/out" && ok || bad "check finds the damaged entry: $(cat "$T/out")"

# a stale cache: refused, or used with a note under --allow-stale-cache
expect 0 "pack clean copy" -- "$STK" pack "$T/ds2" "$T/ds2.stkc" --cache
cp "$(find "$T/ds2/n0000" -name '*.JPEG' | head -n 1)" "$T/ds2/n0000/added.JPEG"
expect 1 "bench stale cache" -- "$STK" bench "$T/ds2.stkc" --batch 8
grep -q "stale" "$T/err" && ok || bad "stale cache refused with a reason: $(cat "$T/err")"
expect 0 "bench stale cache allowed" -- "$STK" bench "$T/ds2.stkc" --batch 8 --allow-stale-cache --json
grep -q "note: .*stale" "$T/err" && ok || bad "bench prints the note: $(cat "$T/err")"
tail -n 1 "$T/out" | grep -q '"images": 24' && ok || bad "stale cache still reads 24"
expect 2 "check stale cache" -- "$STK" check "$T/ds2.stkc"
expect 0 "check stale cache allowed" -- "$STK" check "$T/ds2.stkc" --allow-stale-cache

# files the pack cannot read: over the size limit, and (not as root) without permission
expect 0 "pack with a size limit" -- "$STK" pack "$T/ds2" "$T/small.stkc" --cache --max-file-bytes 120K
grep -q "^left out: .*over the limit" "$T/out" && ok || bad "pack lists the files over the limit: $(head -n 3 "$T/out")"
if [ "$(id -u)" -ne 0 ]; then
  chmod 000 "$T/ds2/n0000/added.JPEG"
  expect 0 "pack with an unreadable file" -- "$STK" pack "$T/ds2" "$T/perm.stkc" --cache
  grep -q "^left out: .*added.JPEG: .*ermission" "$T/out" && ok || bad "pack lists the unreadable file: $(cat "$T/out")"
  chmod 644 "$T/ds2/n0000/added.JPEG"
fi

# -V and --version print the version
for v in -V --version; do
  expect 0 "$v" -- "$STK" $v
  grep -q "^stoker [0-9]*\.[0-9]*\.[0-9]*" "$T/out" && ok || bad "$v prints the version: $(cat "$T/out" "$T/err")"
done

# the stale-cache error names the flag a CLI user passes, not the field
expect 1 "bench stale cache names the flag" -- "$STK" bench "$T/ds2.stkc" --batch 8
grep -q -e "pass --allow-stale-cache" "$T/err" && ok || bad "stale message names --allow-stale-cache: $(cat "$T/err")"
# one "stoker pack:" prefix, not "stoker pack: pack:"
mkdir -p "$T/notempty" && touch "$T/notempty/x"
expect 1 "pack tar into a non-empty folder" -- "$STK" pack "$T/ds" "$T/notempty" --tar
grep -q "pack: pack:" "$T/err" && bad "doubled prefix: $(cat "$T/err")" || ok
grep -q "^stoker pack: .*notempty exists and is not an empty folder" "$T/err" && ok || bad "tar output message: $(cat "$T/err")"

# the same bad file gets the same reason from a cache and a tar pack; PPM
# and PGM (ImageFolder extensions) are decoded: a good PPM is packed (a
# .ppm member in the shard), a truncated PGM is left out, named as such
printf 'P6\n2 2\n255\n012345678901' >"$T/ds/n0001/image.ppm"
printf 'P5\n2 2\n255\n012' >"$T/ds/n0001/image.pgm"
expect 0 "pack cache with PPM" -- "$STK" pack "$T/ds" "$T/ppm.stkc" --cache
grep "^left out: " "$T/out" | sort >"$T/cache-left"
expect 0 "pack tar with PPM" -- "$STK" pack "$T/ds" "$T/ppm-shards" --tar --check
grep "^left out: " "$T/out" | sort >"$T/tar-left"
cmp -s "$T/cache-left" "$T/tar-left" && ok || bad "cache and tar --check give the same reasons: $(diff "$T/cache-left" "$T/tar-left")"
grep -q "image.ppm" "$T/cache-left" && bad "PPM left out: $(cat "$T/cache-left")" || ok
grep -q "image.pgm: truncated PPM/PGM file" "$T/cache-left" && ok || bad "PGM named: $(cat "$T/cache-left")"
cat "$T"/ppm-shards/*.tar | tr -c '[:print:]' '\n' | grep -q '[.]ppm$' && ok || bad "no .ppm member in the shards"
expect 1 "check with PPM" -- "$STK" check "$T/ds"
grep -q "image.pgm: truncated PPM/PGM file" "$T/out" && ok || bad "check names PGM: $(cat "$T/out")"
rm -f "$T/ds/n0001/image.ppm" "$T/ds/n0001/image.pgm"
# tar --check decodes: the truncated JPEG is left out (without it, only the
# header is read and it goes in, as above)
grep -q "truncated.jpg: " "$T/tar-left" && ok || bad "tar --check leaves out the truncated JPEG: $(cat "$T/tar-left")"
expect 2 "--check with --cache" -- "$STK" pack "$T/ds" "$T/x.stkc" --cache --check
grep -q -e "--check applies to --tar only" "$T/err" && ok || bad "--check --cache message: $(cat "$T/err")"

# the raw cache's size estimate comes before the pack, close to the result
expect 0 "pack prints its estimate" -- "$STK" pack "$T/ds2" "$T/est.stkc" --cache --json
grep -q "^stoker pack: the raw cache of 25 files will take about .* (estimated from the headers of 25)" "$T/err" && ok || bad "estimate line: $(cat "$T/err")"
est=$(tail -n 1 "$T/out" | sed 's/.*"estimated_bytes": \([0-9]*\).*/\1/')
real=$(wc -c <"$T/est.stkc")
[ "$est" -gt $((real * 9 / 10)) ] && [ "$est" -lt $((real * 11 / 10)) ] && ok || bad "estimate $est within 10% of $real"
# a disk smaller than the estimate: refused before writing (needs a mount)
mkdir -p "$T/tiny"
if mount -t tmpfs -o size=256k tmpfs "$T/tiny" 2>/dev/null; then
  expect 1 "pack onto a full disk" -- "$STK" pack "$T/ds2" "$T/tiny/c.stkc" --cache
  grep -q "not enough room for .*tiny/c.stkc: the raw cache of 25 images needs about .* MB" "$T/err" && ok || bad "room message: $(cat "$T/err")"
  [ -z "$(ls "$T/tiny")" ] && ok || bad "nothing written: $(ls "$T/tiny")"
  umount "$T/tiny"
else
  echo "cli.sh: full-disk case skipped (no tmpfs mount here)"
fi

# --read-timeout: a FIFO list whose writer sends a few lines and stalls
# fails within the timeout in check, pack and bench, instead of hanging
if command -v mkfifo >/dev/null; then
  find "$T/ds2" -name '*.JPEG' | head -n 6 | awk '{print $0, 0}' >"$T/six.txt"
  mkfifo "$T/list.fifo"
  for cmd in check pack bench; do
    ( exec 3>"$T/list.fifo"; head -n 3 "$T/six.txt" >&3; sleep 5 ) &
    wp=$!
    case $cmd in
      pack) set -- pack --list "$T/list.fifo" "$T/fifo.stkc" --cache ;;
      *) set -- $cmd --list "$T/list.fifo" ;;
    esac
    t0=$(date +%s%N)
    "$STK" "$@" --read-timeout 1 >"$T/out" 2>"$T/err"
    rc=$?
    dt=$((($(date +%s%N) - t0) / 1000000))
    [ "$rc" -ne 0 ] && [ "$dt" -lt 4000 ] && ok || bad "$cmd with a stalled FIFO list: exit $rc after $dt ms"
    grep -q "list.fifo: not read to its end within 1 s: its writer sent .* (3 lines), then stalled; a slow writer needs a longer --read-timeout" "$T/err" && ok || bad "$cmd stalled list message: $(cat "$T/err")"
    kill $wp 2>/dev/null; wait $wp 2>/dev/null
  done
  # a FIFO list that is written in full works with check and pack
  ( cat "$T/six.txt" >"$T/list.fifo" ) &
  expect 0 "pack from a FIFO list" -- "$STK" pack --list "$T/list.fifo" "$T/fifo.stkc" --cache --read-timeout 10
  wait
  grep -q "packed 6 samples" "$T/out" && ok || bad "pack from a FIFO: $(cat "$T/out")"
fi
expect 2 "pack bad read timeout" -- "$STK" pack "$T/ds" "$T/x.stkc" --cache --read-timeout -1
"$STK" check --help | grep -q -e "--read-timeout" && ok || bad "check --help lists --read-timeout"

# Ctrl-C (SIGINT) or SIGTERM during a pack removes its temporary output and
# the exit status is the signal's
# (a list of the same 100 files 60 times over: a pack of many seconds, so
# that the signal always comes while it runs, on a fast machine too)
"$STK" synth "$T/slow" --images 100 --classes 2 >/dev/null
find "$T/slow" -type f -name '*.JPEG' | sed 's/$/ 0/' >"$T/slow1.list"
: >"$T/slow.list"
for i in $(seq 60); do cat "$T/slow1.list" >>"$T/slow.list"; done
for sig in 2 15; do
  for fmt in cache tar; do
    if [ $fmt = cache ]; then out="$T/sig.stkc"; set -- --cache --max-side 0; else out="$T/sigshards"; set -- --tar --check --shard-size 1M; fi
    "$STK" pack --list "$T/slow.list" "$out" "$@" --threads 1 >/dev/null 2>&1 &
    pp=$!
    for i in 1 2 3 4 5 6 7 8 9 10; do ls -d "$out".tmp-* >/dev/null 2>&1 && break; sleep 0.1; done
    sleep 0.2
    kill -s $([ $sig = 2 ] && echo INT || echo TERM) $pp
    wait $pp
    rc=$?
    want=$((128 + sig))
    [ "$rc" -eq "$want" ] && ok || bad "pack $fmt killed by SIG$sig: exit $rc, want $want"
    leftovers=$(ls -d "$out"* 2>/dev/null)
    [ -z "$leftovers" ] && ok || bad "pack $fmt killed by SIG$sig left $leftovers"
  done
done

# ---- the forms scripts use (issue 31) -------------------------------------------
# --flag=value is --flag value; a switch takes =0/=1 or --no-flag
"$STK" synth "$T/ds31" --images 24 --classes 3 --seed 7 >/dev/null
expect 0 "bench --threads=2 --size=32" -- "$STK" bench "$T/ds31" --threads=2 --size=32 --json
grep -q '"threads": 2' "$T/out" && ok || bad "--threads=2 reached the loader: $(tail -n 1 "$T/out")"
expect 2 "a bad --flag=value names the flag" -- "$STK" bench "$T/ds31" --threads=zero
grep -q -e "--threads zero" "$T/err" && ok || bad "--threads=zero message: $(cat "$T/err")"
expect 0 "--no-augmix-all-ops" -- "$STK" bench "$T/ds31" --size 32 --auto-augment augmix --no-augmix-all-ops
expect 0 "--augmix-all-ops=0" -- "$STK" bench "$T/ds31" --size 32 --auto-augment augmix --augmix-all-ops=0
expect 2 "--augmix-all-ops=2 is refused" -- "$STK" bench "$T/ds31" --size 32 --augmix-all-ops=2
# MixUp/CutMix from the options table: the loader mixes, the eval pipeline refuses it
expect 0 "--mixup-alpha --cutmix-alpha" -- "$STK" bench "$T/ds31" --size 32 --mixup-alpha 0.2 --cutmix-alpha 1
expect 0 "--mix-mode timm" -- "$STK" bench "$T/ds31" --size 32 --mix-mode timm --cutmix-alpha 1 --mix-prob 0.5 --mix-label-smoothing 0.1
expect 1 "MixUp on the eval pipeline" -- "$STK" bench "$T/ds31" --size 32 --pipeline eval --mixup-alpha 0.2
grep -q "train pipeline" "$T/err" && ok || bad "eval --mixup-alpha message: $(cat "$T/err")"
expect 2 "--mix-prob 2 is refused" -- "$STK" bench "$T/ds31" --size 32 --mix-prob 2
expect 2 "--no- of a valued flag is unknown" -- "$STK" bench "$T/ds31" --no-threads
grep -q "unknown option --no-threads" "$T/err" && ok || bad "--no-threads message: $(cat "$T/err")"
# timm's RandAugment string, as examples/reference/train.py takes it
expect 0 "bench --auto-augment rand-m9-mstd0.5-inc1" -- "$STK" bench "$T/ds31" --size 32 --auto-augment rand-m9-mstd0.5-inc1
expect 0 "bench --auto-augment=rand-n3-m7" -- "$STK" bench "$T/ds31" --size 32 --auto-augment=rand-n3-m7
expect 2 "a bad timm section is named" -- "$STK" bench "$T/ds31" --size 32 --auto-augment rand-m9-x3
grep -q "section 'x3'" "$T/err" && ok || bad "timm section message: $(cat "$T/err")"
expect 2 "timm's inc0 is refused" -- "$STK" bench "$T/ds31" --size 32 --auto-augment rand-m9-inc0
expect 2 "an unknown policy name still is" -- "$STK" bench "$T/ds31" --auto-augment wobble
# info SOURCE says what the source is, or refuses it
expect 0 "info DIR" -- "$STK" info "$T/ds31"
grep -q "^source: folder $T/ds31, 24 samples, 3 classes" "$T/out" && ok || bad "info DIR: $(tail -n 1 "$T/out")"
expect 1 "info of a missing path" -- "$STK" info "$T/missing"
grep -q "No such file or directory" "$T/err" && ! grep -q "input/output error" "$T/err" && ok \
  || bad "info missing message: $(cat "$T/err")"
expect 2 "info with two paths" -- "$STK" info "$T/ds31" "$T/ds"
# pack --cache refuses to replace a cache unless --force, as --tar refuses shards
expect 0 "pack a cache" -- "$STK" pack "$T/ds31" "$T/f.stkc" --cache --max-side 64
before=$(cksum <"$T/f.stkc")
expect 1 "pack over an existing cache" -- "$STK" pack "$T/ds31" "$T/f.stkc" --cache --max-side 32
grep -q "exists: give --force" "$T/err" && ok || bad "pack exists message: $(cat "$T/err")"
[ "$(cksum <"$T/f.stkc")" = "$before" ] && ok || bad "a refused pack changed the cache"
expect 0 "pack --force replaces it" -- "$STK" pack "$T/ds31" "$T/f.stkc" --cache --max-side 32 --force
[ "$(cksum <"$T/f.stkc")" != "$before" ] && ok || bad "pack --force left the old cache"
expect 0 "info of a cache" -- "$STK" info "$T/f.stkc"
grep -q "^source: cache $T/f.stkc, 24 samples, 3 classes" "$T/out" && ok || bad "info cache: $(tail -n 1 "$T/out")"
# a missing source: the system's words, not "(input/output error)"
for c in bench check; do
  expect $([ $c = check ] && echo 2 || echo 1) "$c of a missing source" -- "$STK" $c "$T/missing"
  grep -q "No such file or directory" "$T/err" && ! grep -q "input/output error" "$T/err" && ok \
    || bad "$c missing source message: $(cat "$T/err")"
done
# a CPU-only build (STK_GPU=OFF; pip's STOKER_CPU_ONLY=1) says so, not that nvcc was missing
if [ "$GPU_OPTION" = OFF ]; then
  "$STK" info >"$T/out" 2>&1
  grep -q "gpu kernels: not built (a CPU-only build, as asked)" "$T/out" && ! grep -q nvcc "$T/out" \
    && ok || bad "CPU-only info: $(cat "$T/out")"
  expect 1 "CPU-only bench --device 0" -- "$STK" bench "$T/ds31" --device 0
  grep -q "a CPU-only build" "$T/err" && ! grep -q nvcc "$T/err" && ok || bad "CPU-only device message: $(cat "$T/err")"
fi
expect 1 "pack of a missing source" -- "$STK" pack "$T/missing" "$T/m.stkc" --cache
grep -q "No such file or directory" "$T/err" && ! grep -q "input/output error" "$T/err" && ok \
  || bad "pack missing source message: $(cat "$T/err")"

"$STK" synth "$T/oom" --images 4 --classes 2 >/dev/null 2>&1
# check says the pixel ceiling of its options, and takes the pipeline whose limits it applies
expect 0 "check --pipeline eval" -- "$STK" check "$T/oom" --pipeline eval --max-decode-bytes 7M
grep -q "images up to 2097152 pixels decode in every format" "$T/out" && ok \
  || bad "check's pixel ceiling: $(cat "$T/out")"

# out of memory is said once: "out of memory for 4 batch slots ... (out of memory)" doubled it
(ulimit -v 400000 && exec "$STK" bench "$T/oom" --batch 100000 --threads 1) >"$T/out" 2>"$T/err"
if ! grep -q -e AddressSanitizer -e ThreadSanitizer "$T/err"; then # sanitizers need the address space
  [ "$(grep -o "out of memory" "$T/err" | wc -l)" -eq 1 ] && ok || bad "out of memory once: $(cat "$T/err")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
