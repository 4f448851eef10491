/*
 * pack.c: stk_pack, which turns an image folder or a list file into a
 * pre-decoded cache (here) or tar shards (sources/tar.c).
 *
 * Both are written by `threads` workers and the calling thread: workers
 * claim files in order, read them (each read bounded by read_timeout, see
 * bounded_read.h), decode them in full, bound their size and encode them
 * (raw RGB8, or JPEG) for a cache, or check them for tar shards (the
 * header, or with `check` the whole image), and leave the result in a small
 * reorder ring; the calling thread writes the ring's results strictly in
 * sample order, so the output is the same whatever the thread count, and
 * reports progress and bad files. Memory stays bounded by the ring (4
 * results per worker). A cache and a tar pack give a bad file the same
 * reason, as both come from here.
 *
 * With a device (o->device >= 0, a cache only) the workers are device
 * threads instead: each claims an aligned block of files, reads them and
 * their headers, has the GPU decode them and resize them into a slot of its
 * own (stk__gpu_run_batch with each item at its own output size), copies
 * the pixels back and fills the same ring. The writer then only places
 * each result (its offset, in sample order) and the device thread writes
 * its own block there (dev_flush): one thread copying several GB/s into
 * the page cache would bound the pack.
 *
 * The file is written under a temporary name beside the output, its header
 * last, then synced and renamed: a pack that is interrupted or fails leaves
 * no file under the output's name (see cache_format.h for the layout).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "codecs/encode.h"
#include "loader/bounded_read.h"
#include "core/options.h"
#include "core/workers.h"
#include "gpu/gpu.h"
#include "loader/pack.h"
#include "loader/pipeline.h"
#include "sources/cache_format.h"
#include "sources/net.h"
#include "sources/source.h"
#include "sources/upload.h"

int stk__pack_tmp_path(const char *output, long pid, char *buf, size_t n) {
  size_t ol = strlen(output);
  while (ol > 1 && output[ol - 1] == '/') ol--;
  int w = snprintf(buf, n, "%.*s.tmp-%ld", (int)ol, output, pid);
  return w < 0 || (size_t)w >= n ? -1 : 0;
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
  int state; /* 0 free, 1 claimed, 2 done, 3 placed (a device pack: see dev_flush) */
  uint64_t off; /* placed: where its bytes go in the cache */
  int rc;
  char msg[256];
  uint8_t *data; /* malloc'd (jpeg), in buf (raw, tar) or, with `lent`, in
                    a device thread's pinned buffer until it writes it */
  int lent;
  size_t len;
  stk__buf buf;
  int w, h;
  const char *ext; /* tar: the member's extension, from the content */
  uint64_t hash;
  stk__cache_stat fst; /* the source file as it was before the read */
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
  /* device packs */
  stk__gpu *gpu;
  int next_slot;          /* each device thread takes one */
  int dev_rc;             /* a failure of the GPU itself stops the pack */
  char dev_msg[320];
  int64_t device_items;   /* decoded on the GPU (stk_pack_result.device_packed) */
  uint8_t **pinned;       /* a pinned buffer per device thread (dev_block) */
  int fd;                 /* the cache being written, for dev_flush */
  const char *tmp;        /* its name */
} packer;

/* The cache's bytes of an image of nw x nh RGB8 pixels px (in r->buf):
 * the pixels themselves, or their JPEG; and their hash. */
static void finish_result(const stk_pack_options *o, result *r, uint8_t *px, int nw, int nh) {
  r->w = nw;
  r->h = nh;
  if (o->encoding == STK_CACHE_RAW) {
    r->data = px;
    r->len = (size_t)nw * nh * 3;
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

/* The source file's stat as it was before the read (see pack_one). */
/* A tar member's extension from the file's content, so that readers that go
 * by the name (webdataset's decoders) see the right format. */
static const char *member_ext(const uint8_t *data, size_t len) {
  switch (stk__sniff(data, len)) {
  case STK__FMT_PNG: return "png";
  case STK__FMT_WEBP: return "webp";
  case STK__FMT_TIFF: return "tif";
  case STK__FMT_BMP: return "bmp";
  case STK__FMT_PNM: return data[1] == '2' || data[1] == '5' ? "pgm" : "ppm";
  default: return "jpg";
  }
}

static void stat_source(const char *path, result *r) {
  struct stat fs;
  if (stat(path, &fs) == 0) {
    r->fst.size = (uint64_t)fs.st_size;
    r->fst.mtime_ns = (int64_t)fs.st_mtim.tv_sec * 1000000000 + fs.st_mtim.tv_nsec;
  } else {
    r->fst.size = UINT64_MAX;
    r->fst.mtime_ns = INT64_MIN;
  }
}

/* Reads file i and decodes it in full (a cache, or tar shards with
 * `check`) or its header (tar shards), then for a cache bounds and encodes
 * it into r: the work of one file. */
static void pack_one(packer *pk, stk__worker *w, stk__resampler *rs, stk__bounded_reader *br,
                     int64_t i, result *r) {
  const stk_pack_options *o = pk->o;
  int tar = o->format == STK_PACK_TAR;
  const char *path = stk__dataset_path(pk->ds, i);
  /* Stat first, read second: a file replaced between the two is recorded
   * with its old stat and so looks changed at the next open, never the
   * reverse. A failed stat records what no file has. */
  if (!tar) stat_source(path, r);
  stk__bytes b = {0};
  r->rc = stk__bounded_read_file(br, path, o->max_file_bytes, &b, r->msg, sizeof r->msg);
  stk__image_info info;
  if (!r->rc) r->rc = stk__decoder_header(w->dec, b.data, b.len, &info, r->msg, sizeof r->msg);
  if (!r->rc && tar && b.len > 077777777777ULL)
    r->rc = stk__fail(r->msg, sizeof r->msg, STK_ELIMIT, "file is %zu bytes, too large for a tar "
                      "member", b.len);
  stk__region reg;
  if (!r->rc && (!tar || pk->o->check))
    r->rc = stk__decoder_decode(w->dec, b.data, b.len, NULL, 1, &reg, r->msg, sizeof r->msg);
  if (r->rc) {
    return;
  }
  if (tar) { /* the file's own bytes go into the shard */
    if (stk__buf_reserve(&r->buf, b.len ? b.len : 1)) {
      r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory");
      return;
    }
    memcpy(r->buf.p, b.data, b.len);
    r->data = r->buf.p;
    r->len = b.len;
    r->ext = member_ext(b.data, b.len);
    return;
  }
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
  finish_result(o, r, px, nw, nh);
}

static void pack_main(void *arg) {
  packer *pk = arg;
  stk__worker w;
  stk__plan plan;
  memset(&plan, 0, sizeof plan);
  plan.max_pixels = pk->o->max_pixels;
  int ok = stk__worker_init(&w, &plan) == STK_OK;
  stk__resampler rs;
  memset(&rs, 0, sizeof rs);
  stk__bounded_reader br;
  stk__bounded_init(&br, pk->o->read_timeout);
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
      pack_one(pk, &w, &rs, &br, i, r);
    else
      r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory for decoder state");
    pthread_mutex_lock(&pk->mu);
    r->state = 2;
    pthread_cond_broadcast(&pk->cv);
  }
  pthread_mutex_unlock(&pk->mu);
  stk__bounded_free(&br);
  stk__resampler_free(&rs);
  if (ok) stk__worker_free(&w);
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

/* ---- packing on a device ---------------------------------------------------- */
#define DEV_BLOCK 64       /* files of one GPU batch: a device thread's claim */
#define DEV_MAX_THREADS 8  /* each holds a slot of DEV_BLOCK max_side^2 images */

/* A device thread's files of one block, kept until the batch has run (the
 * bounded reader's bytes last only until its next read). */
typedef struct {
  stk__buf bytes[DEV_BLOCK];
  stk__gpu_item items[DEV_BLOCK];
  int64_t index[DEV_BLOCK];
  char msg[DEV_BLOCK][256];
  /* the block's pixels come back into pinned memory (pageable copies run
   * at a fraction of the rate), where the results point until dev_flush
   * has written them: the thread's next block reuses it */
  uint8_t *pinned;
  size_t image_bytes;
  int dst[DEV_BLOCK];
  size_t len[DEV_BLOCK];
  void *host[DEV_BLOCK];
} dev_block;

/* Reads file i of the block, its header and the size the cache keeps, into
 * item k; a file that fails here gets its reason in r. */
static void dev_read(packer *pk, stk__decoder *dec, stk__bounded_reader *br, dev_block *b, int k,
                     int64_t i, result *r) {
  const char *path = stk__dataset_path(pk->ds, i);
  stat_source(path, r);
  stk__bytes f = {0};
  stk__image_info info;
  r->rc = stk__bounded_read_file(br, path, pk->o->max_file_bytes, &f, r->msg, sizeof r->msg);
  if (!r->rc) r->rc = stk__decoder_header(dec, f.data, f.len, &info, r->msg, sizeof r->msg);
  if (!r->rc && stk__buf_reserve(&b->bytes[k], f.len ? f.len : 1))
    r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory");
  if (r->rc) return;
  memcpy(b->bytes[k].p, f.data, f.len);
  stk__gpu_item *it = &b->items[k];
  memset(it, 0, sizeof *it);
  it->kind = STK__GPU_JPEG; /* what the GPU cannot decode, its CPU decoder does */
  it->data = b->bytes[k].p;
  it->len = f.len;
  stk__bound_size(info.width, info.height, pk->o->max_side, &it->out_w, &it->out_h);
  /* the CPU pack's resize: the whole image, Pillow's pass order */
  stk__geom_crop(&(stk__rect){0, 0, info.width, info.height}, it->out_w, it->out_h, &it->geom);
  it->geom.exact = 1;
  it->msg = b->msg[k];
  it->msglen = sizeof b->msg[k];
}

/* One block [first, first + n) through the GPU, its results into the ring.
 * Returns STK_OK, or the GPU's own failure (msg), which stops the pack. */
static int dev_run(packer *pk, stk__decoder *dec, stk__bounded_reader *br, dev_block *b, int slot,
                   int64_t first, int n, char *msg, size_t msglen) {
  int m = 0;
  for (int k = 0; k < n; k++) {
    result *r = &pk->ring[(first + k) % pk->nring];
    r->data = NULL;
    r->lent = 0;
    dev_read(pk, dec, br, b, m, first + k, r);
    if (r->rc) continue;
    b->items[m].dst = m;
    b->index[m++] = first + k;
  }
  int rc = m ? stk__gpu_run_batch(pk->gpu, slot, m, b->items, msg, msglen) : STK_OK;
  int nd = 0;
  for (int k = 0; k < m && rc == STK_OK; k++) {
    stk__gpu_item *it = &b->items[k];
    if (it->rc) continue;
    b->dst[nd] = k;
    b->len[nd] = (size_t)it->out_w * it->out_h * 3;
    b->host[nd++] = b->pinned + (size_t)k * b->image_bytes;
  }
  if (rc == STK_OK) rc = stk__gpu_download_images(pk->gpu, slot, nd, b->dst, b->len, b->host, msg,
                                                  msglen);
  int64_t on_gpu = 0;
  for (int k = 0; k < m && rc == STK_OK; k++) {
    stk__gpu_item *it = &b->items[k];
    result *r = &pk->ring[b->index[k] % pk->nring];
    if (it->rc) {
      r->rc = it->rc;
      snprintf(r->msg, sizeof r->msg, "%s", b->msg[k]);
      continue;
    }
    on_gpu += it->path == STK__GPU_PATH_HW || it->path == STK__GPU_PATH_CUDA;
    uint8_t *px = b->pinned + (size_t)k * b->image_bytes;
    finish_result(pk->o, r, px, it->out_w, it->out_h);
    r->lent = r->data == px;
  }
  pthread_mutex_lock(&pk->mu);
  pk->device_items += on_gpu;
  pthread_mutex_unlock(&pk->mu);
  return rc;
}

/* Writes block [first, first + n) once the writer has placed all of it
 * (state 3), then frees its ring entries. A device pack's output is several
 * GB/s: one writer thread copying it into the page cache would bound the
 * pack, so the writer only places each result, in sample order, and the
 * device threads write their own blocks side by side. Called and returns
 * with pk->mu held. */
static void dev_flush(packer *pk, int64_t first, int n) {
  while (!pk->dev_rc && !pk->stop && pk->written < first + n)
    pthread_cond_wait(&pk->cv, &pk->mu);
  /* a pack stopped before placing the block (cancelled, failed) writes
   * nothing more: its file is removed */
  int write = !pk->dev_rc && pk->written >= first + n;
  pthread_mutex_unlock(&pk->mu);
  int err = 0;
  for (int k = 0; k < n; k++) {
    result *r = &pk->ring[(first + k) % pk->nring];
    errno = 0; /* pwrite_all fails on a 0-byte write too, which sets none */
    if (write && !err && !r->rc && pwrite_all(pk->fd, r->data, r->len, r->off))
      err = errno ? errno : EIO;
    if (r->data && r->data != r->buf.p && !r->lent) free(r->data);
    r->data = NULL;
    r->lent = 0;
  }
  pthread_mutex_lock(&pk->mu);
  if (err && !pk->dev_rc) {
    pk->dev_rc = stk__fail(pk->dev_msg, sizeof pk->dev_msg, STK_EIO, "cannot write %s: %s",
                           pk->tmp, strerror(err));
    pk->stop = 1;
  }
  for (int k = 0; k < n; k++) pk->ring[(first + k) % pk->nring].state = 0;
  pthread_cond_broadcast(&pk->cv);
}

/* Whether the ring entries of block [first, first + n) are all free. */
static int dev_ring_free(const packer *pk, int64_t first, int n) {
  for (int k = 0; k < n; k++)
    if (pk->ring[(first + k) % pk->nring].state != 0) return 0;
  return 1;
}

static void dev_main(void *arg) {
  packer *pk = arg;
  dev_block *b = calloc(1, sizeof *b);
  stk__decoder *dec = stk__decoder_create();
  stk__bounded_reader br;
  stk__bounded_init(&br, pk->o->read_timeout);
  char msg[320] = "";
  pthread_mutex_lock(&pk->mu);
  int slot = pk->next_slot++;
  if (b) {
    b->image_bytes = stk__gpu_image_bytes(pk->gpu);
    b->pinned = pk->pinned[slot];
  }
  if (!b || !dec) {
    if (!pk->dev_rc) {
      pk->dev_rc = STK_ENOMEM;
      snprintf(pk->dev_msg, sizeof pk->dev_msg, "out of memory");
    }
    pk->stop = 1;
    pthread_cond_broadcast(&pk->cv);
  }
  if (dec) stk__decoder_set_limits(dec, pk->o->max_pixels);
  for (;;) {
    /* a whole block of free ring entries (blocks are aligned in the ring,
     * which holds a whole number of them) */
    while (!pk->stop && pk->next_claim < pk->ds->n && !dev_ring_free(pk, pk->next_claim, DEV_BLOCK))
      pthread_cond_wait(&pk->cv, &pk->mu);
    if (pk->stop || pk->next_claim >= pk->ds->n) break;
    int64_t first = pk->next_claim;
    int n = pk->ds->n - first < DEV_BLOCK ? (int)(pk->ds->n - first) : DEV_BLOCK;
    pk->next_claim += n;
    for (int k = 0; k < n; k++) pk->ring[(first + k) % pk->nring].state = 1;
    pthread_mutex_unlock(&pk->mu);
    int rc = dev_run(pk, dec, &br, b, slot, first, n, msg, sizeof msg);
    pthread_mutex_lock(&pk->mu);
    if (rc) {
      if (!pk->dev_rc) {
        pk->dev_rc = rc;
        snprintf(pk->dev_msg, sizeof pk->dev_msg, "%s", msg);
      }
      pk->stop = 1;
    } else {
      for (int k = 0; k < n; k++) pk->ring[(first + k) % pk->nring].state = 2;
    }
    pthread_cond_broadcast(&pk->cv);
    dev_flush(pk, first, n);
    if (rc) break;
  }
  pthread_mutex_unlock(&pk->mu);
  stk__bounded_free(&br);
  stk__decoder_destroy(dec);
  if (b)
    for (int k = 0; k < DEV_BLOCK; k++) stk__buf_free(&b->bytes[k]);
  free(b);
}

/* The GPU of a device pack: one slot per device thread, each image a
 * max_side square of uint8 RGB, into which every item writes at its own
 * size. Opened before anything is written, so that a missing device fails
 * the pack at once. */
static int dev_open(const stk_pack_options *o, int threads, stk__gpu **g, char *err,
                    size_t errlen) {
  stk__gpu_config c;
  stk__gpu_config_init(&c);
  c.max_batch = DEV_BLOCK;
  c.out_w = c.out_h = o->max_side;
  c.dtype = STK_DTYPE_UINT8;
  c.layout = STK_LAYOUT_NHWC;
  for (int k = 0; k < 3; k++) c.mean[k] = 0, c.std[k] = 1;
  c.slots = threads;
  c.lanes = threads < 4 ? threads : 4;
  c.roi = 0; /* whole images */
  /* libjpeg-like (interpolated) chroma upsampling unless plain_chroma:
   * measured on ImageNet photos, no value then more than 1 level from the
   * CPU pack's, where the engines' plain upsampling (up to 2.3x faster) puts
   * 0.1-1.8% of them further, up to 40 (docs/storage.md) */
  c.chroma_interp = !o->plain_chroma;
  c.max_pixels = o->max_pixels;
  char msg[384];
  int rc = stk__gpu_open(o->device, &c, g, msg, sizeof msg);
  if (rc) return stk__fail(err, errlen, rc, "cannot pack on device %d: %s", o->device, msg);
  return STK_OK;
}

/* The device threads' pinned buffers, one block of max_side squares each:
 * as many as can be had, up to *threads (at least one, else the pack
 * fails), so that a host short of pinned memory runs fewer threads. */
static int dev_pinned(stk__gpu *g, int *threads, uint8_t ***out, char *err, size_t errlen) {
  uint8_t **p = calloc((size_t)*threads, sizeof *p);
  if (!p) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  size_t bytes = DEV_BLOCK * stk__gpu_image_bytes(g);
  char msg[256];
  int k = 0;
  for (; k < *threads; k++)
    if (stk__gpu_host_alloc(g, bytes, (void **)&p[k], msg, sizeof msg)) break;
  if (k == 0) {
    free(p);
    return stk__fail(err, errlen, STK_ENOMEM, "cannot pack on a device: %s", msg);
  }
  *threads = k;
  *out = p;
  return STK_OK;
}

static void dev_close(stk__gpu *g, uint8_t **pinned, int threads) {
  for (int k = 0; pinned && k < threads; k++) stk__gpu_host_free(g, pinned[k]);
  free(pinned);
  stk__gpu_close(g);
}

/* Why a device pack stopped (pk->dev_rc set): a device thread's write, or
 * the GPU itself after `done` of the files. */
static int dev_failure(const stk_pack_options *o, const packer *pk, int64_t done, int64_t n,
                       char *err, size_t errlen) {
  if (pk->dev_rc == STK_EIO) return stk__fail(err, errlen, STK_EIO, "%s", pk->dev_msg);
  /* what the GPU left undone cannot be told from bad files: the pack fails */
  return stk__fail(err, errlen, pk->dev_rc, "device %d failed after %lld of %lld files: %s",
                   o->device, (long long)done, (long long)n, pk->dev_msg);
}

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

/* Packs ds into a cache (kind, where and base describe its source) or tar
 * shards. */
static int pack_run(const stk_pack_options *o, const stk__dataset *ds,
                    const char *kind, const char *where, const char *base, stk_pack_result *res,
                    char *err, size_t errlen) {
  int tar = o->format == STK_PACK_TAR, dev = !tar && o->device >= 0;
  int threads = o->threads;
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  stk__gpu *gpu = NULL;
  uint8_t **pinned = NULL;
  if (dev) {
    /* each thread holds a GPU slot and a pinned block of DEV_BLOCK max_side
     * squares: at most 4 GiB of them (one thread at the largest sides) */
    uint64_t per = (uint64_t)DEV_BLOCK * o->max_side * o->max_side * 3;
    int most = (int)((4ULL << 30) / per);
    if (threads > DEV_MAX_THREADS) threads = DEV_MAX_THREADS;
    if (threads > most) threads = most > 0 ? most : 1;
    int rc = dev_open(o, threads, &gpu, err, errlen);
    if (!rc && (rc = dev_pinned(gpu, &threads, &pinned, err, errlen))) stk__gpu_close(gpu);
    if (rc) return rc;
  }
  if (!tar && o->encoding == STK_CACHE_RAW) {
    /* Say how large the cache will be before writing it, and refuse at
     * once what the disk cannot hold rather than after filling it. */
    int64_t sampled = 0;
    uint64_t est = estimate_raw(o, ds, &sampled);
    uint64_t avail = free_bytes_at(o->output);
    if (o->estimate && est) o->estimate(o->user, est, avail, sampled, ds->n);
    if (est && avail != UINT64_MAX && est > avail) {
      char e[32], a[32];
      human(e, sizeof e, est);
      human(a, sizeof a, avail);
      int rc = stk__fail(err, errlen, STK_EIO,
                       "not enough room for %s: the raw cache of %lld images needs about %s "
                       "(estimated from the headers of %lld), and %s is free there; free some "
                       "space, pack with a smaller max_side or with the jpeg encoding",
                       o->output, (long long)ds->n, e, (long long)sampled, a);
      dev_close(gpu, pinned, threads);
      return rc;
    }
  }
  stk__tar_writer *tw = NULL;
  char tmp[4200];
  int fd = -1;
  if (tar) {
    int rc = stk__tar_writer_open(&tw, o, err, errlen);
    if (rc) return rc;
  } else {
    int rc = STK_OK;
    if (stk__pack_tmp_path(o->output, (long)getpid(), tmp, sizeof tmp))
      rc = stk__fail(err, errlen, STK_EINVAL, "output path too long");
    else if ((fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
      rc = stk__fail(err, errlen, STK_EIO, "cannot create %s: %s", tmp, strerror(errno));
    if (rc) {
      dev_close(gpu, pinned, threads);
      return rc;
    }
  }
  packer pk;
  memset(&pk, 0, sizeof pk);
  pk.o = o;
  pk.ds = ds;
  pk.gpu = gpu;
  pk.pinned = pinned;
  pk.fd = fd;
  pk.tmp = tmp;
  /* a device thread claims a block at a time: room for two each */
  pk.nring = dev ? (int64_t)threads * DEV_BLOCK * 2 : (int64_t)threads * 4;
  pk.ring = calloc((size_t)pk.nring, sizeof *pk.ring);
  stk__cache_entry *ent = tar ? NULL : calloc((size_t)ds->n, sizeof *ent);
  stk__cache_stat *fst = tar ? NULL : calloc((size_t)ds->n, sizeof *fst);
  stk__work *th = calloc((size_t)threads, sizeof *th);
  stk__workers *pool = stk__workers_create(0, "stk-pack", NULL, 0);
  stk__buf meta = {0}, names = {0};
  size_t names_len = 0;
  int rc = STK_OK, started = 0;
  if (!pk.ring || (!tar && (!ent || !fst)) || !th || !pool)
    rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  pthread_mutex_init(&pk.mu, NULL);
  pthread_cond_init(&pk.cv, NULL);
  /* a decoder each, for the whole pack; those that cannot start are done
   * without, as long as one did */
  for (int t = 0; rc == STK_OK && t < threads; t++) {
    if (stk__workers_spawn(pool, &th[t], dev ? dev_main : pack_main, NULL, &pk)) break;
    started++;
  }
  if (rc == STK_OK && !started)
    rc = stk__fail(err, errlen, STK_ENOMEM, "cannot start a pack thread");

  /* The writer: results in sample order. */
  uint64_t off = STK__CACHE_DATA_OFF;
  int64_t nout = 0;
  for (int64_t i = 0; rc == STK_OK && i < ds->n; i++) {
    if (o->cancel && i % 16 == 0 && o->cancel(o->user)) {
      rc = stk__fail(err, errlen, STK_ECANCELED, "cancelled after %lld of %lld files",
                     (long long)i, (long long)ds->n);
      break;
    }
    result *r = &pk.ring[i % pk.nring];
    pthread_mutex_lock(&pk.mu);
    while (!(r->state == 2 && pk.written == i) && !pk.dev_rc) pthread_cond_wait(&pk.cv, &pk.mu);
    int dev_rc = pk.dev_rc;
    pthread_mutex_unlock(&pk.mu);
    if (dev_rc) {
      rc = dev_failure(o, &pk, i, ds->n, err, errlen);
      break;
    }
    const char *path = stk__dataset_path(ds, i);
    if (r->rc) {
      res->failed++;
      if (o->bad_file) o->bad_file(o->user, path, r->msg);
    } else if (tar) {
      rc = stk__tar_writer_add(tw, i, path, r->ext, r->data, r->len, ds->labels[i], res, err,
                               errlen);
    } else {
      r->off = off; /* a device pack: its thread writes it there (dev_flush) */
      if (!dev && pwrite_all(fd, r->data, r->len, off)) {
        rc = stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tmp, strerror(errno));
      } else {
        stk__cache_entry *e = &ent[nout++];
        e->off = off;
        e->len = r->len;
        e->w = (uint32_t)r->w;
        e->h = (uint32_t)r->h;
        e->label = ds->labels[i];
        e->hash = r->hash;
        fst[nout - 1] = r->fst;
        off += (r->len + STK__CACHE_ALIGN - 1) / STK__CACHE_ALIGN * STK__CACHE_ALIGN;
        if (put(&names, &names_len, path, strlen(path) + 1))
          rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
      }
    }
    if (!dev) {
      if (r->data && r->data != r->buf.p) free(r->data);
      r->data = NULL;
    }
    pthread_mutex_lock(&pk.mu);
    /* (when a device thread failed meanwhile, dev_flush may have freed this
     * block already: the 3 then stays, harmless, as stop is set and nothing
     * claims the entry again) */
    r->state = dev ? 3 : 0;
    pk.written = i + 1;
    pthread_cond_broadcast(&pk.cv);
    pthread_mutex_unlock(&pk.mu);
    if (o->progress && ((i + 1) % 64 == 0 || i + 1 == ds->n)) o->progress(o->user, i + 1, ds->n);
  }
  pthread_mutex_lock(&pk.mu);
  pk.stop = 1;
  pthread_cond_broadcast(&pk.cv);
  pthread_mutex_unlock(&pk.mu);
  stk__workers_destroy(pool);
  /* the device threads write the last blocks after the writer has placed
   * them: a failure there is known only now */
  if (rc == STK_OK && pk.dev_rc) rc = dev_failure(o, &pk, ds->n, ds->n, err, errlen);
  dev_close(gpu, pinned, threads);
  res->device_packed = pk.device_items;

  if (tar) {
    rc = stk__tar_writer_finish(tw, rc, ds, res, err, errlen);
    goto out;
  }
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
    /* the source files' stats, after the strings (see cache_format.h) */
    hd.reserved = STK__CACHE_F_STATS;
    stk__cache_ext ext;
    memset(&ext, 0, sizeof ext);
    memcpy(ext.magic, STK__CACHE_EXT_MAGIC, 8);
    ext.stats_off = (off + mlen + 7) / 8 * 8;
    ext.stats_len = (uint64_t)nout * sizeof *fst;
    ext.stats_hash = stk__hash64(fst, (size_t)ext.stats_len, 0);
    ext.ext_hash = stk__hash64(&ext, offsetof(stk__cache_ext, ext_hash), 0);
    hd.header_hash = stk__hash64(&hd, offsetof(stk__cache_header, header_hash), 0);
    uint8_t block[STK__CACHE_DATA_OFF];
    memset(block, 0, sizeof block);
    memcpy(block, &hd, sizeof hd);
    memcpy(block + STK__CACHE_EXT_OFF, &ext, sizeof ext);
    static const uint8_t zeros[8];
    if (pwrite_all(fd, meta.p, mlen, off) ||
        pwrite_all(fd, zeros, (size_t)(ext.stats_off - off - mlen), off + mlen) ||
        pwrite_all(fd, fst, (size_t)ext.stats_len, ext.stats_off) ||
        pwrite_all(fd, block, sizeof block, 0) || fsync(fd) != 0)
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
    res->bytes = (off + mlen + 7) / 8 * 8 + (uint64_t)nout * sizeof *fst;
  }
out:
  for (int64_t k = 0; pk.ring && k < pk.nring; k++) {
    /* results done but never written (a failure or a cancel stopped the
     * writer): their encoded bytes too */
    if (pk.ring[k].data && pk.ring[k].data != pk.ring[k].buf.p && !pk.ring[k].lent)
      free(pk.ring[k].data);
    stk__buf_free(&pk.ring[k].buf);
  }
  free(pk.ring);
  free(ent);
  free(fst);
  free(th);
  stk__buf_free(&meta);
  stk__buf_free(&names);
  pthread_mutex_destroy(&pk.mu);
  pthread_cond_destroy(&pk.cv);
  return rc;
}

int stk__pack_dataset(const stk_pack_options *o, const stk__dataset *ds, stk_pack_result *res,
                      char *err, size_t errlen) {
  const char *where = o->root ? o->root : o->list_file ? o->list_file : "";
  return pack_run(o, ds, o->root ? "folder" : "list", where, o->list_base ? o->list_base : "",
                  res, err, errlen);
}

int stk_pack_temp_path(const char *output, char *buf, size_t n) {
  if (!output || !buf || stk__pack_tmp_path(output, (long)getpid(), buf, n))
    return STK_EINVAL;
  return STK_OK;
}

/* SIGXFSZ ignored while packs run. A write past RLIMIT_FSIZE (ulimit -f)
 * raises SIGXFSZ, whose default action kills the process, leaving the
 * temporary file behind; ignored, the write fails with EFBIG instead, and
 * the pack fails, removes what it wrote, and says so. Only a default
 * disposition is replaced (a handler of the caller's stays), and it comes
 * back when the last pack of the process ends. */
static pthread_mutex_t g_xfsz_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_xfsz_users, g_xfsz_swapped;
static struct sigaction g_xfsz_old;

static void xfsz_ignore(int on) {
  pthread_mutex_lock(&g_xfsz_mu);
  if (on && g_xfsz_users++ == 0) {
    struct sigaction cur;
    g_xfsz_swapped = 0;
    if (sigaction(SIGXFSZ, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_DFL) {
      struct sigaction ign;
      memset(&ign, 0, sizeof ign);
      ign.sa_handler = SIG_IGN;
      sigemptyset(&ign.sa_mask);
      g_xfsz_old = cur;
      g_xfsz_swapped = sigaction(SIGXFSZ, &ign, NULL) == 0;
    }
  } else if (!on && --g_xfsz_users == 0 && g_xfsz_swapped) {
    struct sigaction cur;
    /* unless someone set another disposition meanwhile */
    if (sigaction(SIGXFSZ, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_IGN)
      sigaction(SIGXFSZ, &g_xfsz_old, NULL);
    g_xfsz_swapped = 0;
  }
  pthread_mutex_unlock(&g_xfsz_mu);
}

/* A failed write's "File too large" names the limit that caused it. */
static void explain_efbig(int rc, char *err, size_t errlen) {
  struct rlimit rl;
  const char *tl = strerror(EFBIG);
  if (rc != STK_EIO || !err || !strstr(err, tl) || getrlimit(RLIMIT_FSIZE, &rl) != 0 ||
      rl.rlim_cur == RLIM_INFINITY)
    return;
  size_t l = strlen(err);
  snprintf(err + l, errlen - l,
           " (the file size limit of this process, ulimit -f / RLIMIT_FSIZE, is %llu bytes)",
           (unsigned long long)rl.rlim_cur);
}

/* A pack to s3://: the shards are written into a local temporary folder,
 * then uploaded (sources/upload.h) and the folder removed. */
static int pack_to_store(const stk_pack_options *o, int header_version, stk_pack_result *res,
                         char *err, size_t errlen) {
  if (o->format != STK_PACK_TAR)
    return stk__fail(err, errlen, STK_EINVAL,
                     "%s: a pack to object storage writes tar shards (--tar), not a cache",
                     o->output);
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/stoker-pack-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir))
    return stk__fail(err, errlen, STK_EIO, "cannot make a temporary folder in %s: %s",
                     tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
  char out[4200];
  snprintf(out, sizeof out, "%s/shards", dir);
  stk_pack_options local = *o;
  local.output = out;
  int rc = stk_pack(&local, header_version, res, err, errlen);
  if (rc == STK_OK) rc = stk__upload_folder(out, o->output, o->read_timeout, err, errlen);
  /* the local copy goes, whatever happened */
  DIR *d = opendir(out);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[4600];
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", out, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(out);
  rmdir(dir);
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
  memcpy(&o, opt, opt->struct_size); /* fields the caller's header lacks keep defaults */
  o.struct_size = sizeof o;
  int vr = stk__pack_options_validate(&o, err, errlen);
  if (vr) return vr;
  if (o.output && stk__is_url(o.output)) return pack_to_store(&o, header_version, res, err, errlen);
  /* The source is opened by its real path, so that the fingerprint the
   * cache keeps is that of the list a later check sees. */
  const char *given = o.root ? o.root : o.list_file;
  /* A list that is a pipe or FIFO (`--list <(...)`, /dev/stdin,
   * /proc/self/fd/N) has no real path to keep (realpath() fails on a pipe's
   * "pipe:[N]"), nor one a later check could read again: it is read where it
   * is, and the cache records no source (it is not checked for changes). */
  struct stat gst;
  int piped = !o.root && stat(given, &gst) == 0 && !S_ISREG(gst.st_mode) && !S_ISDIR(gst.st_mode);
  char *real = piped ? strdup(given) : realpath(given, NULL);
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
  lo.read_timeout = o.read_timeout; /* a FIFO or pipe list */
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
  xfsz_ignore(1);
  rc = pack_run(&o, &src.ds, o.root ? "folder" : "list", piped ? "" : real,
                real_base ? real_base : "", res, err, errlen);
  xfsz_ignore(0);
  explain_efbig(rc, err, errlen);
done:
  stk__source_close(&src);
  free(real);
  free(real_base);
  return rc;
}
