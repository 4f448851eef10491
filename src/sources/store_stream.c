/* store_stream.c: a first epoch that reads remote objects while a format's
 * scan indexes them (see store.h). Foreign tar shards (no index beside
 * them, none in the index folder): scanning them all at open would read
 * the whole dataset before the first batch. Instead a thread of the store
 * scans this rank's objects front to back through the store of parts, so
 * that the bytes it reads are those the sample reads then find there, read
 * once; the scan appends each item to the stream as it meets it. The scan
 * runs ahead of the positions the loader has asked for by the read-ahead's
 * measured reach, at most `ahead` bytes, so that what it reads is still
 * there when read. docs/remote.md. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "sources/sampler.h"
#include "sources/store.h"

struct stk__stream {
  stk__objstore *st;
  stk__stream_scan scan;
  void *ctx;
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int *order; /* the rank's objects, in the stream's order */
  int norder;
  stk__span *e; /* the stream's items so far */
  int32_t *label;
  uint64_t *at; /* each one's place in the stream's bytes */
  int64_t n, cap;
  char **why; /* reasons of the items whose read fails (damage - 1) */
  int nwhy;
  int done, stop, oom;
  int64_t wanted;   /* the furthest position planned or read; -1 = none */
  int64_t L;        /* this rank's positions in an epoch */
  uint64_t scan_at; /* the scan's place in the stream's bytes */
  uint64_t ahead;   /* how far the scan may run ahead of `wanted` */
};

/* Room for one more item (mutex held): 0, or -1 out of memory. */
static int grow(stk__stream *ss) {
  if (ss->n < ss->cap) return 0;
  int64_t cap = ss->cap ? 2 * ss->cap : 1024;
  stk__span *e = realloc(ss->e, (size_t)cap * sizeof *e);
  if (e) ss->e = e;
  int32_t *l = e ? realloc(ss->label, (size_t)cap * sizeof *l) : NULL;
  if (l) ss->label = l;
  uint64_t *a = l ? realloc(ss->at, (size_t)cap * sizeof *a) : NULL;
  if (a) ss->at = a;
  if (!a) return -1;
  ss->cap = cap;
  return 0;
}

void stk__stream_push(stk__stream *ss, const stk__span *m, int32_t label, uint64_t at,
                      const char *why) {
  pthread_mutex_lock(&ss->mu);
  stk__span mm = *m;
  if (grow(ss)) goto oom;
  if (why) {
    char **w = realloc(ss->why, ((size_t)ss->nwhy + 1) * sizeof *w);
    if (w) ss->why = w;
    if (!w || !(w[ss->nwhy] = strdup(why))) goto oom;
    mm.damage = ++ss->nwhy;
  }
  ss->e[ss->n] = mm;
  ss->label[ss->n] = label;
  ss->at[ss->n++] = at;
  pthread_cond_broadcast(&ss->cv);
  pthread_mutex_unlock(&ss->mu);
  return;
oom:
  ss->oom = 1; /* the reads past here fail, saying so */
  pthread_mutex_unlock(&ss->mu);
}

/* The read-ahead's measured reach, at most ss->ahead. Further would push
 * out of the store the parts of the samples that wait in the shuffle
 * buffer (with the dataset twice remote_memory, a scan half of it ahead
 * made 2,880 requests an epoch for 54 shards). */
static uint64_t room(stk__stream *ss) {
  uint64_t ahead = stk__objstore_reach(ss->st);
  return ahead > ss->ahead ? ss->ahead : ahead;
}

int stk__stream_pace(stk__stream *ss, uint64_t at) {
  uint64_t ahead = room(ss);
  pthread_mutex_lock(&ss->mu);
  ss->scan_at = at;
  for (;;) {
    if (ss->stop || ss->wanted + 1 >= ss->L || ss->n <= ss->wanted + 1) break;
    uint64_t ref = ss->wanted >= 0 ? ss->at[ss->wanted] : 0;
    if (ss->scan_at < ref + ahead) break;
    pthread_cond_wait(&ss->cv, &ss->mu);
  }
  int stop = ss->stop;
  pthread_mutex_unlock(&ss->mu);
  return stop;
}

unsigned stk__stream_depth(stk__stream *ss) {
  unsigned depth = (unsigned)(room(ss) / STK__REMOTE_PART_BYTES);
  return depth < 1 ? 1 : depth > 8 ? 8 : depth;
}

/* The first parts of the objects after the j-th, as far as the read-ahead
 * reaches (at most 32 objects: the requests in flight), so that a stream
 * of small objects does not wait a round trip for each. */
static void want_ahead(stk__stream *ss, int j) {
  uint64_t span = ss->st->size[ss->order[j]], reach = room(ss);
  for (int i = j + 1; i < ss->norder && i <= j + 32 && span < reach; i++) {
    stk__objstore_want(ss->st, ss->order[i], 0);
    span += ss->st->size[ss->order[i]];
  }
}

static void *stream_main(void *arg) {
  stk__stream *ss = arg;
  uint64_t base = 0;
  for (int j = 0; j < ss->norder && !stk__stream_pace(ss, base); j++) {
    want_ahead(ss, j);
    ss->scan(ss->ctx, ss, ss->order[j], base);
    base += ss->st->size[ss->order[j]];
  }
  pthread_mutex_lock(&ss->mu);
  ss->done = 1;
  pthread_cond_broadcast(&ss->cv);
  pthread_mutex_unlock(&ss->mu);
  return NULL;
}

/* Notes position i as asked for (mutex held), and where it is in the
 * items: past the rank's last item the positions wrap round. */
static int64_t ask(stk__stream *ss, int64_t i) {
  if (i > ss->wanted) {
    ss->wanted = i;
    pthread_cond_broadcast(&ss->cv);
  }
  return i >= ss->n && ss->n > 0 && ss->done ? i % ss->n : i; /* the padding */
}

int stk__stream_get(stk__stream *ss, int64_t i, stk__span *m, int32_t *label, char *msg,
                    size_t msglen) {
  pthread_mutex_lock(&ss->mu);
  ask(ss, i);
  while (!ss->stop && !ss->done && !ss->oom && i >= ss->n) pthread_cond_wait(&ss->cv, &ss->mu);
  i = ask(ss, i);
  int rc = STK_OK;
  if (i < ss->n) {
    *m = ss->e[i];
    *label = ss->label[i];
    if (m->damage) rc = stk__fail(msg, msglen, STK_EDECODE, "%s", ss->why[m->damage - 1]);
  } else {
    rc = stk__fail(msg, msglen, ss->oom ? STK_ENOMEM : STK_EIO, "%s",
                   ss->oom    ? "out of memory for the stream's index"
                   : ss->stop ? "the loader is closing"
                              : "this rank's shards hold no sample");
  }
  pthread_mutex_unlock(&ss->mu);
  return rc;
}

int stk__stream_peek(stk__stream *ss, int64_t i, stk__span *m) {
  pthread_mutex_lock(&ss->mu);
  i = ask(ss, i);
  int have = i < ss->n;
  if (have) *m = ss->e[i];
  pthread_mutex_unlock(&ss->mu);
  return have;
}

void stk__stream_length(stk__stream *ss, int64_t L) {
  pthread_mutex_lock(&ss->mu);
  ss->L = L;
  pthread_cond_broadcast(&ss->cv);
  pthread_mutex_unlock(&ss->mu);
}

void stk__stream_stop(stk__stream *ss) {
  if (!ss) return;
  pthread_mutex_lock(&ss->mu);
  ss->stop = 1;
  pthread_cond_broadcast(&ss->cv);
  pthread_mutex_unlock(&ss->mu);
}

int stk__stream_stopped(stk__stream *ss) {
  pthread_mutex_lock(&ss->mu);
  int stop = ss->stop;
  pthread_mutex_unlock(&ss->mu);
  return stop;
}

void stk__stream_close(stk__stream *ss) {
  if (!ss) return;
  stk__stream_stop(ss);
  if (ss->started) pthread_join(ss->th, NULL);
  pthread_mutex_destroy(&ss->mu);
  pthread_cond_destroy(&ss->cv);
  for (int i = 0; i < ss->nwhy; i++) free(ss->why[i]);
  free(ss->why);
  free(ss->e);
  free(ss->label);
  free(ss->at);
  free(ss->order);
  free(ss);
}

/* This rank's objects in the first epoch: the objects' permutation of
 * (seed, epoch 0), as later epochs permute theirs, dealt round-robin. */
static int deal(stk__stream *ss, int n, const stk_options *o) {
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  ss->order = malloc((size_t)n * sizeof *ss->order);
  if (!perm || !ss->order) {
    free(perm);
    return STK_ENOMEM;
  }
  if (o->shuffle)
    stk__torch_randperm(o->seed, n, perm);
  else
    for (int k = 0; k < n; k++) perm[k] = k;
  int world = o->world_size > 0 ? o->world_size : 1, rank = o->rank;
  for (int j = rank; j < n; j += world) ss->order[ss->norder++] = (int)perm[j];
  if (!ss->norder) ss->order[ss->norder++] = (int)perm[rank % n]; /* more ranks than objects */
  free(perm);
  return STK_OK;
}

int stk__stream_open(stk__stream **out, stk__objstore *st, const stk_options *o, uint64_t ahead,
                     stk__stream_scan scan, void *ctx, char *msg, size_t msglen) {
  stk__stream *ss = calloc(1, sizeof *ss);
  *out = ss;
  if (!ss) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  pthread_mutex_init(&ss->mu, NULL);
  pthread_cond_init(&ss->cv, NULL);
  ss->st = st;
  ss->scan = scan;
  ss->ctx = ctx;
  ss->wanted = -1;
  ss->L = INT64_MAX;
  ss->ahead = ahead;
  if (deal(ss, st->n, o)) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  return STK_OK;
}

int stk__stream_first(const stk__stream *ss) { return ss->order[0]; }

int stk__stream_start(stk__stream *ss, char *msg, size_t msglen) {
  if (pthread_create(&ss->th, NULL, stream_main, ss))
    return stk__fail(msg, msglen, STK_EIO, "cannot start the shards' scan: %s", strerror(errno));
  ss->started = 1;
  return STK_OK;
}
