/* common.c: see common.h. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include "core/common.h"
#include "core/errors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int stk__vfail(char *msg, size_t len, int code, const char *fmt, va_list ap) {
  if (msg && len) vsnprintf(msg, len, fmt, ap);
  return code;
}

int stk__fail(char *msg, size_t len, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  stk__vfail(msg, len, code, fmt, ap);
  va_end(ap);
  return code;
}

double stk__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Buffers from this size up are mapped, not taken from malloc: glibc
 * keeps freed heap memory below its mmap threshold (which rises to 32 MiB
 * after the first large free) at the top of each thread's arena, where
 * malloc_trim does not reach, so a decode's pixels stayed resident after
 * their buffer was freed, and after their loader closed. A mapping goes
 * back to the system when it is unmapped. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STK__HEAP_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(thread_sanitizer)
#define STK__HEAP_ONLY 1
#endif
#endif
#ifdef STK__HEAP_ONLY
/* the sanitizers check the heap's blocks to the byte, not a mapping's */
#define BUF_MAPPED SIZE_MAX
#else
#define BUF_MAPPED ((size_t)1 << 20)
#endif

/* A mapping of cap bytes holding the first `keep` bytes of old. */
static void *map_copy(const void *old, size_t keep, size_t cap) {
  void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (keep) memcpy(p, old, keep);
  return p;
}

int stk__buf_reserve(stk__buf *b, size_t n) {
  if (n <= b->cap) return STK_OK;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < n) cap = cap / 2 * 3 + 4096; /* grow by 1.5x: few reallocations */
  if (cap < BUF_MAPPED) {
    void *p = realloc(b->p, cap);
    if (!p) return STK_ENOMEM;
    b->p = p;
    b->cap = cap;
    return STK_OK;
  }
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  cap = (cap + page - 1) / page * page;
  void *p = map_copy(b->p, b->cap, cap);
  if (!p) return STK_ENOMEM;
  stk__buf_free(b);
  b->p = p;
  b->cap = cap;
  return STK_OK;
}

void stk__buf_free(stk__buf *b) {
  if (b->cap >= BUF_MAPPED)
    munmap(b->p, b->cap);
  else
    free(b->p);
  b->p = NULL;
  b->cap = 0;
}

int64_t stk__rng_range(stk__rng *r, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo);
  /* Rejection sampling: drop the top partial copy of the span. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t v;
  do {
    v = stk__rng_next(r);
  } while (v >= limit);
  return lo + (int64_t)(v % span);
}

/* Each row's value must be the enum's: the enum in stoker.h is what users
 * read, the table what the library and the extension use. */
#define CHECK_ROW(name, value, pyexc, msg) \
  _Static_assert(STK_##name == (value), "STK_" #name " is not " #value " in stoker.h");
STK__ERRORS(CHECK_ROW)
#undef CHECK_ROW

#define ROW(name, value, pyexc, msg) {#name, STK_##name, msg},
const stk__error stk__errors[] = {STK__ERRORS(ROW)};
#undef ROW
const int stk__num_errors = (int)(sizeof stk__errors / sizeof stk__errors[0]);

const char *stk_strerror(int code) {
  switch (code) {
#define ROW(name, value, pyexc, msg) \
  case STK_##name: return msg;
    STK__ERRORS(ROW)
#undef ROW
    default: return "unknown error";
  }
}

static inline uint64_t hash_round(uint64_t h, uint64_t w) {
  h ^= w * 0xc2b2ae3d27d4eb4fULL;
  return (h << 31 | h >> 33) * 0x9e3779b185ebca87ULL;
}

uint64_t stk__hash64(const void *data, size_t n, uint64_t seed) {
  const uint8_t *b = data;
  uint64_t h = stk__mix64(seed ^ (n * 0x9e3779b97f4a7c15ULL));
  /* two independent lanes keep the multiplier busy, so that checking a
   * large cache is not slower than reading it */
  uint64_t h2 = h ^ 0x632be59bd9b4e019ULL;
  while (n >= 16) {
    uint64_t w0, w1;
    memcpy(&w0, b, 8);
    memcpy(&w1, b + 8, 8);
    h = hash_round(h, w0);
    h2 = hash_round(h2, w1);
    b += 16;
    n -= 16;
  }
  uint64_t tail[2] = {0, 0};
  memcpy(tail, b, n);
  return stk__mix64(h ^ stk__mix64(h2 ^ tail[0]) ^ stk__mix64(tail[1] + n));
}

int stk__check_version(int header_version, char *msg, size_t len) {
  if (header_version / 10000 != STK_VERSION_MAJOR ||
      (STK_VERSION_MAJOR == 0 && header_version / 100 != STK_VERSION / 100))
    return stk__fail(msg, len, STK_EVERSION,
                     "built against stoker.h %d, but the library is %d: rebuild against this header",
                     header_version, STK_VERSION);
  return STK_OK;
}
