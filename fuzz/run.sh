#!/bin/sh
# Runs each fuzz target of a STK_FUZZ build for a while, one after the other
# (one process each: the machine's other cores stay free). `make fuzz`
# calls it. Usage: fuzz/run.sh BUILD SECONDS TARGET...
#
# Per target: the seeds of fuzz/corpus/T/ (the minimised corpus kept in the
# tree) and tests/crashers/T/ are read; new interesting inputs go to
# BUILD/corpus/T/ (kept between runs, not committed), crashes to
# BUILD/crashes/T/, the log to BUILD/logs/T.log. The jpeg and markers
# targets get fuzz/jpeg.dict, png fuzz/png.dict (-dict=). After the run,
# BUILD/corpus/T/ is minimised (-merge=1 into a fresh folder, which replaces
# it), so that it stays small between runs; `make fuzz-corpus` merges it into
# fuzz/corpus/T/ (only inputs that add coverage are added).
# A line per target (executions, exec/s, seconds, crashes, and libFuzzer's
# last cov: and ft: counts, coverage edges and features) is printed and
# appended to BUILD/fuzz-stats.tsv. Exits 1 when any target found a crash.
#
# FUZZ_JOBS=N (default 1) runs N fuzzing processes per target at once, on one
# shared corpus (libFuzzer's -jobs/-workers); the executions are the sum of
# theirs and the rate their total per second. FUZZ_RUNS=N stops each process
# after N executions (libFuzzer's -runs=), SECONDS still bounding it.
set -u
JOBS=${FUZZ_JOBS:-1}
B=$1
SECS=$2
shift 2
mkdir -p "$B" && B=$(cd "$B" && pwd) # jobs run in a folder of their own
status=0
printf 'target\texecs\texec/s\tseconds\tcrashes\tcov\tft\n'
for t in "$@"; do
  case $t in
    jpeg | png | markers) max_len=32768 ;;
    list) max_len=8192 ;;
    tar) max_len=65536 ;;
    cache) max_len=32768 ;;
    *) max_len=16384 ;;
  esac
  case $t in
    jpeg | markers) dict=fuzz/jpeg.dict ;;
    png) dict=fuzz/png.dict ;;
    *) dict= ;;
  esac
  [ -n "$dict" ] && dict=-dict=$(cd "$(dirname "$dict")" && pwd)/$(basename "$dict")
  mkdir -p "$B/corpus/$t" "$B/crashes/$t" "$B/logs"
  seeds=fuzz/corpus/$t
  [ -d tests/crashers/$t ] && seeds="$seeds tests/crashers/$t"
  log="$B/logs/$t.log"
  start=$(date +%s)
  # rss_limit_mb also bounds a single allocation (malloc_limit_mb follows
  # it): a parser that sizes a buffer from the input is caught. timeout:
  # one input taking this long is a hang.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  set -- -max_total_time="$SECS" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$B/crashes/$t/" ${dict:+"$dict"} \
    ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"}
  if [ "$JOBS" -le 1 ]; then
    "$B/fuzz_$t" "$@" "$B/corpus/$t" $seeds >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  else
    # Each job writes fuzz-K.log in the folder it starts in.
    jd="$B/logs/$t.jobs"
    rm -rf "$jd" && mkdir -p "$jd"
    absseeds=""
    for d in $seeds; do absseeds="$absseeds $(cd "$d" && pwd)"; done
    (cd "$jd" && "$B/fuzz_$t" "$@" -jobs="$JOBS" -workers="$JOBS" "$B/corpus/$t" $absseeds) \
      >"$log" 2>&1
    rc=$?
    cat "$jd"/fuzz-*.log >>"$log"
    execs=$(cat "$jd"/fuzz-*.log | sed -n 's/^stat::number_of_executed_units: *//p' |
      awk '{s += $1} END {print s + 0}')
    # a job that found a crash exits non-zero; the parent's status may not say so
    grep -q '^==[0-9]*==ERROR\|^SUMMARY: \|deadly signal\|Test unit written' "$jd"/fuzz-*.log && rc=1
  fi
  secs=$(($(date +%s) - start))
  rate=$(awk -v e="${execs:-0}" -v s="$secs" 'BEGIN {if (s > 0) printf "%d", e / s; else print "?"}')
  crashes=$(find "$B/crashes/$t" -type f | wc -l)
  # the last status line's counts: "#N ... cov: C ft: F corp: ..."
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1)
  ft=${cov##* }
  cov=$(echo "$cov" | sed -n 's/^cov: \([0-9]*\).*/\1/p')
  if [ $rc -eq 0 ]; then
    # minimise the working corpus in place (the seeds stay where they are)
    rm -rf "$B/corpus/$t.min" && mkdir -p "$B/corpus/$t.min"
    if "$B/fuzz_$t" -merge=1 -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 ${dict:+"$dict"} \
      "$B/corpus/$t.min" "$B/corpus/$t" >"$B/logs/$t.merge.log" 2>&1; then
      rm -rf "$B/corpus/$t" && mv "$B/corpus/$t.min" "$B/corpus/$t"
    else
      echo "fuzz: minimising $B/corpus/$t failed; see $B/logs/$t.merge.log" >&2
      rm -rf "$B/corpus/$t.min"
    fi
  fi
  [ $rc -ne 0 ] && status=1
  name=$t
  [ "$JOBS" -gt 1 ] && name="$t x$JOBS"
  line=$(printf '%s\t%s\t%s\t%s\t%s\t%s\t%s' "$name" "${execs:-?}" "${rate:-?}" "$secs" "$crashes" \
    "${cov:-?}" "${ft:-?}")
  echo "$line"
  printf '%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$line" >>"$B/fuzz-stats.tsv"
  if [ $rc -ne 0 ]; then
    echo "fuzz: $t stopped (exit $rc); see $log and $B/crashes/$t/" >&2
    tail -n 30 "$log" >&2
  fi
done
exit $status
