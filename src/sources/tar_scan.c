/* tar_scan.c: one tar shard's scan, and its saved form (see tar_scan.h).
 * The scan reads the 512-byte headers (and the few bytes of each .cls
 * member, and of GNU long names and pax headers) and seeks over the data.
 * The shards are untrusted input: every length is checked against the
 * shard's size before it is used, nothing larger than STK__TAR_EXT_MAX is
 * allocated for a header, and what cannot be used is left out and counted
 * (the tally). Damage that loses members (a shard cut short, a header that
 * is not one, a zero-filled region) ends the scan, in its `damage`. */
#define _POSIX_C_SOURCE 200809L
#include "sources/tar_scan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "sources/index.h"

#define BLOCK STK__TAR_BLOCK
/* tar's default record: an empty archive written by tar is this long */
#define EMPTY_TAR_MAX 10240

void stk__tar_tally_add(tally *t, const tally *u) {
  t->unsafe += u->unsafe, t->link += u->link, t->special += u->special, t->other += u->other;
  t->dup += u->dup, t->no_cls += u->no_cls, t->bad_cls += u->bad_cls, t->no_img += u->no_img;
  t->bad_ext += u->bad_ext, t->truncated += u->truncated, t->bad_header += u->bad_header;
  t->zeroed += u->zeroed, t->empty += u->empty;
  if (!t->first[0]) memcpy(t->first, u->first, sizeof t->first);
}

void stk__tar_left_out(tally *t, int64_t *counter, const char *shard, const char *name,
                       const char *why) {
  (*counter)++;
  /* (the return value is looked at: truncating a long name is fine here) */
  if (!t->first[0] && snprintf(t->first, sizeof t->first, "%s:%s (%s)", shard, name, why) < 0)
    t->first[0] = '\0';
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

/* Where the zeros that start at `off` end: the offset of the first
 * non-zero byte after them, or fsize when the rest of the file is zeros (the
 * end-of-archive blocks and the record padding after them); -1 on a read
 * error. Reads only the zeros, normally a few KiB at the end of a shard. */
static int64_t zeros_end(stk__object *fd, uint64_t off, uint64_t fsize) {
  unsigned char b[16384];
  while (off < fsize) {
    size_t n = fsize - off < sizeof b ? (size_t)(fsize - off) : sizeof b;
    ssize_t r = stk__objstore_reader_pread(fd, b, n, off);
    if (r <= 0) return r < 0 ? -1 : (int64_t)fsize;
    for (ssize_t i = 0; i < r; i++)
      if (b[i]) return (int64_t)(off + (uint64_t)i);
    off += (uint64_t)r;
  }
  return (int64_t)fsize;
}

#define DAMAGE(d, nm, ...)                                          \
  do {                                                              \
    snprintf((d)->name, sizeof (d)->name, "%s", (nm));              \
    if (snprintf((d)->why, sizeof (d)->why, __VA_ARGS__) < 0)       \
      (d)->why[0] = '\0';                                           \
  } while (0)

void stk__tar_scan_free(shard_scan *sc) {
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

int stk__tar_lose(shard_scan *sc, const char *name, const char *why) {
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
    stk__tar_left_out(ta, &ta->truncated, path, "end", "the shard ends without its end-of-archive blocks");
    DAMAGE(dm, where,
           "the shard ends without its end-of-archive blocks%s%s: it is truncated, the members "
           "after that point are lost",
           prev[0] ? " after member " : "", prev);
    return 1;
  }
  ssize_t r = stk__objstore_reader_pread(st->fd, st->h, BLOCK, off);
  if (r < 0) {
    st->rc = stk__fail(st->msg, st->msglen, STK_EIO, "cannot read shard %s: %s", path,
                       stk__objstore_reader_why(st->fd));
    return 1;
  }
  if (r < BLOCK) {
    stk__tar_left_out(ta, &ta->truncated, path, where, "truncated inside a header");
    DAMAGE(dm, where, "the shard ends inside a tar header: it is truncated, the members "
                      "after that point are lost");
    return 1;
  }
  if (!stk__ustar_all_zero(st->h)) return 0;
  /* The end of the archive, when only zeros follow. Data after the zeros
   * means that a region was zero-filled: the members in it and after it
   * would be lost without a word. */
  int64_t z = zeros_end(st->fd, off, fsize);
  if (z >= 0 && off == 0 && fsize > EMPTY_TAR_MAX) {
    /* An empty archive is at most one record of zeros; a larger shard of
     * nothing but zeros was overwritten, and its members are lost. */
    stk__tar_left_out(ta, &ta->zeroed, path, where, "the shard is all zeros");
    DAMAGE(dm, where,
           "the shard is %llu zero bytes: it holds no member (overwritten with zeros?), its "
           "samples are lost",
           (unsigned long long)fsize);
  } else if (z < 0) {
    st->rc = stk__fail(st->msg, st->msglen, STK_EIO, "cannot read shard %s: %s", path,
                       stk__objstore_reader_why(st->fd));
  } else if (off == 0 && (uint64_t)z == fsize) {
    /* A valid empty archive, where a shard's samples were: replaced by an
     * empty tar, or written by a job that failed. Its samples are lost, and
     * a note and a failing stand-in say so, as for a shard cut short. */
    stk__tar_left_out(ta, &ta->empty, path, where, "an empty archive");
    DAMAGE(dm, where,
           "the shard is an empty tar archive (%llu bytes, no member): its samples are lost "
           "(replaced by an empty archive, or written by a job that failed?)",
           (unsigned long long)fsize);
  } else if ((uint64_t)z < fsize) {
    stk__tar_left_out(ta, &ta->zeroed, path, where, "a zero-filled region with data after it");
    DAMAGE(dm, where,
           "%llu zero bytes%s%s, then data at offset %llu: a zero-filled region; the members in "
           "it and after it are lost",
           (unsigned long long)((uint64_t)z - off), prev[0] ? " after member " : "", prev,
           (unsigned long long)z);
  }
  return 1;
}

/* An extended header (GNU long name 'L', pax 'x') at data: the next
 * member's name and maybe its size, into st->pd. 0 to go on, 1 when the
 * scan ends (the shard cut inside it, or st->rc). */
static int scan_extended(scan_state *st, char type, uint64_t size, uint64_t data) {
  stk__ustar_pending *pd = &st->pd;
  if (size > STK__TAR_EXT_MAX) {
    stk__ustar_pax_clear(pd);
    pd->drop = type == 'L' ? "its GNU long name is over 64 KiB" : "its pax header is over 64 KiB";
    return 0;
  }
  if (!st->ext && !(st->ext = malloc(STK__TAR_EXT_MAX + 1))) {
    st->rc = stk__fail(st->msg, st->msglen, STK_ENOMEM, "out of memory");
    return 1;
  }
  if (stk__objstore_reader_pread(st->fd, st->ext, (size_t)size, data) != (ssize_t)size) {
    tally *ta = &st->sc->ta;
    stk__tar_left_out(ta, &ta->truncated, st->path, st->where, "truncated inside an extended header");
    DAMAGE(&st->dm, st->where, "the shard ends inside an extended header: it is truncated, the "
                               "members after that point are lost");
    return 1;
  }
  st->ext[size] = '\0';
  if (type == 'x') {
    if (!stk__ustar_pax(st->ext, (size_t)size, pd)) pd->drop = "its pax header is malformed";
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
    stk__tar_left_out(ta, &ta->dup, st->path, name, "a duplicate key in the shard");
    return is_img ? "a duplicate key in the shard" : NULL;
  }
  if (is_cls) {
    kr->has_cls = 1;
    char cb[STK__TAR_CLS_MAX];
    if (size <= STK__TAR_CLS_MAX &&
        stk__objstore_reader_pread(st->fd, cb, (size_t)size, data) == (ssize_t)size)
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
    stk__tar_left_out(ta, &ta->bad_ext, path, name, why_out = st->pd.drop);
  } else if (type == '5') {
    /* a folder: nothing to read */
  } else if (type == '1' || type == '2') {
    stk__tar_left_out(ta, &ta->link, path, name, why_out = "a link, not a file");
  } else if (type == '3' || type == '4' || type == '6') {
    stk__tar_left_out(ta, &ta->special, path, name, why_out = "a device or FIFO, not a file");
  } else if (type != '0' && type != '\0' && type != '7') {
    stk__tar_left_out(ta, &ta->other, path, name, why_out = "a tar member type stoker does not read");
  } else if (name[0] && stk__ustar_unsafe_name(name)) {
    stk__tar_left_out(ta, &ta->unsafe, path, name, why_out = "an absolute name or one with '..'");
  } else {
    why_out = scan_keyed(st, name, size, data);
  }
  if (st->rc == STK_OK && why_out && name[0] && stk__has_image_extension(name) &&
      stk__tar_lose(st->sc, name, why_out))
    st->rc = stk__fail(st->msg, st->msglen, STK_ENOMEM, "out of memory");
}

/* One step of the scan at st->off: the header, then an extended header or
 * a member. 0 to go on (st->off at the next header), 1 when the scan ends. */
int stk__tar_scan_step(scan_state *st) {
  tally *ta = &st->sc->ta;
  snprintf(st->where, sizeof st->where, "offset %llu", (unsigned long long)st->off);
  if (scan_at_end(st)) return 1;
  const unsigned char *h = st->h;
  uint64_t size, fsize = st->fsize;
  if (!stk__ustar_checksum_ok(h) || !stk__ustar_number(h + 124, 12, &size)) {
    stk__tar_left_out(ta, &ta->bad_header, st->path, st->where,
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
  stk__ustar_name(h, hname);
  const char *name = !is_ext && st->pd.name ? st->pd.name : hname;
  uint64_t data = st->off + BLOCK;
  if (size > fsize || data + size > fsize) {
    stk__tar_left_out(ta, &ta->truncated, st->path, st->where,
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
    stk__ustar_pax_clear(&st->pd);
  }
  st->off = next;
  return 0;
}

int stk__tar_scan_done(scan_state *st, shard_scan *sc) {
  int rc = st->rc;
  stk__objstore_reader_close(st->fd);
  free(st->ext);
  stk__ustar_pax_clear(&st->pd);
  if (sc) {
    sc->ks = st->ks;
    sc->dm = st->dm;
  } else {
    keyset_free(&st->ks);
  }
  free(st);
  return rc;
}

scan_state *stk__tar_scan_begin(const char *path, stk__object *fd, shard_scan *sc, char *msg,
                                size_t msglen) {
  scan_state *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  *st = (scan_state){.path = path, .fd = fd, .fsize = stk__objstore_reader_size(fd), .sc = sc,
                     .dm = {"", ""}, .msg = msg, .msglen = msglen};
  return st;
}

int stk__tar_read_scan(stk__objstore *store, int k, shard_scan *sc, char *msg, size_t msglen) {
  char why[256];
  stk__object *o;
  if (stk__objstore_reader(store, k, 0, 0, &o, why, sizeof why))
    return stk__fail(msg, msglen, STK_EIO, "shard %s: %s", store->name[k], why);
  scan_state *st = stk__tar_scan_begin(store->name[k], o, sc, msg, msglen);
  if (!st) {
    stk__objstore_reader_close(o);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  while (!stk__tar_scan_step(st)) {
  }
  return stk__tar_scan_done(st, sc);
}

/* ---- the saved form ------------------------------------------------------- */
/* A shard's scan, saved: beside the shard (stoker pack --tar), or for a
 * remote shard in the index folder under the name the object store gives
 * it (from its URL, size and ETag), so that the next open reads one small
 * local file instead of the whole shard. The file holds a checksum of its
 * body and names its key inside: one that does not match (the store's
 * stk__objstore_key_matches) is scanned again. */
#define SIDX_MAGIC "STKTIDX3"   /* 13 counters; 2 (12, no `empty`) is still read */
#define SIDX_MAGIC2 "STKTIDX2"

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

int stk__tar_save_scan(const char *path, const char *key, const shard_scan *sc) {
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

int stk__tar_load_scan(const char *path, const char *key, uint64_t shard_size, shard_scan *sc) {
  stk__buf b = {0};
  stk__bytes by;
  char why[256];
  int rc = stk__read_whole_file(path, &b, 1u << 30, &by, why, sizeof why)
               ? STK_EIO
               : stk__tar_load_scan_mem(by.data, by.len, key, shard_size, sc);
  stk__buf_free(&b);
  return rc;
}

/* A saved scan (untrusted: a damaged or foreign file is refused, and the
 * shard is scanned instead) of a shard of shard_size bytes: every image
 * member it lists lies after a header inside the shard, and a label it
 * says is valid is one a .cls can hold. */
int stk__tar_load_scan_mem(const uint8_t *data, size_t len, const char *key, uint64_t shard_size,
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
  if (rc == STK_OK && !stk__objstore_key_matches(rstr(&r), key)) rc = STK_ESTALE;
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
    if (!r.err && stk__tar_lose(sc, ln, lw)) rc = STK_ENOMEM;
  }
  if (rc == STK_OK && (r.err || r.p != r.end)) rc = STK_EFORMAT;
  return rc;
}

void stk__tar_index_seal(uint8_t *data, size_t len) {
  if (len < 16) return;
  uint64_t h = stk__hash64(data + 16, len - 16, 0x5bd1e995);
  memcpy(data + 8, &h, 8);
}
