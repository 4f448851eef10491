/*
 * common.h: small pieces every module of libstoker shares: message
 * formatting, a monotonic clock, growable buffers and the counter-based RNG.
 */
#ifndef STK_COMMON_H
#define STK_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "stoker.h"

#if defined(__GNUC__)
#define STK__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define STK__PRINTF(a, b)
#endif

/* snprintf into msg[0..len) that tolerates msg == NULL. Returns `code`, so
 * error paths read `return stk__fail(msg, len, STK_EIO, "...", ...)`. */
int stk__fail(char *msg, size_t len, int code, const char *fmt, ...) STK__PRINTF(4, 5);
/* stk__fail with the arguments as a va_list (for wrappers that check first). */
int stk__vfail(char *msg, size_t len, int code, const char *fmt, va_list ap)
    STK__PRINTF(4, 0);

/* The header-version rule of stoker.h ("Versioning"): STK_OK, or
 * STK_EVERSION with the reason in msg. */
int stk__check_version(int header_version, char *msg, size_t len);

/* Seconds from a monotonic clock. */
double stk__now(void);

/* A buffer that grows to the largest size asked of it and is then reused:
 * the steady state of the pipeline allocates nothing. */
typedef struct {
  void *p;
  size_t cap;
} stk__buf;
/* Ensures cap >= n. Returns 0 or STK_ENOMEM (the old contents are kept). */
int stk__buf_reserve(stk__buf *b, size_t n);
void stk__buf_free(stk__buf *b);

/* ---- counter-based RNG -------------------------------------------------
 * Every random choice for a sample comes from a stream keyed by
 * (seed, epoch, sample index), so a sample's augmentation does not depend on
 * which thread processed it or in which order: output is identical for any
 * thread count. Each draw hashes the key with a counter (splitmix64's
 * finaliser), so streams are independent and cheap to create. */
typedef struct {
  uint64_t key;
  uint64_t ctr;
} stk__rng;

static inline uint64_t stk__mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline void stk__rng_init(stk__rng *r, uint64_t seed, uint64_t epoch, uint64_t index) {
  uint64_t k = stk__mix64(seed + 0x9e3779b97f4a7c15ULL);
  k = stk__mix64(k ^ (epoch + 0x632be59bd9b4e019ULL));
  k = stk__mix64(k ^ (index + 0x85157af5ULL));
  r->key = k;
  r->ctr = 0;
}

static inline uint64_t stk__rng_next(stk__rng *r) {
  r->ctr++;
  return stk__mix64(r->key + r->ctr * 0x9e3779b97f4a7c15ULL);
}

/* Uniform double in [0, 1), 53 bits. */
static inline double stk__rng_uniform(stk__rng *r) {
  return (double)(stk__rng_next(r) >> 11) * 0x1.0p-53;
}

/* A fast 64-bit hash of bytes (checksums and fingerprints of caches and
 * indexes; not cryptographic). */
uint64_t stk__hash64(const void *data, size_t n, uint64_t seed);

/* Uniform integer in [lo, hi) (hi > lo), without modulo bias. */
int64_t stk__rng_range(stk__rng *r, int64_t lo, int64_t hi);

#endif
