/* cache.c: the pre-decoded cache source (.stkc, written by stk_pack). The
 * file is mapped read-only: raw samples are lent to the resampler in place
 * (the page cache is the only copy), JPEG samples to the decoder. See
 * cache_format.h for the layout and source.h for the interface. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sources/cache_format.h"
#include "sources/source.h"

typedef struct {
  const uint8_t *map;
  size_t size;
  stk__cache_header hd;
  const stk__cache_entry *ent; /* n entries, inside the map */
} cache_impl;

static const stk__cache_entry *entry(const stk__source *s, int64_t i) {
  return &((const cache_impl *)s->impl)->ent[i];
}

static int cache_pixels(const stk__source *s, int64_t i, stk__pixels *out, char *msg,
                        size_t msglen) {
  const cache_impl *c = s->impl;
  const stk__cache_entry *e = entry(s, i);
  out->px = c->map + e->off;
  out->stride = (size_t)e->w * 3;
  out->w = (int)e->w;
  out->h = (int)e->h;
  return STK_OK;
}

static int cache_read(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
                      stk__bytes *out, char *msg, size_t msglen) {
  const cache_impl *c = s->impl;
  const stk__cache_entry *e = entry(s, i);
  out->data = c->map + e->off; /* lent from the map: no copy */
  out->len = (size_t)e->len;
  out->bytes_read = e->len;
  return STK_OK;
}

static int cache_verify(const stk__source *s, int64_t i, char *msg, size_t msglen) {
  const cache_impl *c = s->impl;
  const stk__cache_entry *e = entry(s, i);
  if (stk__hash64(c->map + e->off, (size_t)e->len, 0) != e->hash)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the cached bytes do not match their checksum (the cache file is corrupt)");
  return STK_OK;
}

static void cache_close(stk__source *s) {
  cache_impl *c = s->impl;
  if (!c) return;
  if (c->map) munmap((void *)c->map, c->size);
  free(c);
  s->impl = NULL;
}

static const stk__source_ops raw_ops = {"cache", NULL, cache_pixels, NULL, cache_verify,
                                        cache_close};
static const stk__source_ops jpeg_ops = {"cache", cache_read, NULL, NULL, cache_verify,
                                         cache_close};

uint64_t stk__source_list_fp(const stk__dataset *ds) {
  uint64_t h = stk__hash64(&ds->n, sizeof ds->n, 1);
  for (int64_t i = 0; i < ds->n; i++) {
    const char *name = stk__dataset_path(ds, i);
    h = stk__hash64(name, strlen(name), h);
    h = stk__hash64(&ds->labels[i], sizeof ds->labels[i], h);
  }
  return h;
}

/* The next NUL-terminated string of a run [*p, end), or NULL. */
static const char *next_str(const char **p, const char *end) {
  const char *s = *p;
  const char *z = s < end ? memchr(s, '\0', (size_t)(end - s)) : NULL;
  if (!z) return NULL;
  *p = z + 1;
  return s;
}

/* Compares the cache with the folder or list it was packed from, when that
 * still exists: the same names and labels, or the cache is stale. */
static int check_source(stk__source *s, const char *path, const char *kind, const char *where,
                        const char *base, const stk_options *opt, char *msg, size_t msglen) {
  struct stat st;
  if (!where || !*where || stat(where, &st) != 0) return STK_OK; /* moved away: self-contained */
  stk_options o = *opt;
  o.root = o.list_file = o.list_base = NULL;
  stk__source src;
  memset(&src, 0, sizeof src);
  int rc;
  char why[256];
  if (!strcmp(kind, "list")) {
    o.list_file = where;
    o.list_base = base && *base ? base : NULL;
    rc = stk__list_open(&src, &o, why, sizeof why);
  } else {
    if (!S_ISDIR(st.st_mode)) return STK_OK;
    o.root = where;
    rc = stk__folder_open(&src, &o, why, sizeof why);
  }
  int stale = rc != STK_OK;
  const cache_impl *c = s->impl;
  if (!stale) stale = stk__source_list_fp(&src.ds) != c->hd.list_fp;
  int64_t now = rc == STK_OK ? src.ds.n : -1;
  stk__source_close(&src);
  if (!stale) return STK_OK;
  char what[160];
  if (now >= 0)
    snprintf(what, sizeof what, "it now lists %lld samples, the cache holds %llu, or their names "
                                "or labels changed", (long long)now, (unsigned long long)c->hd.n);
  else
    snprintf(what, sizeof what, "it can no longer be read");
  if (!opt->allow_stale_cache)
    return stk__fail(msg, msglen, STK_ESTALE,
                     "cache %s is stale: %s %s changed since it was packed (%s); pack it again, "
                     "or pass allow_stale_cache to use it as it is",
                     path, kind, where, what);
  snprintf(s->note, sizeof s->note, "cache %s is stale: %s %s changed since it was packed (%s)",
           path, kind, where, what);
  return STK_OK;
}

int stk__cache_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                    size_t msglen) {
  cache_impl *c = calloc(1, sizeof *c);
  if (!c) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  s->impl = c;
  s->ops = &raw_ops; /* close() until the encoding is known */
#define BAD(...) return stk__fail(msg, msglen, STK_EDECODE, __VA_ARGS__)
  struct stat st;
  char why[256];
  int fd = stk__open_input(path, 0, &st, why, sizeof why);
  if (fd < 0) return stk__fail(msg, msglen, STK_EIO, "cache %s: %s", path, why);
  if (st.st_size < (off_t)STK__CACHE_DATA_OFF) {
    close(fd);
    BAD("cache %s is truncated: %lld bytes, shorter than its header", path, (long long)st.st_size);
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return stk__fail(msg, msglen, STK_EIO, "cannot map %s: %s", path, strerror(errno));
  c->map = m;
  c->size = (size_t)st.st_size;
  stk__cache_header *hd = &c->hd;
  memcpy(hd, c->map, sizeof *hd);
  if (memcmp(hd->magic, STK__CACHE_MAGIC, 8) != 0) BAD("%s is not a stoker cache", path);
  if (hd->version != STK__CACHE_VERSION)
    return stk__fail(msg, msglen, STK_EFORMAT,
                     "cache %s has format version %u; this build reads version %u: pack it again",
                     path, hd->version, STK__CACHE_VERSION);
  if (stk__hash64(hd, offsetof(stk__cache_header, header_hash), 0) != hd->header_hash)
    BAD("cache %s: the header is corrupt (checksum mismatch)", path);
  /* Every bound is checked before anything is trusted or allocated. */
  if (hd->encoding > STK_CACHE_JPEG) BAD("cache %s: unknown encoding %u", path, hd->encoding);
  if (hd->meta_off < hd->data_end || hd->data_end < STK__CACHE_DATA_OFF ||
      hd->meta_off > c->size || hd->meta_len > c->size - hd->meta_off)
    BAD("cache %s is truncated or corrupt: %zu bytes, its header expects %llu", path, c->size,
        (unsigned long long)(hd->meta_off + hd->meta_len));
  if (hd->n == 0 || hd->n > hd->meta_len / sizeof(stk__cache_entry) || hd->nclasses == 0 ||
      hd->nclasses > hd->n)
    BAD("cache %s: corrupt counts (%llu samples, %u classes)", path, (unsigned long long)hd->n,
        hd->nclasses);
  uint64_t strs = hd->meta_len - hd->n * sizeof(stk__cache_entry);
  if (hd->names_len + hd->classes_len + hd->source_len != strs)
    BAD("cache %s: corrupt index lengths", path);
  const uint8_t *meta = c->map + hd->meta_off;
  if (stk__hash64(meta, (size_t)hd->meta_len, 0) != hd->meta_hash)
    BAD("cache %s: the index is corrupt (checksum mismatch)", path);
  c->ent = (const stk__cache_entry *)meta; /* meta_off is a multiple of 64 */
  if ((uintptr_t)c->ent % _Alignof(stk__cache_entry)) BAD("cache %s: misaligned index", path);
  for (uint64_t i = 0; i < hd->n; i++) {
    const stk__cache_entry *e = &c->ent[i];
    /* Sizes are ints downstream, and w * h * 3 must not wrap round to the
     * length of a small sample. */
    if (e->off < STK__CACHE_DATA_OFF || e->off > hd->data_end || e->len > hd->data_end - e->off ||
        e->label < 0 || (uint32_t)e->label >= hd->nclasses || e->w == 0 || e->h == 0 ||
        e->w > INT32_MAX || e->h > INT32_MAX ||
        (hd->encoding == STK_CACHE_RAW && e->len != (uint64_t)e->w * e->h * 3))
      BAD("cache %s: index entry %llu is corrupt", path, (unsigned long long)i);
  }
  const char *p = (const char *)(meta + hd->n * sizeof(stk__cache_entry));
  const char *names_end = p + hd->names_len, *classes_end = names_end + hd->classes_len;
  const char *src_end = classes_end + hd->source_len;
  size_t plen = strlen(path);
  stk__buf name = {0};
  int rc = STK_OK;
  for (uint64_t i = 0; rc == STK_OK && i < hd->n; i++) {
    const char *nm = next_str(&p, names_end);
    if (!nm) {
      stk__buf_free(&name);
      BAD("cache %s: corrupt sample names", path);
    }
    /* errors name the cache and the file the sample was packed from */
    size_t l = strlen(nm);
    if (stk__buf_reserve(&name, plen + l + 2)) {
      rc = STK_ENOMEM;
      break;
    }
    memcpy(name.p, path, plen);
    ((char *)name.p)[plen] = '#';
    memcpy((char *)name.p + plen + 1, nm, l + 1);
    rc = stk__dataset_add(&s->ds, name.p, c->ent[i].label);
  }
  stk__buf_free(&name);
  if (rc) return stk__fail(msg, msglen, rc, "out of memory");
  p = names_end;
  s->ds.classes = calloc(hd->nclasses, sizeof(char *));
  if (!s->ds.classes) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  for (uint32_t k = 0; k < hd->nclasses; k++) {
    const char *cn = next_str(&p, classes_end);
    if (!cn) BAD("cache %s: corrupt class names", path);
    if (!(s->ds.classes[k] = strdup(cn))) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    s->ds.nclasses = (int)k + 1;
  }
  p = classes_end;
  const char *kind = next_str(&p, src_end), *where = next_str(&p, src_end);
  const char *base = next_str(&p, src_end);
  if (!kind || !where || !base) BAD("cache %s: corrupt source description", path);
#undef BAD
  s->ops = hd->encoding == STK_CACHE_RAW ? &raw_ops : &jpeg_ops;
  return check_source(s, path, kind, where, base, opt, msg, msglen);
}

int stk__cache_describe(const stk__source *s, stk_cache_encoding *enc, int *max_side,
                        int *quality) {
  if (!s->ops || strcmp(s->ops->kind, "cache") || !s->impl) return STK_EINVAL;
  const cache_impl *c = s->impl;
  *enc = (stk_cache_encoding)c->hd.encoding;
  *max_side = (int)c->hd.max_side;
  *quality = (int)c->hd.quality;
  return STK_OK;
}
