/*
 * test_faults.c: the loader with one in 16 of the library's allocations and
 * file reads failing at random (src/core/fault.h; the sanitizer build has
 * the hooks). Whatever fails, every call must return an error with a
 * message, or a good batch: never crash, hang or leak (LeakSanitizer checks
 * the last). Each run uses another seed, thread count, prefetch and policy,
 * and breaks off at a random point.
 */
#include "util.h"

#include <signal.h>

#include "check.h"
#include "core/common.h"
#include "core/fault.h"

#ifdef STK_FAULT_INJECTION
static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int g_runs, g_created, g_batches, g_errors, g_create_errors;
static uint64_t g_injected;

static void one_run(const char *root, const char *list, uint64_t seed) {
  uint64_t r = seed;
  stk_options o;
  stk_options_init(&o);
  if (rng(&r) % 2)
    o.root = root;
  else
    o.list_file = list;
  o.size = 8;
  o.batch_size = 1 + (int)(rng(&r) % 6);
  o.threads = 1 + (int)(rng(&r) % 3);
  o.prefetch = 1 + (int)(rng(&r) % 3);
  o.on_error = rng(&r) % 2 ? STK_ON_ERROR_SKIP : STK_ON_ERROR_RAISE;
  o.max_consecutive_failures = 0;
  o.index = 0;
  int stop_at = (int)(rng(&r) % 40);
  stk__fault_set(seed, 16);
  stk_loader *l = NULL;
  char err[512] = "";
  int rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
  g_runs++;
  if (rc) {
    CHECK(l == NULL);
    g_create_errors++;
    g_injected += stk__fault_count();
    stk__fault_set(0, 0);
    return;
  }
  g_created++;
  stk_batch held[2];
  int nheld = 0;
  for (int k = 0; k < stop_at; k++) {
    stk_batch b;
    rc = stk_loader_next(l, &b);
    if (rc == STK_EEND) continue;
    if (rc) {
      g_errors++;
      const char *m = stk_loader_error(l);
      CHECK_MSG(m && m[0], "seed %llu: error %d (%s) without a message", (unsigned long long)seed,
                rc, stk_strerror(rc));
      if (rc == STK_EBUSY) break;
      continue;
    }
    g_batches++;
    CHECK(b.n >= 1 && b.n <= o.batch_size);
    for (int64_t i = 0; i < b.n; i++) CHECK(b.labels[i] >= 0 && b.labels[i] < 3);
    if (nheld < 2 && rng(&r) % 3 == 0) {
      held[nheld++] = b; /* destroyed while held */
      if (nheld == 2) {
        stk_batch_release(l, &held[0]);
        held[0] = held[1];
        nheld = 1;
      }
    } else {
      stk_batch_release(l, &b);
    }
  }
  if (rng(&r) % 4 == 0) stk_loader_set_epoch(l, 3);
  stk_stats st;
  stk_loader_stats(l, &st);
  stk_loader_destroy(l);
  g_injected += stk__fault_count();
  stk__fault_set(0, 0);
}
#endif

int main(int argc, char **argv) {
#ifndef STK_FAULT_INJECTION
  (void)argc, (void)argv;
  printf("test_faults: skipped (built without STK_FAULT_INJECTION; the sanitizer build runs it)\n");
  return check_failed_ + check_passed_; /* 0 */
#else
  int runs = argc > 1 ? atoi(argv[1]) : 300;
  alarm(300); /* a hang fails the test instead of stalling the suite */
  char *dir = tu_tempdir();
  if (!dir) return 1;
  char root[4096], list[4096];
  snprintf(root, sizeof root, "%s/data", dir);
  tu_mkdir(root);
  CHECK(tu_make_folder(root, 3, 8, 10, 9) == STK_OK);
  /* one broken file, so that failures of the data mix with injected ones */
  char p[8192];
  snprintf(p, sizeof p, "%s/class001/broken.jpg", root);
  tu_write_bytes(p, "\xff\xd8\xff\xe0 not really", 15);
  snprintf(list, sizeof list, "%s/list.txt", dir);
  FILE *f = fopen(list, "w");
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 8; i++) fprintf(f, "data/class%03d/img%04d.jpg %d\n", c, i, c);
  fclose(f);
  double t0 = stk__now();
  for (int s = 0; s < runs; s++) one_run(root, list, (uint64_t)s + 1);
  printf("test_faults: %d runs (%d loaders created, %d refused at create), %d batches, %d errors, "
         "%llu injected failures in %.1f s\n",
         g_runs, g_created, g_create_errors, g_batches, g_errors, (unsigned long long)g_injected,
         stk__now() - t0);
  CHECK(g_created > runs / 10 && g_batches > runs);
  CHECK(g_errors > 0 && g_create_errors > 0 && g_injected > 0); /* the injection did something */
  tu_rmtree(dir);
  free(dir);
  printf("test_faults: %d passed, %d failed\n", check_passed_, check_failed_);
  return check_failed_ ? 1 : 0;
#endif
}
