/* store_remote.c: the store's row of remote objects (see store.h): s3://
 * and hf:// prefixes listed, brace ranges expanded, other names sized by
 * HEAD; reads through the node's copies (shard_cache.h), else the store of
 * parts (object.h), both over the transport (net.h); the requests an open
 * makes ahead (the sibling, indexes beside the objects, first parts). */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/options.h"
#include "sources/net.h"
#include "sources/object.h"
#include "sources/shard_cache.h"
#include "sources/store.h"

#define PART STK__REMOTE_PART_BYTES

typedef struct {
  stk__net *net;
  stk__parts *parts;
  stk__shard_cache *cache; /* local copies (cache_dir), or NULL */
  stk__net_req **first;    /* per object: its index beside it or its first part, asked ahead */
  stk__net_req *early;     /* the sibling, asked before the listing */
  char *early_dir;         /* the folder it was asked in */
  char *early_name;
  uint64_t memory, cache_bytes;
  char *cache_dir;
} remote;

static void drop(stk__net_req *q) {
  if (!q) return;
  stk__net_wait(q, NULL, NULL, 0);
  stk__net_free(q);
}

int stk__objstore_remote_open(stk__objstore *st, const stk__objstore_config *cfg, char *msg,
                           size_t msglen) {
  remote *r = calloc(1, sizeof *r);
  if (!r) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  st->impl = r;
  r->memory = cfg->memory;
  r->cache_bytes = cfg->cache_bytes;
  if (cfg->cache_dir && cfg->cache_dir[0] && !(r->cache_dir = strdup(cfg->cache_dir)))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  return stk__net_open(&r->net, cfg->read_timeout, msg, msglen);
}

/* ---- the listing ------------------------------------------------------------ */

typedef struct {
  char **v;
  int n, cap;
} names;

static int names_add(names *a, char *s) {
  if (!s) return STK_ENOMEM;
  if (a->n == a->cap) {
    int cap = a->cap ? a->cap * 2 : 64;
    char **v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v) {
      free(s);
      return STK_ENOMEM;
    }
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = s;
  return STK_OK;
}

#define MAX_EXPANSION 10000000

/* WebDataset's brace notation: "a-{000..127}.tar" (numbers keep the width
 * of a bound written with leading zeros), "{x,y}", several braces. */
static int brace_expand(const char *pat, names *out, char *msg, size_t msglen);

/* The names of a range {a..b} in pat (o at its '{', c at its '}'). */
static int brace_range(const char *pat, const char *o, const char *c, const char *body,
                       names *out, char *msg, size_t msglen) {
  const char *dots = strstr(body, "..");
  char buf[4096], *end1, *end2;
  size_t pre = (size_t)(o - pat);
  long long a = strtoll(body, &end1, 10), b = strtoll(dots + 2, &end2, 10);
  if (end1 != dots || *end2 || end1 == body || !dots[2] || b < a || b - a >= MAX_EXPANSION)
    return stk__fail(msg, msglen, STK_EINVAL, "%s: {%s} is not a range {first..last}", pat, body);
  int w1 = (int)(dots - body), w2 = (int)strlen(dots + 2);
  int width = (body[0] == '0' && w1 > 1) || (dots[2] == '0' && w2 > 1) ? (w1 > w2 ? w1 : w2) : 0;
  for (long long k = a; k <= b; k++) {
    if (snprintf(buf, sizeof buf, "%.*s%0*lld%s", (int)pre, pat, width, k, c + 1) >= (int)sizeof buf)
      return stk__fail(msg, msglen, STK_EINVAL, "%s: a name too long", pat);
    int rc = brace_expand(buf, out, msg, msglen);
    if (rc) return rc;
    if (out->n > MAX_EXPANSION)
      return stk__fail(msg, msglen, STK_EINVAL, "%s names too many shards", pat);
  }
  return STK_OK;
}

static int brace_expand(const char *pat, names *out, char *msg, size_t msglen) {
  const char *o = strchr(pat, '{');
  if (!o) return names_add(out, strdup(pat)) ? stk__fail(msg, msglen, STK_ENOMEM, "out of memory")
                                             : STK_OK;
  const char *c = strchr(o, '}');
  if (!c) return stk__fail(msg, msglen, STK_EINVAL, "%s: a '{' without its '}'", pat);
  size_t pre = (size_t)(o - pat);
  char body[256], buf[4096];
  if ((size_t)(c - o - 1) >= sizeof body)
    return stk__fail(msg, msglen, STK_EINVAL, "%s: a brace too long", pat);
  memcpy(body, o + 1, (size_t)(c - o - 1));
  body[c - o - 1] = '\0';
  if (strstr(body, "..")) return brace_range(pat, o, c, body, out, msg, msglen);
  for (char *tok = body;;) {
    char *comma = strchr(tok, ',');
    size_t tl = comma ? (size_t)(comma - tok) : strlen(tok);
    if (snprintf(buf, sizeof buf, "%.*s%.*s%s", (int)pre, pat, (int)tl, tok, c + 1) >= (int)sizeof buf)
      return stk__fail(msg, msglen, STK_EINVAL, "%s: a name too long", pat);
    int rc = brace_expand(buf, out, msg, msglen);
    if (rc) return rc;
    if (!comma) break;
    tok = comma + 1;
  }
  return STK_OK;
}

/* The sizes and ETags of the objects, by HEAD requests in flight together. */
static int head_all(stk__objstore *st, stk__net *net, char *msg, size_t msglen) {
  int rc = STK_OK;
  for (int at = 0; rc == STK_OK && at < st->n; at += 64) {
    int k = st->n - at < 64 ? st->n - at : 64;
    stk__net_req *q[64];
    for (int i = 0; i < k; i++) q[i] = stk__net_get(net, st->name[at + i], 0, 0, 0, 1);
    for (int i = 0; i < k; i++) {
      stk__net_body b;
      int r = stk__net_wait(q[i], &b, rc ? NULL : msg, msglen);
      if (r && !rc) rc = r;
      if (!r) {
        st->size[at + i] = b.size;
        memcpy(st->etag[at + i], b.etag, sizeof b.etag);
      }
      stk__net_free(q[i]);
    }
  }
  return rc;
}

/* Adds a listed object (its URL, size and ETag) to nm and st. STK_ENOMEM. */
static int add_listed(stk__objstore *st, names *nm, const stk__net_object *o) {
  if (names_add(nm, strdup(o->url))) return STK_ENOMEM;
  uint64_t *sz = realloc(st->size, (size_t)nm->cap * sizeof *sz);
  if (!sz) return STK_ENOMEM;
  st->size = sz;
  st->size[nm->n - 1] = o->size;
  char(*et)[96] = realloc(st->etag, (size_t)nm->cap * sizeof *et);
  if (!et) return STK_ENOMEM;
  st->etag = et;
  memcpy(st->etag[nm->n - 1], o->etag, sizeof *et);
  return STK_OK;
}

/* A root without its trailing slash (s3://bucket/train) that is not a
 * folder: S3 would list every key that starts with it (train/, train2/,
 * train-old.tar...), sibling datasets mixed into one. Refused, naming what
 * it matched. */
static int refuse_loose_prefix(const char *url, const stk__net_object *v, int n,
                               stk__objstore_keep keep, char *msg, size_t msglen) {
  char some[600] = "", why[8];
  size_t len = 0;
  int shown = 0, tars = 0, kept = 0;
  for (int i = 0; i < n; i++) {
    if (keep(v[i].url, &kept, why, sizeof why) || !kept) continue; /* (refused: not an object) */
    tars++;
    if (shown < 3 && len < sizeof some) {
      int w = snprintf(some + len, sizeof some - len, "%s%s", shown ? ", " : "", v[i].url);
      if (w > 0) len += (size_t)w;
      shown++;
    }
  }
  if (!tars) return STK_OK; /* nothing matched: "holds no .tar shard" says it */
  return stk__fail(msg, msglen, STK_EINVAL,
                   "%s is no folder (no key starts with %s/), only the start of the names of %d "
                   "shard%s (%s%s): end a folder's name with '/', or name the shards (a brace "
                   "range)",
                   url, url, tars, tars == 1 ? "" : "s", some, tars > shown ? ", ..." : "");
}

/* The objects under an s3:// prefix that `keep` keeps, sorted by key, into
 * nm (with their sizes and ETags into st). A root without a trailing slash
 * is the folder of that name when one exists; *folder gets the prefix. */
static int list_prefix(stk__objstore *st, stk__net *net, const char *url, stk__objstore_keep keep,
                       names *nm, char **folder, char *msg, size_t msglen) {
  stk__net_object *v = NULL;
  int n = 0, kept = 0;
  int rc = stk__net_list(net, url, &v, &n, msg, msglen);
  size_t ul = strlen(url);
  /* s3://bucket and s3://bucket/prefix/ name a folder as they are */
  int loose = rc == STK_OK && url[ul - 1] != '/' && strchr(url + 5, '/');
  int in_folder = 0;
  for (int i = 0; loose && i < n && !in_folder; i++) in_folder = v[i].url[ul] == '/';
  if (loose && !in_folder) rc = refuse_loose_prefix(url, v, n, keep, msg, msglen);
  *folder = rc == STK_OK ? malloc(ul + 2) : NULL;
  if (*folder) snprintf(*folder, ul + 2, "%s%s", url, loose ? "/" : "");
  if (rc == STK_OK && !*folder) rc = STK_ENOMEM;
  for (int i = 0; rc == STK_OK && i < n; i++) {
    if (loose && v[i].url[ul] != '/') continue; /* a sibling of the folder */
    rc = keep(v[i].url, &kept, msg, msglen);
    if (rc == STK_OK && kept) rc = add_listed(st, nm, &v[i]);
  }
  if (rc == STK_ENOMEM) stk__fail(msg, msglen, rc, "out of memory");
  stk__net_objects_free(v, n);
  return rc;
}

/* The names a root gives without a listing: its brace ranges expanded
 * (each checked by keep for a refusal, but kept whatever its name), or
 * the one object. */
static int list_named(const char *url, int one, stk__objstore_keep keep, names *nm, char *msg,
                      size_t msglen) {
  int kept = 0;
  if (!strchr(url, '{')) {
    if (!one)
      return stk__fail(msg, msglen, STK_EINVAL,
                       "%s: an HTTP folder cannot be listed; name the shards with a range, as in "
                       "https://host/path/shard-{0000..0099}.tar, or use a list file of URLs",
                       url);
    return names_add(nm, strdup(url)) ? stk__fail(msg, msglen, STK_ENOMEM, "out of memory")
                                      : STK_OK;
  }
  int rc = brace_expand(url, nm, msg, msglen);
  for (int i = 0; rc == STK_OK && i < nm->n; i++) rc = keep(nm->v[i], &kept, msg, msglen);
  return rc;
}

/* The folder of the objects (where the sibling lives): the listed folder,
 * or the first name's. */
static char *folder_of(const char *base) {
  const char *slash = strrchr(base, '/');
  size_t scheme = (size_t)(strstr(base, "://") - base) + 3;
  size_t dl = slash && (size_t)(slash - base) >= scheme ? (size_t)(slash - base) : strlen(base);
  return strndup(base, dl);
}

/* The transfers of the parts, and the copies: once the objects are known. */
static uint64_t memory_default(void);

static int open_parts(stk__objstore *st, remote *r, char *msg, size_t msglen) {
  uint64_t budget = r->memory ? r->memory : memory_default();
  if (stk__parts_open(&r->parts, r->net, PART, budget, st->n, st->size,
                      (const char *const *)st->name) ||
      !(r->first = calloc((size_t)st->n + 1, sizeof *r->first)))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (r->cache_dir)
    return stk__shard_cache_open(&r->cache, r->cache_dir, r->cache_bytes, r->net, st->n, msg,
                                 msglen);
  return STK_OK;
}

/* The objects a URL names: an s3:// or hf:// prefix (every object under it
 * that keep keeps, sorted by key), a name with brace ranges, or one object
 * (a name keep keeps). */
static int remote_list(stk__objstore *st, const char *url, stk__objstore_keep keep, char *msg,
                       size_t msglen) {
  remote *r = st->impl;
  names nm = {0};
  int one = 0, listed = 0;
  /* (a brace range's names are checked one by one: the pattern is none) */
  int rc = strchr(url, '{') ? STK_OK : keep(url, &one, msg, msglen);
  /* s3:// and hf:// folders can be listed (a bucket listing, the Hub's
   * tree API); an http(s):// one cannot */
  int s3 = !strncmp(url, "s3://", 5) || !strncmp(url, "hf://", 5);
  char *folder = NULL;
  if (rc == STK_OK && s3 && !one && !strchr(url, '{')) {
    rc = list_prefix(st, r->net, url, keep, &nm, &folder, msg, msglen);
    listed = 1;
  } else if (rc == STK_OK) {
    rc = list_named(url, one, keep, &nm, msg, msglen);
  }
  st->name = nm.v;
  st->n = nm.n;
  if (rc == STK_OK && !listed) {
    if (!(st->size = calloc((size_t)nm.n + 1, sizeof *st->size)) ||
        !(st->etag = calloc((size_t)nm.n + 1, sizeof *st->etag)))
      rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    else
      rc = head_all(st, r->net, msg, msglen);
  }
  if (rc == STK_OK && !(st->dir = folder_of(nm.n && !listed ? nm.v[0] : folder ? folder : url)))
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  free(folder);
  if (rc == STK_OK && st->n) rc = open_parts(st, r, msg, msglen);
  return rc;
}

/* remote_memory 0: 1/32 of the machine's memory (of its cgroup's limit
 * when lower: a container), at least STK__REMOTE_MEMORY_DEFAULT and at most
 * 4 GiB. Enough parts to keep a shuffle buffer's span and the read-ahead
 * that hides a round trip (256 MiB held a loader at 20 ms to 0.6x local
 * disk, 1 GiB gave 1.02x), while 8 ranks of a node take a quarter of it. */
static uint64_t memory_default(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
  uint64_t mem = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); /* "max" when unlimited */
  unsigned long long lim = 0;
  if (f) {
    if (fscanf(f, "%llu", &lim) == 1 && lim > 0 && (mem == 0 || lim < mem)) mem = lim;
    fclose(f);
  }
  uint64_t b = mem / 32, lo = STK__REMOTE_MEMORY_DEFAULT, hi = (uint64_t)4 << 30;
  return b < lo ? lo : b > hi ? hi : b;
}

/* ---- what an open asks for ahead -------------------------------------------- */

void stk__objstore_remote_early(stk__objstore *st, const char *root, stk__objstore_keep keep,
                             const char *sibling) {
  remote *r = st->impl;
  if (!sibling) return;
  const char *slash = strrchr(root, '/');
  char why[8];
  int one = 0;
  /* (s3://bucket/name without a '/' at the end names the folder name/, as
   * hf://datasets/OWNER/NAME/folder does; with one, the folder is what
   * precedes it, as the listing has it) */
  size_t pl = strlen(root);
  int prefix = !keep(root, &one, why, sizeof why) && !one;
  if ((!strncmp(root, "s3://", 5) || !strncmp(root, "hf://", 5)) && !strchr(root, '{') &&
      prefix && pl && root[pl - 1] != '/')
    slash = root + pl;
  if (!slash || slash <= strstr(root, "://") + 2 ||
      !(r->early_dir = strndup(root, (size_t)(slash - root))) || !(r->early_name = strdup(sibling)))
    return;
  char *u = stk__path_join(r->early_dir, sibling);
  r->early = u ? stk__net_probe(r->net, u, 64u << 20, 0) : NULL; /* it may not exist */
  free(u);
}

/* The file `name` beside the objects, in memory: *data NULL when there is
 * none (a 404). The request sent before the listing serves when it was for
 * the same file in the same folder. */
static int remote_sibling(stk__objstore *st, const char *name, uint8_t **data, size_t *len,
                          char *msg, size_t msglen) {
  remote *r = st->impl;
  *data = NULL;
  *len = 0;
  char *url = stk__path_join(st->dir, name), why[800];
  stk__net_req *q = r->early;
  r->early = NULL;
  if (q && (strcmp(st->dir, r->early_dir) || strcmp(name, r->early_name))) {
    drop(q); /* the objects live elsewhere */
    q = NULL;
  }
  if (!url) {
    drop(q);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  if (!q) q = stk__net_probe(r->net, url, 64u << 20, 0);
  stk__net_body b;
  int rc = stk__net_wait(q, &b, why, sizeof why);
  if (rc == STK_OK) {
    *len = b.len;
    *data = stk__net_take(q);
  } else if (strstr(why, "HTTP 404")) {
    rc = STK_OK;
  } else {
    stk__fail(msg, msglen, rc, "%s", why);
  }
  stk__net_free(q);
  free(url);
  return rc;
}

/* Indexes beside the objects (stoker pack --tar writes them): asked for
 * the first object that has no saved index; if it has one, the others are
 * taken to have theirs. */
static int remote_probe_beside(stk__objstore *st, const char *suffix) {
  remote *r = st->impl;
  for (int k = 0; k < st->n; k++) {
    if (stk__objstore_has_index(st, k)) continue;
    char u[4200];
    snprintf(u, sizeof u, "%s%s", st->name[k], suffix);
    stk__net_req *q = stk__net_probe(r->net, u, 1u << 30, 1); /* a 404 is an answer */
    st->beside = stk__net_wait(q, NULL, NULL, 0) == STK_OK;
    stk__net_free(q);
    break;
  }
  return st->beside;
}

/* While object k is scanned, what the next few need is requested: their
 * indexes beside them, or their first parts, so that opening costs
 * transfers, not a round trip per object. */
static void remote_open_ahead(stk__objstore *st, int k, int count, const char *suffix) {
  remote *r = st->impl;
  for (int j = k; j < st->n && j < k + count; j++) {
    if (r->first[j] || !st->size[j] || stk__objstore_has_index(st, j)) continue;
    if (st->beside) {
      char u[4200];
      snprintf(u, sizeof u, "%s%s", st->name[j], suffix);
      r->first[j] = stk__net_probe(r->net, u, 1u << 30, 0);
    } else {
      r->first[j] = stk__net_get(r->net, st->name[j], 0, st->size[j] < PART ? st->size[j] : PART,
                                 0, 0);
    }
  }
}

static int remote_beside(stk__objstore *st, int k, uint8_t **data, size_t *len) {
  remote *r = st->impl;
  if (!st->beside || !r->first[k]) return STK_EIO;
  stk__net_body b;
  int rc = stk__net_wait(r->first[k], &b, NULL, 0);
  if (rc == STK_OK) {
    *len = b.len;
    *data = stk__net_take(r->first[k]);
  }
  stk__net_free(r->first[k]);
  r->first[k] = NULL;
  return rc;
}

/* ---- reads ---------------------------------------------------------------- */

static int remote_reader(stk__objstore *st, int k, int parts, unsigned depth, stk__object **out,
                         char *msg, size_t msglen) {
  remote *r = st->impl;
  char why[256];
  stk__object *o = malloc(sizeof *o);
  if (!o) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (stk__object_open(o, st->name[k], r->net, st->size[k], PART, why, sizeof why)) {
    free(o);
    return stk__fail(msg, msglen, STK_EIO, "%s", why);
  }
  if (parts) {
    stk__object_parts(o, r->parts, k, depth, 0);
  } else {
    if (!st->beside && r->first[k]) { /* its first part, requested ahead */
      o->ahead = r->first[k];
      o->ahead_off = 0;
      r->first[k] = NULL;
    }
    /* an open's scan: the bytes it reads stay for the first epoch's reads
     * while the parts' budget has room (fetched once, not twice) */
    if (r->parts) stk__object_keep(o, r->parts, k);
  }
  *out = o;
  return STK_OK;
}

/* From the object's local copy, else through the store of parts. */
static int remote_read(stk__objstore *st, int k, uint64_t off, uint64_t len, void *dst,
                       uint64_t *got, char *msg, size_t msglen) {
  remote *r = st->impl;
  int rc = stk__shard_cache_read(r->cache, k, off, len, dst);
  if (rc) rc = stk__parts_read(r->parts, k, st->name[k], off, len, dst, msg, msglen);
  if (rc == STK_OK) *got = len;
  return rc;
}

static void remote_plan(stk__objstore *st, int k, uint64_t off, uint64_t len, uint64_t epoch) {
  remote *r = st->impl;
  /* an object with a local copy (or one under way) needs no parts */
  if (r->cache && stk__shard_cache_want(r->cache, k, st->name[k], st->size[k], st->etag[k]))
    return;
  stk__parts_plan(r->parts, k, st->name[k], st->size[k], off, len, epoch);
}

static void remote_expect(stk__objstore *st, uint64_t epoch, int64_t n, const int32_t *obj,
                          const uint64_t *off) {
  remote *r = st->impl;
  if (r->parts) stk__parts_expect(r->parts, epoch, n, obj, off);
}

static void remote_plan_reset(stk__objstore *st) {
  remote *r = st->impl;
  if (r->parts) stk__parts_reset(r->parts);
}

static void remote_want(stk__objstore *st, int k, uint64_t off) {
  remote *r = st->impl;
  stk__parts_want(r->parts, k, st->name[k], st->size[k], off, 0);
}

static uint64_t remote_reach(stk__objstore *st) {
  return stk__parts_reach(((remote *)st->impl)->parts);
}

static uint64_t remote_budget(stk__objstore *st) {
  return stk__parts_budget(((remote *)st->impl)->parts);
}

/* ---- whole objects by name (a list of URLs) --------------------------------- */

static stk__objstore_req *remote_fetch(stk__objstore *st, const char *name, uint64_t max) {
  /* (a store request is a transport request, by another name) */
  return (stk__objstore_req *)stk__net_get(((remote *)st->impl)->net, name, 0, 0, max, 0);
}

static int remote_get(stk__objstore *st, stk__objstore_req *q, const char *name, stk__buf *buf,
                      uint64_t max, stk__bytes *out, char *msg, size_t msglen) {
  stk__net_req *nq = q ? (stk__net_req *)q : stk__net_get(((remote *)st->impl)->net, name, 0, 0,
                                                          max, 0);
  stk__net_body b;
  int rc = stk__net_wait_reason(nq, &b, msg, msglen);
  if (rc == STK_OK && max && b.len > max)
    rc = stk__fail(msg, msglen, STK_ELIMIT, "%zu bytes, over the limit of %llu", b.len,
                   (unsigned long long)max); /* (the message names the sample) */
  if (rc == STK_OK && stk__buf_reserve(buf, b.len + 1))
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory for %zu bytes", b.len);
  if (rc == STK_OK) {
    memcpy(buf->p, b.data, b.len);
    out->data = buf->p;
    out->len = b.len;
    out->bytes_read = b.len;
  }
  stk__net_free(nq);
  return rc;
}

static void remote_req_free(stk__objstore_req *q) { drop((stk__net_req *)q); }

/* ---- the rest --------------------------------------------------------------- */

static void remote_cancel(stk__objstore *st) { stk__net_cancel(((remote *)st->impl)->net); }

static void remote_stats(const stk__objstore *st, stk_stats *o) {
  const remote *r = st->impl;
  stk__net_stats ns;
  stk__net_get_stats(r->net, &ns);
  o->remote_bytes = ns.bytes;
  o->remote_requests = ns.requests;
  o->remote_retries = ns.retries;
  o->remote_failures = ns.failures;
  o->remote_seconds = ns.seconds;
  if (r->parts) stk__parts_memory(r->parts, &o->remote_part_bytes, &o->remote_part_peak);
  o->remote_cache_bytes = stk__shard_cache_bytes(r->cache);
}

static void remote_close(stk__objstore *st) {
  remote *r = st->impl;
  if (!r) return;
  /* the parts' transfers end before the client that carries them */
  if (r->net) stk__net_cancel(r->net);
  drop(r->early);
  for (int k = 0; r->first && k < st->n; k++) drop(r->first[k]);
  free(r->first);
  stk__shard_cache_close(r->cache);
  stk__parts_close(r->parts);
  stk__net_close(r->net);
  free(r->early_dir);
  free(r->early_name);
  free(r->cache_dir);
  free(r);
  st->impl = NULL;
}

const stk__objstore_ops stk__objstore_remote = {.kind = "remote",
                                          .list = remote_list,
                                          .sibling = remote_sibling,
                                          .reader = remote_reader,
                                          .read = remote_read,
                                          .plan = remote_plan,
                                          .expect = remote_expect,
                                          .plan_reset = remote_plan_reset,
                                          .want = remote_want,
                                          .reach = remote_reach,
                                          .budget = remote_budget,
                                          .probe_beside = remote_probe_beside,
                                          .open_ahead = remote_open_ahead,
                                          .beside = remote_beside,
                                          .fetch = remote_fetch,
                                          .get = remote_get,
                                          .req_free = remote_req_free,
                                          .cancel = remote_cancel,
                                          .stats = remote_stats,
                                          .close = remote_close};
