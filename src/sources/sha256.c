/* sha256.c: libcrypto's SHA-256 loaded at run time, the portable one of
 * s3.c as the fallback. See sha256.h. */
#define _POSIX_C_SOURCE 200809L
#include "sources/sha256.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md):
 * the one-shot function of every libcrypto since 0.9.8 (deprecated in 3.0
 * for the EVP calls, still exported, and without their per-call lookup of
 * the algorithm, which costs more than hashing a signature's few hundred
 * bytes) */
typedef unsigned char *(*sha256_fn)(const unsigned char *, size_t, unsigned char *);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static sha256_fn g_fn;
static const char *g_name = "portable";

static void load(void) {
  const char *e = getenv("STOKER_SHA256");
  if (e && !strcmp(e, "portable")) return;
  static const char *const names[] = {"libcrypto.so.3", "libcrypto.so.1.1"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    /* dlsym returns an object pointer; POSIX guarantees it converts */
    void *p = dlsym(h, "SHA256");
    if (!p) {
      dlclose(h);
      continue;
    }
    memcpy(&g_fn, &p, sizeof p);
    g_name = names[i];
    return; /* kept open for the process's life, as libcurl is */
  }
}

int stk__sha256_libcrypto(const void *data, size_t n, uint8_t out[32]) {
  pthread_once(&g_once, load);
  if (!g_fn) return 0;
  static const unsigned char none = 0; /* SHA256(NULL, 0) is not promised */
  g_fn(n ? (const unsigned char *)data : &none, n, out);
  return 1;
}

void stk__sha256(const void *data, size_t n, uint8_t out[32]) {
  if (!stk__sha256_libcrypto(data, n, out)) stk__sha256_portable(data, n, out);
}

const char *stk__sha256_impl(void) {
  pthread_once(&g_once, load);
  return g_name;
}
