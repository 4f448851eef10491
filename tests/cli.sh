#!/bin/sh
# The `stoker` command end to end: synth, check, bench --json, info, --help,
# and the exit codes a script relies on.
# usage: cli.sh PATH/TO/stoker
set -u
STK=$1
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

for c in "" bench check synth info; do
  expect 0 "$c --help" -- "$STK" $c --help
  grep -q "usage: stoker" "$T/out" && ok || bad "$c --help prints usage"
done
expect 2 "no command" -- "$STK"
expect 2 "unknown command" -- "$STK" frobnicate
expect 2 "bad option" -- "$STK" bench "$T" --frob
expect 2 "bad number" -- "$STK" bench "$T" --batch abc

expect 0 "info" -- "$STK" info
grep -q "^simd: " "$T/out" && grep -q "^jpeg: " "$T/out" && ok || bad "info lists simd and jpeg"

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
expect 0 "bench skip" -- "$STK" bench "$T/ds" --batch 4 --threads 2 --on-error skip --json
tail -n 1 "$T/out" | grep -q '"skipped": 3' && ok || bad "skip counts 3"
tail -n 1 "$T/out" | grep -q '"images": 24' && ok || bad "skip still delivers the 24 good images"
grep -q "skipped: .*truncated.jpg" "$T/out" && ok || bad "skip lists the files"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
