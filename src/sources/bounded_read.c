/* bounded_read.c: reads with a timeout through a helper thread. See
 * bounded_read.h. */
#define _POSIX_C_SOURCE 200809L
#include "sources/bounded_read.h"
#include "sources/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/workers.h"

struct stk__bread_ctx {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int refs;          /* the owner's and the helper's */
  int state;         /* 0 idle, 1 asked, 2 done */
  int quit;
  int abandoned;     /* the owner gave up waiting */
  /* the request: a copy of the path, or a source and a sample */
  char *path;
  const stk__source *src;
  int64_t idx;
  uint64_t max_bytes;
  /* the answer */
  stk__buf buf;
  stk__bytes out;
  int rc;
  char msg[512];
};

static atomic_llong stuck_;

int64_t stk__bounded_stuck(void) { return atomic_load(&stuck_); }

/* Drops one reference; the last frees the context. Mutex held; released. */
static void ctx_release(stk__bread_ctx *c) {
  int last = --c->refs == 0;
  pthread_mutex_unlock(&c->mu);
  if (!last) return;
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->path);
  stk__buf_free(&c->buf);
  free(c);
}

static void helper_main(void *arg) {
  stk__bread_ctx *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (c->state != 1 && !c->quit) pthread_cond_wait(&c->cv, &c->mu);
    if (c->quit) break;
    pthread_mutex_unlock(&c->mu);
    /* only this thread touches the request and the buffer while asked */
    stk__bytes out;
    char msg[512] = "";
    int rc = c->path ? stk__read_whole_file(c->path, &c->buf, c->max_bytes, &out, msg, sizeof msg)
                     : c->src->ops->read(c->src, c->idx, &c->buf, c->max_bytes, &out, msg,
                                         sizeof msg);
    pthread_mutex_lock(&c->mu);
    c->out = out;
    c->rc = rc;
    memcpy(c->msg, msg, sizeof msg);
    c->state = 2;
    pthread_cond_broadcast(&c->cv);
  }
  if (c->abandoned) atomic_fetch_sub(&stuck_, 1);
  ctx_release(c);
}

static stk__bread_ctx *ctx_new(void) {
  stk__bread_ctx *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, &ca);
  pthread_condattr_destroy(&ca);
  c->refs = 2;
  /* A thread of its own, not a pool's: a stuck read keeps it past its
   * owner, whom nothing may make wait for it (nobody joins it). */
  if (stk__workers_detached("stk-read", helper_main, c)) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return NULL;
  }
  return c;
}

void stk__bounded_init(stk__bounded_reader *br, double timeout_s) {
  memset(br, 0, sizeof *br);
  br->timeout = timeout_s > 0 ? timeout_s : 0;
}

void stk__bounded_free(stk__bounded_reader *br) {
  stk__bread_ctx *c = br->ctx;
  if (c) {
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->cv);
    ctx_release(c);
  }
  stk__buf_free(&br->own);
  br->ctx = NULL;
}

/* Asks the helper (starting one when there is none) and waits. */
static int ask(stk__bounded_reader *br, const char *path, const stk__source *src, int64_t i,
               uint64_t max_bytes, stk__bytes *out, char *msg, size_t msglen) {
  if (!br->ctx && !(br->ctx = ctx_new()))
    return stk__fail(msg, msglen, STK_ENOMEM, "cannot start a reader thread");
  stk__bread_ctx *c = br->ctx;
  char *p = path ? strdup(path) : NULL;
  if (path && !p) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  double t = (double)dl.tv_sec + dl.tv_nsec * 1e-9 + br->timeout;
  if (t > 1e12) t = 1e12;
  dl.tv_sec = (time_t)t;
  dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
  if (dl.tv_nsec > 999999999L) dl.tv_nsec = 999999999L;
  pthread_mutex_lock(&c->mu);
  free(c->path);
  c->path = p;
  c->src = src;
  c->idx = i;
  c->max_bytes = max_bytes;
  c->state = 1;
  pthread_cond_broadcast(&c->cv);
  int e = 0;
  while (c->state != 2 && e != ETIMEDOUT) e = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
  if (c->state != 2) {
    /* Left behind: the helper frees the context when its read returns. */
    br->ctx = NULL;
    br->abandoned++;
    c->abandoned = 1;
    c->quit = 1; /* once its read returns */
    atomic_fetch_add(&stuck_, 1);
    ctx_release(c);
    out->data = NULL;
    out->len = out->bytes_read = 0;
    return stk__fail(msg, msglen, STK_EIO, "read timed out after %g s", br->timeout);
  }
  c->state = 0;
  *out = c->out;
  int rc = c->rc;
  if (msg && msglen) snprintf(msg, msglen, "%s", c->msg);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int stk__bounded_read_file(stk__bounded_reader *br, const char *path, uint64_t max_bytes,
                           stk__bytes *out, char *msg, size_t msglen) {
  if (br->timeout <= 0) return stk__read_whole_file(path, &br->own, max_bytes, out, msg, msglen);
  return ask(br, path, NULL, 0, max_bytes, out, msg, msglen);
}

int stk__bounded_read_sample(stk__bounded_reader *br, const stk__source *src, int64_t i,
                             uint64_t max_bytes, stk__bytes *out, char *msg, size_t msglen) {
  if (br->timeout <= 0) return src->ops->read(src, i, &br->own, max_bytes, out, msg, msglen);
  return ask(br, NULL, src, i, max_bytes, out, msg, msglen);
}
