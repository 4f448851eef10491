#!/bin/sh
# Lists the C functions of src/ longer than a limit (default 80 lines), longest first, and the
# counts over 80 and over 100. CUDA kernels (.cu) are not counted. Needs Universal Ctags.
#   scripts/func-lengths.sh [LIMIT] [PATH...]
limit=${1:-80}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- src
find "$@" -name '*.c' | sort | xargs ctags --c-kinds=f --fields=+ne -o - |
awk -F'\t' -v limit="$limit" '
{ line = ""; end = ""
  for (i = 4; i <= NF; i++) {
    if ($i ~ /^line:/) line = substr($i, 6)
    if ($i ~ /^end:/) end = substr($i, 5)
  }
  if (line == "" || end == "") next
  n = end - line + 1
  if (n > 80) over80++
  if (n > 100) over100++
  if (n > limit) printf "%5d %s:%s %s\n", n, $2, line, $1
}
END { printf "over 80: %d, over 100: %d\n", over80 + 0, over100 + 0 > "/dev/stderr" }' | sort -rn
