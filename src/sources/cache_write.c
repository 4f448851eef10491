/*
 * cache_write.c: the cache writer of stk_pack (pack_writer.h), the
 * counterpart of cache.c, which reads what it writes.
 *
 * The samples' bytes go into OUTPUT.tmp-PID in sample order, each at a
 * 64-byte aligned offset; then the metadata (index, names, class names,
 * the source's description), the source files' stats, and the header
 * block last, so that a file whose header checks out is whole. The file is
 * synced and renamed to the output: a pack that is interrupted or fails
 * leaves no file under the output's name (cache_format.h has the layout).
 * A raw cache's size is estimated from a sample of headers first, and a
 * disk that cannot hold it is refused before anything is written.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "ops/ops.h"
#include "sources/bounded_read.h"
#include "sources/pack_writer.h"

typedef struct {
  const stk_pack_options *o;
  stk__pack_source src;
  int fd;
  char tmp[4200];
  uint64_t off;           /* where the next sample's bytes go */
  int64_t nout;           /* samples written */
  stk__cache_entry *ent;  /* the index, one entry per sample written */
  stk__cache_stat *fst;   /* their source files' stats */
  stk__buf names;         /* their names, NUL-terminated, in order */
  size_t names_len;
} cache_w;

/* A growable byte string, for the metadata block. */
static int put(stk__buf *b, size_t *len, const void *p, size_t n) {
  if (stk__buf_reserve(b, *len + n)) return STK_ENOMEM;
  memcpy((uint8_t *)b->p + *len, p, n);
  *len += n;
  return STK_OK;
}

/* Raw cache: the output's size from the headers of up to 256 files spread
 * over the list (pixels bounded to max_side, 64-byte aligned, plus the
 * index entry and the name of each), scaled to all n. Reading a header
 * means reading the file, so 256 keep this within a second or two even on
 * network storage. Returns 0 when no sampled header could be read. */
static uint64_t estimate_raw(const stk_pack_options *o,
                             const stk__dataset *ds, int64_t *sampled) {
  int64_t n = ds->n, ns = n < 256 ? n : 256, ok = 0;
  stk__decoder *dec = stk__decoder_create();
  if (!dec) return 0;
  stk__decoder_set_limits(dec, o->max_pixels);
  stk__bounded_reader br;
  stk__bounded_init(&br, o->read_timeout);
  double sum = 0;
  char msg[256];
  for (int64_t k = 0; k < ns; k++) {
    int64_t i = ns > 1 ? k * (n - 1) / (ns - 1) : 0;
    stk__bytes b;
    stk__image_info info;
    if (stk__bounded_read_file(&br, stk__dataset_path(ds, i), o->max_file_bytes, &b, msg,
                               sizeof msg) ||
        stk__decoder_header(dec, b.data, b.len, &info, msg, sizeof msg))
      continue;
    int nw, nh;
    stk__bound_size(info.width, info.height, o->max_side, &nw, &nh);
    uint64_t px = (uint64_t)nw * (uint64_t)nh * 3;
    sum += (double)((px + STK__CACHE_ALIGN - 1) / STK__CACHE_ALIGN * STK__CACHE_ALIGN);
    sum += sizeof(stk__cache_entry) + sizeof(stk__cache_stat) + strlen(stk__dataset_path(ds, i)) +
           1;
    ok++;
  }
  stk__bounded_free(&br);
  stk__decoder_destroy(dec);
  *sampled = ok;
  if (!ok) return 0;
  return STK__CACHE_DATA_OFF + (uint64_t)(sum / (double)ok * (double)n);
}

/* Bytes free to this process in the folder that holds `path`. */
static uint64_t free_bytes_at(const char *path) {
  char *dir = strdup(path);
  if (!dir) return UINT64_MAX;
  char *slash = strrchr(dir, '/');
  if (!slash)
    strcpy(dir, ".");
  else
    slash[slash == dir ? 1 : 0] = '\0';
  struct statvfs sv;
  uint64_t avail = statvfs(dir, &sv) == 0 ? (uint64_t)sv.f_bavail * sv.f_frsize : UINT64_MAX;
  free(dir);
  return avail;
}

static void human(char *buf, size_t n, uint64_t b) {
  if (b >= 1000000000ULL)
    snprintf(buf, n, "%.1f GB", b / 1e9);
  else
    snprintf(buf, n, "%.1f MB", b / 1e6);
}


/* The raw cache's estimate against the free space at the output. */
static int check_room(const stk_pack_options *o, const stk__dataset *ds, char *err,
                      size_t errlen) {
  int64_t sampled = 0;
  uint64_t est = estimate_raw(o, ds, &sampled);
  uint64_t avail = free_bytes_at(o->output);
  if (o->estimate && est) o->estimate(o->user, est, avail, sampled, ds->n);
  if (!est || avail == UINT64_MAX || est <= avail) return STK_OK;
  char e[32], a[32];
  human(e, sizeof e, est);
  human(a, sizeof a, avail);
  return stk__fail(err, errlen, STK_EIO,
                   "not enough room for %s: the raw cache of %lld images needs about %s "
                   "(estimated from the headers of %lld), and %s is free there; free some "
                   "space, pack with a smaller max_side or with the jpeg encoding",
                   o->output, (long long)ds->n, e, (long long)sampled, a);
}

static int cw_open(void **wp, const stk_pack_options *o, const stk__dataset *ds,
                   const stk__pack_source *src, char *err, size_t errlen) {
  *wp = NULL;
  if (o->encoding == STK_CACHE_RAW) {
    /* Say how large the cache will be before writing it, and refuse at
     * once what the disk cannot hold rather than after filling it. */
    int rc = check_room(o, ds, err, errlen);
    if (rc) return rc;
  }
  cache_w *w = calloc(1, sizeof *w);
  if (!w) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  w->o = o;
  w->src = *src;
  w->off = STK__CACHE_DATA_OFF;
  w->fd = -1;
  w->ent = calloc(ds->n ? (size_t)ds->n : 1, sizeof *w->ent);
  w->fst = calloc(ds->n ? (size_t)ds->n : 1, sizeof *w->fst);
  int rc = STK_OK;
  if (!w->ent || !w->fst)
    rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  else if (stk__pack_tmp_path(o->output, (long)getpid(), w->tmp, sizeof w->tmp))
    rc = stk__fail(err, errlen, STK_EINVAL, "output path too long");
  else if ((w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
    rc = stk__fail(err, errlen, STK_EIO, "cannot create %s: %s", w->tmp, strerror(errno));
  if (rc) {
    free(w->ent);
    free(w->fst);
    free(w);
    return rc;
  }
  *wp = w;
  return STK_OK;
}

static int cw_add(void *wp, const stk__pack_item *it, uint64_t *off, stk_pack_result *res,
                  char *err, size_t errlen) {
  cache_w *w = wp;
  (void)res;
  *off = w->off;
  if (it->data && stk__pwrite_all(w->fd, it->data, it->len, w->off))
    return stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
  stk__cache_entry *e = &w->ent[w->nout];
  e->off = w->off;
  e->len = it->len;
  e->w = (uint32_t)it->w;
  e->h = (uint32_t)it->h;
  e->label = it->label;
  e->hash = it->hash;
  w->fst[w->nout++] = it->fst;
  w->off += (it->len + STK__CACHE_ALIGN - 1) / STK__CACHE_ALIGN * STK__CACHE_ALIGN;
  if (put(&w->names, &w->names_len, it->path, strlen(it->path) + 1))
    return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  return STK_OK;
}

static int cw_write_at(void *wp, const void *p, size_t n, uint64_t off) {
  cache_w *w = wp;
  errno = 0;
  return stk__pwrite_all(w->fd, p, n, off) ? (errno ? errno : EIO) : 0;
}

static const char *cw_temp_name(void *wp) { return ((cache_w *)wp)->tmp; }

/* The metadata block: index, sample names, class names, source description. */
static int build_meta(cache_w *w, const stk__dataset *ds, stk__buf *meta, stk__cache_header *hd) {
  size_t mlen = 0, classes_len = 0, source_len = 0;
  int m = put(meta, &mlen, w->ent, (size_t)w->nout * sizeof *w->ent);
  m |= put(meta, &mlen, w->names.p, w->names_len);
  for (int c = 0; c < ds->nclasses; c++) {
    size_t l = strlen(ds->classes[c]) + 1;
    m |= put(meta, &mlen, ds->classes[c], l);
    classes_len += l;
  }
  const char *desc[3] = {w->src.kind, w->src.where, w->src.base};
  for (int k = 0; k < 3; k++) {
    size_t l = strlen(desc[k]) + 1;
    m |= put(meta, &mlen, desc[k], l);
    source_len += l;
  }
  hd->meta_len = mlen;
  hd->names_len = w->names_len;
  hd->classes_len = classes_len;
  hd->source_len = source_len;
  return m ? STK_ENOMEM : STK_OK;
}

/* The header and its extension (the stats table's place), into block. */
static void build_header(cache_w *w, const stk__dataset *ds, const stk__buf *meta,
                         stk__cache_header *hd, uint8_t block[STK__CACHE_DATA_OFF]) {
  const stk_pack_options *o = w->o;
  memcpy(hd->magic, STK__CACHE_MAGIC, 8);
  hd->version = STK__CACHE_VERSION;
  hd->encoding = (uint32_t)o->encoding;
  hd->max_side = (uint32_t)o->max_side;
  hd->quality = o->encoding == STK_CACHE_JPEG ? (uint32_t)o->quality : 0;
  hd->n = (uint64_t)w->nout;
  hd->nclasses = (uint32_t)ds->nclasses;
  hd->source_kind = strcmp(w->src.kind, "list") ? STK__CACHE_SRC_FOLDER : STK__CACHE_SRC_LIST;
  hd->list_fp = stk__dataset_list_fp(ds);
  hd->data_end = w->off;
  hd->meta_off = w->off; /* a multiple of 64: the index is aligned in the map */
  hd->meta_hash = stk__hash64(meta->p, hd->meta_len, 0);
  /* the source files' stats, after the strings (see cache_format.h) */
  hd->reserved = STK__CACHE_F_STATS;
  stk__cache_ext ext;
  memset(&ext, 0, sizeof ext);
  memcpy(ext.magic, STK__CACHE_EXT_MAGIC, 8);
  ext.stats_off = (w->off + hd->meta_len + 7) / 8 * 8;
  ext.stats_len = (uint64_t)w->nout * sizeof *w->fst;
  ext.stats_hash = stk__hash64(w->fst, (size_t)ext.stats_len, 0);
  ext.ext_hash = stk__hash64(&ext, offsetof(stk__cache_ext, ext_hash), 0);
  hd->header_hash = stk__hash64(hd, offsetof(stk__cache_header, header_hash), 0);
  memset(block, 0, STK__CACHE_DATA_OFF);
  memcpy(block, hd, sizeof *hd);
  memcpy(block + STK__CACHE_EXT_OFF, &ext, sizeof ext);
}

/* Metadata, stats, then the header, and the sync: the header last, so that
 * a file cut short anywhere fails its checks. */
static int write_tail(cache_w *w, const stk__dataset *ds, char *err, size_t errlen,
                      uint64_t *bytes) {
  stk__buf meta = {0};
  stk__cache_header hd;
  memset(&hd, 0, sizeof hd);
  if (build_meta(w, ds, &meta, &hd)) {
    stk__buf_free(&meta);
    return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  }
  uint8_t block[STK__CACHE_DATA_OFF];
  build_header(w, ds, &meta, &hd, block);
  uint64_t stats_off = (w->off + hd.meta_len + 7) / 8 * 8;
  static const uint8_t zeros[8];
  int rc = STK_OK;
  if (stk__pwrite_all(w->fd, meta.p, hd.meta_len, w->off) ||
      stk__pwrite_all(w->fd, zeros, (size_t)(stats_off - w->off - hd.meta_len),
                      w->off + hd.meta_len) ||
      stk__pwrite_all(w->fd, w->fst, (size_t)w->nout * sizeof *w->fst, stats_off) ||
      stk__pwrite_all(w->fd, block, sizeof block, 0) || fsync(w->fd) != 0)
    rc = stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
  *bytes = stats_off + (uint64_t)w->nout * sizeof *w->fst;
  stk__buf_free(&meta);
  return rc;
}

static int cw_finish(void *wp, int rc, const stk__dataset *ds, stk_pack_result *res, char *err,
                     size_t errlen) {
  cache_w *w = wp;
  uint64_t bytes = 0;
  if (rc == STK_OK && w->nout == 0)
    rc = stk__fail(err, errlen, STK_EEMPTY, "none of the %lld files could be packed",
                   (long long)ds->n);
  if (rc == STK_OK) rc = write_tail(w, ds, err, errlen, &bytes);
  if (close(w->fd) != 0 && rc == STK_OK)
    rc = stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
  if (rc == STK_OK && rename(w->tmp, w->o->output) != 0)
    rc = stk__fail(err, errlen, STK_EIO, "cannot rename %s to %s: %s", w->tmp, w->o->output,
                   strerror(errno));
  if (rc) unlink(w->tmp);
  if (rc == STK_OK) {
    res->packed = w->nout;
    res->bytes = bytes;
  }
  free(w->ent);
  free(w->fst);
  stk__buf_free(&w->names);
  free(w);
  return rc;
}

const stk__pack_writer_ops stk__cache_writer = {
    .name = "cache",
    .pixels = 1,
    .open = cw_open,
    .add = cw_add,
    .write_at = cw_write_at,
    .temp_name = cw_temp_name,
    .finish = cw_finish,
};
