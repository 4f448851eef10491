/* object.c: byte ranges of local files and remote objects. See object.h. */
#define _POSIX_C_SOURCE 200809L
#include "sources/object.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "sources/source.h"

int stk__object_open(stk__object *o, const char *name, stk__net *net, uint64_t size,
                     uint64_t part, char *msg, size_t msglen) {
  memset(o, 0, sizeof *o);
  o->name = name;
  o->fd = -1;
  if (net) {
    o->net = net;
    o->size = size;
    o->part = part ? part : 8u << 20;
    return STK_OK;
  }
  struct stat st;
  o->fd = stk__open_input(name, 0, &st, msg, msglen);
  if (o->fd < 0) return STK_EIO;
  o->size = (uint64_t)st.st_size;
  return STK_OK;
}

void stk__object_close(stk__object *o) {
  if (o->fd >= 0) close(o->fd);
  free(o->win);
  if (o->ahead) {
    stk__net_wait(o->ahead, NULL, NULL, 0);
    stk__net_free(o->ahead);
  }
  memset(o, 0, sizeof *o);
  o->fd = -1;
}

/* The window at off (remote): the part requested ahead when it is that one,
 * else a request now; the next part is requested before returning. */
static int window_at(stk__object *o, uint64_t off) {
  stk__net_req *q = NULL;
  if (o->ahead && o->ahead_off == off) {
    q = o->ahead;
  } else {
    if (o->ahead) {
      stk__net_wait(o->ahead, NULL, NULL, 0);
      stk__net_free(o->ahead);
    }
    uint64_t len = o->size - off < o->part ? o->size - off : o->part;
    q = stk__net_get(o->net, o->name, off, len, 0, 0);
  }
  o->ahead = NULL;
  uint64_t next = off + o->part;
  if (next < o->size)
    o->ahead = stk__net_get(o->net, o->name, next, o->size - next < o->part ? o->size - next : o->part,
                            0, 0);
  o->ahead_off = next;
  stk__net_body b;
  int rc = stk__net_wait_reason(q, &b, o->why, sizeof o->why);
  if (rc == STK_OK) {
    free(o->win);
    o->win_len = b.len;
    o->win = stk__net_take(q); /* taken over from the request */
    o->win_off = off;
  }
  stk__net_free(q);
  return rc;
}

ssize_t stk__object_pread(stk__object *o, void *dst, size_t n, uint64_t off) {
  if (o->fd >= 0) {
    size_t got = 0;
    while (got < n) {
      ssize_t r = pread(o->fd, (char *)dst + got, n - got, (off_t)(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        snprintf(o->why, sizeof o->why, "%s", strerror(errno));
        return -1;
      }
      if (r == 0) break;
      got += (size_t)r;
    }
    return (ssize_t)got;
  }
  if (off >= o->size) return 0;
  if (n > o->size - off) n = (size_t)(o->size - off);
  size_t got = 0;
  while (got < n) {
    uint64_t at = off + got;
    if (!o->win || at < o->win_off || at >= o->win_off + o->win_len) {
      /* windows are aligned to parts, so a scan's next window is the one
       * requested ahead */
      if (window_at(o, at - at % o->part)) return -1;
      if (at >= o->win_off + o->win_len) break; /* the object is shorter than listed */
    }
    size_t k = (size_t)(o->win_off + o->win_len - at);
    if (k > n - got) k = n - got;
    memcpy((char *)dst + got, o->win + (at - o->win_off), k);
    got += k;
  }
  return (ssize_t)got;
}

/* ---- the store of parts ------------------------------------------------------ */

typedef struct piece {
  struct piece *next;
  int obj;
  uint64_t off, len;
  stk__net_req *req;
  int refs;        /* planned reads not yet made */
  int users;       /* reads copying from it now */
  int failed;      /* its transfer failed: later reads fetch their own bytes */
  uint64_t tick;   /* last use, for least-recently-used */
} piece;

typedef struct {
  uint64_t hw;     /* the end of the furthest part requested this epoch */
  uint64_t epoch;
} frontier;

struct stk__parts {
  stk__net *net;
  uint64_t part, budget;
  pthread_mutex_t mu;
  piece *list;
  uint64_t bytes, peak, tick;
  frontier *fr;
  int nfr;
};

int stk__parts_open(stk__parts **out, stk__net *net, uint64_t part_size, uint64_t budget) {
  stk__parts *p = calloc(1, sizeof *p);
  if (!p) return STK_ENOMEM;
  p->net = net;
  p->part = part_size;
  p->budget = budget;
  pthread_mutex_init(&p->mu, NULL);
  *out = p;
  return STK_OK;
}

static void piece_free(piece *c) {
  if (c->req) {
    stk__net_wait(c->req, NULL, NULL, 0); /* fails at once once the client is cancelled */
    stk__net_free(c->req);
  }
  free(c);
}

void stk__parts_close(stk__parts *p) {
  if (!p) return;
  for (piece *c = p->list; c;) {
    piece *nx = c->next;
    piece_free(c);
    c = nx;
  }
  free(p->fr);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* Lets go of pieces no plan holds, least recently used first, until the
 * store is within its budget (mutex held). Pieces still in transfer are
 * kept: freeing one would wait for it. */
static void evict(stk__parts *p) {
  for (piece **c = &p->list; *c;) {
    piece *v = *c;
    if (v->failed && !v->users) {
      *c = v->next;
      p->bytes -= v->len;
      piece_free(v);
    } else {
      c = &v->next;
    }
  }
  while (p->bytes > p->budget) {
    piece **best = NULL;
    for (piece **c = &p->list; *c; c = &(*c)->next)
      if (!(*c)->refs && !(*c)->users && stk__net_done((*c)->req) &&
          (!best || (*c)->tick < (*best)->tick))
        best = c;
    if (!best) return;
    piece *v = *best;
    *best = v->next;
    p->bytes -= v->len;
    piece_free(v);
  }
}

static piece *find(stk__parts *p, int obj, uint64_t at) {
  for (piece *c = p->list; c; c = c->next)
    if (c->obj == obj && !c->failed && at >= c->off && at < c->off + c->len) return c;
  return NULL;
}

/* The start of the first piece of obj after `at`, or `limit`. */
static uint64_t next_start(stk__parts *p, int obj, uint64_t at, uint64_t limit) {
  for (piece *c = p->list; c; c = c->next)
    if (c->obj == obj && c->off > at && c->off < limit) limit = c->off;
  return limit;
}

static frontier *frontier_of(stk__parts *p, int obj) {
  if (obj >= p->nfr) {
    int n = obj + 64;
    frontier *f = realloc(p->fr, (size_t)n * sizeof *f);
    if (!f) return NULL;
    memset(f + p->nfr, 0, (size_t)(n - p->nfr) * sizeof *f);
    p->fr = f;
    p->nfr = n;
  }
  return &p->fr[obj];
}

void stk__parts_plan(stk__parts *p, int obj, const char *url, uint64_t size, uint64_t off,
                     uint64_t len, uint64_t epoch) {
  pthread_mutex_lock(&p->mu);
  frontier *f = frontier_of(p, obj);
  if (f && f->epoch != epoch + 1) { /* +1: 0 means never planned */
    f->epoch = epoch + 1;
    f->hw = 0;
  }
  uint64_t end = off + len, at = off;
  while (at < end) {
    piece *c = find(p, obj, at);
    if (!c) {
      uint64_t stop;
      if (f && at >= f->hw) {
        /* the shard is read front to back: a whole part from here */
        stop = at + p->part > end ? at + p->part : end;
      } else {
        stop = end; /* a straggler: its own bytes only */
      }
      if (stop > size) stop = size;
      stop = next_start(p, obj, at, stop);
      if (stop <= at) break;
      c = calloc(1, sizeof *c);
      if (!c) break; /* the read then fetches its bytes itself */
      c->obj = obj;
      c->off = at;
      c->len = stop - at;
      c->req = stk__net_get(p->net, url, at, c->len, 0, 0);
      if (!c->req) {
        free(c);
        break;
      }
      c->next = p->list;
      p->list = c;
      p->bytes += c->len;
      if (p->bytes > p->peak) p->peak = p->bytes;
      if (f && stop > f->hw) f->hw = stop;
    }
    c->refs++;
    c->tick = ++p->tick;
    at = c->off + c->len;
  }
  evict(p);
  pthread_mutex_unlock(&p->mu);
}

void stk__parts_reset(stk__parts *p) {
  pthread_mutex_lock(&p->mu);
  for (piece *c = p->list; c; c = c->next) c->refs = 0;
  evict(p);
  pthread_mutex_unlock(&p->mu);
}

void stk__parts_memory(stk__parts *p, uint64_t *now, uint64_t *peak) {
  pthread_mutex_lock(&p->mu);
  *now = p->bytes;
  *peak = p->peak;
  pthread_mutex_unlock(&p->mu);
}

int stk__parts_read(stk__parts *p, int obj, const char *url, uint64_t size, uint64_t off,
                    uint64_t len, uint8_t *dst, char *msg, size_t msglen) {
  (void)size;
  uint64_t end = off + len, at = off;
  int rc = STK_OK;
  while (rc == STK_OK && at < end) {
    pthread_mutex_lock(&p->mu);
    piece *c = find(p, obj, at);
    if (c) c->users++;
    pthread_mutex_unlock(&p->mu);
    if (!c) {
      /* nothing planned holds these bytes: fetch them alone, up to the next
       * piece that may */
      pthread_mutex_lock(&p->mu);
      uint64_t stop = next_start(p, obj, at, end);
      pthread_mutex_unlock(&p->mu);
      stk__net_req *q = stk__net_get(p->net, url, at, stop - at, 0, 0);
      stk__net_body b;
      rc = stk__net_wait_reason(q, &b, msg, msglen);
      if (rc == STK_OK) memcpy(dst + (at - off), b.data, (size_t)(stop - at));
      stk__net_free(q);
      at = stop;
      continue;
    }
    stk__net_body b;
    rc = stk__net_wait_reason(c->req, &b, msg, msglen);
    uint64_t stop = c->off + c->len < end ? c->off + c->len : end;
    if (rc == STK_OK) memcpy(dst + (at - off), b.data + (at - c->off), (size_t)(stop - at));
    pthread_mutex_lock(&p->mu);
    c->users--;
    if (c->refs) c->refs--;
    c->tick = ++p->tick;
    if (rc) {
      /* a failed piece must not fail the later reads of its bytes (the
       * network may be back): they fetch their own; let go once unused */
      c->refs = 0;
      c->failed = 1;
    }
    evict(p);
    pthread_mutex_unlock(&p->mu);
    at = stop;
  }
  return rc;
}
