/* fault.c: the fault injector of fault.h (STK_FAULT_INJECTION builds only). */
#define _POSIX_C_SOURCE 200809L
#include "core/fault.h"

#ifdef STK_FAULT_INJECTION
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <time.h>

#include "core/common.h"

static atomic_uint_fast64_t state;   /* the random stream, shared by every thread */
static atomic_uint one_in_;
static atomic_uint_fast64_t failed_, stalls_;
static pthread_mutex_t stall_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stall_cv = PTHREAD_COND_INITIALIZER;
static char stall_sub[256];
static double stall_max;
static uint64_t stall_gen; /* bumped by unstall: wakes every stalled read */

void stk__fault_set(uint64_t seed, unsigned one_in) {
  atomic_store(&state, seed * 0x9E3779B97F4A7C15ull + 1);
  atomic_store(&one_in_, one_in);
  atomic_store(&failed_, 0);
}

int stk__fi_fail(void) {
  unsigned k = atomic_load_explicit(&one_in_, memory_order_relaxed);
  if (!k) return 0;
  /* splitmix64 on an atomic counter: which calls fail depends on the
   * interleaving of threads, the rate does not */
  uint64_t z = atomic_fetch_add_explicit(&state, 0x9E3779B97F4A7C15ull, memory_order_relaxed);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  if (z % k) return 0;
  atomic_fetch_add_explicit(&failed_, 1, memory_order_relaxed);
  return 1;
}

uint64_t stk__fault_count(void) { return atomic_load(&failed_); }
uint64_t stk__fault_stalls(void) { return atomic_load(&stalls_); }

void *stk__fi_malloc(size_t n) { return stk__fi_fail() ? NULL : malloc(n); }
void *stk__fi_calloc(size_t n, size_t size) { return stk__fi_fail() ? NULL : calloc(n, size); }
void *stk__fi_realloc(void *p, size_t n) { return stk__fi_fail() ? NULL : realloc(p, n); }
char *stk__fi_strdup(const char *s) { return stk__fi_fail() ? NULL : strdup(s); }

void stk__fault_stall(const char *substr, double max_seconds) {
  pthread_mutex_lock(&stall_mu);
  snprintf(stall_sub, sizeof stall_sub, "%s", substr ? substr : "");
  stall_max = max_seconds;
  pthread_mutex_unlock(&stall_mu);
}

void stk__fault_unstall(void) {
  pthread_mutex_lock(&stall_mu);
  stall_sub[0] = '\0';
  stall_gen++;
  pthread_cond_broadcast(&stall_cv);
  pthread_mutex_unlock(&stall_mu);
}

ssize_t stk__fi_read(int fd, void *buf, size_t n, const char *path) {
  pthread_mutex_lock(&stall_mu);
  if (stall_sub[0] && path && strstr(path, stall_sub)) {
    atomic_fetch_add(&stalls_, 1);
    uint64_t g = stall_gen;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + stall_max;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    while (g == stall_gen && pthread_cond_timedwait(&stall_cv, &stall_mu, &ts) == 0) {
    }
  }
  pthread_mutex_unlock(&stall_mu);
  if (stk__fi_fail()) {
    errno = EIO;
    return -1;
  }
  return read(fd, buf, n);
}
#else
typedef int stk__fault_unused; /* ISO C wants a translation unit to declare something */
#endif
