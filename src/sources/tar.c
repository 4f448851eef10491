/* tar.c: WebDataset tar shards read as a source (see source.h): the
 * samples of each shard's scan (tar_scan.c), their shard-by-shard epoch
 * order, and their reads through the store (store.h), local and remote
 * alike. See tar.h and docs/storage.md.
 *
 * The source indexes every shard when it is opened (from the index folder,
 * the index beside the shard, or a scan); remote shards without an index
 * may instead be indexed by a first epoch that streams them (store.h's
 * stream, at the end of this file). What a scan left out is counted in the
 * source's note.
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

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/options.h"
#include "sources/md5.h"
#include "sources/store.h"
#include "sources/tar_scan.h"

#define BLOCK STK__TAR_BLOCK
#define PART STK__REMOTE_PART_BYTES
/* remote shards: how many shards ahead of the one scanned have their
 * first part (or index beside them) requested at open */
#define SCAN_AHEAD 16

/* A sample: its image member's data in its shard (obj), the hash of its
 * header at open, and 1 + the index in tar_impl.why of a damaged shard's
 * stand-in, whose read fails. */
typedef stk__span tar_member;

/* The class names of classes.txt, when the folder has one. */
typedef struct {
  char **v;
  int n;
  int present;
} classlist;

typedef struct {
  stk__objstore *store;   /* the shards (store->name[k], sorted by name) and their bytes */
  int nrun;            /* shards that hold at least one sample */
  int64_t *run_start;  /* nrun + 1: run k holds samples [run_start[k], run_start[k+1]) */
  tar_member *m;       /* one per sample */
  char **why;          /* nwhy reasons of the damaged shards' stand-ins */
  int nwhy;
  int64_t real;        /* samples that are members, not stand-ins */
  int64_t *lost;       /* per stand-in (as why): the samples it stands for */
  stk__stream *st;     /* the first epoch's stream, or NULL (see the end) */
  classlist cl;        /* the stream's classes */
} tar_impl;

static void classlist_free(classlist *c) {
  for (int i = 0; i < c->n; i++) free(c->v[i]);
  free(c->v);
  memset(c, 0, sizeof *c);
}

/* Appends one line (NUL-ended) to the class names. */
static int classes_add(classlist *c, const char *line, int *cap, const char *name, char *msg,
                       size_t msglen) {
  if (c->n >= STK__TAR_LABEL_MAX)
    return stk__fail(msg, msglen, STK_EINVAL, "%s names more than %d classes", name,
                     STK__TAR_LABEL_MAX);
  if (c->n == *cap) {
    *cap = *cap ? *cap * 2 : 64;
    char **v = realloc(c->v, (size_t)*cap * sizeof *v);
    if (!v) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    c->v = v;
  }
  if (!(c->v[c->n] = strdup(line))) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  c->n++;
  return STK_OK;
}

/* classes.txt beside the shards (through the store: the remote row asked
 * for it with the listing), one name a line; none: the label numbers. */
static int read_classes(stk__objstore *store, classlist *c, char *msg, size_t msglen) {
  memset(c, 0, sizeof *c);
  uint8_t *body;
  size_t len;
  int rc = stk__objstore_sibling(store, "classes.txt", &body, &len, msg, msglen);
  if (rc || !body) return rc;
  char *name = stk__path_join(store->dir, "classes.txt");
  c->present = 1;
  int cap = 0;
  for (size_t at = 0; rc == STK_OK && name && at < len;) {
    char *nl = memchr(body + at, '\n', len - at);
    size_t e = nl ? (size_t)(nl - (char *)body) : len, l = e - at;
    while (l > 0 && (body[at + l - 1] == '\r' || body[at + l - 1] == '\n')) l--;
    char *line = strndup((char *)body + at, l);
    rc = line ? classes_add(c, line, &cap, name, msg, msglen)
              : stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    free(line);
    at = e + 1;
  }
  if (!name) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (rc == STK_OK && c->n == 0)
    rc = stk__fail(msg, msglen, STK_EINVAL, "%s names no class", name);
  free(name);
  free(body);
  if (rc) classlist_free(c);
  return rc;
}

/* nm = "SHARD:NAME", a sample's name. STK_OK or STK_ENOMEM. */
static int sample_name(stk__buf *nm, const char *path, const char *name) {
  size_t plen = strlen(path), l = strlen(name);
  if (stk__buf_reserve(nm, plen + l + 2)) return STK_ENOMEM;
  memcpy(nm->p, path, plen);
  ((char *)nm->p)[plen] = ':';
  memcpy((char *)nm->p + plen + 1, name, l + 1);
  return STK_OK;
}

/* Why key r of a scan is not a sample, or NULL when it is one. */
static const char *rec_refusal(const rec *r, const classlist *cl) {
  if (!r->has_cls) return "no .cls member";
  if (r->cls_ok && r->label < (cl->present ? cl->n : STK__TAR_LABEL_MAX)) return NULL;
  return cl->present ? "its .cls is not a class index of classes.txt"
                     : "its .cls is not a non-negative integer below 1048576";
}

/* A sample that stands for lost ones: named SHARD:NAME, its read fails with
 * `why` (label 0: it is never delivered); it counts as `weight` samples
 * against max_skipped_fraction. STK_OK or STK_ENOMEM. */
static int stand_in(stk__source *s, tar_impl *t, int32_t shard, const char *name,
                    const char *why, int64_t weight, stk__buf *nm) {
  char **wv = realloc(t->why, ((size_t)t->nwhy + 1) * sizeof *wv);
  if (!wv) return STK_ENOMEM;
  t->why = wv;
  int64_t *lv = realloc(t->lost, ((size_t)t->nwhy + 1) * sizeof *lv);
  if (!lv) return STK_ENOMEM;
  t->lost = lv;
  if (!(wv[t->nwhy] = strdup(why))) return STK_ENOMEM;
  if (sample_name(nm, t->store->name[shard], name)) {
    free(wv[t->nwhy]);
    return STK_ENOMEM;
  }
  lv[t->nwhy] = weight;
  t->nwhy++;
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
  const char *path = t->store->name[shard];
  keyset ks = sc->ks;
  damage dm = sc->dm;
  int rc = STK_OK;
  stk__tar_tally_add(ta, &sc->ta);
  /* Samples in the order their keys first appear in the shard. */
  stk__buf nm = {0};
  for (size_t i = 0; rc == STK_OK && i < ks.n; i++) {
    const rec *r = &ks.r[i];
    if (!r->img_name) {
      char nb[300];
      snprintf(nb, sizeof nb, "%s.cls", r->key);
      stk__tar_left_out(ta, &ta->no_img, path, nb, "a .cls without an image");
      continue;
    }
    const char *why = rec_refusal(r, cl);
    if (why) {
      stk__tar_left_out(ta, !r->has_cls ? &ta->no_cls : &ta->bad_cls, path, r->img_name, why);
      if ((rc = stk__tar_lose(sc, r->img_name, why))) break;
      continue;
    }
    if ((rc = sample_name(&nm, path, r->img_name))) break;
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

int stk__tar_index_load(const uint8_t *data, size_t len, const char *key, const char *shard,
                        uint64_t shard_size, int nclasses, stk__dataset *ds, uint64_t **span,
                        char *msg, size_t msglen) {
  memset(ds, 0, sizeof *ds);
  *span = NULL;
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  int rc = stk__tar_load_scan_mem(data, len, key, shard_size, &sc);
  if (rc) {
    stk__tar_scan_free(&sc);
    return stk__fail(msg, msglen, rc, "the saved scan is refused");
  }
  char *one[1] = {(char *)shard};
  stk__objstore store = {.n = 1, .name = one}; /* a table of one name, read by add_scan */
  tar_impl t;
  memset(&t, 0, sizeof t);
  t.store = &store;
  stk__source s;
  memset(&s, 0, sizeof s);
  classlist cl = {NULL, nclasses, nclasses > 0};
  tally ta;
  memset(&ta, 0, sizeof ta);
  int32_t maxlabel = -1;
  rc = add_scan(&s, &t, 0, &sc, &cl, &ta, &maxlabel, msg, msglen);
  stk__tar_scan_free(&sc);
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
  int64_t *real = calloc((size_t)t->store->n + 1, sizeof *real);
  char *hurt = calloc((size_t)t->store->n + 1, 1);
  if (!real || !hurt) {
    free(real);
    free(hurt);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  for (int64_t i = 0; i < n; i++) {
    const tar_member *m = &t->m[i];
    if (!m->damage) real[m->obj]++;
    else if (t->lost[m->damage - 1] < 0) hurt[m->obj] = 1;
  }
  int64_t k = 0;
  for (int i = 0; i < t->store->n; i++)
    if (!hurt[i]) k++;
  /* the undamaged shards' counts, sorted, for the median */
  int64_t *whole = malloc(((size_t)k + 1) * sizeof *whole), j = 0;
  for (int i = 0; whole && i < t->store->n; i++)
    if (!hurt[i]) whole[j++] = real[i];
  int64_t median = 0;
  if (whole && k) {
    qsort(whole, (size_t)k, sizeof *whole, cmp_i64);
    median = whole[k / 2];
  }
  for (int64_t i = 0; i < n; i++) {
    const tar_member *m = &t->m[i];
    if (m->damage && t->lost[m->damage - 1] < 0) {
      int64_t w = median - real[m->obj];
      t->lost[m->damage - 1] = w > 1 ? w : 1;
      say_lost(t, m->damage - 1);
    }
  }
  free(whole);
  free(real);
  free(hurt);
  return STK_OK;
}

/* One shard's scan: from the index folder, the index beside it (requested
 * ahead), or read; kept in the index folder when it came from elsewhere (a
 * cache that cannot be written costs the next open a scan, no more). */
static int shard_scan_of(stk__objstore *store, int32_t shard, shard_scan *sc, char *msg,
                         size_t msglen) {
  char ipath[4200] = "", key[4400];
  int rc = STK_EIO, remote = stk__objstore_is_remote(store);
  uint64_t size = store->size[shard];
  stk__objstore_index_key(store, shard, key, sizeof key);
  if (remote && stk__objstore_index_path(store, shard, ipath, sizeof ipath) == STK_OK)
    rc = stk__tar_load_scan(ipath, key, size, sc);
  uint8_t *data;
  size_t len;
  if (rc && store->beside && stk__objstore_beside(store, shard, &data, &len) == STK_OK) {
    char bkey[200];
    stk__tar_scan_free(sc);
    memset(sc, 0, sizeof *sc);
    stk__objstore_beside_key(size, store->etag[shard], bkey, sizeof bkey);
    rc = stk__tar_load_scan_mem(data, len, bkey, size, sc);
    free(data);
    if (rc == STK_OK && ipath[0]) stk__tar_save_scan(ipath, key, sc);
  }
  if (rc) {
    stk__tar_scan_free(sc);
    memset(sc, 0, sizeof *sc);
    rc = stk__tar_read_scan(store, shard, sc, msg, msglen);
    if (rc == STK_OK && ipath[0]) stk__tar_save_scan(ipath, key, sc);
  }
  return rc;
}

static int scan_shard(stk__source *s, tar_impl *t, int32_t shard, const classlist *cl,
                      tally *ta, int32_t *maxlabel, char *msg, size_t msglen) {
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  int rc = shard_scan_of(t->store, shard, &sc, msg, msglen);
  if (rc == STK_OK) rc = add_scan(s, t, shard, &sc, cl, ta, maxlabel, msg, msglen);
  stk__tar_scan_free(&sc);
  return rc;
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

/* What a listing keeps: .tar shards; a compressed one is refused. */
static int keep_shard(const char *name, int *keep, char *msg, size_t msglen) {
  *keep = 0;
  if (stk__tar_compressed(name)) return refuse_compressed(name, msg, msglen);
  *keep = has_tar_suffix(name);
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

/* ---- the source's operations ---------------------------------------------- */

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
    int rc = stk__stream_get(t->st, i, &sm, &label, msg, msglen);
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
  int rc = stk__objstore_read(t->store, m->obj, m->off - BLOCK, m->size + BLOCK, buf->p,
                           &out->bytes_read, msg, msglen);
  if (rc) return rc;
  if (out->bytes_read < m->size + BLOCK)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the shard is truncated: it ends %llu bytes into this member of %llu "
                     "(it changed since it was opened)",
                     (unsigned long long)(out->bytes_read > BLOCK ? out->bytes_read - BLOCK : 0),
                     (unsigned long long)m->size);
  if (stk__hash64(buf->p, BLOCK, 0) != m->hhash)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the member's tar header is not the one read when the shard was opened (the "
                     "shard was zero-filled or overwritten since)");
  out->data = (const uint8_t *)buf->p + BLOCK;
  out->len = (size_t)m->size;
  return STK_OK;
}

/* Remote shards: the store learns which reads the epoch holds. */
static void expect_order(const tar_impl *t, const int64_t *out, int64_t L, uint64_t epoch) {
  if (!stk__objstore_is_remote(t->store)) return;
  int32_t *obj = malloc(((size_t)L + 1) * sizeof *obj);
  uint64_t *off = malloc(((size_t)L + 1) * sizeof *off);
  for (int64_t j = 0; obj && off && j < L; j++) {
    const tar_member *m = &t->m[out[j]];
    obj[j] = m->damage ? -1 : m->obj;
    off[j] = m->damage ? 0 : m->off - BLOCK;
  }
  if (obj && off) stk__objstore_expect(t->store, epoch, L, obj, off);
  free(obj); /* without memory the store goes by recency alone */
  free(off);
}

/* This rank's order of an epoch (docs/storage.md has the rule): the runs of
 * samples of each shard in a per-epoch permutation of the shards, then a
 * bounded shuffle buffer when shuffling (sampler.c). The stream: position
 * j is its j-th sample, in every epoch of this table (the first epoch's
 * shard order; a reopen after it is exact). */
static void tar_order(const stk__source *s, stk__sampler *sp, uint64_t epoch, int64_t *out) {
  const tar_impl *t = s->impl;
  int64_t L = sp->num_samples;
  if (t->st) {
    stk__stream_length(t->st, L);
    for (int64_t j = 0; j < L; j++) out[j] = j;
  } else {
    stk__sampler_runs(sp, epoch, t->run_start, t->nrun, out);
  }
  stk__sampler_buffer_shuffle(sp, epoch, s->shuffle_buffer, out, L);
  if (!t->st) expect_order(t, out, L, epoch);
}

static void tar_plan(const stk__source *s, const int64_t *idx, int n, uint64_t epoch) {
  const tar_impl *t = s->impl;
  if (!stk__objstore_is_remote(t->store)) return;
  for (int k = 0; k < n; k++) {
    tar_member sm;
    const tar_member *m = &sm;
    if (!t->st) m = &t->m[idx[k]];
    else if (!stk__stream_peek(t->st, idx[k], &sm)) continue; /* the scan brings it */
    if (!m->damage) stk__objstore_plan(t->store, m->obj, m->off - BLOCK, m->size + BLOCK, epoch);
  }
}

static int64_t tar_weight(const stk__source *s, int64_t i) {
  const tar_impl *t = s->impl;
  if (t->st) return 1;
  const tar_member *m = &t->m[i];
  return m->damage ? t->lost[m->damage - 1] : 1;
}

static void tar_plan_reset(const stk__source *s) {
  stk__objstore_plan_reset(((const tar_impl *)s->impl)->store);
}

static void tar_cancel(const stk__source *s) {
  const tar_impl *t = s->impl;
  stk__stream_stop(t->st);
  stk__objstore_cancel(t->store);
}

static void tar_net_stats(const stk__source *s, stk_stats *o) {
  const tar_impl *t = s->impl;
  stk__objstore_stats(t->store, o);
  o->remote_streaming = t->st != NULL;
}

static void tar_close(stk__source *s) {
  tar_impl *t = s->impl;
  if (!t) return;
  /* the stream's waits end and the store's transfers fail before the
   * stream's scan is joined, and the scan ends before the store it reads */
  stk__stream_stop(t->st);
  stk__objstore_cancel(t->store);
  stk__stream_close(t->st);
  stk__objstore_close(t->store);
  classlist_free(&t->cl);
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

/* Indexes every shard (from the index folder, the index beside it, or a
 * scan), in order; each shard's samples are a run. Remote: while shard k
 * is scanned, what the next few need is requested. */
static int scan_all(stk__source *s, tar_impl *t, const classlist *cl, tally *ta,
                    int32_t *maxlabel, char *msg, size_t msglen) {
  int rc = STK_OK;
  for (int k = 0; rc == STK_OK && k < t->store->n; k++) {
    int64_t before = s->ds.n;
    stk__objstore_open_ahead(t->store, k, SCAN_AHEAD, STK__TAR_INDEX_EXT);
    rc = scan_shard(s, t, k, cl, ta, maxlabel, msg, msglen);
    if (rc == STK_OK && s->ds.n > before) t->run_start[t->nrun++] = before;
  }
  if (rc == STK_OK) rc = weigh_damage(t, s->ds.n, msg, msglen);
  return rc;
}

/* The shards of `path` listed, their store ready, classes.txt read. */
static int open_store(tar_impl *t, const char *path, const stk_options *opt, classlist *cl,
                      char *msg, size_t msglen) {
  stk__objstore_config cfg = {0};
  if (opt)
    cfg = (stk__objstore_config){opt->read_timeout, opt->remote_memory, opt->cache_dir,
                              opt->cache_bytes, opt->index_dir};
  int rc = stk__objstore_open(&t->store, path, &cfg, msg, msglen);
  /* (a local file is refused by name; remote names are refused as listed,
   * each name of a brace range on its own) */
  if (rc == STK_OK && !stk__objstore_is_remote(t->store) && stk__tar_compressed(path))
    rc = refuse_compressed(path, msg, msglen);
  if (rc == STK_OK) rc = stk__objstore_list(t->store, path, keep_shard, "classes.txt", msg, msglen);
  if (rc == STK_OK && t->store->n == 0)
    rc = stk__fail(msg, msglen, STK_EEMPTY, "%s holds no .tar shard", path);
  if (rc == STK_OK) rc = read_classes(t->store, cl, msg, msglen);
  if (rc == STK_OK && !(t->run_start = malloc(((size_t)t->store->n + 1) * sizeof *t->run_start)))
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  return rc;
}

static int stream_wanted(const tar_impl *t, const stk_options *o);
static int stream_begin(tar_impl *t, const stk_options *o, char *msg, size_t msglen);
static int stream_open(stk__source *s, tar_impl *t, classlist *cl, char *msg, size_t msglen);

int stk__tar_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                  size_t msglen) {
  tar_impl *t = calloc(1, sizeof *t);
  if (!t) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  s->impl = t;
  s->ops = &tar_ops; /* close() frees what was made on any failure */
  classlist cl = {0};
  tally ta;
  memset(&ta, 0, sizeof ta);
  int32_t maxlabel = -1;
  int rc = open_store(t, path, opt, &cl, msg, msglen);
  /* Foreign shards may stream: shard 0's first part is asked for with the
   * probe for an index beside the shards, so that the first batch comes
   * two round trips and a part after the listing's. */
  int may_stream = rc == STK_OK && stream_wanted(t, opt);
  if (may_stream) rc = stream_begin(t, opt, msg, msglen);
  if (rc == STK_OK) stk__objstore_probe_beside(t->store, STK__TAR_INDEX_EXT);
  /* Without classes.txt the stream knows the classes of shard 0's first
   * part only: soft labels need them all (mix_classes says how many, or
   * the shards are read at open). */
  int mixing = opt && (opt->mix_mixup_alpha > 0 || opt->mix_cutmix_alpha > 0);
  if (may_stream && !cl.present && mixing && !opt->mix_classes) may_stream = 0;
  if (may_stream && rc == STK_OK && !t->store->beside) return stream_open(s, t, &cl, msg, msglen);
  stk__stream_close(t->st); /* indexes beside the shards: they are read instead */
  t->st = NULL;
  if (rc == STK_OK) rc = scan_all(s, t, &cl, &ta, &maxlabel, msg, msglen);
  if (rc == STK_OK) {
    t->run_start[t->nrun] = s->ds.n;
    write_note(s->note, sizeof s->note, &ta);
    if (t->real == 0)
      rc = stk__fail(msg, msglen, STK_EEMPTY, "the tar shards of %s hold no usable sample%s%s",
                     path, s->note[0] ? ": " : "", s->note);
  }
  if (rc == STK_OK) rc = name_classes(s, &cl, maxlabel, msg, msglen);
  classlist_free(&cl);
  return rc;
}

/* ---- the first epoch of foreign shards, streamed -------------------------- */
/* Remote shards written by other tools (no .stkidx beside them) and not yet
 * in the index folder (stream_first_epoch): the open costs the listing and
 * the first part of shard 0, which gives an estimate of the samples per
 * byte, hence of the dataset's size; the sample table is that many
 * positions of the store's stream (store.h), whose thread runs
 * stream_shard on this rank's shards and keeps each finished shard's scan
 * in the index folder, as an open's scan is kept. Every rank derives the
 * same estimate from the same bytes, hence the same len(): the ranks yield
 * the same number of batches. docs/remote.md. */

/* A failing entry of shard k: "SHARD:NAME: why". */
static void stream_fail(stk__stream *ss, const tar_impl *t, int k, const char *name,
                        const char *why, uint64_t at) {
  char buf[1200];
  snprintf(buf, sizeof buf, "%s:%s: %s", t->store->name[k], name, why);
  tar_member m = {0, 0, 0, k, 0};
  stk__stream_push(ss, &m, 0, at, buf);
}

/* Key r of shard k, ended: a sample of the stream, or (an image without a
 * usable .cls) an entry that fails as the index's stand-in would. */
static void stream_rec(stk__stream *ss, const tar_impl *t, int k, const rec *r, uint64_t base) {
  if (!r->img_name) return;
  const char *why = rec_refusal(r, &t->cl);
  if (why) {
    stream_fail(ss, t, k, r->img_name, why, base + r->img_off);
    return;
  }
  tar_member m = {r->img_off, r->img_size, r->img_hhash, k, 0};
  stk__stream_push(ss, &m, r->label, base + r->img_off, NULL);
}

/* The end of shard k's scan: what it left out, then its damage. */
static void stream_tail(stk__stream *ss, const tar_impl *t, int k, const shard_scan *sc,
                        uint64_t at) {
  for (size_t i = 0; i < sc->nlost; i++) {
    char why[700];
    snprintf(why, sizeof why, "left out when the shard was read: %s", sc->lost_why[i]);
    stream_fail(ss, t, k, sc->lost_name[i], why, at);
  }
  if (sc->dm.why[0]) stream_fail(ss, t, k, sc->dm.name, sc->dm.why, at);
}

/* Scans shard k through the store of parts, emitting each key as the scan
 * passes it (webdataset writes a key's members together). */
static int stream_scan(stk__stream *ss, tar_impl *t, int k, uint64_t base, shard_scan *sc,
                       char *msg, size_t msglen) {
  stk__object *o;
  if (stk__objstore_reader(t->store, k, 1, stk__stream_depth(ss), &o, msg, msglen)) return STK_EIO;
  scan_state *st = stk__tar_scan_begin(t->store->name[k], o, sc, msg, msglen);
  if (!st) {
    stk__objstore_reader_close(o);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  size_t emitted = 0;
  while (!stk__tar_scan_step(st)) {
    for (; emitted + 1 < st->ks.n; emitted++) stream_rec(ss, t, k, &st->ks.r[emitted], base);
    if (stk__stream_pace(ss, base + st->off)) st->rc = STK_ECANCELED;
  }
  for (; st->rc == STK_OK && emitted < st->ks.n; emitted++)
    stream_rec(ss, t, k, &st->ks.r[emitted], base);
  return stk__tar_scan_done(st, sc);
}

/* Shard k of the stream (the store's stream calls it): from the index
 * folder when it is there, else scanned; one that cannot be read is one
 * failing entry. */
static void stream_shard(void *ctx, stk__stream *ss, int k, uint64_t base) {
  tar_impl *t = ctx;
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  char ipath[4200] = "", key[4400], msg[600] = "";
  uint64_t size = t->store->size[k];
  stk__objstore_index_key(t->store, k, key, sizeof key);
  int have = stk__objstore_index_path(t->store, k, ipath, sizeof ipath) == STK_OK;
  if (have && stk__tar_load_scan(ipath, key, size, &sc) == STK_OK) {
    for (size_t i = 0; i < sc.ks.n; i++) stream_rec(ss, t, k, &sc.ks.r[i], base);
    stream_tail(ss, t, k, &sc, base + size);
  } else {
    stk__tar_scan_free(&sc);
    memset(&sc, 0, sizeof sc);
    int rc = stream_scan(ss, t, k, base, &sc, msg, sizeof msg);
    if (rc == STK_OK) {
      stream_tail(ss, t, k, &sc, base + size);
      if (have) stk__tar_save_scan(ipath, key, &sc); /* unwritable: the next open scans it */
    } else if (!stk__stream_stopped(ss)) { /* (a closing loader's reads fail: no entry) */
      stream_fail(ss, t, k, "", msg, base);
    }
  }
  stk__tar_scan_free(&sc);
}

/* Samples per byte, from the headers in shard 0's first part (the same
 * bytes on every rank, so every rank makes the same estimate): *count
 * images in *bytes bytes, and the largest label met. */
static int stream_sample_rate(tar_impl *t, uint64_t *count, uint64_t *bytes, int32_t *maxlabel,
                              char *msg, size_t msglen) {
  stk__object *o;
  char why[256];
  if (stk__objstore_reader(t->store, 0, 1, 0, &o, why, sizeof why))
    return stk__fail(msg, msglen, STK_EIO, "shard %s: %s", t->store->name[0], why);
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  scan_state *st = stk__tar_scan_begin(t->store->name[0], o, &sc, msg, msglen);
  if (!st) {
    stk__objstore_reader_close(o);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  uint64_t lim = st->fsize < PART ? st->fsize : PART, fsize = st->fsize;
  int ended = 0;
  /* (a header and a small .cls after it stay inside the part) */
  while (st->off + 2 * BLOCK <= lim && !(ended = stk__tar_scan_step(st))) {
  }
  *count = 0;
  for (size_t i = 0; i < st->ks.n; i++) {
    const rec *r = &st->ks.r[i];
    if (!r->img_name) continue;
    ++*count;
    if (r->cls_ok && r->label < STK__TAR_LABEL_MAX && r->label > *maxlabel) *maxlabel = r->label;
  }
  *bytes = ended ? fsize : st->off;
  int rc = stk__tar_scan_done(st, NULL);
  stk__tar_scan_free(&sc);
  return rc;
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
  if (!stk__objstore_is_remote(t->store) || !o || !o->stream_first_epoch) return 0;
  for (int k = 0; k < t->store->n; k++)
    if (t->store->size[k] && !stk__objstore_has_index(t->store, k)) return 1;
  return 0;
}

/* Starts a stream: this rank's shards, and the first parts of shard 0 (for
 * the estimate) and of the rank's first shard requested at once, with the
 * probe for an index beside the shards (which may yet call it off). The
 * scan runs at most a quarter of the parts' budget ahead: the rest holds
 * the shuffle buffer's. */
static int stream_begin(tar_impl *t, const stk_options *o, char *msg, size_t msglen) {
  uint64_t budget = stk__objstore_budget(t->store);
  uint64_t ahead = budget / 4 > 2 * PART ? budget / 4 : 2 * PART;
  int rc = stk__stream_open(&t->st, t->store, o, ahead, stream_shard, t, msg, msglen);
  if (rc) return rc;
  stk__objstore_want(t->store, 0, 0);
  stk__objstore_want(t->store, stk__stream_first(t->st), 0);
  return STK_OK;
}

/* Opens the stream begun: the estimate, the table, and the scan's thread.
 * Takes cl. */
static int stream_open(stk__source *s, tar_impl *t, classlist *cl, char *msg, size_t msglen) {
  t->cl = *cl;
  memset(cl, 0, sizeof *cl);
  uint64_t count = 0, bytes = 1;
  int32_t maxlabel = -1;
  int rc = stream_sample_rate(t, &count, &bytes, &maxlabel, msg, msglen);
  if (rc) return rc;
  double est = 0;
  for (int k = 0; k < t->store->n; k++)
    est += (double)t->store->size[k] * (double)count / (double)bytes;
  int64_t n = (int64_t)(est + 0.5) > 0 ? (int64_t)(est + 0.5) : 1;
  if (stream_table(s, n)) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (name_classes(s, &t->cl, maxlabel, msg, msglen)) return STK_ENOMEM;
  t->real = n;
  return stk__stream_start(t->st, msg, msglen);
}

/* ---- the index beside a written shard (tar_write.c) ----------------------- */

static int keep_any(const char *name, int *keep, char *msg, size_t msglen) {
  (void)name, (void)msg, (void)msglen;
  *keep = 1;
  return STK_OK;
}

int stk__tar_write_index(const char *shard, char *err, size_t errlen) {
  char idx[4400], key[200], etags[160];
  if (snprintf(idx, sizeof idx, "%s" STK__TAR_INDEX_EXT, shard) >= (int)sizeof idx)
    return stk__fail(err, errlen, STK_EINVAL, "path too long: %s", shard);
  stk__objstore_config cfg = {0};
  stk__objstore *store = NULL;
  shard_scan sc;
  memset(&sc, 0, sizeof sc);
  int rc = stk__objstore_open(&store, shard, &cfg, err, errlen);
  if (rc == STK_OK) rc = stk__objstore_list(store, shard, keep_any, NULL, err, errlen);
  if (rc == STK_OK) rc = stk__tar_read_scan(store, 0, &sc, err, errlen);
  struct stat st;
  if (rc == STK_OK && stat(shard, &st) != 0)
    rc = stk__fail(err, errlen, STK_EIO, "cannot stat %s: %s", shard, strerror(errno));
  if (rc == STK_OK) rc = stk__md5_s3_etags(shard, etags, sizeof etags, err, errlen);
  if (rc == STK_OK) {
    stk__objstore_beside_key((uint64_t)st.st_size, etags, key, sizeof key);
    rc = stk__tar_save_scan(idx, key, &sc);
    if (rc) stk__fail(err, errlen, rc, "cannot write %s", idx);
  }
  stk__tar_scan_free(&sc);
  stk__objstore_close(store);
  return rc;
}
