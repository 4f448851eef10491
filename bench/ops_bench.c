/*
 * ops_bench.c: the CPU time of each augmentation op on one tile.
 *
 *   build/bench/stk_ops_bench [SIZE=176] [REPS=400]
 *
 * Applies each op of TrivialAugmentWide's space (stk__op_apply, nearest
 * warps, no fill) REPS times to a SIZE x SIZE RGB tile of a fixed pattern
 * and prints microseconds per call, one thread. The magnitudes are mid-range
 * ones (shears 0.3, translations 30 px, rotation 30 degrees, enhancement
 * factors 0.5, 4 bits, threshold 128). docs/BENCHMARKS.md has its figures.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/common.h"
#include "ops/augment.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int side = argc > 1 ? atoi(argv[1]) : 176, reps = argc > 2 ? atoi(argv[2]) : 400;
  if (side < 1 || side > 4096 || reps < 1) {
    fprintf(stderr, "usage: stk_ops_bench [SIZE=176] [REPS=400]\n");
    return 2;
  }
  size_t n = (size_t)side * side * 3;
  uint8_t *t = malloc(n);
  if (!t) return 1;
  for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(i * 7 + i / 500);
  static const float mags[STK__TA_OPS] = {0, 0.3f, 0.3f, 30, 30, 30, 0.5f, 0.5f, 0.5f, 0.5f,
                                          4,  128, 0,    0};
  stk__buf scratch = {0};
  printf("op on a %dx%d tile, %d calls: us per call\n", side, side, reps);
  for (int k = 0; k < STK__TA_OPS; k++) {
    stk__op op = {(uint8_t)k, 0, mags[k], 0};
    double t0 = now();
    for (int r = 0; r < reps; r++)
      if (stk__op_apply(&op, t, side, side, 1, NULL, &scratch)) return 1;
    printf("%-14s %8.1f\n", stk__op_name(k), (now() - t0) / reps * 1e6);
  }
  stk__buf_free(&scratch);
  free(t);
  return 0;
}
