/*
 * test_shutdown.c: leaving a loader at any moment is clean. 1,000 times,
 * with every combination of threads and prefetch: iterate to a random
 * batch (sometimes across an epoch end), hold a random number of batches,
 * sometimes seek, then destroy. Every time destroy returns within a second,
 * every thread is gone at once, and no file descriptor or mapping is left
 * (counted in /proc/self). Tiny images keep the 1,000 runs to seconds.
 */
#include "util.h"

#include <dirent.h>

#include <time.h>

#include "check.h"
#include "core/common.h"

/* (in /proc/self/fd, the count includes opendir's own descriptor) */
static int count_entries(const char *path) {
  return tu_count_dir(path) - (!strcmp(path, "/proc/self/fd"));
}

static int count_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* One run; returns the seconds destroy took. */
static double one_run(const char *root, int threads, int prefetch, uint64_t seed, int *batches) {
  uint64_t r = seed;
  stk_options o;
  stk_options_init(&o);
  o.root = root;
  o.size = 8;
  o.batch_size = 3;
  o.threads = threads;
  o.prefetch = prefetch;
  o.index = 0;
  o.seed = seed;
  o.on_error = rng(&r) % 2 ? STK_ON_ERROR_SKIP : STK_ON_ERROR_RAISE;
  stk_loader *l = NULL;
  char err[512] = "";
  int rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
  CHECK_MSG(rc == STK_OK, "%s", err);
  if (rc) return 0;
  int stop = (int)(rng(&r) % 25); /* an epoch is 11 batches */
  int maxheld = (int)(rng(&r) % (uint64_t)(stk_loader_num_slots(l)));
  stk_batch held[70];
  int nheld = 0;
  for (int k = 0; k < stop; k++) {
    stk_batch b;
    rc = stk_loader_next(l, &b);
    if (rc) continue; /* the end of an epoch, or the broken file */
    (*batches)++;
    if (nheld < maxheld)
      held[nheld++] = b;
    else
      stk_batch_release(l, &b);
  }
  if (rng(&r) % 5 == 0) stk_loader_seek(l, 2, (int64_t)(rng(&r) % 5));
  /* release some of what is held, keep the rest through destroy */
  for (int i = 0; i < nheld; i++)
    if (rng(&r) % 2) stk_batch_release(l, &held[i]);
  double t0 = stk__now();
  stk_loader_destroy(l);
  return stk__now() - t0;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 1000;
  char *dir = tu_tempdir();
  if (!dir) return 1;
  CHECK(tu_make_folder(dir, 3, 11, 10, 9) == STK_OK);
  char p[8192];
  snprintf(p, sizeof p, "%s/class001/zz-broken.jpg", dir);
  tu_write_bytes(p, "not an image", 12);
  int threads_set[] = {1, 2, 4}, prefetch_set[] = {1, 2, 4};
  int batches = 0;
  /* a few runs first: the allocator's per-thread arenas are mapped once */
  for (int i = 0; i < 20; i++) one_run(dir, 4, 4, 1000 + (uint64_t)i, &batches);
  int fd0 = count_entries("/proc/self/fd"), th0 = count_entries("/proc/self/task");
  int maps0 = count_maps();
  int clean = 0, maps_max = maps0;
  double worst = 0, t0 = stk__now();
  for (int i = 0; i < runs; i++) {
    int th = threads_set[i % 3], pf = prefetch_set[(i / 3) % 3];
    double dt = one_run(dir, th, pf, (uint64_t)i, &batches);
    int fds = count_entries("/proc/self/fd"), tasks = count_entries("/proc/self/task");
    /* A worker whose read outlived the shutdown grace was left to finish on
     * its own (it touches nothing shared): it must be gone within a second
     * of destroy, like the others. */
    for (double tw = stk__now(); (tasks != th0 || fds != fd0) && stk__now() - tw < 1.0;) {
      nanosleep(&(struct timespec){0, 2000000}, NULL);
      fds = count_entries("/proc/self/fd");
      tasks = count_entries("/proc/self/task");
    }
    int maps = count_maps();
    if (maps > maps_max) maps_max = maps;
    int ok = dt < 1.0 && fds == fd0 && tasks == th0;
    CHECK_MSG(ok, "run %d (threads %d, prefetch %d): destroy %.3f s, fds %d (%d before), threads %d (%d)",
              i, th, pf, dt, fds, fd0, tasks, th0);
    clean += ok;
    if (dt > worst) worst = dt;
  }
  int maps1 = count_maps();
  /* Nothing mapped stays behind: the count comes back to where it was (the
   * allocators, ASan's too, map a few regions lazily; a mapping left per run
   * would add 1,000). */
  CHECK_MSG(maps1 <= maps0 + 16, "mappings: %d before, %d after, %d at most", maps0, maps1, maps_max);
  printf("test_shutdown: %d of %d early breaks clean (threads 1/2/4 x prefetch 1/2/4, %d batches, "
         "slowest destroy %.1f ms), fds %d, threads %d, maps %d -> %d, in %.1f s\n",
         clean, runs, batches, worst * 1e3, fd0, th0, maps0, maps1, stk__now() - t0);
  tu_rmtree(dir);
  free(dir);
  printf("test_shutdown: %d passed, %d failed\n", check_passed_, check_failed_);
  return check_failed_ ? 1 : 0;
}
