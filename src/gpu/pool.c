/*
 * pool.c: nvJPEG's own memory (pool.h). nvJPEG allocates its internal
 * device and pinned buffers itself, and grows them when a batch needs more
 * than any before. cuMemFree and cuMemFreeHost
 * synchronise the whole device: while a model trains, each such call waits
 * for the queued training work and leaves the GPU idle behind it. So
 * nvJPEG's memory comes from these allocators: a freed block is kept and
 * handed out again for a request that fits it, and the blocks are freed
 * only when the gpu closes. g_pool_fresh counts real allocations, so that
 * the statistics show whether nvJPEG still allocates after open. */
#define _POSIX_C_SOURCE 200809L
#include "gpu/pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct pool_blk {
  struct pool_blk *next;
  CUcontext ctx;
  void *p;
  size_t n;
  int pinned, used;
} pool_blk;
static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_blk *g_pool;
static uint64_t g_pool_fresh;

static int pool_get(void **out, size_t n, int pinned) {
  CUcontext ctx = NULL;
  stk__cu.CtxGetCurrent(&ctx);
  if (n == 0) n = 1;
  pthread_mutex_lock(&g_pool_mu);
  pool_blk *best = NULL;
  for (pool_blk *b = g_pool; b; b = b->next)
    if (!b->used && b->ctx == ctx && b->pinned == pinned && b->n >= n && (!best || b->n < best->n))
      best = b;
  if (best) {
    best->used = 1;
    *out = best->p;
    pthread_mutex_unlock(&g_pool_mu);
    return 0;
  }
  pthread_mutex_unlock(&g_pool_mu);
  pool_blk *b = calloc(1, sizeof *b);
  if (!b) return 1;
  CUresult r;
  if (pinned) {
    r = stk__cu.MemHostAlloc(&b->p, n, 0);
  } else {
    CUdeviceptr d = 0;
    r = stk__cu.MemAlloc(&d, n);
    b->p = (void *)(uintptr_t)d;
  }
  if (r != CUDA_SUCCESS) {
    free(b);
    return 1;
  }
  b->ctx = ctx;
  b->n = n;
  b->pinned = pinned;
  b->used = 1;
  pthread_mutex_lock(&g_pool_mu);
  b->next = g_pool;
  g_pool = b;
  g_pool_fresh++;
  pthread_mutex_unlock(&g_pool_mu);
  *out = b->p;
  return 0;
}

static int pool_put(void *p) {
  pthread_mutex_lock(&g_pool_mu);
  pool_blk *b = g_pool;
  while (b && b->p != p) b = b->next;
  if (b) b->used = 0;
  pthread_mutex_unlock(&g_pool_mu);
  return b ? 0 : 1;
}

/* Frees the unused blocks of context ctx (current). */
void stk__pool_release(CUcontext ctx) {
  pthread_mutex_lock(&g_pool_mu);
  for (pool_blk **pp = &g_pool; *pp;) {
    pool_blk *b = *pp;
    if (b->used || b->ctx != ctx) {
      pp = &b->next;
      continue;
    }
    if (b->pinned)
      stk__cu.MemFreeHost(b->p);
    else
      stk__cu.MemFree((CUdeviceptr)(uintptr_t)b->p);
    *pp = b->next;
    free(b);
  }
  pthread_mutex_unlock(&g_pool_mu);
}

uint64_t stk__pool_fresh(void) {
  pthread_mutex_lock(&g_pool_mu);
  uint64_t n = g_pool_fresh;
  pthread_mutex_unlock(&g_pool_mu);
  return n;
}

static int nj_dev_malloc(void **p, size_t n) { return pool_get(p, n, 0); }
static int nj_dev_free(void *p) { return pool_put(p); }
static int nj_pin_malloc(void **p, size_t n, unsigned flags) {
  (void)flags;
  return pool_get(p, n, 1);
}
static int nj_pin_free(void *p) { return pool_put(p); }
typedef struct {
  int (*dev_malloc)(void **, size_t);
  int (*dev_free)(void *);
} nj_dev_allocator;
typedef struct {
  int (*pinned_malloc)(void **, size_t, unsigned);
  int (*pinned_free)(void *);
} nj_pinned_allocator;
static nj_dev_allocator g_nj_dev = {nj_dev_malloc, nj_dev_free};
static nj_pinned_allocator g_nj_pin = {nj_pin_malloc, nj_pin_free};
void *stk__pool_dev_allocator(void) { return &g_nj_dev; }
void *stk__pool_pinned_allocator(void) { return &g_nj_pin; }
