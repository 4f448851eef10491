#!/bin/sh
# Adds to the tree's corpus, fuzz/corpus/T/, the inputs that fuzzing found
# (BUILD/corpus/T/) and that reach coverage the tree's corpus does not:
# libFuzzer's -merge=1, which takes the smallest input for each feature. The
# files are named by their SHA-1, as libFuzzer names them. `make fuzz-corpus`
# calls it. Usage: fuzz/merge.sh BUILD TARGET...
#
# The tree's corpus is the seed set of every run (fuzz/run.sh) and of the
# corpus replays of `make test`, so it stays small: the total size of each
# folder is printed; a few hundred KB for all of them is the budget.
set -eu
B=$1
shift
for t in "$@"; do
  case $t in
    list) max_len=8192 ;;
    tar) max_len=65536 ;;
    *) max_len=32768 ;;
  esac
  [ -d "$B/corpus/$t" ] || { echo "$t: no $B/corpus/$t (run make fuzz first)"; continue; }
  before=$(ls fuzz/corpus/$t | wc -l)
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$B/fuzz_$t" -set_cover_merge=1 -use_counters=0 -max_len=$max_len \
    -rss_limit_mb=2048 -timeout=10 fuzz/corpus/$t "$B/corpus/$t" >"$B/logs/$t.tree-merge.log" 2>&1 || {
    echo "fuzz/merge.sh: $t: the merge failed; see $B/logs/$t.tree-merge.log" >&2
    exit 1
  }
  after=$(ls fuzz/corpus/$t | wc -l)
  printf '%s: %d inputs added, %d in all, %s\n' "$t" $((after - before)) "$after" \
    "$(du -sh --apparent-size fuzz/corpus/$t | cut -f1)"
done
