/*
 * test_workers.c: the thread pool (src/core/workers.h). Every submitted
 * item runs once and its done after it; a fan-out runs its copies at the
 * same time and returns after the last; destroy runs what is still queued
 * and joins; a detached thread is neither waited for nor joined; threads
 * are named and pinned as asked; and threads that fail to start (fault
 * injection) leave the work to fewer threads or to the caller.
 */
#define _GNU_SOURCE /* pthread_getname_np, sched_getaffinity */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/common.h"
#include "core/fault.h"
#include "core/workers.h"
#include "util.h"

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- every item once, done after work ------------------------------------ */

#define NITEMS 2000

typedef struct {
  stk__work w;
  atomic_int ran, done, bad_order, named, off_caller;
  int seq;
} item;

static pthread_t g_caller;
static atomic_int g_seq;
static const char *g_prefix;

static void item_work(void *arg) {
  item *it = arg;
  atomic_fetch_add(&it->ran, 1);
  it->seq = atomic_fetch_add(&g_seq, 1);
  char name[32] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  size_t pl = strlen(g_prefix);
  if (!strncmp(name, g_prefix, pl) && name[pl] == '-') atomic_store(&it->named, 1);
  if (!pthread_equal(pthread_self(), g_caller)) atomic_store(&it->off_caller, 1);
}

static void item_done(void *arg) {
  item *it = arg;
  if (atomic_load(&it->ran) != 1) atomic_store(&it->bad_order, 1);
  atomic_fetch_add(&it->done, 1);
}

static item *new_items(int n) {
  item *v = calloc((size_t)n, sizeof *v);
  for (int i = 0; i < n; i++) {
    atomic_init(&v[i].ran, 0);
    atomic_init(&v[i].done, 0);
    atomic_init(&v[i].bad_order, 0);
    atomic_init(&v[i].named, 0);
    atomic_init(&v[i].off_caller, 0);
  }
  return v;
}

/* Counts items whose work and done did not each run exactly once, in order. */
static int wrong_items(item *v, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    bad += atomic_load(&v[i].ran) != 1 || atomic_load(&v[i].done) != 1 ||
           atomic_load(&v[i].bad_order);
  return bad;
}

/* The threads of the pools under test, by name (each test names its pool
 * "t" and one letter, its threads "tw-0", "tw-1", ...): a thread that a runtime starts at a time of its own
 * (a sanitizer's, under load) carries the program's name and is not
 * counted. */
static int pool_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[288], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* a thread that ended meanwhile */
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    n += comm[0] == 't' && comm[1] && (!comm[2] || comm[2] == '-'); /* "tw", "tw-3" */
  }
  closedir(d);
  return n;
}

/* Waits up to `secs` for the count to reach `want`: down, as threads left
 * behind end on their own; up, as new threads name themselves (each does
 * so once it runs). */
static int pool_threads_wait(int want, double secs) {
  double t0 = stk__now();
  struct timespec ts = {0, 2000000};
  while (pool_threads() != want && stk__now() - t0 < secs) nanosleep(&ts, NULL);
  return pool_threads();
}

static void test_submit(void) {
  int base = pool_threads();
  g_caller = pthread_self();
  g_prefix = "tw";
  stk__workers *p = stk__workers_create(4, "tw", NULL, 0);
  CHECK(p != NULL);
  CHECK_EQ_INT(stk__workers_size(p), 4);
  CHECK_EQ_INT(pool_threads_wait(base + 4, 5), base + 4);
  item *v = new_items(NITEMS);
  for (int i = 0; i < NITEMS; i++) stk__workers_submit(p, &v[i].w, item_work, item_done, &v[i]);
  stk__workers_wait(p);
  CHECK_EQ_INT(wrong_items(v, NITEMS), 0);
  int named = 0, off = 0;
  for (int i = 0; i < NITEMS; i++) {
    named += atomic_load(&v[i].named);
    off += atomic_load(&v[i].off_caller);
  }
  CHECK_EQ_INT(named, NITEMS);
  CHECK_EQ_INT(off, NITEMS);
  /* the pool is reusable after a wait */
  memset(v, 0, sizeof *v);
  stk__workers_submit(p, &v[0].w, item_work, item_done, &v[0]);
  stk__workers_destroy(p);
  CHECK_EQ_INT(wrong_items(v, 1), 0);
  CHECK_EQ_INT(pool_threads(), base); /* joined, not left behind */
  free(v);
}

/* ---- destroy with work still queued -------------------------------------- */

static void slow_work(void *arg) {
  sleep_ms(30);
  item_work(arg);
}

static void test_destroy_runs_queued(void) {
  int base = pool_threads();
  g_prefix = "tq";
  atomic_store(&g_seq, 0);
  stk__workers *p = stk__workers_create(1, "tq", NULL, 0);
  item *v = new_items(200);
  /* the first holds the only thread while the rest queue up behind it */
  stk__workers_submit(p, &v[0].w, slow_work, item_done, &v[0]);
  for (int i = 1; i < 200; i++) stk__workers_submit(p, &v[i].w, item_work, item_done, &v[i]);
  stk__workers_destroy(p);
  CHECK_EQ_INT(wrong_items(v, 200), 0);
  int fifo = 1;
  for (int i = 0; i < 200; i++) fifo &= v[i].seq == i; /* one thread: in order */
  CHECK(fifo);
  CHECK_EQ_INT(pool_threads(), base);
  free(v);
}

/* ---- fan-out ------------------------------------------------------------- */

typedef struct {
  int n;
  atomic_int entered, returned, met, calls_on_caller;
} fan;

static void fan_fn(void *arg) {
  fan *f = arg;
  atomic_fetch_add(&f->entered, 1);
  if (pthread_equal(pthread_self(), g_caller)) atomic_fetch_add(&f->calls_on_caller, 1);
  /* a barrier with a way out: all n at once, or the test fails, not hangs */
  double t0 = stk__now();
  while (atomic_load(&f->entered) < f->n && stk__now() - t0 < 10) sleep_ms(1);
  if (atomic_load(&f->entered) >= f->n) atomic_fetch_add(&f->met, 1);
  sleep_ms(5); /* so that a fan-out returning early is seen */
  atomic_fetch_add(&f->returned, 1);
}

static void fan_init(fan *f, int n) {
  f->n = n;
  atomic_init(&f->entered, 0);
  atomic_init(&f->returned, 0);
  atomic_init(&f->met, 0);
  atomic_init(&f->calls_on_caller, 0);
}

static void test_fanout(void) {
  int base = pool_threads();
  g_caller = pthread_self();
  int sizes[] = {1, 2, 8, 33};
  for (int k = 0; k < 4; k++) {
    fan f;
    fan_init(&f, sizes[k]);
    stk__workers_fanout("tf", sizes[k], fan_fn, &f);
    CHECK_EQ_INT(atomic_load(&f.returned), sizes[k]);
    CHECK_EQ_INT(atomic_load(&f.met), sizes[k]); /* they all ran at the same time */
    CHECK_EQ_INT(atomic_load(&f.calls_on_caller), 1);
    CHECK_EQ_INT(pool_threads(), base);
  }
  fan f;
  fan_init(&f, 1);
  stk__workers_fanout("tf", 0, fan_fn, &f); /* at least once */
  CHECK_EQ_INT(atomic_load(&f.returned), 1);
}

/* ---- detach -------------------------------------------------------------- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open, inside;
  atomic_int done;
} gate;

static void gate_work(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->mu);
  g->inside = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void gate_done(void *arg) { atomic_fetch_add(&((gate *)arg)->done, 1); }

static void test_detach(void) {
  int base = pool_threads();
  gate g = {.open = 0};
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  atomic_init(&g.done, 0);
  stk__workers *p = stk__workers_create(0, "td", NULL, 0);
  stk__work w, never;
  CHECK_EQ_INT(stk__workers_spawn(p, &w, gate_work, gate_done, &g), STK_OK);
  CHECK_EQ_INT(stk__workers_size(p), 1);
  pthread_mutex_lock(&g.mu);
  while (!g.inside) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
  CHECK_EQ_INT(stk__workers_detach(p, &never), 0); /* not running: nothing to detach */
  CHECK_EQ_INT(stk__workers_detach(p, &w), 1);
  CHECK_EQ_INT(stk__workers_detach(p, &w), 0); /* once */
  CHECK_EQ_INT(stk__workers_size(p), 0);
  /* a later item, with no thread left, runs in the caller */
  item *v = new_items(1);
  g_caller = pthread_self();
  g_prefix = "td";
  stk__workers_submit(p, &v[0].w, item_work, item_done, &v[0]);
  CHECK_EQ_INT(wrong_items(v, 1), 0);
  CHECK_EQ_INT(atomic_load(&v[0].off_caller), 0);
  double t0 = stk__now();
  stk__workers_destroy(p); /* does not wait for the detached thread */
  CHECK(stk__now() - t0 < 1);
  CHECK_EQ_INT(atomic_load(&g.done), 0);
  CHECK_EQ_INT(pool_threads_wait(base + 1, 5), base + 1);
  pthread_mutex_lock(&g.mu);
  g.open = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  /* it ends on its own, after its done, touching nothing of the pool */
  CHECK_EQ_INT(pool_threads_wait(base, 5), base);
  CHECK_EQ_INT(atomic_load(&g.done), 1);
  pthread_mutex_destroy(&g.mu);
  pthread_cond_destroy(&g.cv);
  free(v);
}

/* A spawned item that finishes is back in the pool: detach finds nothing,
 * and destroy joins its thread. */
static void test_spawn_then_pool(void) {
  int base = pool_threads();
  stk__workers *p = stk__workers_create(0, "ts", NULL, 0);
  item *v = new_items(50);
  g_prefix = "ts";
  CHECK_EQ_INT(stk__workers_spawn(p, &v[0].w, item_work, item_done, &v[0]), STK_OK);
  stk__workers_wait(p);
  CHECK_EQ_INT(stk__workers_detach(p, &v[0].w), 0);
  for (int i = 1; i < 50; i++) stk__workers_submit(p, &v[i].w, item_work, item_done, &v[i]);
  stk__workers_destroy(p);
  CHECK_EQ_INT(wrong_items(v, 50), 0);
  int off = 0;
  for (int i = 0; i < 50; i++) off += atomic_load(&v[i].off_caller);
  CHECK_EQ_INT(off, 50); /* the spawned thread stayed to run them */
  CHECK_EQ_INT(pool_threads(), base);
  free(v);
}

/* Items that free themselves, in work or in done: the pool must not read
 * one after it started (AddressSanitizer sees it when it does). */
static atomic_int g_freed;

typedef struct {
  stk__work w;
  char pad[64];
} heap_item;

static void free_in_work(void *arg) {
  free(arg);
  atomic_fetch_add(&g_freed, 1);
}

static void nothing(void *arg) { (void)arg; }

static void free_in_done(void *arg) {
  free(arg);
  atomic_fetch_add(&g_freed, 1);
}

static void test_self_freeing(void) {
  atomic_init(&g_freed, 0);
  stk__workers *p = stk__workers_create(3, "tz", NULL, 0);
  for (int i = 0; i < 300; i++) {
    heap_item *h = malloc(sizeof *h);
    if (i % 3 == 0)
      stk__workers_submit(p, &h->w, free_in_work, NULL, h);
    else if (i % 3 == 1)
      stk__workers_submit(p, &h->w, nothing, free_in_done, h);
    else
      CHECK_EQ_INT(stk__workers_spawn(p, &h->w, free_in_work, NULL, h), STK_OK);
  }
  stk__workers_destroy(p);
  CHECK_EQ_INT(atomic_load(&g_freed), 300);
}

/* ---- affinity ------------------------------------------------------------ */

static atomic_int g_cpu_ok;
static int g_cpu;

static void aff_work(void *arg) {
  cpu_set_t s;
  CPU_ZERO(&s);
  if (sched_getaffinity(0, sizeof s, &s) == 0 && CPU_COUNT(&s) == 1 && CPU_ISSET(g_cpu, &s))
    atomic_fetch_add(&g_cpu_ok, 1);
}

static void test_affinity(void) {
  cpu_set_t s;
  CPU_ZERO(&s);
  if (sched_getaffinity(0, sizeof s, &s) != 0) return;
  g_cpu = -1;
  for (int c = CPU_SETSIZE - 1; c >= 0; c--)
    if (CPU_ISSET(c, &s)) g_cpu = c; /* the first CPU this process may use */
  if (g_cpu < 0) return;
  atomic_init(&g_cpu_ok, 0);
  stk__workers *p = stk__workers_create(3, "ta", &g_cpu, 1);
  stk__work w[6];
  for (int i = 0; i < 6; i++) stk__workers_submit(p, &w[i], aff_work, NULL, NULL);
  stk__workers_destroy(p);
  CHECK_EQ_INT(atomic_load(&g_cpu_ok), 6);
}

/* ---- threads that fail to start ------------------------------------------ */

static void test_start_failures(void) {
#ifdef STK_FAULT_INJECTION
  int base = pool_threads();
  g_caller = pthread_self();
  g_prefix = "tx";
  stk__fault_set(1, 1); /* every start fails */
  stk__workers *p = stk__workers_create(4, "tx", NULL, 0);
  CHECK(p != NULL);
  CHECK_EQ_INT(stk__workers_size(p), 0);
  item *v = new_items(10);
  for (int i = 0; i < 10; i++) stk__workers_submit(p, &v[i].w, item_work, item_done, &v[i]);
  CHECK_EQ_INT(wrong_items(v, 10), 0); /* run in the caller, at once */
  int off = 0;
  for (int i = 0; i < 10; i++) off += atomic_load(&v[i].off_caller);
  CHECK_EQ_INT(off, 0);
  stk__work w;
  item *one = new_items(1);
  CHECK_EQ_INT(stk__workers_spawn(p, &w, item_work, item_done, one), STK_ENOMEM);
  CHECK_EQ_INT(atomic_load(&one->ran), 0); /* not run when its thread did not start */
  stk__workers_destroy(p);
  CHECK(stk__fault_count() >= 5);

  /* a fan-out with no thread runs every copy in the caller */
  fan f;
  fan_init(&f, 1); /* the barrier is met by each alone */
  f.n = 1;
  stk__workers_fanout("tx", 6, fan_fn, &f);
  CHECK_EQ_INT(atomic_load(&f.returned), 6);
  CHECK_EQ_INT(atomic_load(&f.calls_on_caller), 6);

  /* some fail: the pool runs with fewer, and loses nothing */
  stk__fault_set(7, 2);
  int sizes_seen = 0;
  for (int round = 0; round < 20; round++) {
    p = stk__workers_create(6, "tx", NULL, 0);
    int n = stk__workers_size(p);
    sizes_seen |= 1 << n;
    item *u = new_items(100);
    for (int i = 0; i < 100; i++) stk__workers_submit(p, &u[i].w, item_work, item_done, &u[i]);
    stk__workers_destroy(p);
    CHECK_EQ_INT(wrong_items(u, 100), 0);
    free(u);
    fan_init(&f, 1);
    stk__workers_fanout("tx", 5, fan_fn, &f);
    CHECK_EQ_INT(atomic_load(&f.returned), 5);
  }
  CHECK(sizes_seen != 1 && sizes_seen != 1 << 6); /* some, not all or none, started */
  stk__fault_set(0, 0);
  CHECK_EQ_INT(pool_threads_wait(base, 5), base);
  free(v);
  free(one);
#else
  printf("test_workers: no fault injection in this build, start failures not tested\n");
#endif
}

int main(void) {
  /* a first thread, so that a sanitizer's own (TSan starts one with the
   * first) is in every count of threads the tests take */
  stk__workers_destroy(stk__workers_create(1, NULL, NULL, 0));
  test_submit();
  test_destroy_runs_queued();
  test_fanout();
  test_detach();
  test_spawn_then_pool();
  test_self_freeing();
  test_affinity();
  test_start_failures();
  return CHECK_DONE();
}
