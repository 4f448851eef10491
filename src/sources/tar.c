/* tar.c: WebDataset tar shards: the reader (a source, see source.h), its
 * shard-by-shard epoch order, and the writer behind `stoker pack --tar`.
 * See tar.h and docs/storage.md.
 *
 * The reader indexes every shard when the source is opened (remote shards
 * without an index may instead be indexed by the first epoch that streams
 * them: "the first epoch of foreign shards, streamed" below): it reads the
 * 512-byte headers (and the few bytes of each .cls member, and of GNU long
 * names and pax headers) and seeks over the data. The shards are untrusted
 * input: every length is checked against the file's size before it is used,
 * nothing larger than STK__TAR_EXT_MAX is allocated for a header, and what
 * cannot be used is left out and counted in the source's note.
 *
 * Damage that loses members (a shard cut short, a header that is not one, a
 * zero-filled region) cannot be named member by member: what follows it is
 * not read. Each becomes one sample of its own, named after the shard and
 * the member or offset where the damage is, whose read fails with the
 * reason: so on_error=raise raises, skip counts and lists it, and `stoker
 * check` fails, as for a bad image, instead of the shard being silently
 * shorter. A read also checks the member's header against the one seen at
 * open, so a shard cut short or overwritten since fails its read. */
#define _POSIX_C_SOURCE 200809L
#include "sources/tar.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codecs/codec.h"
#include "core/options.h"
#include "sources/index.h"
#include "sources/md5.h"
#include "sources/net.h"
#include "sources/object.h"
#include "sources/shard_cache.h"

#define BLOCK STK__TAR_BLOCK

/* ---- the index ---------------------------------------------------------- */

typedef struct {
  uint64_t off, size; /* the image member's data in its shard */
  uint64_t hhash;     /* stk__hash64 of its 512-byte header, at open */
  int32_t shard;
  int32_t damage;     /* 0, or 1 + the index in tar_impl.why: a damaged
                         shard's stand-in, whose read fails */
} tar_member;

typedef struct {
  char **shards;       /* nshards paths, sorted by file name */
  int nshards;
  int nrun;            /* shards that hold at least one sample */
  int64_t *run_start;  /* nrun + 1: run k holds samples [run_start[k], run_start[k+1]) */
  tar_member *m;       /* one per sample */
  char **why;          /* nwhy reasons of the damaged shards' stand-ins */
  int nwhy;
  int64_t real;        /* samples that are members, not stand-ins */
  /* remote shards (net != NULL): their sizes from the listing or a HEAD,
   * and the store of parts that sample reads go through */
  stk__net *net;
  stk__parts *parts;
  uint64_t *size;
  stk__net_req **first; /* at open: the shards' first parts, requested ahead */
  stk__shard_cache *cache; /* local copies (cache_dir), or NULL */
  int beside;           /* remote: the shards have indexes beside them (.stkidx) */
  char (*etag)[96];     /* remote shards' ETags ("" = none: no index cache) */
  int64_t *lost;        /* per stand-in (as why): the samples it stands for */
  struct tar_stream *st; /* the first epoch's stream, or NULL (see below) */
} tar_impl;

/* Remote reads: parts of 8 MiB, and the bytes the parts that no started
 * batch needs may keep (the shuffle buffer's stragglers then find theirs). */
#define PART_SIZE (8u << 20)
#define SCAN_AHEAD 16
/* tar's default record: an empty archive written by tar is this long */
#define EMPTY_TAR_MAX 10240

/* What was left out, for the note. */
typedef struct {
  int64_t unsafe, link, special, other, dup, no_cls, bad_cls, no_img, bad_ext;
  int64_t truncated, bad_header, zeroed, empty; /* shards */
  char first[200];               /* the first thing left out, with its reason */
} tally;

/* Adds one shard's tally to the source's: the first thing left out stays
 * the first. */
static void tally_add(tally *t, const tally *u) {
  t->unsafe += u->unsafe, t->link += u->link, t->special += u->special, t->other += u->other;
  t->dup += u->dup, t->no_cls += u->no_cls, t->bad_cls += u->bad_cls, t->no_img += u->no_img;
  t->bad_ext += u->bad_ext, t->truncated += u->truncated, t->bad_header += u->bad_header;
  t->zeroed += u->zeroed, t->empty += u->empty;
  if (!t->first[0]) memcpy(t->first, u->first, sizeof t->first);
}

static void left_out(tally *t, int64_t *counter, const char *shard, const char *name,
                     const char *why) {
  (*counter)++;
  /* (the return value is looked at: truncating a long name is fine here) */
  if (!t->first[0] && snprintf(t->first, sizeof t->first, "%s:%s (%s)", shard, name, why) < 0)
    t->first[0] = '\0';
}

/* pread of exactly n bytes, or fewer at the end of the file; -1 on error. */
static ssize_t pread_full(int fd, void *p, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)p + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* A numeric header field: octal digits (leading blanks, ending at a NUL or
 * blank), or GNU's base-256 form (first byte 0x80, then big-endian bytes),
 * which tar uses for sizes of 8 GiB and more. 0 on a malformed field. */
static int parse_number(const unsigned char *f, size_t n, uint64_t *out) {
  uint64_t v = 0;
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return 0; /* negative, or a form we do not know */
    for (size_t i = 1; i < n; i++) {
      if (v >> 55) return 0; /* would overflow 63 bits */
      v = v << 8 | f[i];
    }
    *out = v;
    return 1;
  }
  size_t i = 0;
  while (i < n && f[i] == ' ') i++;
  int digits = 0;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
    if (v >> 60) return 0;
    v = v << 3 | (uint64_t)(f[i] - '0');
  }
  if (i < n && f[i] != '\0' && f[i] != ' ') return 0;
  *out = v;
  return digits > 0 || i == n || f[i] == '\0';
}

/* The header checksum: the bytes summed with the checksum field read as
 * blanks. Some old writers summed signed chars: either form is accepted. */
static int checksum_ok(const unsigned char *h) {
  uint64_t want;
  if (!parse_number(h + 148, 8, &want)) return 0;
  uint64_t u = 0;
  int64_t s = 0;
  for (int i = 0; i < BLOCK; i++) {
    unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    u += c;
    s += (signed char)c;
  }
  return want == u || (int64_t)want == s;
}

static int all_zero(const unsigned char *h) {
  for (int i = 0; i < BLOCK; i++)
    if (h[i]) return 0;
  return 1;
}

/* Absolute names and names with a ".." component could point outside the
 * dataset if a tool extracted them; they are never samples. */
static int unsafe_name(const char *name) {
  if (name[0] == '/') return 1;
  for (const char *p = name; *p;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
    p += n;
    if (*p == '/') p++;
  }
  return 0;
}

/* A .cls member: an ASCII non-negative integer, blanks around it allowed. */
static int parse_cls(const char *p, size_t n, int32_t *out) {
  size_t i = 0;
  while (i < n && isspace((unsigned char)p[i])) i++;
  int64_t v = 0;
  size_t d = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, d++) {
    v = v * 10 + (p[i] - '0');
    if (v > INT32_MAX) return 0;
  }
  while (i < n && isspace((unsigned char)p[i])) i++;
  if (!d || i != n) return 0;
  *out = (int32_t)v;
  return 1;
}

/* One key of a shard while it is scanned. */
typedef struct {
  char *key;
  char *img_name; /* NULL until the key's image member is met */
  uint64_t img_off, img_size, img_hhash;
  int has_cls, cls_ok;
  int32_t label;
} rec;

/* The keys of one shard: records in the order keys first appear, and an
 * open-addressing table (a power of two, at most half full) to find them. */
typedef struct {
  rec *r;
  size_t n, cap;
  int64_t *slot; /* index into r, or -1 */
  size_t nslot;
} keyset;

static void keyset_free(keyset *k) {
  for (size_t i = 0; i < k->n; i++) {
    free(k->r[i].key);
    free(k->r[i].img_name);
  }
  free(k->r);
  free(k->slot);
  memset(k, 0, sizeof *k);
}

static uint64_t str_hash(const char *s, size_t n) { return stk__hash64(s, n, 7); }

/* The record of key[0..n), created when new; NULL when out of memory. */
static rec *keyset_get(keyset *k, const char *key, size_t n) {
  if (2 * (k->n + 1) > k->nslot) {
    size_t ns = k->nslot ? k->nslot * 2 : 256;
    int64_t *sl = malloc(ns * sizeof *sl);
    if (!sl) return NULL;
    for (size_t i = 0; i < ns; i++) sl[i] = -1;
    for (size_t i = 0; i < k->n; i++) {
      size_t h = (size_t)str_hash(k->r[i].key, strlen(k->r[i].key)) & (ns - 1);
      while (sl[h] >= 0) h = (h + 1) & (ns - 1);
      sl[h] = (int64_t)i;
    }
    free(k->slot);
    k->slot = sl;
    k->nslot = ns;
  }
  size_t h = (size_t)str_hash(key, n) & (k->nslot - 1);
  for (; k->slot[h] >= 0; h = (h + 1) & (k->nslot - 1)) {
    rec *r = &k->r[k->slot[h]];
    if (strlen(r->key) == n && memcmp(r->key, key, n) == 0) return r;
  }
  if (k->n == k->cap) {
    size_t cap = k->cap ? k->cap * 2 : 256;
    rec *nr = realloc(k->r, cap * sizeof *nr);
    if (!nr) return NULL;
    k->r = nr;
    k->cap = cap;
  }
  rec *r = &k->r[k->n];
  memset(r, 0, sizeof *r);
  if (!(r->key = malloc(n + 1))) return NULL;
  memcpy(r->key, key, n);
  r->key[n] = '\0';
  k->slot[h] = (int64_t)k->n++;
  return r;
}

/* The class names of classes.txt, when the folder has one. */
typedef struct {
  char **v;
  int n;
  int present;
} classlist;

static void classlist_free(classlist *c) {
  for (int i = 0; i < c->n; i++) free(c->v[i]);
  free(c->v);
  memset(c, 0, sizeof *c);
}

static int parse_classes(FILE *f, char *path, uint8_t *body, classlist *c, char *msg,
                         size_t msglen);

/* classes.txt beside remote shards, in memory: NULL when there is none
 * (a 404), or on an error (in msg, *rc set). */
static FILE *remote_classes(stk__net *net, stk__net_req *early, const char *url, uint8_t **body,
                            int *rc, char *msg, size_t msglen) {
  char why[800];
  stk__net_req *q = early ? early : stk__net_probe(net, url, 64u << 20, 0);
  stk__net_body b;
  *rc = stk__net_wait(q, &b, why, sizeof why);
  FILE *f = NULL;
  if (*rc == STK_OK) {
    size_t len = b.len;
    *body = stk__net_take(q);
    /* fmemopen of an empty buffer fails: an empty file names no class */
    f = len ? fmemopen(*body, len, "r") : NULL;
    if (!f && len) *rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    if (!len) *rc = stk__fail(msg, msglen, STK_EINVAL, "%s names no class", url);
  } else if (strstr(why, "HTTP 404")) {
    *rc = STK_OK;
  } else {
    stk__fail(msg, msglen, *rc, "%s", why);
  }
  stk__net_free(q);
  return f;
}

/* classes.txt beside the shards. Remote: `early` is its request when it
 * was sent before the listing (for dir early_dir), so that opening costs
 * one round trip less; it is freed here either way. */
static int read_classes(const char *dir, stk__net *net, stk__net_req *early, const char *early_dir,
                        classlist *c, char *msg, size_t msglen) {
  memset(c, 0, sizeof *c);
  char *path = stk__path_join(dir, "classes.txt");
  if (!path) {
    if (early) stk__net_wait(early, NULL, NULL, 0);
    stk__net_free(early);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  uint8_t *body = NULL;
  if (net) {
    int rc = STK_OK;
    if (early && strcmp(dir, early_dir)) { /* the shards live elsewhere */
      stk__net_wait(early, NULL, NULL, 0);
      stk__net_free(early);
      early = NULL;
    }
    FILE *f = remote_classes(net, early, path, &body, &rc, msg, msglen);
    if (!f) {
      free(body);
      free(path);
      return rc;
    }
    return parse_classes(f, path, body, c, msg, msglen);
  }
  struct stat st;
  char why[256];
  int fd = stk__open_input(path, 0, &st, why, sizeof why);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    int rc = fd < 0 && errno == ENOENT
                 ? STK_OK /* no classes.txt: the label numbers */
                 : stk__fail(msg, msglen, STK_EIO, "%s: %s", path, fd < 0 ? why : strerror(errno));
    if (fd >= 0) close(fd);
    free(path);
    return rc;
  }
  return parse_classes(f, path, NULL, c, msg, msglen);
}

/* Reads the class names from f, then closes it and frees path and body. */
static int parse_classes(FILE *f, char *path, uint8_t *body, classlist *c, char *msg,
                         size_t msglen) {
  c->present = 1;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = STK_OK, ncap = 0;
  while ((len = getline(&line, &cap, f)) >= 0) {
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    if (c->n >= STK__TAR_LABEL_MAX) {
      rc = stk__fail(msg, msglen, STK_EINVAL, "%s names more than %d classes", path,
                     STK__TAR_LABEL_MAX);
      break;
    }
    if (c->n == ncap) {
      ncap = ncap ? ncap * 2 : 64;
      char **v = realloc(c->v, (size_t)ncap * sizeof *v);
      if (!v) {
        rc = STK_ENOMEM;
        break;
      }
      c->v = v;
    }
    if (!(c->v[c->n] = strdup(line))) {
      rc = STK_ENOMEM;
      break;
    }
    c->n++;
  }
  free(line);
  fclose(f);
  free(body);
  if (rc == STK_ENOMEM) stk__fail(msg, msglen, rc, "out of memory");
  if (rc == STK_OK && c->n == 0)
    rc = stk__fail(msg, msglen, STK_EINVAL, "%s names no class", path);
  free(path);
  if (rc) classlist_free(c);
  return rc;
}

/* State of one shard's scan that the next member inherits from GNU 'L' and
 * pax 'x' headers. */
typedef struct {
  char *name;           /* the next member's name (pax path or GNU long name) */
  int name_from_pax;
  uint64_t size;        /* pax size */
  int has_size;
  const char *drop;     /* the next member is left out, for this reason */
} pending;

static void pending_clear(pending *p) {
  free(p->name);
  memset(p, 0, sizeof *p);
}

/* Parses pax records "LEN key=value\n" in d[0..n). Every length is checked
 * against what is left, so a record claiming a huge length is refused
 * rather than followed. 0 when malformed. */
static int parse_pax(const char *d, size_t n, pending *p) {
  size_t i = 0;
  while (i < n) {
    if (d[i] == '\0') break; /* some writers pad the block with NULs */
    size_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9') {
      len = len * 10 + (size_t)(d[j] - '0');
      if (len > n) return 0;
      j++;
    }
    if (j == i || j >= n || d[j] != ' ' || len > n - i || len < (j - i) + 3 ||
        d[i + len - 1] != '\n')
      return 0;
    const char *kv = d + j + 1, *end = d + i + len - 1;
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq) return 0;
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
    const char *v = eq + 1;
    if (klen == 4 && !memcmp(kv, "path", 4)) {
      if (vlen == 0 || memchr(v, '\0', vlen)) return 0;
      char *nm = malloc(vlen + 1);
      if (!nm) return 0;
      memcpy(nm, v, vlen);
      nm[vlen] = '\0';
      free(p->name);
      p->name = nm;
      p->name_from_pax = 1;
    } else if (klen == 4 && !memcmp(kv, "size", 4)) {
      uint64_t s = 0;
      if (vlen == 0 || vlen > 19) return 0;
      for (size_t q = 0; q < vlen; q++) {
        if (v[q] < '0' || v[q] > '9') return 0;
        s = s * 10 + (uint64_t)(v[q] - '0');
      }
      p->size = s;
      p->has_size = 1;
    }
    i += len;
  }
  return 1;
}

/* Where the zeros that start at `off` end: the offset of the first
 * non-zero byte after them, or fsize when the rest of the file is zeros (the
 * end-of-archive blocks and the record padding after them); -1 on a read
 * error. Reads only the zeros, normally a few KiB at the end of a shard. */
static int64_t zeros_end(stk__object *fd, uint64_t off, uint64_t fsize) {
  unsigned char b[16384];
  while (off < fsize) {
    size_t n = fsize - off < sizeof b ? (size_t)(fsize - off) : sizeof b;
    ssize_t r = stk__object_pread(fd, b, n, off);
    if (r <= 0) return r < 0 ? -1 : (int64_t)fsize;
    for (ssize_t i = 0; i < r; i++)
      if (b[i]) return (int64_t)(off + (uint64_t)i);
    off += (uint64_t)r;
  }
  return (int64_t)fsize;
}

/* The damage that ended a shard's scan, made a stand-in sample. */
typedef struct {
  char name[300]; /* member, or "offset N" */
  char why[600];
} damage;

#define DAMAGE(d, nm, ...)                                          \
  do {                                                              \
    snprintf((d)->name, sizeof (d)->name, "%s", (nm));              \
    if (snprintf((d)->why, sizeof (d)->why, __VA_ARGS__) < 0)       \
      (d)->why[0] = '\0';                                           \
  } while (0)

/* Indexes one shard: its samples go to s->ds and t->m, what is left out to
 * the tally. Returns an error only for what makes the whole source unusable
 * (the shard cannot be opened, out of memory); damage inside the shard ends
 * its scan with a note. */
/* What the scan of one shard found, before classes.txt is applied: the
 * keys' records, what was left out, the damage that ended the scan. For a
 * remote shard this is what the index cache keeps. */
typedef struct {
  keyset ks;
  tally ta;
  damage dm;
  /* image members left out (a link, a duplicate key, no usable .cls, ...):
   * each becomes a sample whose read fails with the reason, so that
   * on_error=raise raises, skip counts and lists it, and check fails */
  char **lost_name, **lost_why;
  size_t nlost;
} shard_scan;

static void shard_scan_free(shard_scan *sc) {
  keyset_free(&sc->ks);
  for (size_t i = 0; i < sc->nlost; i++) {
    free(sc->lost_name[i]);
    free(sc->lost_why[i]);
  }
  free(sc->lost_name);
  free(sc->lost_why);
  sc->lost_name = sc->lost_why = NULL;
  sc->nlost = 0;
}

/* Notes a left-out image member (see shard_scan.lost_*). STK_ENOMEM. */
static int lose(shard_scan *sc, const char *name, const char *why) {
  char **n = realloc(sc->lost_name, (sc->nlost + 1) * sizeof *n);
  if (n) sc->lost_name = n;
  char **w = n ? realloc(sc->lost_why, (sc->nlost + 1) * sizeof *w) : NULL;
  if (w) sc->lost_why = w;
  char *a = w ? strdup(name) : NULL, *b = a ? strdup(why) : NULL;
  if (!b) {
    free(a);
    return STK_ENOMEM;
  }
  sc->lost_name[sc->nlost] = a;
  sc->lost_why[sc->nlost++] = b;
  return STK_OK;
}

/* Reads the shard's headers into sc. An error only for what makes the
 * whole source unusable (the shard cannot be opened or read, out of
 * memory); damage inside the shard ends the scan, in sc->dm. */
/* One shard's scan in progress: read_scan's steps share it. */
typedef struct {
  const char *path;
  stk__object *fd;
  uint64_t fsize, off;
  shard_scan *sc;
  keyset ks;
  pending pd;
  char *ext; /* scratch for GNU long names and pax headers */
  damage dm;
  char prev[300]; /* the last member read, to place the damage */
  char where[64];
  unsigned char h[BLOCK];
  char *msg;
  size_t msglen;
  int rc;
} scan_state;

/* Whether the scan ends at the header block at st->off: the shard's end
 * (cut short, or its end-of-archive blocks), or damage that loses the rest
 * (recorded in st->dm). A read error sets st->rc. */
static int scan_at_end(scan_state *st) {
  tally *ta = &st->sc->ta;
  const char *path = st->path, *prev = st->prev, *where = st->where;
  uint64_t off = st->off, fsize = st->fsize;
  damage *dm = &st->dm;
  if (off == fsize) {
    /* every member is complete, but the end-of-archive blocks are missing */
    left_out(ta, &ta->truncated, path, "end", "the shard ends without its end-of-archive blocks");
    DAMAGE(dm, where,
           "the shard ends without its end-of-archive blocks%s%s: it is truncated, the members "
           "after that point are lost",
           prev[0] ? " after member " : "", prev);
    return 1;
  }
  ssize_t r = stk__object_pread(st->fd, st->h, BLOCK, off);
  if (r < 0) {
    st->rc = stk__fail(st->msg, st->msglen, STK_EIO, "cannot read shard %s: %s", path,
                       st->fd->why);
    return 1;
  }
  if (r < BLOCK) {
    left_out(ta, &ta->truncated, path, where, "truncated inside a header");
    DAMAGE(dm, where, "the shard ends inside a tar header: it is truncated, the members "
                      "after that point are lost");
    return 1;
  }
  if (!all_zero(st->h)) return 0;
  /* The end of the archive, when only zeros follow. Data after the zeros
   * means that a region was zero-filled: the members in it and after it
   * would be lost without a word. */
  int64_t z = zeros_end(st->fd, off, fsize);
  if (z >= 0 && off == 0 && fsize > EMPTY_TAR_MAX) {
    /* An empty archive is at most one record of zeros; a larger shard of
     * nothing but zeros was overwritten, and its members are lost. */
    left_out(ta, &ta->zeroed, path, where, "the shard is all zeros");
    DAMAGE(dm, where,
           "the shard is %llu zero bytes: it holds no member (overwritten with zeros?), its "
           "samples are lost",
           (unsigned long long)fsize);
  } else if (z < 0) {
    st->rc = stk__fail(st->msg, st->msglen, STK_EIO, "cannot read shard %s: %s", path,
                       st->fd->why);
  } else if (off == 0 && (uint64_t)z == fsize) {
    /* A valid empty archive, where a shard's samples were: replaced by an
     * empty tar, or written by a job that failed. Its samples are lost, and
     * a note and a failing stand-in say so, as for a shard cut short. */
    left_out(ta, &ta->empty, path, where, "an empty archive");
    DAMAGE(dm, where,
           "the shard is an empty tar archive (%llu bytes, no member): its samples are lost "
           "(replaced by an empty archive, or written by a job that failed?)",
           (unsigned long long)fsize);
  } else if ((uint64_t)z < fsize) {
    left_out(ta, &ta->zeroed, path, where, "a zero-filled region with data after it");
    DAMAGE(dm, where,
           "%llu zero bytes%s%s, then data at offset %llu: a zero-filled region; the members in "
           "it and after it are lost",
           (unsigned long long)((uint64_t)z - off), prev[0] ? " after member " : "", prev,
           (unsigned long long)z);
  }
  return 1;
}

/* The member name of header h: POSIX ustar ("ustar\0") keeps a prefix;
 * GNU ("ustar  ") uses that space for other fields. */
static void header_name(const unsigned char *h, char out[260]) {
  size_t nl = strnlen((const char *)h, 100);
  size_t pl = 0;
  if (!memcmp(h + 257, "ustar\0", 6)) pl = strnlen((const char *)h + 345, 155);
  if (pl) {
    memcpy(out, h + 345, pl);
    out[pl] = '/';
    memcpy(out + pl + 1, h, nl);
    out[pl + 1 + nl] = '\0';
  } else {
    memcpy(out, h, nl);
    out[nl] = '\0';
  }
}

/* An extended header (GNU long name 'L', pax 'x') at data: the next
 * member's name and maybe its size, into st->pd. 0 to go on, 1 when the
 * scan ends (the shard cut inside it, or st->rc). */
static int scan_extended(scan_state *st, char type, uint64_t size, uint64_t data) {
  pending *pd = &st->pd;
  if (size > STK__TAR_EXT_MAX) {
    pending_clear(pd);
    pd->drop = type == 'L' ? "its GNU long name is over 64 KiB" : "its pax header is over 64 KiB";
    return 0;
  }
  if (!st->ext && !(st->ext = malloc(STK__TAR_EXT_MAX + 1))) {
    st->rc = stk__fail(st->msg, st->msglen, STK_ENOMEM, "out of memory");
    return 1;
  }
  if (stk__object_pread(st->fd, st->ext, (size_t)size, data) != (ssize_t)size) {
    tally *ta = &st->sc->ta;
    left_out(ta, &ta->truncated, st->path, st->where, "truncated inside an extended header");
    DAMAGE(&st->dm, st->where, "the shard ends inside an extended header: it is truncated, the "
                               "members after that point are lost");
    return 1;
  }
  st->ext[size] = '\0';
  if (type == 'x') {
    if (!parse_pax(st->ext, (size_t)size, pd)) pd->drop = "its pax header is malformed";
    return 0;
  }
  free(pd->name);
  pd->name = NULL;
  if (!pd->name_from_pax && !(pd->name = strndup(st->ext, (size_t)size))) { /* pax path wins */
    st->rc = stk__fail(st->msg, st->msglen, STK_ENOMEM, "out of memory");
    return 1;
  }
  return 0;
}

/* A key's member (webdataset's key: up to the first '.' of the last path
 * component): its image or its .cls into st->ks. Returns why the member is
 * left out (a duplicate image), or NULL; out of memory sets st->rc. */
static const char *scan_keyed(scan_state *st, const char *name, uint64_t size, uint64_t data) {
  tally *ta = &st->sc->ta;
  const char *last = strrchr(name, '/');
  last = last ? last + 1 : name;
  const char *dot = strchr(last, '.');
  if (!dot || dot == last) return NULL;
  const char *suffix = dot + 1;
  int is_cls = !strcasecmp(suffix, "cls");
  int is_img = !strchr(suffix, '.') && stk__has_image_extension(name);
  if (!is_cls && !is_img) return NULL;
  rec *kr = keyset_get(&st->ks, name, (size_t)(dot - name));
  if (!kr) {
    st->rc = stk__fail(st->msg, st->msglen, STK_ENOMEM, "out of memory");
    return NULL;
  }
  if ((is_cls && kr->has_cls) || (is_img && kr->img_name)) {
    left_out(ta, &ta->dup, st->path, name, "a duplicate key in the shard");
    return is_img ? "a duplicate key in the shard" : NULL;
  }
  if (is_cls) {
    kr->has_cls = 1;
    char cb[STK__TAR_CLS_MAX];
    if (size <= STK__TAR_CLS_MAX &&
        stk__object_pread(st->fd, cb, (size_t)size, data) == (ssize_t)size)
      kr->cls_ok = parse_cls(cb, (size_t)size, &kr->label);
    return NULL;
  }
  if (!(kr->img_name = strdup(name))) {
    st->rc = stk__fail(st->msg, st->msglen, STK_ENOMEM, "out of memory");
    return NULL;
  }
  kr->img_off = data;
  kr->img_size = size;
  kr->img_hhash = stk__hash64(st->h, BLOCK, 0);
  return NULL;
}

/* A member proper: kept under its key, or left out with its reason (an
 * image member left out is a sample lost: it is named). */
static void scan_member(scan_state *st, char type, const char *name, uint64_t size,
                        uint64_t data) {
  tally *ta = &st->sc->ta;
  const char *path = st->path, *why_out = NULL;
  snprintf(st->prev, sizeof st->prev, "%s", name);
  if (st->pd.drop) {
    left_out(ta, &ta->bad_ext, path, name, why_out = st->pd.drop);
  } else if (type == '5') {
    /* a folder: nothing to read */
  } else if (type == '1' || type == '2') {
    left_out(ta, &ta->link, path, name, why_out = "a link, not a file");
  } else if (type == '3' || type == '4' || type == '6') {
    left_out(ta, &ta->special, path, name, why_out = "a device or FIFO, not a file");
  } else if (type != '0' && type != '\0' && type != '7') {
    left_out(ta, &ta->other, path, name, why_out = "a tar member type stoker does not read");
  } else if (name[0] && unsafe_name(name)) {
    left_out(ta, &ta->unsafe, path, name, why_out = "an absolute name or one with '..'");
  } else {
    why_out = scan_keyed(st, name, size, data);
  }
  if (st->rc == STK_OK && why_out && name[0] && stk__has_image_extension(name) &&
      lose(st->sc, name, why_out))
    st->rc = stk__fail(st->msg, st->msglen, STK_ENOMEM, "out of memory");
}

/* One step of the scan at st->off: the header, then an extended header or
 * a member. 0 to go on (st->off at the next header), 1 when the scan ends. */
static int scan_step(scan_state *st) {
  tally *ta = &st->sc->ta;
  snprintf(st->where, sizeof st->where, "offset %llu", (unsigned long long)st->off);
  if (scan_at_end(st)) return 1;
  const unsigned char *h = st->h;
  uint64_t size, fsize = st->fsize;
  if (!checksum_ok(h) || !parse_number(h + 124, 12, &size)) {
    left_out(ta, &ta->bad_header, st->path, st->where,
             "not a valid tar header (checksum mismatch): the rest of the shard is left out");
    DAMAGE(&st->dm, st->where,
           "not a valid tar header (checksum mismatch)%s%s: the rest of the shard (%llu bytes) "
           "is lost",
           st->prev[0] ? " after member " : "", st->prev,
           (unsigned long long)(fsize - st->off));
    return 1;
  }
  char type = (char)h[156];
  int is_ext = type == 'L' || type == 'K' || type == 'x' || type == 'g';
  if (!is_ext && st->pd.has_size) size = st->pd.size; /* pax size overrides the field */
  char hname[260]; /* prefix, '/', name */
  header_name(h, hname);
  const char *name = !is_ext && st->pd.name ? st->pd.name : hname;
  uint64_t data = st->off + BLOCK;
  if (size > fsize || data + size > fsize) {
    left_out(ta, &ta->truncated, st->path, st->where,
             "a member claims more bytes than the shard holds: the shard is truncated");
    DAMAGE(&st->dm, name[0] ? name : st->where,
           "the member claims %llu bytes, the shard holds %llu after its header: the shard is "
           "truncated, this member and those after it are lost",
           (unsigned long long)size, (unsigned long long)(fsize - data));
    return 1;
  }
  uint64_t next = data + ((size + BLOCK - 1) / BLOCK) * BLOCK;
  if (type == 'L' || type == 'x') {
    if (scan_extended(st, type, size, data)) return 1;
  } else if (type != 'K' && type != 'g') { /* a long link name; global pax records: unused */
    scan_member(st, type, name, size, data);
    if (st->rc) return 1;
    pending_clear(&st->pd);
  }
  st->off = next;
  return 0;
}

/* The end of a scan: the object closed, the state freed; its keys and
 * damage go to sc, or are dropped when sc is NULL. Returns its result. */
static int scan_done(scan_state *st, stk__object *obj, shard_scan *sc) {
  int rc = st->rc;
  stk__object_close(obj);
  free(st->ext);
  pending_clear(&st->pd);
  if (sc) {
    sc->ks = st->ks;
    sc->dm = st->dm;
  } else {
    keyset_free(&st->ks);
  }
  free(st);
  return rc;
}

static int read_scan(tar_impl *t, int32_t shard, shard_scan *sc, char *msg, size_t msglen) {
  const char *path = t->shards[shard];
  char why[256];
  stk__object obj;
  if (stk__object_open(&obj, path, t->net, t->net ? t->size[shard] : 0, PART_SIZE, why,
                       sizeof why))
    return stk__fail(msg, msglen, STK_EIO, "shard %s: %s", path, why);
  if (!t->beside && t->first && t->first[shard]) { /* its first part, requested ahead */
    obj.ahead = t->first[shard];
    obj.ahead_off = 0;
    t->first[shard] = NULL;
  }
  scan_state *st = calloc(1, sizeof *st);
  if (!st) {
    stk__object_close(&obj);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  st->path = path;
  st->fd = &obj;
  st->fsize = obj.size;
  st->sc = sc;
  st->dm = (damage){"", ""};
  st->msg = msg;
  st->msglen = msglen;
  while (!scan_step(st)) {
  }
  return scan_done(st, &obj, sc);
}

/* A sample that stands for lost ones: named SHARD:NAME, its read fails with
 * `why` (label 0: it is never delivered); it counts as `weight` samples
 * against max_skipped_fraction. STK_OK or STK_ENOMEM. */
static int stand_in(stk__source *s, tar_impl *t, int32_t shard, const char *name,
                    const char *why, int64_t weight, stk__buf *nm) {
  const char *path = t->shards[shard];
  size_t plen = strlen(path), l = strlen(name);
  char **wv = realloc(t->why, ((size_t)t->nwhy + 1) * sizeof *wv);
  if (!wv) return STK_ENOMEM;
  t->why = wv;
  int64_t *lv = realloc(t->lost, ((size_t)t->nwhy + 1) * sizeof *lv);
  if (!lv) return STK_ENOMEM;
  t->lost = lv;
  if (!(wv[t->nwhy] = strdup(why))) return STK_ENOMEM;
  if (stk__buf_reserve(nm, plen + l + 2)) {
    free(wv[t->nwhy]);
    return STK_ENOMEM;
  }
  lv[t->nwhy] = weight;
  t->nwhy++;
  memcpy(nm->p, path, plen);
  ((char *)nm->p)[plen] = ':';
  memcpy((char *)nm->p + plen + 1, name, l + 1);
  int rc = stk__dataset_add(&s->ds, nm->p, 0);
  tar_member *m = rc == STK_OK ? realloc(t->m, (size_t)s->ds.cap * sizeof *m) : NULL;
  if (!m) return STK_ENOMEM; /* a sample in the table without a member: the open fails */
  t->m = m;
  t->m[s->ds.n - 1] = (tar_member){0, 0, 0, shard, t->nwhy};
  return STK_OK;
}

/* Adds what the scan of a shard found to the source: its samples go to
 * s->ds and t->m, what is left out to the tally. */
static int add_scan(stk__source *s, tar_impl *t, int32_t shard, shard_scan *sc,
                    const classlist *cl, tally *ta, int32_t *maxlabel, char *msg, size_t msglen) {
  const char *path = t->shards[shard];
  keyset ks = sc->ks;
  damage dm = sc->dm;
  int rc = STK_OK;
  tally_add(ta, &sc->ta);
  for (size_t i = 0; i < ks.n; i++) {
    rec *r = &ks.r[i];
    if (r->cls_ok && cl->present && r->label >= cl->n) r->cls_ok = 0;
    if (r->cls_ok && !cl->present && r->label >= STK__TAR_LABEL_MAX) r->cls_ok = 0;
  }

  /* Samples in the order their keys first appear in the shard. */
  size_t plen = strlen(path);
  stk__buf nm = {0};
  for (size_t i = 0; rc == STK_OK && i < ks.n; i++) {
    rec *r = &ks.r[i];
    if (!r->img_name) {
      char nb[300];
      snprintf(nb, sizeof nb, "%s.cls", r->key);
      left_out(ta, &ta->no_img, path, nb, "a .cls without an image");
      continue;
    }
    if (!r->has_cls || !r->cls_ok) {
      const char *why = !r->has_cls ? "no .cls member"
                        : cl->present ? "its .cls is not a class index of classes.txt"
                                      : "its .cls is not a non-negative integer below 1048576";
      left_out(ta, !r->has_cls ? &ta->no_cls : &ta->bad_cls, path, r->img_name, why);
      if ((rc = lose(sc, r->img_name, why))) break;
      continue;
    }
    size_t l = strlen(r->img_name);
    if (stk__buf_reserve(&nm, plen + l + 2)) {
      rc = STK_ENOMEM;
      break;
    }
    memcpy(nm.p, path, plen);
    ((char *)nm.p)[plen] = ':';
    memcpy((char *)nm.p + plen + 1, r->img_name, l + 1);
    if ((rc = stk__dataset_add(&s->ds, nm.p, r->label))) break;
    tar_member *m = realloc(t->m, (size_t)s->ds.cap * sizeof *m);
    if (!m) {
      rc = STK_ENOMEM;
      break;
    }
    t->m = m;
    t->m[s->ds.n - 1] = (tar_member){r->img_off, r->img_size, r->img_hhash, shard, 0};
    t->real++;
    if (r->label > *maxlabel) *maxlabel = r->label;
  }
  /* The image members left out while reading, then the damage: samples of
   * their own after the shard's members. The damage stands for the samples
   * the rest of the shard held, known once every shard is read (-1). */
  for (size_t i = 0; rc == STK_OK && i < sc->nlost; i++) {
    char why[700];
    if (snprintf(why, sizeof why, "left out when the shard was opened: %s", sc->lost_why[i]) < 0)
      why[0] = '\0';
    rc = stand_in(s, t, shard, sc->lost_name[i], why, 1, &nm);
  }
  if (rc == STK_OK && dm.why[0]) rc = stand_in(s, t, shard, dm.name, dm.why, -1, &nm);
  if (rc == STK_ENOMEM) stk__fail(msg, msglen, rc, "out of memory");
  stk__buf_free(&nm);
  return rc;
}

/* ---- the index cache of remote shards ------------------------------------- */
/* A remote shard's scan is kept in the index folder (index_dir, else
 * ~/.cache/stoker) under a name from its URL, size and ETag, so that the
 * next open reads one small local file instead of the whole shard; a shard
 * rewritten since has another ETag, hence another file. The file ends in a
 * checksum of its body, and names its key inside: one that does not
 * match is scanned again. */
#define SIDX_MAGIC "STKTIDX3"   /* 13 counters; 2 (12, no `empty`) is still read */
#define SIDX_MAGIC2 "STKTIDX2"
#define SIDX_EXT STK__TAR_INDEX_EXT

static int shard_index_path(const tar_impl *t, int32_t shard, const char *index_dir, char *out,
                            size_t cap) {
  if (!t->etag || !t->etag[shard][0]) return STK_EINVAL; /* no ETag: no way to tell a change */
  char key[4400];
  int w = snprintf(key, sizeof key, "%s\n%llu\n%s", t->shards[shard],
                   (unsigned long long)t->size[shard], t->etag[shard]);
  if (w < 0 || (size_t)w >= sizeof key) return STK_EINVAL;
  return stk__index_path_kind(out, cap, index_dir, "shard", key);
}

static int has_index(const tar_impl *t, int32_t shard, const char *index_dir) {
  char p[4200];
  return shard_index_path(t, shard, index_dir, p, sizeof p) == STK_OK && access(p, R_OK) == 0;
}

typedef struct {
  stk__buf b;
  size_t len;
  int err;
} wbuf;

static void wput(wbuf *w, const void *p, size_t n) {
  if (w->err || stk__buf_reserve(&w->b, w->len + n)) {
    w->err = 1;
    return;
  }
  memcpy((char *)w->b.p + w->len, p, n);
  w->len += n;
}
static void wstr(wbuf *w, const char *s) { wput(w, s ? s : "", strlen(s ? s : "") + 1); }
static void w64(wbuf *w, uint64_t v) { wput(w, &v, 8); }

/* The key a cached scan names inside: the shard's URL, size and ETag. */
static void cache_key(const tar_impl *t, int32_t shard, char *key, size_t cap) {
  snprintf(key, cap, "%s\n%llu\n%s", t->shards[shard], (unsigned long long)t->size[shard],
           t->etag[shard]);
}

/* The key of an index beside its shard (stoker pack --tar), as written:
 * the shard's size and the ETags S3 gives it (shard_etags), so that a shard
 * rewritten since at the same size, whose member headers may all be the
 * same (other labels, other pixels), is told by its listed ETag. Its name
 * is the file's own. As looked for at open: the listed size and ETag
 * (beside_matches compares them). */
static void beside_key(uint64_t size, const char *etags, char *key, size_t cap) {
  snprintf(key, cap, "beside\n%llu%s%s", (unsigned long long)size, etags[0] ? "\n" : "", etags);
}

/* Whether an ETag has the form of S3's: 32 hex digits (the MD5 of a PUT's
 * bytes), maybe "-N" (a multipart upload of N parts). Other servers' ETags
 * (a file's mtime and size) say nothing of the bytes. */
static int s3_etag_form(const char *e) {
  size_t i = 0;
  while (i < 32 && isxdigit((unsigned char)e[i])) i++;
  if (i != 32) return 0;
  if (!e[32]) return 1;
  if (e[32] != '-' || !e[33]) return 0;
  for (i = 33; e[i]; i++)
    if (!isdigit((unsigned char)e[i])) return 0;
  return 1;
}

/* Whether an index beside its shard, of key `stored`, is the shard's whose
 * listing gave `want` ("beside\nSIZE\nETAG"): the same size, and the ETag one
 * of those the index records. An index without ETags (written before they
 * were recorded), a server without ETags, or one whose ETags are not S3's
 * leave the size alone to tell. */
static int beside_matches(const char *stored, const char *want) {
  if (strncmp(stored, "beside\n", 7)) return 0;
  const char *ws = want + 7, *ss = stored + 7;
  size_t wl = strcspn(ws, "\n"), sl = strcspn(ss, "\n");
  if (wl != sl || memcmp(ws, ss, wl)) return 0; /* another size */
  const char *etag = ws[wl] ? ws + wl + 1 : "";
  if (!ss[sl] || !s3_etag_form(etag)) return 1;
  size_t el = strlen(etag);
  for (const char *p = ss + sl + 1; *p;) {
    size_t l = strcspn(p, "\n");
    if (l == el && !strncasecmp(p, etag, l)) return 1;
    p += l + (p[l] != '\0');
  }
  return 0;
}

static int key_matches(const char *stored, const char *want) {
  return strncmp(want, "beside\n", 7) ? !strcmp(stored, want) : beside_matches(stored, want);
}

static int save_scan(const char *path, const char *key, const shard_scan *sc) {
  wbuf w = {{0}, 0, 0};
  wput(&w, SIDX_MAGIC, 8);
  w64(&w, 0); /* the body's checksum, below */
  wstr(&w, key);
  const tally *ta = &sc->ta;
  int64_t cnt[13] = {ta->unsafe,  ta->link,   ta->special, ta->other,     ta->dup,
                     ta->no_cls,  ta->bad_cls, ta->no_img, ta->bad_ext,  ta->truncated,
                     ta->bad_header, ta->zeroed, ta->empty};
  wput(&w, cnt, sizeof cnt);
  wput(&w, ta->first, sizeof ta->first);
  wstr(&w, sc->dm.name);
  wstr(&w, sc->dm.why);
  w64(&w, sc->ks.n);
  for (size_t i = 0; i < sc->ks.n; i++) {
    const rec *r = &sc->ks.r[i];
    int32_t f[2] = {(r->img_name ? 1 : 0) | (r->has_cls ? 2 : 0) | (r->cls_ok ? 4 : 0), r->label};
    wput(&w, f, sizeof f);
    w64(&w, r->img_off);
    w64(&w, r->img_size);
    w64(&w, r->img_hhash);
    wstr(&w, r->key);
    wstr(&w, r->img_name);
  }
  w64(&w, sc->nlost);
  for (size_t i = 0; i < sc->nlost; i++) {
    wstr(&w, sc->lost_name[i]);
    wstr(&w, sc->lost_why[i]);
  }
  int rc = w.err ? STK_ENOMEM : STK_OK;
  if (rc == STK_OK) {
    uint64_t h = stk__hash64((char *)w.b.p + 16, w.len - 16, 0x5bd1e995);
    memcpy((char *)w.b.p + 8, &h, 8);
    char why[256];
    rc = stk__write_file_atomic(path, w.b.p, w.len, why, sizeof why);
  }
  stk__buf_free(&w.b);
  return rc;
}

typedef struct {
  const uint8_t *p, *end;
  int err;
} rbuf;

static void rget(rbuf *r, void *dst, size_t n) {
  if (r->err || (size_t)(r->end - r->p) < n) {
    r->err = 1;
    memset(dst, 0, n);
    return;
  }
  memcpy(dst, r->p, n);
  r->p += n;
}
static const char *rstr(rbuf *r) {
  const uint8_t *z = r->err ? NULL : memchr(r->p, 0, (size_t)(r->end - r->p));
  if (!z) {
    r->err = 1;
    return "";
  }
  const char *s = (const char *)r->p;
  r->p = z + 1;
  return s;
}

static int load_scan_mem(const uint8_t *data, size_t len, const char *key, uint64_t shard_size,
                         shard_scan *sc);

static int load_scan(const char *path, const char *key, uint64_t shard_size, shard_scan *sc) {
  stk__buf b = {0};
  stk__bytes by;
  char why[256];
  int rc = stk__read_whole_file(path, &b, 1u << 30, &by, why, sizeof why)
               ? STK_EIO
               : load_scan_mem(by.data, by.len, key, shard_size, sc);
  stk__buf_free(&b);
  return rc;
}

/* A saved scan (untrusted: a damaged or foreign file is refused, and the
 * shard is scanned instead) of a shard of shard_size bytes: every image
 * member it lists lies after a header inside the shard, and a label it
 * says is valid is one a .cls can hold. */
static int load_scan_mem(const uint8_t *data, size_t len, const char *key, uint64_t shard_size,
                         shard_scan *sc) {
  if (len < 16) return STK_EFORMAT;
  stk__bytes by = {data, len, 0};
  rbuf r = {by.data, by.data + by.len, 0};
  uint64_t h;
  int v2 = !memcmp(by.data, SIDX_MAGIC2, 8); /* written before empty shards were counted */
  int rc = memcmp(by.data, SIDX_MAGIC, 8) && !v2 ? STK_EFORMAT : STK_OK;
  memcpy(&h, by.data + 8, 8);
  if (rc == STK_OK && h != stk__hash64(by.data + 16, by.len - 16, 0x5bd1e995)) rc = STK_EFORMAT;
  r.p += 16;
  /* another shard's (a hash collision of names), or a shard rewritten since */
  if (rc == STK_OK && !key_matches(rstr(&r), key)) rc = STK_ESTALE;
  tally *ta = &sc->ta;
  int64_t cnt[13] = {0};
  rget(&r, cnt, (v2 ? 12 : 13) * sizeof *cnt);
  /* what one shard left out: members (each at least a header block), and
   * the shard itself counted once at most as truncated, zero-filled, ... */
  for (int i = 0; rc == STK_OK && i < 13; i++)
    if (cnt[i] < 0 || (uint64_t)cnt[i] > (i < 9 ? shard_size / BLOCK : 1)) rc = STK_EFORMAT;
  ta->unsafe = cnt[0], ta->link = cnt[1], ta->special = cnt[2], ta->other = cnt[3];
  ta->dup = cnt[4], ta->no_cls = cnt[5], ta->bad_cls = cnt[6], ta->no_img = cnt[7];
  ta->bad_ext = cnt[8], ta->truncated = cnt[9], ta->bad_header = cnt[10], ta->zeroed = cnt[11];
  ta->empty = cnt[12];
  rget(&r, ta->first, sizeof ta->first);
  ta->first[sizeof ta->first - 1] = '\0';
  snprintf(sc->dm.name, sizeof sc->dm.name, "%s", rstr(&r));
  if (snprintf(sc->dm.why, sizeof sc->dm.why, "%s", rstr(&r)) < 0) sc->dm.why[0] = '\0';
  uint64_t n = 0;
  rget(&r, &n, 8);
  for (uint64_t i = 0; rc == STK_OK && !r.err && i < n; i++) {
    int32_t f[2];
    uint64_t off, size, hh;
    rget(&r, f, sizeof f);
    rget(&r, &off, 8);
    rget(&r, &size, 8);
    rget(&r, &hh, 8);
    const char *k = rstr(&r), *img = rstr(&r);
    if (r.err) break;
    if (((f[0] & 1) && (off < BLOCK || off > shard_size || size > shard_size - off)) ||
        ((f[0] & 4) && f[1] < 0)) {
      rc = STK_EFORMAT;
      break;
    }
    size_t had = sc->ks.n;
    rec *kr = keyset_get(&sc->ks, k, strlen(k));
    if (kr && sc->ks.n == had) { /* a key twice: the scan writes each once */
      rc = STK_EFORMAT;
      break;
    }
    if (!kr || ((f[0] & 1) && !(kr->img_name = strdup(img)))) {
      rc = STK_ENOMEM;
      break;
    }
    kr->has_cls = (f[0] & 2) != 0;
    kr->cls_ok = (f[0] & 4) != 0;
    kr->label = f[1];
    kr->img_off = off;
    kr->img_size = size;
    kr->img_hhash = hh;
  }
  uint64_t nl = 0;
  rget(&r, &nl, 8);
  for (uint64_t i = 0; rc == STK_OK && !r.err && i < nl; i++) {
    const char *ln = rstr(&r), *lw = rstr(&r);
    if (!r.err && lose(sc, ln, lw)) rc = STK_ENOMEM;
  }
  if (rc == STK_OK && (r.err || r.p != r.end)) rc = STK_EFORMAT;
  return rc;
}

void stk__tar_index_seal(uint8_t *data, size_t len) {
  if (len < 16) return;
  uint64_t h = stk__hash64(data + 16, len - 16, 0x5bd1e995);
  memcpy(data + 8, &h, 8);
}

int stk__tar_index_load(const uint8_t *data, size_t len, const char *key, const char *shard,
                        uint64_t shard_size, int nclasses, stk__dataset *ds, uint64_t **span,
                        char *msg, size_t msglen) {
  memset(ds, 0, sizeof *ds);
  *span = NULL;
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  int rc = load_scan_mem(data, len, key, shard_size, &sc);
  if (rc) {
    shard_scan_free(&sc);
    return stk__fail(msg, msglen, rc, "the saved scan is refused");
  }
  char *one[1] = {(char *)shard};
  tar_impl t;
  memset(&t, 0, sizeof t);
  t.shards = one;
  t.nshards = 1;
  stk__source s;
  memset(&s, 0, sizeof s);
  classlist cl = {NULL, nclasses, nclasses > 0};
  tally ta;
  memset(&ta, 0, sizeof ta);
  int32_t maxlabel = -1;
  rc = add_scan(&s, &t, 0, &sc, &cl, &ta, &maxlabel, msg, msglen);
  shard_scan_free(&sc);
  uint64_t *sp = rc == STK_OK ? malloc(2 * (size_t)(s.ds.n ? s.ds.n : 1) * sizeof *sp) : NULL;
  if (rc == STK_OK && !sp) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  for (int64_t i = 0; sp && i < s.ds.n; i++) {
    sp[2 * i] = t.m[i].off;
    sp[2 * i + 1] = t.m[i].size;
  }
  free(t.m);
  for (int i = 0; i < t.nwhy; i++) free(t.why[i]);
  free(t.why);
  free(t.lost);
  if (rc) {
    stk__dataset_free(&s.ds);
    return rc;
  }
  *ds = s.ds;
  *span = sp;
  return STK_OK;
}

/* Adds to stand-in k's reason how many samples it stands for (what
 * stats()["skipped"] and max_skipped_fraction count); the reason stays as
 * it was without memory for the longer one. */
static void say_lost(tar_impl *t, int k) {
  const char *w = t->why[k];
  size_t n = strlen(w) + 96;
  char *nw = malloc(n);
  if (!nw) return;
  snprintf(nw, n, "%s (about %lld sample%s lost, as many as the other shards hold)", w,
           (long long)t->lost[k], t->lost[k] == 1 ? "" : "s");
  free(t->why[k]);
  t->why[k] = nw;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* How many samples each damaged shard's stand-in stands for: what an
 * undamaged shard holds (the median of them), less what was read of the
 * damaged one, at least 1. A shard cut short no longer says how long it
 * was: its siblings are the best measure there is. */
static int weigh_damage(tar_impl *t, int64_t n, char *msg, size_t msglen) {
  int64_t *real = calloc((size_t)t->nshards + 1, sizeof *real);
  char *hurt = calloc((size_t)t->nshards + 1, 1);
  if (!real || !hurt) {
    free(real);
    free(hurt);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  for (int64_t i = 0; i < n; i++) {
    const tar_member *m = &t->m[i];
    if (!m->damage) real[m->shard]++;
    else if (t->lost[m->damage - 1] < 0) hurt[m->shard] = 1;
  }
  int64_t k = 0;
  for (int i = 0; i < t->nshards; i++)
    if (!hurt[i]) k++;
  /* the undamaged shards' counts, sorted, for the median */
  int64_t *whole = malloc(((size_t)k + 1) * sizeof *whole), j = 0;
  for (int i = 0; whole && i < t->nshards; i++)
    if (!hurt[i]) whole[j++] = real[i];
  int64_t median = 0;
  if (whole && k) {
    qsort(whole, (size_t)k, sizeof *whole, cmp_i64);
    median = whole[k / 2];
  }
  for (int64_t i = 0; i < n; i++) {
    const tar_member *m = &t->m[i];
    if (m->damage && t->lost[m->damage - 1] < 0) {
      int64_t w = median - real[m->shard];
      t->lost[m->damage - 1] = w > 1 ? w : 1;
      say_lost(t, m->damage - 1);
    }
  }
  free(whole);
  free(real);
  free(hurt);
  return STK_OK;
}

static int scan_shard(stk__source *s, tar_impl *t, int32_t shard, const classlist *cl,
                      tally *ta, int32_t *maxlabel, const char *index_dir, char *msg,
                      size_t msglen) {
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  char ipath[4200] = "", key[4400];
  int rc = STK_EIO;
  if (t->net) cache_key(t, shard, key, sizeof key);
  if (t->net && shard_index_path(t, shard, index_dir, ipath, sizeof ipath) == STK_OK)
    rc = load_scan(ipath, key, t->size[shard], &sc);
  if (rc && t->beside && t->first && t->first[shard]) {
    /* the index stoker pack wrote beside the shard, requested ahead */
    shard_scan_free(&sc);
    memset(&sc, 0, sizeof sc);
    stk__net_body b;
    char bkey[200];
    beside_key(t->size[shard], t->etag[shard], bkey, sizeof bkey);
    if (stk__net_wait(t->first[shard], &b, NULL, 0) == STK_OK)
      rc = load_scan_mem(b.data, b.len, bkey, t->size[shard], &sc);
    stk__net_free(t->first[shard]);
    t->first[shard] = NULL;
    if (rc == STK_OK && ipath[0]) save_scan(ipath, key, &sc);
  }
  if (rc) {
    shard_scan_free(&sc);
    memset(&sc, 0, sizeof sc);
    rc = read_scan(t, shard, &sc, msg, msglen);
    /* a cache that cannot be written costs the next open a scan, no more */
    if (rc == STK_OK && ipath[0]) save_scan(ipath, key, &sc);
  }
  if (rc == STK_OK) rc = add_scan(s, t, shard, &sc, cl, ta, maxlabel, msg, msglen);
  shard_scan_free(&sc);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_tar_suffix(const char *n) {
  size_t l = strlen(n);
  return l > 4 && !strcasecmp(n + l - 4, ".tar");
}

const char *stk__tar_compressed(const char *name) {
  static const char *const sfx[] = {".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tar.bz2",
                                    ".tar.xz", ".tar.lz4"};
  size_t l = strlen(name);
  for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
    size_t k = strlen(sfx[i]);
    if (l > k && !strcasecmp(name + l - k, sfx[i])) return sfx[i];
  }
  return NULL;
}

/* A compressed shard is refused by name: its members cannot be read in
 * place by offset (a compressed stream has no random access), and leaving
 * it out without a word lost its samples silently. */
static int refuse_compressed(const char *name, char *msg, size_t msglen) {
  const char *sfx = stk__tar_compressed(name);
  return stk__fail(msg, msglen, STK_EFORMAT,
                   "%s is a compressed shard (%s): stoker reads uncompressed .tar shards only, "
                   "whose members it reads in place by offset, which a compressed stream does "
                   "not allow; decompress it (%s) or move it away",
                   name, sfx,
                   !strcasecmp(sfx, ".tar.gz") || !strcasecmp(sfx, ".tgz") ? "gunzip -k"
                   : !strncasecmp(sfx, ".tar.zst", 8)                      ? "zstd -d"
                   : !strcasecmp(sfx, ".tar.bz2")                          ? "bunzip2 -k"
                   : !strcasecmp(sfx, ".tar.xz")                           ? "unxz -k"
                                                                           : "lz4 -d");
}

/* ---- remote shards ---------------------------------------------------------- */

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
static int brace_expand(const char *pat, names *out, char *msg, size_t msglen) {
  const char *o = strchr(pat, '{');
  if (!o) return names_add(out, strdup(pat)) ? stk__fail(msg, msglen, STK_ENOMEM, "out of memory")
                                             : STK_OK;
  const char *c = strchr(o, '}');
  if (!c) return stk__fail(msg, msglen, STK_EINVAL, "%s: a '{' without its '}'", pat);
  size_t pre = (size_t)(o - pat);
  char body[256];
  if ((size_t)(c - o - 1) >= sizeof body)
    return stk__fail(msg, msglen, STK_EINVAL, "%s: a brace too long", pat);
  memcpy(body, o + 1, (size_t)(c - o - 1));
  body[c - o - 1] = '\0';
  char *dots = strstr(body, "..");
  char buf[4096];
  if (dots) {
    char *end1, *end2;
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

/* The sizes of the shards, by HEAD requests in flight together. */
static int head_all(tar_impl *t, char *msg, size_t msglen) {
  int rc = STK_OK;
  for (int at = 0; rc == STK_OK && at < t->nshards; at += 64) {
    int k = t->nshards - at < 64 ? t->nshards - at : 64;
    stk__net_req *q[64];
    for (int i = 0; i < k; i++) q[i] = stk__net_get(t->net, t->shards[at + i], 0, 0, 0, 1);
    for (int i = 0; i < k; i++) {
      stk__net_body b;
      int r = stk__net_wait(q[i], &b, rc ? NULL : msg, msglen);
      if (r && !rc) rc = r;
      if (!r) {
        t->size[at + i] = b.size;
        memcpy(t->etag[at + i], b.etag, sizeof b.etag);
      }
      stk__net_free(q[i]);
    }
  }
  return rc;
}

/* Adds a listed shard (its URL, size and ETag) to nm and t. STK_ENOMEM. */
static int add_listed(tar_impl *t, names *nm, const stk__net_object *o) {
  if (names_add(nm, strdup(o->url))) return STK_ENOMEM;
  uint64_t *sz = realloc(t->size, (size_t)nm->cap * sizeof *sz);
  if (!sz) return STK_ENOMEM;
  t->size = sz;
  t->size[nm->n - 1] = o->size;
  char(*et)[96] = realloc(t->etag, (size_t)nm->cap * sizeof *et);
  if (!et) return STK_ENOMEM;
  t->etag = et;
  memcpy(t->etag[nm->n - 1], o->etag, sizeof *et);
  return STK_OK;
}

/* A root without its trailing slash (s3://bucket/train) that is not a
 * folder: S3 would list every key that starts with it (train/, train2/,
 * train-old.tar...), sibling datasets mixed into one. Refused, naming what
 * it matched. */
static int refuse_loose_prefix(const char *url, const stk__net_object *v, int n, char *msg,
                               size_t msglen) {
  char some[600] = "";
  size_t len = 0;
  int shown = 0, tars = 0;
  for (int i = 0; i < n; i++) {
    if (!has_tar_suffix(v[i].url)) continue;
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

/* The .tar shards under an s3:// prefix, sorted by key, into nm (with
 * their sizes and ETags into t). A root without a trailing slash is the
 * folder of that name when one exists; *folder gets the prefix used. */
static int list_prefix(const char *url, tar_impl *t, names *nm, char **folder, char *msg,
                       size_t msglen) {
  stk__net_object *v = NULL;
  int n = 0;
  int rc = stk__net_list(t->net, url, &v, &n, msg, msglen);
  size_t ul = strlen(url);
  /* s3://bucket and s3://bucket/prefix/ name a folder as they are */
  int loose = rc == STK_OK && url[ul - 1] != '/' && strchr(url + 5, '/');
  int in_folder = 0;
  for (int i = 0; loose && i < n && !in_folder; i++)
    in_folder = v[i].url[ul] == '/';
  if (loose && !in_folder) rc = refuse_loose_prefix(url, v, n, msg, msglen);
  *folder = rc == STK_OK ? malloc(ul + 2) : NULL;
  if (*folder) snprintf(*folder, ul + 2, "%s%s", url, loose ? "/" : "");
  if (rc == STK_OK && !*folder) rc = STK_ENOMEM;
  for (int i = 0; rc == STK_OK && i < n; i++) {
    if (loose && v[i].url[ul] != '/') continue; /* a sibling of the folder */
    if (stk__tar_compressed(v[i].url)) rc = refuse_compressed(v[i].url, msg, msglen);
    if (rc == STK_OK && has_tar_suffix(v[i].url)) rc = add_listed(t, nm, &v[i]);
  }
  if (rc == STK_ENOMEM) stk__fail(msg, msglen, rc, "out of memory");
  stk__net_objects_free(v, n);
  return rc;
}

/* The shards a URL names: an s3:// prefix (every .tar under it, sorted by
 * key), a name with brace ranges, or one shard. `dir` gets where
 * classes.txt is looked for: the folder of the (first) name. */
static int list_remote(const char *url, tar_impl *t, char **dir, char *msg, size_t msglen) {
  names nm = {0};
  int rc = STK_OK, listed = 0;
  /* s3:// and hf:// folders can be listed (a bucket listing, the Hub's
   * tree API); an http(s):// one cannot */
  int s3 = !strncmp(url, "s3://", 5) || !strncmp(url, "hf://", 5);
  char *folder = NULL;
  if (strchr(url, '{')) {
    rc = brace_expand(url, &nm, msg, msglen);
    for (int i = 0; rc == STK_OK && i < nm.n; i++)
      if (stk__tar_compressed(nm.v[i])) rc = refuse_compressed(nm.v[i], msg, msglen);
  } else if (stk__tar_compressed(url)) {
    rc = refuse_compressed(url, msg, msglen);
  } else if (s3 && !has_tar_suffix(url)) {
    rc = list_prefix(url, t, &nm, &folder, msg, msglen);
    listed = 1;
  } else if (!has_tar_suffix(url)) {
    rc = stk__fail(msg, msglen, STK_EINVAL,
                   "%s: an HTTP folder cannot be listed; name the shards with a range, as in "
                   "https://host/path/shard-{0000..0099}.tar, or use a list file of URLs",
                   url);
  } else {
    rc = names_add(&nm, strdup(url)) ? stk__fail(msg, msglen, STK_ENOMEM, "out of memory") : STK_OK;
  }
  t->shards = nm.v;
  t->nshards = nm.n;
  if (rc) {
    free(folder);
    return rc;
  }
  if (!listed) {
    if (!(t->size = calloc((size_t)(nm.n ? nm.n : 1), sizeof *t->size)) ||
        !(t->etag = calloc((size_t)(nm.n ? nm.n : 1), sizeof *t->etag)))
      return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    if ((rc = head_all(t, msg, msglen))) return rc;
  }
  /* where classes.txt lives: the listed folder, or the name's */
  const char *base = nm.n && !listed ? nm.v[0] : folder ? folder : url;
  const char *slash = strrchr(base, '/');
  size_t scheme = (size_t)(strstr(base, "://") - base) + 3;
  size_t dl = slash && (size_t)(slash - base) >= scheme ? (size_t)(slash - base) : strlen(base);
  *dir = strndup(base, dl);
  free(folder);
  return *dir ? STK_OK : stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
}

/* The shards of `path`: the folder's *.tar files in sorted name order, or
 * the one file. `dir` gets the folder that classes.txt is looked for in. */
static int list_shards(const char *path, tar_impl *t, char **dir, char *msg, size_t msglen) {
  if (t->net) return list_remote(path, t, dir, msg, msglen);
  if (stk__tar_compressed(path)) return refuse_compressed(path, msg, msglen);
  struct stat st;
  if (stat(path, &st) != 0)
    return stk__fail(msg, msglen, STK_EIO, "cannot open %s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    t->shards = malloc(sizeof *t->shards);
    char *slash = strrchr(path, '/');
    *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!t->shards || !*dir || !(t->shards[0] = strdup(path)))
      return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    t->nshards = 1;
    return STK_OK;
  }
  if (!(*dir = strdup(path))) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  DIR *d = opendir(path);
  if (!d) return stk__fail(msg, msglen, STK_EIO, "cannot open folder %s: %s", path, strerror(errno));
  int rc = STK_OK, cap = 0;
  struct dirent *e;
  while (rc == STK_OK && (e = readdir(d))) {
    int gz = stk__tar_compressed(e->d_name) != NULL;
    if (e->d_name[0] == '.' || (!gz && !has_tar_suffix(e->d_name))) continue;
    char *full = stk__path_join(path, e->d_name);
    if (!full) {
      rc = STK_ENOMEM;
      break;
    }
    if (gz) {
      rc = refuse_compressed(full, msg, msglen);
      free(full);
      break;
    }
    if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
      free(full);
      continue;
    }
    if (t->nshards == cap) {
      cap = cap ? cap * 2 : 64;
      char **v = realloc(t->shards, (size_t)cap * sizeof *v);
      if (!v) {
        free(full);
        rc = STK_ENOMEM;
        break;
      }
      t->shards = v;
    }
    t->shards[t->nshards++] = full;
  }
  closedir(d);
  if (rc == STK_ENOMEM) return stk__fail(msg, msglen, rc, "out of memory");
  if (rc) return rc;
  /* Sorting full paths of one folder sorts their file names. */
  if (t->nshards > 1) qsort(t->shards, (size_t)t->nshards, sizeof *t->shards, cmp_str);
  return STK_OK;
}

/* "3 tar members left out: 2 without a .cls, 1 link; first: ..." */
static void write_note(char *note, size_t cap, const tally *ta) {
  struct {
    int64_t n;
    const char *one, *many;
  } parts[] = {
      {ta->no_cls, "without a .cls", "without a .cls"},
      {ta->bad_cls, "with a bad .cls", "with a bad .cls"},
      {ta->no_img, ".cls without an image", ".cls without an image"},
      {ta->dup, "duplicate key", "duplicate keys"},
      {ta->unsafe, "unsafe name", "unsafe names"},
      {ta->link, "link", "links"},
      {ta->special, "device or FIFO", "devices or FIFOs"},
      {ta->other, "unsupported member type", "unsupported member types"},
      {ta->bad_ext, "bad extended header", "bad extended headers"},
  };
  int64_t members = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) members += parts[i].n;
  note[0] = '\0';
  if (!members && !ta->truncated && !ta->bad_header && !ta->zeroed && !ta->empty) return;
  size_t len = 0;
#define PUT(...)                                                        \
  do {                                                                  \
    if (len < cap) {                                                    \
      int w_ = snprintf(note + len, cap - len, __VA_ARGS__);            \
      if (w_ > 0) len += (size_t)w_;                                    \
    }                                                                   \
  } while (0)
  const char *sep = "";
  if (members) {
    PUT("%lld tar member%s left out:", (long long)members, members == 1 ? "" : "s");
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
      if (!parts[i].n) continue;
      PUT("%s %lld %s", sep, (long long)parts[i].n, parts[i].n == 1 ? parts[i].one : parts[i].many);
      sep = ",";
    }
    sep = ";";
  }
  if (ta->truncated) {
    PUT("%s %lld shard%s truncated", sep, (long long)ta->truncated, ta->truncated == 1 ? "" : "s");
    sep = ";";
  }
  if (ta->bad_header) {
    PUT("%s %lld shard%s with a bad header (read up to it)", sep, (long long)ta->bad_header,
        ta->bad_header == 1 ? "" : "s");
    sep = ";";
  }
  if (ta->zeroed) {
    PUT("%s %lld shard%s with a zero-filled region (read up to it)", sep, (long long)ta->zeroed,
        ta->zeroed == 1 ? "" : "s");
    sep = ";";
  }
  if (ta->empty)
    PUT("%s %lld empty shard%s (no member)", sep, (long long)ta->empty, ta->empty == 1 ? "" : "s");
  PUT("; first: %s", ta->first);
#undef PUT
  /* trim the leading blank of the first part */
  if (note[0] == ' ') memmove(note, note + 1, strlen(note));
}

/* classes.txt's names, or the label numbers (as for a list file). */
static int name_classes(stk__source *s, const classlist *cl, int32_t maxlabel, char *msg,
                        size_t msglen) {
  int rc = STK_OK;
  if (!cl->present) {
    rc = stk__dataset_number_classes(&s->ds, maxlabel + 1);
  } else if (!(s->ds.classes = calloc((size_t)cl->n, sizeof(char *)))) {
    rc = STK_ENOMEM;
  }
  for (int i = 0; cl->present && rc == STK_OK && i < cl->n; i++) {
    if (!(s->ds.classes[i] = strdup(cl->v[i]))) rc = STK_ENOMEM;
    s->ds.nclasses = i + 1;
  }
  if (rc) stk__fail(msg, msglen, rc, "out of memory");
  return rc;
}

/* ---- the first epoch of foreign shards, streamed -------------------------- */
/* Remote shards written by other tools (no .stkidx beside them) and not yet
 * in the index folder: scanning them all at open would read the whole
 * dataset before the first batch. Instead (stream_first_epoch) the open
 * costs the listing and the first part of shard 0, which gives an estimate
 * of the samples per byte, hence of the dataset's size; the sample table is
 * that many positions of a stream. A thread of the source scans this
 * rank's shards front to back through the store of parts (so the bytes it
 * reads are those the sample reads then find there, read once), appends
 * each sample to the stream as its key ends, and keeps each finished
 * shard's scan in the index folder, as an open's scan is kept. Position j
 * of the epoch is the stream's j-th sample; past the rank's last sample the
 * positions wrap round to its first (DistributedSampler's padding). The
 * scan runs ahead of the positions the loader has asked for by at most half
 * the parts' budget, so that what it reads is still there when read. Every
 * rank derives the same estimate from the same bytes, hence the same
 * len(): the ranks yield the same number of batches. docs/remote.md. */
typedef struct tar_stream {
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int *order; /* the rank's shards, in the stream's order */
  int norder;
  tar_member *e; /* the stream's samples so far */
  int32_t *label;
  uint64_t *at; /* each one's place in the stream's bytes */
  int64_t n, cap;
  char **why; /* reasons of the entries whose read fails (damage - 1) */
  int nwhy;
  int done, stop, oom;
  int64_t wanted;   /* the furthest position planned or read; -1 = none */
  int64_t L;        /* this rank's positions in an epoch */
  uint64_t scan_at; /* the scan's place in the stream's bytes */
  uint64_t ahead;   /* how far the scan may run ahead of `wanted` */
  classlist cl;
  char *index_dir;
} tar_stream;

/* Appends an entry (mutex not held). why != NULL: its read fails with it. */
static void stream_push(tar_stream *ts, const tar_member *m, int32_t label, uint64_t at,
                        const char *why) {
  pthread_mutex_lock(&ts->mu);
  if (ts->n == ts->cap) {
    int64_t cap = ts->cap ? 2 * ts->cap : 1024;
    tar_member *e = realloc(ts->e, (size_t)cap * sizeof *e);
    if (e) ts->e = e;
    int32_t *l = e ? realloc(ts->label, (size_t)cap * sizeof *l) : NULL;
    if (l) ts->label = l;
    uint64_t *a = l ? realloc(ts->at, (size_t)cap * sizeof *a) : NULL;
    if (a) ts->at = a;
    if (!a) goto oom;
    ts->cap = cap;
  }
  tar_member mm = *m;
  if (why) {
    char **w = realloc(ts->why, ((size_t)ts->nwhy + 1) * sizeof *w);
    if (!w || !(w[ts->nwhy] = strdup(why))) {
      if (w) ts->why = w;
      goto oom;
    }
    ts->why = w;
    mm.damage = ++ts->nwhy;
  }
  ts->e[ts->n] = mm;
  ts->label[ts->n] = label;
  ts->at[ts->n++] = at;
  pthread_cond_broadcast(&ts->cv);
  pthread_mutex_unlock(&ts->mu);
  return;
oom:
  ts->oom = 1; /* the reads past here fail, saying so */
  pthread_mutex_unlock(&ts->mu);
}

/* A failing entry of shard k: "SHARD:NAME: why". */
static void stream_fail(tar_stream *ts, const tar_impl *t, int k, const char *name,
                        const char *why, uint64_t at) {
  char buf[1200];
  snprintf(buf, sizeof buf, "%s:%s: %s", t->shards[k], name, why);
  tar_member m = {0, 0, 0, k, 0};
  stream_push(ts, &m, 0, at, buf);
}

/* Key r of shard k, ended: a sample of the stream, or (an image without a
 * usable .cls) an entry that fails as the index's stand-in would. */
static void stream_rec(tar_stream *ts, const tar_impl *t, int k, const rec *r, uint64_t base) {
  if (!r->img_name) return;
  const classlist *cl = &ts->cl;
  int ok = r->has_cls && r->cls_ok && (cl->present ? r->label < cl->n : r->label < STK__TAR_LABEL_MAX);
  if (!ok) {
    const char *why = !r->has_cls ? "no .cls member"
                      : cl->present ? "its .cls is not a class index of classes.txt"
                                    : "its .cls is not a non-negative integer below 1048576";
    stream_fail(ts, t, k, r->img_name, why, base + r->img_off);
    return;
  }
  tar_member m = {r->img_off, r->img_size, r->img_hhash, k, 0};
  stream_push(ts, &m, r->label, base + r->img_off, NULL);
}

/* The end of shard k's scan: what it left out, then its damage. */
static void stream_tail(tar_stream *ts, const tar_impl *t, int k, const shard_scan *sc,
                        uint64_t at) {
  for (size_t i = 0; i < sc->nlost; i++) {
    char why[700];
    snprintf(why, sizeof why, "left out when the shard was read: %s", sc->lost_why[i]);
    stream_fail(ts, t, k, sc->lost_name[i], why, at);
  }
  if (sc->dm.why[0]) stream_fail(ts, t, k, sc->dm.name, sc->dm.why, at);
}

/* Waits while the scan is far enough ahead of what the loader asked for:
 * the read-ahead's measured reach (stk__parts_reach), at most ts->ahead.
 * Further would push out of the store the parts of the samples that wait
 * in the shuffle buffer (with the dataset twice remote_memory, a scan half
 * of it ahead made 2,880 requests an epoch for 54 shards). */
static void stream_wait_room(tar_stream *ts, stk__parts *parts) {
  uint64_t ahead = stk__parts_reach(parts);
  if (ahead > ts->ahead) ahead = ts->ahead;
  pthread_mutex_lock(&ts->mu);
  for (;;) {
    if (ts->stop || ts->wanted + 1 >= ts->L || ts->n <= ts->wanted + 1) break;
    uint64_t ref = ts->wanted >= 0 ? ts->at[ts->wanted] : 0;
    if (ts->scan_at < ref + ahead) break;
    pthread_cond_wait(&ts->cv, &ts->mu);
  }
  pthread_mutex_unlock(&ts->mu);
}

/* Scans shard k through the store of parts, emitting each key as the scan
 * passes it (webdataset writes a key's members together), and keeps the
 * scan in the index folder. */
static int stream_scan(tar_stream *ts, tar_impl *t, int k, uint64_t base, shard_scan *sc,
                       char *msg, size_t msglen) {
  stk__object obj;
  char why[256];
  if (stk__object_open(&obj, t->shards[k], t->net, t->size[k], PART_SIZE, why, sizeof why))
    return stk__fail(msg, msglen, STK_EIO, "%s", why);
  uint64_t reach = stk__parts_reach(t->parts); /* parts of this shard requested ahead */
  unsigned depth = (unsigned)((reach < ts->ahead ? reach : ts->ahead) / PART_SIZE);
  stk__object_parts(&obj, t->parts, k, depth < 1 ? 1 : depth > 8 ? 8 : depth, 0);
  scan_state *st = calloc(1, sizeof *st);
  if (!st) {
    stk__object_close(&obj);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  *st = (scan_state){.path = t->shards[k], .fd = &obj, .fsize = obj.size, .sc = sc,
                     .dm = {"", ""}, .msg = msg, .msglen = msglen};
  size_t emitted = 0;
  while (!scan_step(st)) {
    for (; emitted + 1 < st->ks.n; emitted++) stream_rec(ts, t, k, &st->ks.r[emitted], base);
    pthread_mutex_lock(&ts->mu);
    ts->scan_at = base + st->off;
    pthread_mutex_unlock(&ts->mu);
    stream_wait_room(ts, t->parts);
    if (ts->stop) st->rc = STK_ECANCELED;
  }
  for (; st->rc == STK_OK && emitted < st->ks.n; emitted++)
    stream_rec(ts, t, k, &st->ks.r[emitted], base);
  return scan_done(st, &obj, sc);
}

/* Shard k of the stream: from the index folder when it is there, else
 * scanned; a shard that cannot be read is one failing entry. */
static void stream_shard(tar_stream *ts, tar_impl *t, int k, uint64_t base) {
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  char ipath[4200] = "", key[4400], msg[600] = "";
  cache_key(t, k, key, sizeof key);
  int have = shard_index_path(t, k, ts->index_dir, ipath, sizeof ipath) == STK_OK;
  if (have && load_scan(ipath, key, t->size[k], &sc) == STK_OK) {
    for (size_t i = 0; i < sc.ks.n; i++) stream_rec(ts, t, k, &sc.ks.r[i], base);
    stream_tail(ts, t, k, &sc, base + t->size[k]);
  } else {
    shard_scan_free(&sc);
    memset(&sc, 0, sizeof sc);
    int rc = stream_scan(ts, t, k, base, &sc, msg, sizeof msg);
    if (rc == STK_OK) {
      stream_tail(ts, t, k, &sc, base + t->size[k]);
      if (have) save_scan(ipath, key, &sc); /* unwritable: the next open scans it */
    } else if (!ts->stop) {
      stream_fail(ts, t, k, "", msg, base);
    }
  }
  shard_scan_free(&sc);
}

/* The first parts of the shards after the j-th, as far as the read-ahead
 * reaches (at most 32 shards: the requests in flight), so that a stream
 * of small shards does not wait a round trip for each. */
static void stream_ahead(tar_stream *ts, tar_impl *t, int j) {
  uint64_t span = t->size[ts->order[j]], reach = stk__parts_reach(t->parts);
  if (reach > ts->ahead) reach = ts->ahead;
  for (int i = j + 1; i < ts->norder && i <= j + 32 && span < reach; i++) {
    int k = ts->order[i];
    stk__parts_want(t->parts, k, t->shards[k], t->size[k], 0, 0);
    span += t->size[k];
  }
}

static void *stream_main(void *arg) {
  tar_impl *t = arg;
  tar_stream *ts = t->st;
  uint64_t base = 0;
  for (int j = 0; j < ts->norder && !ts->stop; j++) {
    stream_wait_room(ts, t->parts);
    stream_ahead(ts, t, j);
    stream_shard(ts, t, ts->order[j], base);
    base += t->size[ts->order[j]];
    pthread_mutex_lock(&ts->mu);
    ts->scan_at = base;
    pthread_mutex_unlock(&ts->mu);
  }
  pthread_mutex_lock(&ts->mu);
  ts->done = 1;
  pthread_cond_broadcast(&ts->cv);
  pthread_mutex_unlock(&ts->mu);
  return NULL;
}

/* Position i of the stream (waiting for the scan to get there): its entry
 * and label, or the failure of its read. */
static int stream_get(tar_stream *ts, int64_t i, tar_member *m, int32_t *label, char *msg,
                      size_t msglen) {
  pthread_mutex_lock(&ts->mu);
  if (i > ts->wanted) {
    ts->wanted = i;
    pthread_cond_broadcast(&ts->cv);
  }
  while (!ts->stop && !ts->done && !ts->oom && i >= ts->n) pthread_cond_wait(&ts->cv, &ts->mu);
  int rc = STK_OK;
  if (i >= ts->n && ts->n > 0 && ts->done) i %= ts->n; /* the padding */
  if (i < ts->n) {
    *m = ts->e[i];
    *label = ts->label[i];
    if (m->damage) rc = stk__fail(msg, msglen, STK_EDECODE, "%s", ts->why[m->damage - 1]);
  } else {
    rc = stk__fail(msg, msglen, ts->oom ? STK_ENOMEM : STK_EIO, "%s",
                   ts->oom    ? "out of memory for the stream's index"
                   : ts->stop ? "the loader is closing"
                              : "this rank's shards hold no sample");
  }
  pthread_mutex_unlock(&ts->mu);
  return rc;
}

/* The entry of position i when the scan has got there, without waiting:
 * 1 and *m, or 0. Notes i as asked for. */
static int stream_peek(tar_stream *ts, int64_t i, tar_member *m) {
  pthread_mutex_lock(&ts->mu);
  if (i > ts->wanted) {
    ts->wanted = i;
    pthread_cond_broadcast(&ts->cv);
  }
  if (i >= ts->n && ts->n > 0 && ts->done) i %= ts->n;
  int have = i < ts->n;
  if (have) *m = ts->e[i];
  pthread_mutex_unlock(&ts->mu);
  return have;
}

static void stream_close(tar_stream *ts) {
  if (!ts) return;
  pthread_mutex_lock(&ts->mu);
  ts->stop = 1;
  pthread_cond_broadcast(&ts->cv);
  pthread_mutex_unlock(&ts->mu);
  if (ts->started) pthread_join(ts->th, NULL);
  pthread_mutex_destroy(&ts->mu);
  pthread_cond_destroy(&ts->cv);
  for (int i = 0; i < ts->nwhy; i++) free(ts->why[i]);
  free(ts->why);
  free(ts->e);
  free(ts->label);
  free(ts->at);
  free(ts->order);
  classlist_free(&ts->cl);
  free(ts->index_dir);
  free(ts);
}

/* Samples per byte, from the headers in shard 0's first part (the same
 * bytes on every rank, so every rank makes the same estimate): *count
 * images in *bytes bytes, and the largest label met. */
static int stream_sample_rate(tar_impl *t, uint64_t *count, uint64_t *bytes, int32_t *maxlabel,
                              char *msg, size_t msglen) {
  stk__object obj;
  char why[256];
  if (stk__object_open(&obj, t->shards[0], t->net, t->size[0], PART_SIZE, why, sizeof why))
    return stk__fail(msg, msglen, STK_EIO, "shard %s: %s", t->shards[0], why);
  stk__object_parts(&obj, t->parts, 0, 0, 0);
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  scan_state *st = calloc(1, sizeof *st);
  if (!st) {
    stk__object_close(&obj);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  *st = (scan_state){.path = t->shards[0], .fd = &obj, .fsize = obj.size, .sc = &sc,
                     .dm = {"", ""}, .msg = msg, .msglen = msglen};
  uint64_t lim = obj.size < PART_SIZE ? obj.size : PART_SIZE;
  int ended = 0;
  /* (a header and a small .cls after it stay inside the part) */
  while (st->off + 2 * BLOCK <= lim && !(ended = scan_step(st))) {
  }
  *count = 0;
  for (size_t i = 0; i < st->ks.n; i++) {
    const rec *r = &st->ks.r[i];
    if (!r->img_name) continue;
    ++*count;
    if (r->cls_ok && r->label < STK__TAR_LABEL_MAX && r->label > *maxlabel) *maxlabel = r->label;
  }
  *bytes = ended ? obj.size : st->off;
  int rc = scan_done(st, &obj, NULL);
  shard_scan_free(&sc);
  return rc;
}

/* This rank's shards in the first epoch: the shards' permutation of
 * (seed, epoch 0), as later epochs permute theirs, dealt round-robin. */
static int stream_order(tar_stream *ts, int nshards, const stk_options *o) {
  int64_t *perm = malloc((size_t)nshards * sizeof *perm);
  ts->order = malloc((size_t)nshards * sizeof *ts->order);
  if (!perm || !ts->order) {
    free(perm);
    return STK_ENOMEM;
  }
  if (o->shuffle)
    stk__torch_randperm(o->seed, nshards, perm);
  else
    for (int k = 0; k < nshards; k++) perm[k] = k;
  int world = o->world_size > 0 ? o->world_size : 1, rank = o->rank;
  for (int j = rank; j < nshards; j += world) ts->order[ts->norder++] = (int)perm[j];
  if (!ts->norder) ts->order[ts->norder++] = (int)perm[rank % nshards]; /* more ranks than shards */
  free(perm);
  return STK_OK;
}

/* The sample table of the stream: n positions, one name for all (a
 * position has no member until the scan gets there), labels written by
 * the reads. */
static int stream_table(stk__source *s, int64_t n) {
  static const char name[] = "(first epoch: a sample of the stream of shards)";
  stk__dataset *ds = &s->ds;
  ds->arena = malloc(sizeof name);
  ds->path_off = calloc((size_t)n, sizeof *ds->path_off);
  ds->labels = calloc((size_t)n, sizeof *ds->labels);
  if (!ds->arena || !ds->path_off || !ds->labels) return STK_ENOMEM;
  memcpy(ds->arena, name, sizeof name);
  ds->arena_len = ds->arena_cap = sizeof name;
  ds->n = ds->cap = n;
  return STK_OK;
}

/* Whether the open streams: remote shards with no index beside them, some
 * of which the index folder does not hold. */
static int stream_wanted(const tar_impl *t, const stk_options *o) {
  if (!t->net || !t->parts || t->beside || !o || !o->stream_first_epoch) return 0;
  for (int k = 0; k < t->nshards; k++)
    if (t->size[k] && !has_index(t, k, o->index_dir)) return 1;
  return 0;
}

/* Starts a stream: this rank's shards, and the first parts of shard 0 (for
 * the estimate) and of the rank's first shard requested at once, with the
 * probe for an index beside the shards (which may yet call it off). */
static int stream_begin(tar_impl *t, const stk_options *o, char *msg, size_t msglen) {
  tar_stream *ts = calloc(1, sizeof *ts);
  if (!ts) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  t->st = ts;
  pthread_mutex_init(&ts->mu, NULL);
  pthread_cond_init(&ts->cv, NULL);
  if (stream_order(ts, t->nshards, o)) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  int k = ts->order[0];
  stk__parts_want(t->parts, 0, t->shards[0], t->size[0], 0, 0);
  stk__parts_want(t->parts, k, t->shards[k], t->size[k], 0, 0);
  return STK_OK;
}

/* Opens the stream begun: the estimate, the table, and the scan's thread.
 * Takes cl. */
static int stream_open(stk__source *s, tar_impl *t, const stk_options *o, classlist *cl,
                       char *msg, size_t msglen) {
  tar_stream *ts = t->st;
  ts->cl = *cl;
  memset(cl, 0, sizeof *cl);
  ts->wanted = -1;
  ts->L = INT64_MAX;
  uint64_t budget = stk__parts_budget(t->parts);
  /* at most a quarter of the budget: the rest holds the shuffle buffer's */
  ts->ahead = budget / 4 > 2 * PART_SIZE ? budget / 4 : 2 * PART_SIZE;
  if (o->index_dir && !(ts->index_dir = strdup(o->index_dir)))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  uint64_t count = 0, bytes = 1;
  int32_t maxlabel = -1;
  int rc = stream_sample_rate(t, &count, &bytes, &maxlabel, msg, msglen);
  if (rc) return rc;
  double est = 0;
  for (int k = 0; k < t->nshards; k++) est += (double)t->size[k] * (double)count / (double)bytes;
  int64_t n = (int64_t)(est + 0.5) > 0 ? (int64_t)(est + 0.5) : 1;
  if (stream_table(s, n)) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (name_classes(s, &ts->cl, maxlabel, msg, msglen)) return STK_ENOMEM;
  t->real = n;
  if (pthread_create(&ts->th, NULL, stream_main, t))
    return stk__fail(msg, msglen, STK_EIO, "cannot start the shards' scan: %s", strerror(errno));
  ts->started = 1;
  return STK_OK;
}

/* ---- the source's operations ---------------------------------------------- */

/* Each read opens the shard, preads the member and closes it again. A folder
 * may hold thousands of shards, more than the default limit of 1024 open
 * files, and an fd cache shared by every worker thread would need a lock
 * and eviction; open() of a file whose name the kernel has just looked up
 * costs microseconds, against a millisecond or more to decode the image. */
static int read_local(const tar_impl *t, const tar_member *m, stk__buf *buf, stk__bytes *out,
                      char *msg, size_t msglen);

static int tar_read(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
                    stk__bytes *out, char *msg, size_t msglen) {
  const tar_impl *t = s->impl;
  const tar_member *m = t->st ? NULL : &t->m[i];
  out->data = NULL;
  out->len = 0;
  out->bytes_read = 0;
  tar_member sm;
  if (t->st) {
    /* position i of the stream: its label is known once the scan got there
     * (written before the loader reads it, by the thread that reads it) */
    int32_t label = 0;
    int rc = stream_get(t->st, i, &sm, &label, msg, msglen);
    ((stk__source *)s)->ds.labels[i] = label;
    if (rc) return rc;
    m = &sm;
  } else if (m->damage) {
    return stk__fail(msg, msglen, STK_EDECODE, "%s", t->why[m->damage - 1]);
  }
  if (max_bytes && m->size > max_bytes)
    return stk__fail(msg, msglen, STK_ELIMIT, "member is %llu bytes, over the limit of %llu",
                     (unsigned long long)m->size, (unsigned long long)max_bytes);
  /* the member's header is read with its data (one more block) and must
   * be the one seen at open */
  if (m->size > SIZE_MAX - BLOCK - 1 || stk__buf_reserve(buf, (size_t)m->size + BLOCK + 1))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for %llu bytes",
                     (unsigned long long)m->size);
  if (t->net) {
    /* a remote shard: from its local copy, else through the store of parts */
    int rc = stk__shard_cache_read(t->cache, m->shard, m->off - BLOCK, m->size + BLOCK, buf->p);
    if (rc)
      rc = stk__parts_read(t->parts, m->shard, t->shards[m->shard], m->off - BLOCK,
                           m->size + BLOCK, buf->p, msg, msglen);
    if (rc) return rc;
    out->bytes_read = m->size + BLOCK;
  } else {
    int rc = read_local(t, m, buf, out, msg, msglen);
    if (rc) return rc;
  }
  if (stk__hash64(buf->p, BLOCK, 0) != m->hhash)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the member's tar header is not the one read when the shard was opened (the "
                     "shard was zero-filled or overwritten since)");
  out->data = (const uint8_t *)buf->p + BLOCK;
  out->len = (size_t)m->size;
  return STK_OK;
}

/* A local shard's member: its header and data, by one pread. */
static int read_local(const tar_impl *t, const tar_member *m, stk__buf *buf, stk__bytes *out,
                      char *msg, size_t msglen) {
  /* Checked as a regular file when the shards were scanned; O_NONBLOCK so
   * that one replaced by a FIFO since cannot block the open (pread on it
   * then fails), without stk__open_input's fstat and fcntl per sample. */
  int fd = open(t->shards[m->shard], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return stk__fail(msg, msglen, STK_EIO, "cannot open the shard: %s", strerror(errno));
  ssize_t r = pread_full(fd, buf->p, (size_t)m->size + BLOCK, m->off - BLOCK);
  int e = errno;
  close(fd);
  if (r < 0) return stk__fail(msg, msglen, STK_EIO, "read failed: %s", strerror(e));
  out->bytes_read = (uint64_t)r;
  if ((uint64_t)r < m->size + BLOCK)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the shard is truncated: it ends %llu bytes into this member of %llu "
                     "(it changed since it was opened)",
                     (unsigned long long)(r > BLOCK ? (uint64_t)r - BLOCK : 0),
                     (unsigned long long)m->size);
  return STK_OK;
}

/* Remote shards: the store of parts learns which reads the epoch holds. */
static void expect_order(const tar_impl *t, const int64_t *out, int64_t L, uint64_t epoch) {
  if (!t->parts) return;
  int32_t *obj = malloc(((size_t)L + 1) * sizeof *obj);
  uint64_t *off = malloc(((size_t)L + 1) * sizeof *off);
  for (int64_t j = 0; obj && off && j < L; j++) {
    const tar_member *m = &t->m[out[j]];
    obj[j] = m->damage ? -1 : m->shard;
    off[j] = m->damage ? 0 : m->off - BLOCK;
  }
  if (obj && off) stk__parts_expect(t->parts, epoch, L, obj, off);
  free(obj); /* without memory the store goes by recency alone */
  free(off);
}

/* This rank's order of an epoch (docs/storage.md has the rule): the runs of
 * samples of each shard, in a per-epoch permutation of the shards, laid end
 * to end; rank r takes positions [r*L, (r+1)*L) of that sequence (wrapping
 * round for the padding); then a bounded shuffle buffer when shuffling.
 * The sampler's scratch (n entries) holds the shard order, then the
 * buffer's output: L <= n and the number of runs <= n. */
static void buffer_shuffle(const stk__source *s, stk__sampler *sp, uint64_t epoch, int64_t *out,
                           int64_t L);

static void tar_order(const stk__source *s, stk__sampler *sp, uint64_t epoch, int64_t *out) {
  const tar_impl *t = s->impl;
  int64_t n = sp->n, L = sp->num_samples, nrun = t->nrun;
  if (t->st) {
    /* the stream: position j is its j-th sample, in every epoch of this
     * table (the first epoch's shard order; a reopen after it is exact) */
    pthread_mutex_lock(&t->st->mu);
    t->st->L = L;
    pthread_cond_broadcast(&t->st->cv);
    pthread_mutex_unlock(&t->st->mu);
    for (int64_t j = 0; j < L; j++) out[j] = j;
    buffer_shuffle(s, sp, epoch, out, L);
    return;
  }
  int64_t *scratch = sp->perm;
  if (sp->shuffle)
    stk__torch_randperm(sp->seed + epoch, nrun, scratch); /* the same on every rank */
  else
    for (int64_t k = 0; k < nrun; k++) scratch[k] = k;
  /* The run holding the rank's first position, and the offset in it. */
  int64_t pos = ((int64_t)sp->rank * L) % n, k = 0;
  for (;; k++) {
    int64_t len = t->run_start[scratch[k] + 1] - t->run_start[scratch[k]];
    if (pos < len) break;
    pos -= len;
  }
  for (int64_t j = 0; j < L; j++) {
    int64_t run = scratch[k];
    out[j] = t->run_start[run] + pos;
    if (++pos == t->run_start[run + 1] - t->run_start[run]) {
      pos = 0;
      if (++k == nrun) k = 0; /* the padding wraps round to the start */
    }
  }
  buffer_shuffle(s, sp, epoch, out, L);
  expect_order(t, out, L, epoch);
}

/* The bounded shuffle buffer over out[0..L) (when shuffling). */
static void buffer_shuffle(const stk__source *s, stk__sampler *sp, uint64_t epoch, int64_t *out,
                           int64_t L) {
  int64_t *scratch = sp->perm;
  int64_t K = s->shuffle_buffer < L ? s->shuffle_buffer : L;
  if (!sp->shuffle || K <= 1) return;
  /* The buffer is out[0..K); the rest of out is read ahead of where the
   * output (in scratch) is written, so nothing is overwritten early. Its
   * stream is keyed by the rank (and kept apart from sample streams). */
  stk__rng rng;
  stk__rng_init(&rng, sp->seed, epoch, 0xb0ffe7000000000ULL + (uint64_t)sp->rank);
  int64_t e = 0;
  for (int64_t i = K; i < L; i++) {
    int64_t b = stk__rng_range(&rng, 0, K);
    scratch[e++] = out[b];
    out[b] = out[i];
  }
  for (int64_t left = K; left > 0; left--) {
    int64_t b = stk__rng_range(&rng, 0, left);
    scratch[e++] = out[b];
    out[b] = out[left - 1];
  }
  memcpy(out, scratch, (size_t)L * sizeof *out);
}

static void tar_plan(const stk__source *s, const int64_t *idx, int n, uint64_t epoch) {
  const tar_impl *t = s->impl;
  if (!t->parts) return;
  for (int k = 0; k < n; k++) {
    tar_member sm;
    const tar_member *m = &sm;
    if (!t->st) m = &t->m[idx[k]];
    else if (!stream_peek(t->st, idx[k], &sm)) continue; /* the scan brings it */
    if (m->damage) continue;
    /* a shard with a local copy (or one under way) needs no parts */
    if (t->cache &&
        stk__shard_cache_want(t->cache, m->shard, t->shards[m->shard], t->size[m->shard],
                              t->etag[m->shard]))
      continue;
    stk__parts_plan(t->parts, m->shard, t->shards[m->shard], t->size[m->shard], m->off - BLOCK,
                    m->size + BLOCK, epoch);
  }
}

static int64_t tar_weight(const stk__source *s, int64_t i) {
  const tar_impl *t = s->impl;
  if (t->st) return 1;
  const tar_member *m = &t->m[i];
  return m->damage ? t->lost[m->damage - 1] : 1;
}

static void tar_plan_reset(const stk__source *s) {
  const tar_impl *t = s->impl;
  if (t->parts) stk__parts_reset(t->parts);
}

/* The stream's waits end (the loader is closing). */
static void stream_stop(tar_stream *ts) {
  if (!ts) return;
  pthread_mutex_lock(&ts->mu);
  ts->stop = 1;
  pthread_cond_broadcast(&ts->cv);
  pthread_mutex_unlock(&ts->mu);
}

static void tar_cancel(const stk__source *s) {
  const tar_impl *t = s->impl;
  stream_stop(t->st);
  stk__net_cancel(t->net);
}

static void tar_net_stats(const stk__source *s, stk_stats *o) {
  const tar_impl *t = s->impl;
  if (!t->net) return;
  stk__net_stats ns;
  stk__net_get_stats(t->net, &ns);
  o->remote_bytes = ns.bytes;
  o->remote_requests = ns.requests;
  o->remote_retries = ns.retries;
  o->remote_failures = ns.failures;
  o->remote_seconds = ns.seconds;
  if (t->parts) stk__parts_memory(t->parts, &o->remote_part_bytes, &o->remote_part_peak);
  o->remote_cache_bytes = stk__shard_cache_bytes(t->cache);
  o->remote_streaming = t->st != NULL;
}

static void tar_close(stk__source *s) {
  tar_impl *t = s->impl;
  if (!t) return;
  /* the parts' transfers end before the client that carries them, and the
   * stream's scan before the parts it reads */
  stream_stop(t->st);
  stk__net_cancel(t->net);
  stream_close(t->st);
  for (int k = 0; t->first && k < t->nshards; k++)
    if (t->first[k]) {
      stk__net_wait(t->first[k], NULL, NULL, 0);
      stk__net_free(t->first[k]);
    }
  free(t->first);
  stk__shard_cache_close(t->cache);
  stk__parts_close(t->parts);
  stk__net_close(t->net);
  free(t->size);
  free(t->etag);
  for (int i = 0; i < t->nshards; i++) free(t->shards[i]);
  free(t->shards);
  free(t->run_start);
  free(t->m);
  for (int i = 0; i < t->nwhy; i++) free(t->why[i]);
  free(t->why);
  free(t->lost);
  free(t);
  s->impl = NULL;
}

static const stk__source_ops tar_ops = {.kind = "tar",
                                        .read = tar_read,
                                        .order = tar_order,
                                        .close = tar_close,
                                        .plan = tar_plan,
                                        .plan_reset = tar_plan_reset,
                                        .cancel = tar_cancel,
                                        .net_stats = tar_net_stats,
                                        .weight = tar_weight};

/* Indexes beside remote shards (stoker pack --tar wrote them): asked for
 * the first shard that has no local index; if it has one, the others are
 * taken to have theirs, and the shards are not read to open them. */
static void probe_beside(tar_impl *t, const char *index_dir) {
  for (int k = 0; k < t->nshards; k++) {
    if (has_index(t, k, index_dir)) continue;
    char u[4200];
    snprintf(u, sizeof u, "%s" SIDX_EXT, t->shards[k]);
    stk__net_req *q = stk__net_probe(t->net, u, 1u << 30, 1); /* a 404 is an answer */
    t->beside = stk__net_wait(q, NULL, NULL, 0) == STK_OK;
    stk__net_free(q);
    return;
  }
}

/* While shard k is scanned, what the next few need is requested: their
 * indexes beside them, or their first parts, so that opening costs
 * transfers, not a round trip per shard. */
static void request_ahead(tar_impl *t, int k, const char *index_dir) {
  for (int j = k; j < t->nshards && j < k + SCAN_AHEAD; j++) {
    if (t->first[j] || !t->size[j] || has_index(t, j, index_dir)) continue;
    if (t->beside) {
      char u[4200];
      snprintf(u, sizeof u, "%s" SIDX_EXT, t->shards[j]);
      t->first[j] = stk__net_probe(t->net, u, 1u << 30, 0);
    } else {
      t->first[j] = stk__net_get(t->net, t->shards[j], 0,
                                 t->size[j] < PART_SIZE ? t->size[j] : PART_SIZE, 0, 0);
    }
  }
}

/* Remote: classes.txt is asked for with the listing, in the folder the
 * root names (where list_remote looks for it, but for braces in folders),
 * so that opening costs one round trip less; *dir gets that folder. */
static stk__net_req *early_classes(stk__net *net, const char *path, char **dir) {
  const char *slash = strrchr(path, '/');
  /* (s3://bucket/name without a '/' at the end names the folder name/;
   * with one, the folder is what precedes it, as list_remote says) */
  size_t pl = strlen(path);
  /* (so does hf://datasets/OWNER/NAME/folder, listed by the Hub's tree API) */
  if ((!strncmp(path, "s3://", 5) || !strncmp(path, "hf://", 5)) && !strchr(path, '{') &&
      !has_tar_suffix(path) && !stk__tar_compressed(path) && pl && path[pl - 1] != '/')
    slash = path + pl;
  if (!slash || slash <= strstr(path, "://") + 2 || !(*dir = strndup(path, (size_t)(slash - path))))
    return NULL;
  char *u = stk__path_join(*dir, "classes.txt");
  stk__net_req *q = u ? stk__net_probe(net, u, 64u << 20, 0) : NULL; /* it may not exist */
  free(u);
  return q;
}

/* remote_memory 0: 1/32 of the machine's memory (of its cgroup's limit
 * when lower: a container), at least STK__REMOTE_MEMORY_DEFAULT and at most
 * 4 GiB. Enough parts to keep a shuffle buffer's span and the read-ahead
 * that hides a round trip (256 MiB held a loader at 20 ms to 0.6x local
 * disk, 1 GiB gave 1.02x), while 8 ranks of a node take a quarter of it. */
static uint64_t remote_memory_default(void) {
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

/* Indexes every shard (from the index folder, the index beside it, or a
 * scan), in order; each shard's samples are a run. */
static int scan_all(stk__source *s, tar_impl *t, const classlist *cl, tally *ta,
                    int32_t *maxlabel, const char *index_dir, char *msg, size_t msglen) {
  int rc = STK_OK;
  for (int k = 0; rc == STK_OK && k < t->nshards; k++) {
    int64_t before = s->ds.n;
    if (t->first) request_ahead(t, k, index_dir);
    rc = scan_shard(s, t, k, cl, ta, maxlabel, index_dir, msg, msglen);
    if (rc == STK_OK && s->ds.n > before) t->run_start[t->nrun++] = before;
  }
  if (rc == STK_OK) rc = weigh_damage(t, s->ds.n, msg, msglen);
  return rc;
}

int stk__tar_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                  size_t msglen) {
  tar_impl *t = calloc(1, sizeof *t);
  if (!t) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  s->impl = t;
  s->ops = &tar_ops; /* close() frees what was made on any failure */
  if (stk__is_url(path)) {
    int rc = stk__net_open(&t->net, opt ? opt->read_timeout : 0, msg, msglen);
    if (rc) return rc;
  }
  char *dir = NULL;
  classlist cl = {0};
  tally ta;
  memset(&ta, 0, sizeof ta);
  int32_t maxlabel = -1;
  char *early_dir = NULL;
  stk__net_req *early = t->net ? early_classes(t->net, path, &early_dir) : NULL;
  int rc = list_shards(path, t, &dir, msg, msglen);
  if (rc == STK_OK && t->nshards == 0)
    rc = stk__fail(msg, msglen, STK_EEMPTY, "%s holds no .tar shard", path);
  if (rc == STK_OK && t->net) {
    uint64_t budget = opt && opt->remote_memory ? opt->remote_memory : remote_memory_default();
    if (stk__parts_open(&t->parts, t->net, PART_SIZE, budget, t->nshards, t->size,
                        (const char *const *)t->shards))
      rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  if (rc == STK_OK && t->net && opt && opt->cache_dir && opt->cache_dir[0])
    rc = stk__shard_cache_open(&t->cache, opt->cache_dir, opt->cache_bytes, t->net, t->nshards,
                               msg, msglen);
  if (rc == STK_OK) {
    rc = read_classes(dir, t->net, early, early_dir, &cl, msg, msglen);
    early = NULL;
  }
  if (early) {
    stk__net_wait(early, NULL, NULL, 0);
    stk__net_free(early);
  }
  free(early_dir);
  if (rc == STK_OK && !(t->run_start = malloc(((size_t)t->nshards + 1) * sizeof *t->run_start)))
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  /* Remote shards: the first part of the next few shards is requested
   * while one is scanned, so that opening costs transfers, not a round trip
   * per shard. */
  if (rc == STK_OK && t->net && !(t->first = calloc((size_t)t->nshards, sizeof *t->first)))
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  /* Foreign shards may stream: shard 0's first part is asked for with the
   * probe for an index beside the shards, so that the first batch comes
   * two round trips and a part after the listing's. */
  int may_stream = rc == STK_OK && stream_wanted(t, opt);
  if (may_stream) rc = stream_begin(t, opt, msg, msglen);
  if (rc == STK_OK && t->first) probe_beside(t, opt ? opt->index_dir : NULL);
  /* Without classes.txt the stream knows the classes of shard 0's first
   * part only: soft labels need them all (mix_classes says how many, or
   * the shards are read at open). */
  int mixing = opt && (opt->mix_mixup_alpha > 0 || opt->mix_cutmix_alpha > 0);
  if (may_stream && !cl.present && mixing && !opt->mix_classes) may_stream = 0;
  if (may_stream && rc == STK_OK && !t->beside) {
    rc = stream_open(s, t, opt, &cl, msg, msglen);
    free(dir);
    return rc;
  }
  if (t->st) { /* indexes beside the shards: they are read instead */
    stream_close(t->st);
    t->st = NULL;
  }
  if (rc == STK_OK) rc = scan_all(s, t, &cl, &ta, &maxlabel, opt ? opt->index_dir : NULL, msg, msglen);
  if (rc == STK_OK) {
    t->run_start[t->nrun] = s->ds.n;
    write_note(s->note, sizeof s->note, &ta);
    if (t->real == 0)
      rc = stk__fail(msg, msglen, STK_EEMPTY, "the tar shards of %s hold no usable sample%s%s",
                     path, s->note[0] ? ": " : "", s->note);
  }
  if (rc == STK_OK) rc = name_classes(s, &cl, maxlabel, msg, msglen);
  classlist_free(&cl);
  free(dir);
  return rc;
}

/* ---- the index beside a written shard (tar_write.c) ----------------------- */

/* The ETags S3 gives the local shard at `path` once uploaded: the MD5 of
 * its bytes (one PUT), and for a multipart upload in parts of 8 MiB (the
 * AWS CLI's default) and of 16 MiB (stoker pack's) the MD5 of the parts'
 * MD5s, "-N"; as "MD5\nE8\nE16" into out. One pass over the file. */
static int shard_etags(const char *path, char *out, size_t cap, char *err, size_t errlen) {
  static const uint64_t part[2] = {8u << 20, 16u << 20};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t *b = fd >= 0 ? malloc(1u << 20) : NULL;
  if (!b) {
    if (fd >= 0) close(fd);
    return stk__fail(err, errlen, fd < 0 ? STK_EIO : STK_ENOMEM, "cannot hash %s: %s", path,
                     fd < 0 ? strerror(errno) : "out of memory");
  }
  stk__md5 all, cur[2], outer[2];
  uint64_t off = 0, nparts[2] = {0, 0};
  stk__md5_init(&all);
  for (int k = 0; k < 2; k++) stk__md5_init(&cur[k]), stk__md5_init(&outer[k]);
  ssize_t r;
  uint8_t d[16];
  /* (1 MiB reads: a part boundary, a multiple of 1 MiB, never falls inside one) */
  while ((r = pread(fd, b, 1u << 20, (off_t)off)) > 0 || (r < 0 && errno == EINTR)) {
    if (r < 0) continue;
    stk__md5 *const three[3] = {&all, &cur[0], &cur[1]};
    stk__md5_update3(three, b, (size_t)r); /* the three chains at once */
    off += (uint64_t)r;
    for (int k = 0; k < 2; k++) {
      if (off % part[k]) continue;
      stk__md5_final(&cur[k], d);
      stk__md5_update(&outer[k], d, 16);
      stk__md5_init(&cur[k]);
      nparts[k]++;
    }
  }
  int e = errno;
  free(b);
  close(fd);
  if (r < 0) return stk__fail(err, errlen, STK_EIO, "cannot hash %s: %s", path, strerror(e));
  size_t len = 0;
  for (int k = -1; k < 2; k++) {
    if (k >= 0 && off % part[k]) { /* the last part, shorter */
      stk__md5_final(&cur[k], d);
      stk__md5_update(&outer[k], d, 16);
      nparts[k]++;
    }
    stk__md5_final(k < 0 ? &all : &outer[k], d);
    for (int i = 0; i < 16 && len + 3 < cap; i++) len += (size_t)snprintf(out + len, cap - len, "%02x", d[i]);
    if (k >= 0) len += (size_t)snprintf(out + len, cap - len, "-%llu", (unsigned long long)nparts[k]);
    if (k < 1) len += (size_t)snprintf(out + len, cap - len, "\n");
  }
  return STK_OK;
}

int stk__tar_write_index(const char *shard, char *err, size_t errlen) {
  char idx[4400], key[200], etags[160];
  if (snprintf(idx, sizeof idx, "%s" SIDX_EXT, shard) >= (int)sizeof idx)
    return stk__fail(err, errlen, STK_EINVAL, "path too long: %s", shard);
  char *one_name[1] = {(char *)shard};
  tar_impl one;
  memset(&one, 0, sizeof one);
  one.shards = one_name;
  one.nshards = 1;
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  int rc = read_scan(&one, 0, &sc, err, errlen);
  struct stat st;
  if (rc == STK_OK && stat(shard, &st) != 0)
    rc = stk__fail(err, errlen, STK_EIO, "cannot stat %s: %s", shard, strerror(errno));
  if (rc == STK_OK) rc = shard_etags(shard, etags, sizeof etags, err, errlen);
  if (rc == STK_OK) {
    beside_key((uint64_t)st.st_size, etags, key, sizeof key);
    rc = save_scan(idx, key, &sc);
    if (rc) stk__fail(err, errlen, rc, "cannot write %s", idx);
  }
  shard_scan_free(&sc);
  return rc;
}
