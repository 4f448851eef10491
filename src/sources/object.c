/* object.c: byte ranges of local files and remote objects. See object.h. */
#define _POSIX_C_SOURCE 200809L
#include "sources/object.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <time.h>

#include "core/common.h"
#include "core/fault.h"
#include "core/options.h"
#include "sources/source.h"

int stk__object_open(stk__object *o, const char *name, stk__net *net, uint64_t size,
                     uint64_t part, char *msg, size_t msglen) {
  memset(o, 0, sizeof *o);
  o->name = name;
  o->fd = -1;
  if (net) {
    o->net = net;
    o->size = size;
    o->part = part ? part : STK__REMOTE_PART_BYTES;
    return STK_OK;
  }
  struct stat st;
  o->fd = stk__open_input(name, 0, &st, msg, msglen);
  if (o->fd < 0) return STK_EIO;
  o->size = (uint64_t)st.st_size;
  return STK_OK;
}

static void window_release(stk__object *o);

void stk__object_close(stk__object *o) {
  if (o->fd >= 0) close(o->fd);
  window_release(o);
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
    window_release(o);
    o->win_len = b.len;
    o->win_off = off;
    if (o->keep) { /* the request is kept: the store may take it later */
      o->win = b.data;
      o->win_req = q;
      return rc;
    }
    o->win = stk__net_take(q); /* taken over from the request */
  }
  stk__net_free(q);
  return rc;
}

static ssize_t parts_pread(stk__object *o, void *dst, size_t n, uint64_t off);

ssize_t stk__object_pread(stk__object *o, void *dst, size_t n, uint64_t off) {
  if (o->parts && o->fd < 0) return parts_pread(o, dst, n, off);
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
  uint64_t tick;   /* last use */
} piece;

/* The reads of one epoch's order (this rank's), by part: for part q, the
 * positions pos[start[q] .. start[q + 1]) in the order that read it, and
 * how many of them were planned so far. */
typedef struct {
  uint64_t epoch1; /* the epoch + 1; 0 = none */
  int64_t n;       /* reads in the order */
  int64_t *start, *pos, *cur;
  int64_t *seq;    /* n: the part of each position (-1: none) */
  int64_t ahead;   /* positions before this one were looked ahead at */
} uses;

struct stk__parts {
  stk__net *net;
  uint64_t part, budget;
  pthread_mutex_t mu;
  piece *list;
  uint64_t bytes, peak, tick;
  int nobj;
  int64_t *base;      /* nobj + 1: each object's first part number */
  uint64_t *fetched;  /* per part: the epoch + 1 it was last requested whole in */
  uses u[2];          /* the current epoch and the next (slot epoch & 1) */
  uint64_t planning;  /* the latest epoch planned */
  /* the look-ahead (look_ahead): the rate of planned bytes, measured */
  double rate, rate_t0;
  uint64_t rate_bytes;
  uint64_t reach;     /* bytes of parts requested ahead of the plans, now */
  const char *const *urls; /* nobj (borrowed), or NULL: no look-ahead */
  const uint64_t *sizes;   /* nobj (borrowed) */
};

int stk__parts_open(stk__parts **out, stk__net *net, uint64_t part_size, uint64_t budget, int nobj,
                    const uint64_t *sizes, const char *const *urls) {
  *out = NULL;
  stk__parts *p = calloc(1, sizeof *p);
  if (!p) return STK_ENOMEM;
  p->base = malloc(((size_t)nobj + 1) * sizeof *p->base);
  if (!p->base) {
    free(p);
    return STK_ENOMEM;
  }
  p->base[0] = 0;
  for (int i = 0; i < nobj; i++) p->base[i + 1] = p->base[i] + (int64_t)(sizes[i] / part_size + 1);
  if (!(p->fetched = calloc((size_t)p->base[nobj] + 1, sizeof *p->fetched))) {
    free(p->base);
    free(p);
    return STK_ENOMEM;
  }
  p->net = net;
  p->part = part_size;
  p->budget = budget;
  p->nobj = nobj;
  p->urls = urls;
  p->sizes = sizes;
  pthread_mutex_init(&p->mu, NULL);
  *out = p;
  return STK_OK;
}

static void uses_free(uses *u) {
  free(u->start);
  free(u->pos);
  free(u->cur);
  free(u->seq);
  memset(u, 0, sizeof *u);
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
  uses_free(&p->u[0]);
  uses_free(&p->u[1]);
  free(p->fetched);
  free(p->base);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static int64_t part_of(const stk__parts *p, int obj, uint64_t at) {
  int64_t q = p->base[obj] + (int64_t)(at / p->part);
  return q < p->base[obj + 1] ? q : p->base[obj + 1] - 1;
}

/* Where the next read of part q not yet planned lies, counted in reads from
 * the start of the earlier epoch planned; INT64_MAX when none is known. */
static int64_t next_use(const stk__parts *p, int64_t q) {
  int64_t offset = 0;
  for (uint64_t e = p->planning; e <= p->planning + 1; e++) {
    /* reads of an epoch before the one being planned will not come:
     * what of it was not planned is read by refills, not through here */
    const uses *u = &p->u[e & 1];
    if (u->epoch1 != e + 1) continue;
    int64_t have = u->start[q + 1] - u->start[q];
    if (u->cur[q] < have) return offset + u->pos[u->start[q] + u->cur[q]];
    offset += u->n;
  }
  return INT64_MAX;
}

static int64_t reads_left(const stk__parts *p, int64_t q, uint64_t epoch);

/* The requests that letting go of part q will cost this epoch: a part
 * fetched whole this epoch gives each read of it still to come a request
 * of its own (a straggler's); one not fetched yet this epoch is fetched
 * whole again at its next read, one request; none when no read is left. */
static int64_t evict_cost(const stk__parts *p, int64_t q) {
  int64_t now = reads_left(p, q, p->planning);
  if (p->fetched[q] == p->planning + 1) return now;
  return now + reads_left(p, q, p->planning + 1) > 0;
}

/* Lets go of pieces no plan holds until the store is within its budget
 * (mutex held): the one whose loss costs the fewest requests first (the
 * epoch's order is known), then the one read again furthest in the future
 * (Belady's rule), then the least recently used. Failed pieces go at once.
 * Pieces still in transfer stay: freeing one would wait for it. */
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
    int64_t best_cost = 0, best_next = 0;
    for (piece **c = &p->list; *c; c = &(*c)->next) {
      if ((*c)->refs || (*c)->users || !stk__net_done((*c)->req)) continue;
      int64_t q = part_of(p, (*c)->obj, (*c)->off);
      int64_t cost = evict_cost(p, q), nx = next_use(p, q);
      if (!best || cost < best_cost || (cost == best_cost && nx > best_next) ||
          (cost == best_cost && nx == best_next && (*c)->tick < (*best)->tick)) {
        best = c;
        best_cost = cost;
        best_next = nx;
      }
    }
    if (!best) return;
    piece *v = *best;
    *best = v->next;
    p->bytes -= v->len;
    piece_free(v);
  }
}

static uint64_t next_start(stk__parts *p, int obj, uint64_t at, uint64_t limit);
static piece *find(stk__parts *p, int obj, uint64_t at);

/* Takes the finished request q, bytes [off, off + its length) of obj, as a
 * piece no plan holds, if the store has room for it without letting go of
 * anything and no piece holds any of its bytes. 1 if taken. */
static int parts_adopt(stk__parts *p, int obj, uint64_t off, stk__net_req *q) {
  stk__net_body b;
  if (stk__net_wait(q, &b, NULL, 0) != STK_OK || !b.len) return 0;
  piece *c = calloc(1, sizeof *c);
  if (!c) return 0;
  pthread_mutex_lock(&p->mu);
  int fits = p->bytes + b.len <= p->budget && !find(p, obj, off) &&
             next_start(p, obj, off, off + b.len) == off + b.len;
  if (fits) {
    *c = (piece){.obj = obj, .off = off, .len = b.len, .req = q, .tick = ++p->tick};
    c->next = p->list;
    p->list = c;
    p->bytes += c->len;
    if (p->bytes > p->peak) p->peak = p->bytes;
  }
  pthread_mutex_unlock(&p->mu);
  if (!fits) free(c);
  return fits;
}

/* Lets go of the window: its request to the store kept for (or freed). */
static void window_release(stk__object *o) {
  if (o->win_req) {
    if (!parts_adopt(o->keep, o->keep_obj, o->win_off, o->win_req)) stk__net_free(o->win_req);
    o->win_req = NULL;
  } else {
    free(o->win);
  }
  o->win = NULL;
}

void stk__object_keep(stk__object *o, stk__parts *p, int obj) {
  o->keep = p;
  o->keep_obj = obj;
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

/* Whether a part let go and needed again is fetched whole: when a quarter
 * of its reads this epoch (and at least 8) still need it, so that one
 * request serves them (a request costs a server about as much as a
 * megabyte of transfer; eviction then keeps it, for those reads). */
static int refetch(const stk__parts *p, int64_t q, uint64_t epoch) {
  const uses *u = &p->u[epoch & 1];
  if (u->epoch1 != epoch + 1) return 0;
  int64_t all = u->start[q + 1] - u->start[q], left = all - u->cur[q];
  if (left < 8 || 4 * left < all) return 0;
  if (p->bytes + p->part <= p->budget) return 1;
  /* a full store: only when a piece that costs fewer requests can make
   * room, else the part would push out what serves more reads */
  uint64_t room = 0;
  for (const piece *c = p->list; c && room < p->part; c = c->next)
    if (!c->refs && !c->users && evict_cost(p, part_of(p, c->obj, c->off)) < left) room += c->len;
  return room >= p->part;
}

static int64_t reads_left(const stk__parts *p, int64_t q, uint64_t epoch) {
  const uses *u = &p->u[epoch & 1];
  if (u->epoch1 != epoch + 1) return 0;
  return u->start[q + 1] - u->start[q] - u->cur[q];
}

int stk__parts_expect(stk__parts *p, uint64_t epoch, int64_t n, const int32_t *obj,
                      const uint64_t *off) {
  int64_t nq = p->base[p->nobj];
  uses u = {epoch + 1, n, calloc((size_t)nq + 2, sizeof(int64_t)),
            malloc(((size_t)n + 1) * sizeof(int64_t)), calloc((size_t)nq + 1, sizeof(int64_t)),
            malloc(((size_t)n + 1) * sizeof(int64_t)), 0};
  if (!u.start || !u.pos || !u.cur || !u.seq) {
    uses_free(&u);
    return STK_ENOMEM; /* eviction goes by recency alone */
  }
  /* counts, prefix sums, then the positions in order (ascending per part) */
  for (int64_t j = 0; j < n; j++)
    if (obj[j] >= 0) u.start[part_of(p, obj[j], off[j]) + 2]++;
  for (int64_t q = 0; q < nq; q++) u.start[q + 2] += u.start[q + 1];
  for (int64_t j = 0; j < n; j++)
    if (obj[j] >= 0) u.pos[u.start[part_of(p, obj[j], off[j]) + 1]++] = j;
  for (int64_t j = 0; j < n; j++) u.seq[j] = obj[j] >= 0 ? part_of(p, obj[j], off[j]) : -1;
  pthread_mutex_lock(&p->mu);
  uses_free(&p->u[epoch & 1]);
  p->u[epoch & 1] = u;
  pthread_mutex_unlock(&p->mu);
  return STK_OK;
}

/* The rate the loader plans bytes at (bytes a second, smoothed over
 * windows of a quarter of a second; mutex held). */
static void measure_rate(stk__parts *p, uint64_t len) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  if (p->rate_t0 == 0) p->rate_t0 = now;
  p->rate_bytes += len;
  double dt = now - p->rate_t0;
  if (dt < 0.25) return;
  double r = (double)p->rate_bytes / dt;
  p->rate = p->rate > 0 ? 0.5 * p->rate + 0.5 * r : r;
  p->rate_bytes = 0;
  p->rate_t0 = now;
}

/* How far ahead of the plans whole parts are requested: what the loader
 * reads in twice the time a request takes now (its round trip and its
 * transfer, as measured), so that a part is there when the batch that
 * needs it starts; at least 2 parts, at most half the budget (the rest
 * keeps the parts the shuffle buffer's stragglers need). */
static uint64_t reach_wanted(stk__parts *p) {
  stk__net_stats ns;
  stk__net_get_stats(p->net, &ns);
  double lat = ns.requests ? ns.seconds / (double)ns.requests : 0.05;
  double want = 2.0 * p->rate * lat;
  uint64_t hi = p->budget / 2, lo = 2 * p->part < hi ? 2 * p->part : hi;
  if (want < (double)lo) return lo;
  if (want > (double)hi) return hi;
  return (uint64_t)want;
}

/* The bytes the store may take without letting go of a part that a read
 * of this epoch still needs: the budget not used, and the pieces no read
 * is left for (mutex held). */
static uint64_t free_room(stk__parts *p) {
  uint64_t room = p->budget > p->bytes ? p->budget - p->bytes : 0;
  for (const piece *c = p->list; c; c = c->next)
    if (!c->refs && !c->users && stk__net_done(c->req) &&
        evict_cost(p, part_of(p, c->obj, c->off)) == 0)
      room += c->len;
  return room;
}

uint64_t stk__parts_reach(stk__parts *p) {
  pthread_mutex_lock(&p->mu);
  uint64_t r = reach_wanted(p);
  pthread_mutex_unlock(&p->mu);
  return r;
}

/* Requests the whole parts that the positions after at_pos will read,
 * up to reach_wanted() bytes of parts not yet fetched this epoch (mutex
 * held). Positions already looked at are not looked at again. */
static void look_ahead(stk__parts *p, uses *u, int64_t at_pos, uint64_t epoch) {
  if (!p->urls) return;
  uint64_t reach = reach_wanted(p), span = 0, room = free_room(p);
  p->reach = reach;
  int64_t j = at_pos + 1 > u->ahead ? at_pos + 1 : u->ahead, last = -1;
  for (; j < u->n && span < reach && j < at_pos + 65536; j++) {
    int64_t q = u->seq[j];
    if (q < 0 || q == last) continue;
    last = q;
    int lo = 0, hi = p->nobj - 1; /* the object o of part q: base[o] <= q < base[o + 1] */
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (p->base[mid] <= q) lo = mid;
      else hi = mid - 1;
    }
    int o = lo;
    uint64_t start = (uint64_t)(q - p->base[o]) * p->part, size = p->sizes[o];
    uint64_t end = start + p->part < size ? start + p->part : size;
    if (start >= size) continue;
    if ((span += end - start) > reach) break;
    if (p->fetched[q] == epoch + 1 || find(p, o, start)) continue;
    /* only into room that costs no read a request: a part pushed out for
     * one wanted later would cost the shuffle buffer's stragglers a request
     * each (measured: with the dataset twice the budget, 620 requests an
     * epoch instead of 280) */
    if (end - start > room) break;
    room -= end - start;
    uint64_t stop = next_start(p, o, start, end);
    piece *c = calloc(1, sizeof *c);
    if (!c) return;
    *c = (piece){.obj = o, .off = start, .len = stop - start, .tick = ++p->tick};
    if (!(c->req = stk__net_get(p->net, p->urls[o], start, c->len, 0, 0))) {
      free(c);
      return;
    }
    p->fetched[q] = epoch + 1;
    c->next = p->list;
    p->list = c;
    p->bytes += c->len;
    if (p->bytes > p->peak) p->peak = p->bytes;
  }
  if (j > u->ahead) u->ahead = j;
}

void stk__parts_plan(stk__parts *p, int obj, const char *url, uint64_t size, uint64_t off,
                     uint64_t len, uint64_t epoch) {
  pthread_mutex_lock(&p->mu);
  uint64_t end = off + len, at = off;
  while (at < end) {
    piece *c = find(p, obj, at);
    if (!c) {
      int64_t q = part_of(p, obj, at);
      uint64_t start = at, stop;
      if (p->fetched[q] != epoch + 1 || refetch(p, q, epoch)) {
        /* the part's first read this epoch, or one let go that more reads
         * of this epoch still need: the whole part (what of it no piece
         * holds), for the samples of it that follow */
        p->fetched[q] = epoch + 1;
        start = at - at % p->part;
        stop = start + p->part;
        for (piece *o = p->list; o; o = o->next) /* not over a piece before `at` */
          if (o->obj == obj && o->off + o->len <= at && o->off + o->len > start)
            start = o->off + o->len;
      } else {
        stop = end; /* a straggler: its own bytes only */
      }
      if (stop > size) stop = size;
      stop = next_start(p, obj, at, stop);
      if (stop <= at) break;
      c = calloc(1, sizeof *c);
      if (!c) break; /* the read then fetches its bytes itself */
      c->obj = obj;
      c->off = start;
      c->len = stop - start;
      c->req = stk__net_get(p->net, url, start, c->len, 0, 0);
      if (!c->req) {
        free(c);
        break;
      }
      c->next = p->list;
      p->list = c;
      p->bytes += c->len;
      if (p->bytes > p->peak) p->peak = p->bytes;
    }
    c->refs++;
    c->tick = ++p->tick;
    at = c->off + c->len;
  }
  if (epoch > p->planning) p->planning = epoch;
  /* this read is planned: its part's next read is the one after it */
  uses *u = &p->u[epoch & 1];
  int64_t at_pos = -1;
  if (u->epoch1 == epoch + 1) {
    int64_t q = part_of(p, obj, off);
    if (u->cur[q] < u->start[q + 1] - u->start[q]) at_pos = u->pos[u->start[q] + u->cur[q]++];
  }
  measure_rate(p, len);
  if (at_pos >= 0) look_ahead(p, u, at_pos, epoch);
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

static int parts_copy(stk__parts *p, int obj, const char *url, uint64_t off, uint64_t len,
                      uint8_t *dst, int consume, char *msg, size_t msglen);

int stk__parts_read(stk__parts *p, int obj, const char *url, uint64_t off, uint64_t len,
                    uint8_t *dst, char *msg, size_t msglen) {
  return parts_copy(p, obj, url, off, len, dst, 1, msg, msglen);
}

/* A read of planned bytes gives up its plan's hold on the piece; a scan
 * through the store (consume 0) holds none and must not take the reads'. */
static int parts_copy(stk__parts *p, int obj, const char *url, uint64_t off, uint64_t len,
                      uint8_t *dst, int consume, char *msg, size_t msglen) {
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
    if (consume && c->refs) c->refs--;
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

void stk__parts_want(stk__parts *p, int obj, const char *url, uint64_t size, uint64_t off,
                     uint64_t epoch) {
  pthread_mutex_lock(&p->mu);
  piece *c = find(p, obj, off);
  if (c) {
    c->tick = ++p->tick;
  } else if (off < size) {
    /* the whole part, less what pieces already hold of it */
    uint64_t start = off - off % p->part, stop = start + p->part;
    for (piece *o = p->list; o; o = o->next)
      if (o->obj == obj && o->off + o->len <= off && o->off + o->len > start)
        start = o->off + o->len;
    if (stop > size) stop = size;
    stop = next_start(p, obj, off, stop);
    c = stop > start ? calloc(1, sizeof *c) : NULL;
    if (c) {
      c->obj = obj;
      c->off = start;
      c->len = stop - start;
      c->tick = ++p->tick;
      c->req = stk__net_get(p->net, url, start, c->len, 0, 0);
      if (c->req) {
        p->fetched[part_of(p, obj, off)] = epoch + 1;
        c->next = p->list;
        p->list = c;
        p->bytes += c->len;
        if (p->bytes > p->peak) p->peak = p->bytes;
        evict(p);
      } else {
        free(c);
      }
    }
  }
  pthread_mutex_unlock(&p->mu);
}

uint64_t stk__parts_budget(stk__parts *p) { return p->budget; }

/* A remote object read through the store of parts (stk__object_parts):
 * the parts at off and the next o->depth are requested, so that a scan
 * waits for a round trip only at its start; the bytes stay in the store
 * for the sample reads that follow the scan. */
static ssize_t parts_pread(stk__object *o, void *dst, size_t n, uint64_t off) {
  if (off >= o->size) return 0;
  if (n > o->size - off) n = (size_t)(o->size - off);
  uint64_t first = off - off % o->part;
  for (unsigned k = 0; k <= o->depth && first + k * o->part < o->size; k++)
    stk__parts_want(o->parts, o->obj, o->name, o->size, first + k * o->part, o->epoch);
  if (parts_copy(o->parts, o->obj, o->name, off, n, dst, 0, o->why, sizeof o->why)) return -1;
  return (ssize_t)n;
}

void stk__object_parts(stk__object *o, stk__parts *p, int obj, unsigned depth, uint64_t epoch) {
  o->parts = p;
  o->obj = obj;
  o->depth = depth;
  o->epoch = epoch;
}
