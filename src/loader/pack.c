/*
 * pack.c: stk_pack, which turns an image folder or a list file into a
 * pre-decoded cache (here) or tar shards (sources/tar.c).
 *
 * A cache is written by `threads` workers and the calling thread: workers
 * claim files in order, decode them in full, bound their size, encode them
 * (raw RGB8, or JPEG) and leave the result in a small reorder ring; the
 * calling thread writes the ring's results strictly in sample order, so the
 * file is the same whatever the thread count, and reports progress and bad
 * files. Memory stays bounded by the ring (4 results per worker).
 *
 * The file is written under a temporary name beside the output, its header
 * last, then synced and renamed: a pack that is interrupted or fails leaves
 * no file under the output's name (see cache_format.h for the layout).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codecs/encode.h"
#include "loader/pipeline.h"
#include "sources/cache_format.h"
#include "sources/source.h"

void stk_pack_options_init(stk_pack_options *o) {
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->format = STK_PACK_CACHE;
  o->encoding = STK_CACHE_RAW;
  o->max_side = 512;
  o->quality = 90;
  o->shard_bytes = 1ULL << 30;
  o->max_pixels = 178956970ULL;
  o->max_file_bytes = 256ULL << 20;
}

void stk__bound_size(int w, int h, int max_side, int *nw, int *nh) {
  *nw = w;
  *nh = h;
  if (max_side <= 0 || (w <= max_side && h <= max_side)) return;
  /* the longer side becomes max_side, the shorter keeps the aspect ratio */
  if (w >= h) {
    *nw = max_side;
    *nh = (int)((double)h * max_side / w + 0.5);
  } else {
    *nh = max_side;
    *nw = (int)((double)w * max_side / h + 0.5);
  }
  if (*nw < 1) *nw = 1;
  if (*nh < 1) *nh = 1;
}

/* One result of the reorder ring. */
typedef struct {
  int state; /* 0 free, 1 claimed, 2 done */
  int rc;
  char msg[256];
  uint8_t *data; /* malloc'd (jpeg) or in buf (raw) */
  size_t len;
  stk__buf buf;
  int w, h;
  uint64_t hash;
} result;

typedef struct {
  const stk_pack_options *o;
  const stk__dataset *ds;
  result *ring;
  int64_t nring;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t next_claim, written;
  int stop;
} packer;

/* Decodes sample i in full and bounds it into r: the work of one file. */
static void pack_one(packer *pk, stk__worker *w, stk__resampler *rs, int64_t i, result *r) {
  const stk_pack_options *o = pk->o;
  const char *path = stk__dataset_path(pk->ds, i);
  stk__bytes b;
  r->rc = stk__read_whole_file(path, &w->file, o->max_file_bytes, &b, r->msg, sizeof r->msg);
  stk__image_info info;
  if (!r->rc) r->rc = stk__decoder_header(w->dec, b.data, b.len, &info, r->msg, sizeof r->msg);
  stk__region reg;
  if (!r->rc) r->rc = stk__decoder_decode(w->dec, b.data, b.len, NULL, 1, &reg, r->msg, sizeof r->msg);
  if (r->rc) return;
  int nw, nh;
  stk__bound_size(reg.w, reg.h, o->max_side, &nw, &nh);
  size_t raw = (size_t)nw * nh * 3;
  if (stk__buf_reserve(&r->buf, raw)) {
    r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory");
    return;
  }
  uint8_t *px = r->buf.p;
  if (nw == reg.w && nh == reg.h) {
    for (int y = 0; y < nh; y++)
      memcpy(px + (size_t)y * nw * 3, reg.pixels + (size_t)y * reg.stride, (size_t)nw * 3);
  } else {
    /* Pillow's antialiased bilinear resize of the whole image: the cache
     * then holds what PIL's img.resize((nw, nh), BILINEAR) gives */
    stk__geom g;
    stk__geom_crop(&(stk__rect){0, 0, reg.w, reg.h}, nw, nh, &g);
    g.exact = 1;
    stk__rect need;
    stk__store st;
    const float m[3] = {0, 0, 0}, sd[3] = {1, 1, 1};
    stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, nw, nh, m, sd);
    if (stk__resampler_plan(rs, &g, &need) ||
        stk__resampler_run(rs, reg.pixels, reg.stride, 0, 0, &st, px)) {
      r->rc = stk__fail(r->msg, sizeof r->msg, STK_EDECODE, "cannot resize %dx%d to %dx%d", reg.w,
                        reg.h, nw, nh);
      return;
    }
  }
  r->w = nw;
  r->h = nh;
  if (o->encoding == STK_CACHE_RAW) {
    r->data = px;
    r->len = raw;
  } else {
    stk__jpeg_enc_opts eo;
    stk__jpeg_enc_defaults(&eo); /* baseline 4:2:0, what the GPU engines take fastest */
    eo.quality = o->quality;
    uint8_t *out = NULL;
    size_t outlen = 0;
    if (stk__jpeg_encode(px, nw, nh, &eo, &out, &outlen)) {
      r->rc = stk__fail(r->msg, sizeof r->msg, STK_EDECODE, "cannot encode as JPEG");
      return;
    }
    r->data = out;
    r->len = outlen;
  }
  r->hash = stk__hash64(r->data, r->len, 0);
}

typedef struct {
  packer *pk;
  pthread_t t;
} pack_thread;

static void *pack_main(void *arg) {
  packer *pk = ((pack_thread *)arg)->pk;
  stk__worker w;
  stk__plan plan;
  memset(&plan, 0, sizeof plan);
  plan.max_pixels = pk->o->max_pixels;
  int ok = stk__worker_init(&w, &plan) == STK_OK;
  stk__resampler rs;
  memset(&rs, 0, sizeof rs);
  pthread_mutex_lock(&pk->mu);
  for (;;) {
    /* claim only within the ring: the writer is at most nring behind */
    while (!pk->stop && pk->next_claim < pk->ds->n && pk->next_claim >= pk->written + pk->nring)
      pthread_cond_wait(&pk->cv, &pk->mu);
    if (pk->stop || pk->next_claim >= pk->ds->n) break;
    int64_t i = pk->next_claim++;
    result *r = &pk->ring[i % pk->nring];
    r->state = 1;
    pthread_mutex_unlock(&pk->mu);
    r->data = NULL;
    if (ok)
      pack_one(pk, &w, &rs, i, r);
    else
      r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory for decoder state");
    pthread_mutex_lock(&pk->mu);
    r->state = 2;
    pthread_cond_broadcast(&pk->cv);
  }
  pthread_mutex_unlock(&pk->mu);
  stk__resampler_free(&rs);
  if (ok) stk__worker_free(&w);
  return NULL;
}

/* A growable byte string, for the metadata block. */
static int put(stk__buf *b, size_t *len, const void *p, size_t n) {
  if (stk__buf_reserve(b, *len + n)) return STK_ENOMEM;
  memcpy((uint8_t *)b->p + *len, p, n);
  *len += n;
  return STK_OK;
}

static int pwrite_all(int fd, const void *p, size_t n, uint64_t off) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = pwrite(fd, b, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

static int pack_cache(const stk_pack_options *o, const stk__source *src, const char *kind,
                      const char *where, const char *base, stk_pack_result *res, char *err,
                      size_t errlen) {
  const stk__dataset *ds = &src->ds;
  size_t olen = strlen(o->output);
  char *tmp = malloc(olen + 32);
  if (!tmp) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  snprintf(tmp, olen + 32, "%s.tmp-%ld", o->output, (long)getpid());
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int rc = stk__fail(err, errlen, STK_EIO, "cannot create %s: %s", tmp, strerror(errno));
    free(tmp);
    return rc;
  }
  int threads = o->threads;
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  packer pk;
  memset(&pk, 0, sizeof pk);
  pk.o = o;
  pk.ds = ds;
  pk.nring = (int64_t)threads * 4;
  pk.ring = calloc((size_t)pk.nring, sizeof *pk.ring);
  stk__cache_entry *ent = calloc((size_t)ds->n, sizeof *ent);
  pack_thread *th = calloc((size_t)threads, sizeof *th);
  stk__buf meta = {0}, names = {0};
  size_t names_len = 0;
  int rc = STK_OK, started = 0;
  if (!pk.ring || !ent || !th) rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  pthread_mutex_init(&pk.mu, NULL);
  pthread_cond_init(&pk.cv, NULL);
  for (int t = 0; rc == STK_OK && t < threads; t++) {
    th[t].pk = &pk;
    if (pthread_create(&th[t].t, NULL, pack_main, &th[t]) != 0) {
      rc = stk__fail(err, errlen, STK_ENOMEM, "cannot start pack thread %d", t);
      break;
    }
    started++;
  }

  /* The writer: results in sample order. */
  uint64_t off = STK__CACHE_DATA_OFF;
  int64_t nout = 0;
  for (int64_t i = 0; rc == STK_OK && i < ds->n; i++) {
    result *r = &pk.ring[i % pk.nring];
    pthread_mutex_lock(&pk.mu);
    while (!(r->state == 2 && pk.written == i)) pthread_cond_wait(&pk.cv, &pk.mu);
    pthread_mutex_unlock(&pk.mu);
    const char *path = stk__dataset_path(ds, i);
    if (r->rc) {
      res->failed++;
      if (o->bad_file) o->bad_file(o->user, path, r->msg);
    } else {
      if (pwrite_all(fd, r->data, r->len, off)) {
        rc = stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tmp, strerror(errno));
      } else {
        stk__cache_entry *e = &ent[nout++];
        e->off = off;
        e->len = r->len;
        e->w = (uint32_t)r->w;
        e->h = (uint32_t)r->h;
        e->label = ds->labels[i];
        e->hash = r->hash;
        off += (r->len + STK__CACHE_ALIGN - 1) / STK__CACHE_ALIGN * STK__CACHE_ALIGN;
        if (put(&names, &names_len, path, strlen(path) + 1))
          rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
      }
    }
    if (r->data && r->data != r->buf.p) free(r->data);
    r->data = NULL;
    pthread_mutex_lock(&pk.mu);
    r->state = 0;
    pk.written = i + 1;
    pthread_cond_broadcast(&pk.cv);
    pthread_mutex_unlock(&pk.mu);
    if (o->progress && ((i + 1) % 64 == 0 || i + 1 == ds->n)) o->progress(o->user, i + 1, ds->n);
  }
  pthread_mutex_lock(&pk.mu);
  pk.stop = 1;
  pthread_cond_broadcast(&pk.cv);
  pthread_mutex_unlock(&pk.mu);
  for (int t = 0; t < started; t++) pthread_join(th[t].t, NULL);

  if (rc == STK_OK && nout == 0)
    rc = stk__fail(err, errlen, STK_EEMPTY, "none of the %lld files could be packed",
                   (long long)ds->n);
  /* the metadata: index, sample names, class names, source description */
  size_t mlen = 0, classes_len = 0, source_len = 0;
  if (rc == STK_OK) {
    int m = put(&meta, &mlen, ent, (size_t)nout * sizeof *ent);
    m |= put(&meta, &mlen, names.p, names_len);
    for (int c = 0; c < ds->nclasses; c++) {
      size_t l = strlen(ds->classes[c]) + 1;
      m |= put(&meta, &mlen, ds->classes[c], l);
      classes_len += l;
    }
    const char *desc[3] = {kind, where, base};
    for (int k = 0; k < 3; k++) {
      size_t l = strlen(desc[k]) + 1;
      m |= put(&meta, &mlen, desc[k], l);
      source_len += l;
    }
    if (m) rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  }
  stk__cache_header hd;
  memset(&hd, 0, sizeof hd);
  if (rc == STK_OK) {
    memcpy(hd.magic, STK__CACHE_MAGIC, 8);
    hd.version = STK__CACHE_VERSION;
    hd.encoding = (uint32_t)o->encoding;
    hd.max_side = (uint32_t)o->max_side;
    hd.quality = o->encoding == STK_CACHE_JPEG ? (uint32_t)o->quality : 0;
    hd.n = (uint64_t)nout;
    hd.nclasses = (uint32_t)ds->nclasses;
    hd.source_kind = strcmp(kind, "list") ? STK__CACHE_SRC_FOLDER : STK__CACHE_SRC_LIST;
    hd.list_fp = stk__source_list_fp(ds);
    hd.data_end = off;
    hd.meta_off = off; /* a multiple of 64: the index is aligned in the map */
    hd.meta_len = mlen;
    hd.names_len = names_len;
    hd.classes_len = classes_len;
    hd.source_len = source_len;
    hd.meta_hash = stk__hash64(meta.p, mlen, 0);
    hd.header_hash = stk__hash64(&hd, offsetof(stk__cache_header, header_hash), 0);
    uint8_t block[STK__CACHE_DATA_OFF];
    memset(block, 0, sizeof block);
    memcpy(block, &hd, sizeof hd);
    if (pwrite_all(fd, meta.p, mlen, off) || pwrite_all(fd, block, sizeof block, 0) ||
        fsync(fd) != 0)
      rc = stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tmp, strerror(errno));
  }
  if (close(fd) != 0 && rc == STK_OK)
    rc = stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tmp, strerror(errno));
  if (rc == STK_OK && rename(tmp, o->output) != 0)
    rc = stk__fail(err, errlen, STK_EIO, "cannot rename %s to %s: %s", tmp, o->output,
                   strerror(errno));
  if (rc) unlink(tmp);
  if (rc == STK_OK) {
    res->packed = nout;
    res->bytes = off + mlen;
  }
  for (int64_t k = 0; pk.ring && k < pk.nring; k++) stk__buf_free(&pk.ring[k].buf);
  free(pk.ring);
  free(ent);
  free(th);
  stk__buf_free(&meta);
  stk__buf_free(&names);
  pthread_mutex_destroy(&pk.mu);
  pthread_cond_destroy(&pk.cv);
  free(tmp);
  return rc;
}

int stk_pack(const stk_pack_options *opt, int header_version, stk_pack_result *res, char *err,
             size_t errlen) {
  stk_pack_result dummy;
  if (!res) res = &dummy;
  memset(res, 0, sizeof *res);
  if (!opt) return stk__fail(err, errlen, STK_EINVAL, "options must not be NULL");
  int vrc = stk__check_version(header_version, err, errlen);
  if (vrc) return vrc;
  if (opt->struct_size == 0 || opt->struct_size > sizeof(stk_pack_options))
    return stk__fail(err, errlen, STK_EVERSION,
                     "pack options struct of %zu bytes, this library knows %zu: call "
                     "stk_pack_options_init()",
                     opt->struct_size, sizeof(stk_pack_options));
  stk_pack_options o;
  stk_pack_options_init(&o);
  memcpy(&o, opt, opt->struct_size);
#define BAD(...) return stk__fail(err, errlen, STK_EINVAL, __VA_ARGS__)
  if (!o.root == !o.list_file) BAD("pack: set exactly one of root and list_file");
  if (!o.output || !*o.output) BAD("pack: output must be set");
  if (o.format != STK_PACK_CACHE && o.format != STK_PACK_TAR) BAD("pack: unknown format %d", (int)o.format);
  if (o.encoding != STK_CACHE_RAW && o.encoding != STK_CACHE_JPEG)
    BAD("pack: unknown encoding %d", (int)o.encoding);
  if (o.max_side < 0 || o.max_side > 65500) BAD("pack: max_side must be in 0..65500, got %d", o.max_side);
  if (o.quality < 1 || o.quality > 100) BAD("pack: quality must be in 1..100, got %d", o.quality);
  if (o.shard_bytes < 1) BAD("pack: shard_bytes must be at least 1");
  if (o.threads < 0 || o.threads > 1024) BAD("pack: threads must be in 0..1024, got %d", o.threads);
#undef BAD
  /* The source is opened by its real path, so that the fingerprint the
   * cache keeps is that of the list a later check sees. */
  const char *given = o.root ? o.root : o.list_file;
  char *real = realpath(given, NULL);
  char *real_base = o.list_base ? realpath(o.list_base, NULL) : NULL;
  if (!real || (o.list_base && !real_base)) {
    int rc = stk__fail(err, errlen, STK_EIO, "cannot open %s: %s", real ? o.list_base : given,
                       strerror(errno));
    free(real);
    free(real_base);
    return rc;
  }
  stk_options lo;
  stk_options_init(&lo);
  lo.max_pixels = o.max_pixels;
  lo.max_file_bytes = o.max_file_bytes;
  stk__source src;
  memset(&src, 0, sizeof src);
  int rc;
  if (o.root) {
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
      rc = stk__fail(err, errlen, STK_EINVAL,
                     "pack reads an image folder or a list file; %s is not a folder", given);
      goto done;
    }
    lo.root = real;
    rc = stk__folder_open(&src, &lo, err, errlen);
  } else {
    lo.list_file = real;
    lo.list_base = real_base;
    rc = stk__list_open(&src, &lo, err, errlen);
  }
  if (rc) goto done;
  if (o.format == STK_PACK_TAR)
    rc = stk__tar_pack(&o, &src.ds, res, err, errlen);
  else
    rc = pack_cache(&o, &src, o.root ? "folder" : "list", real, real_base ? real_base : "", res,
                    err, errlen);
done:
  stk__source_close(&src);
  free(real);
  free(real_base);
  return rc;
}
