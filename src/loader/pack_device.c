/*
 * pack_device.c: the device producer of stk_pack (pack.h), for a cache
 * packed with o->device >= 0.
 *
 * Each device thread claims an aligned block of STK__PACK_DEV_BLOCK files,
 * reads them and their headers, has the GPU decode them and resize them
 * into a slot of its own (stk__gpu_run_batch, each item at its own output
 * size), copies the pixels back into its pinned buffer and marks the
 * block's ring entries done. The ordered loop places each result (its
 * offset, in sample order); once the whole block is placed, the thread
 * writes it there itself (dev_flush) and frees the entries. What the GPU
 * cannot decode, its CPU decoder does, so the cache holds what the CPU
 * producer would have made, within the chroma rule of docs/storage.md.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "gpu/gpu.h"
#include "loader/pack.h"
#include "ops/ops.h"
#include "sources/bounded_read.h"

#define DEV_BLOCK STK__PACK_DEV_BLOCK
#define DEV_MAX_THREADS 8 /* each holds a slot of DEV_BLOCK max_side^2 images */

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
static void dev_read(stk__packer *pk, stk__decoder *dec, stk__bounded_reader *br, dev_block *b, int k,
                     int64_t i, stk__pack_result *r) {
  const char *path = stk__dataset_path(pk->ds, i);
  stk__pack_stat_source(path, r);
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
static int dev_run(stk__packer *pk, stk__decoder *dec, stk__bounded_reader *br, dev_block *b, int slot,
                   int64_t first, int n, char *msg, size_t msglen) {
  int m = 0;
  for (int k = 0; k < n; k++) {
    stk__pack_result *r = &pk->ring[(first + k) % pk->nring];
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
    stk__pack_result *r = &pk->ring[b->index[k] % pk->nring];
    if (it->rc) {
      r->rc = it->rc;
      snprintf(r->msg, sizeof r->msg, "%s", b->msg[k]);
      continue;
    }
    on_gpu += it->path == STK__GPU_PATH_HW || it->path == STK__GPU_PATH_CUDA;
    uint8_t *px = b->pinned + (size_t)k * b->image_bytes;
    stk__pack_finish_result(pk->o, r, px, it->out_w, it->out_h);
    r->lent = r->data == px;
  }
  pthread_mutex_lock(&pk->mu);
  pk->device_items += on_gpu;
  pthread_mutex_unlock(&pk->mu);
  return rc;
}

/* Writes block [first, first + n) once the writer has placed all of it
 * (SLOT_PLACED), then frees its ring entries. A device pack's output is several
 * GB/s: one writer thread copying it into the page cache would bound the
 * pack, so the writer only places each result, in sample order, and the
 * device threads write their own blocks side by side. Called and returns
 * with pk->mu held. */
static void dev_flush(stk__packer *pk, int64_t first, int n) {
  while (!pk->dev_rc && !pk->stop && pk->written < first + n)
    pthread_cond_wait(&pk->cv, &pk->mu);
  /* a pack stopped before placing the block (cancelled, failed) writes
   * nothing more: its file is removed */
  int write = !pk->dev_rc && pk->written >= first + n;
  pthread_mutex_unlock(&pk->mu);
  int err = 0;
  for (int k = 0; k < n; k++) {
    stk__pack_result *r = &pk->ring[(first + k) % pk->nring];
    if (write && !err && !r->rc) err = pk->wops->write_at(pk->writer, r->data, r->len, r->off);
    if (r->data && r->data != r->buf.p && !r->lent) free(r->data);
    r->data = NULL;
    r->lent = 0;
  }
  pthread_mutex_lock(&pk->mu);
  if (err && !pk->dev_rc) {
    pk->dev_rc = stk__fail(pk->dev_msg, sizeof pk->dev_msg, STK_EIO, "cannot write %s: %s",
                           pk->wops->temp_name(pk->writer), strerror(err));
    pk->stop = 1;
  }
  for (int k = 0; k < n; k++) pk->ring[(first + k) % pk->nring].state = SLOT_FREE;
  pthread_cond_broadcast(&pk->cv);
}

/* Whether the ring entries of block [first, first + n) are all free. */
static int dev_ring_free(const stk__packer *pk, int64_t first, int n) {
  for (int k = 0; k < n; k++)
    if (pk->ring[(first + k) % pk->nring].state != SLOT_FREE) return 0;
  return 1;
}

void stk__pack_device_main(void *arg) {
  stk__packer *pk = arg;
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
    /* Where the CPU producers alone pack faster, a device thread's block
     * only holds the ordered writes back (the CPU producers wait for it
     * at the end of their window): the device threads stop, and the CPU
     * producers pack the rest. */
    double rd, rcpu;
    if (!pk->dev_stopped && stk__pack_device_slower(pk, &rd, &rcpu)) {
      pk->dev_stopped = 1;
      pk->dev_t1 = stk__now();
    }
    if (pk->dev_stopped) break;
    /* a whole block of free ring entries (blocks are aligned in the ring,
     * which holds a whole number of them) */
    while (!pk->stop && pk->next_claim < pk->ds->n && !dev_ring_free(pk, pk->next_claim, DEV_BLOCK))
      pthread_cond_wait(&pk->cv, &pk->mu);
    if (pk->stop || pk->next_claim >= pk->ds->n) break;
    int64_t first = pk->next_claim;
    if (pk->dev_t0 == 0) pk->dev_t0 = stk__now();
    int n = pk->ds->n - first < DEV_BLOCK ? (int)(pk->ds->n - first) : DEV_BLOCK;
    pk->next_claim += n;
    for (int k = 0; k < n; k++) pk->ring[(first + k) % pk->nring].state = SLOT_CLAIMED;
    pthread_mutex_unlock(&pk->mu);
    int rc = dev_run(pk, dec, &br, b, slot, first, n, msg, sizeof msg);
    pthread_mutex_lock(&pk->mu);
    pk->dev_done += n;
    if (rc) {
      if (!pk->dev_rc) {
        pk->dev_rc = rc;
        snprintf(pk->dev_msg, sizeof pk->dev_msg, "%s", msg);
      }
      pk->stop = 1;
    } else {
      for (int k = 0; k < n; k++) pk->ring[(first + k) % pk->nring].state = SLOT_DONE;
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

int stk__pack_device_slower(const stk__packer *pk, double *dev, double *cpu) {
  double span = (pk->dev_t1 > 0 ? pk->dev_t1 : stk__now()) - pk->dev_t0;
  *dev = pk->dev_t0 > 0 && span > 0 ? (double)pk->dev_done / span : 0;
  *cpu = pk->cpu_busy_s > 0 ? pk->cpu_threads * (double)pk->cpu_done / pk->cpu_busy_s : 0;
  /* enough to tell: a block from each device thread, a few files from
   * each CPU producer (none: the device packs alone) */
  if (pk->cpu_threads == 0 || pk->dev_done < (int64_t)pk->device_threads * DEV_BLOCK ||
      pk->cpu_done < 4 * (int64_t)pk->cpu_threads)
    return 0;
  return *dev < *cpu;
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

int stk__pack_device_failure(const stk__packer *pk, int64_t done, int64_t n, char *err,
                             size_t errlen) {
  if (pk->dev_rc == STK_EIO) return stk__fail(err, errlen, STK_EIO, "%s", pk->dev_msg);
  /* what the GPU left undone cannot be told from bad files: the pack fails */
  return stk__fail(err, errlen, pk->dev_rc, "device %d failed after %lld of %lld files: %s",
                   pk->o->device, (long long)done, (long long)n, pk->dev_msg);
}

int stk__pack_device_open(stk__packer *pk, int *threads, char *err, size_t errlen) {
  const stk_pack_options *o = pk->o;
  /* each thread holds a GPU slot and a pinned block of DEV_BLOCK max_side
   * squares: at most 4 GiB of them (one thread at the largest sides) */
  uint64_t per = (uint64_t)DEV_BLOCK * o->max_side * o->max_side * 3;
  int most = (int)((4ULL << 30) / per);
  if (*threads > DEV_MAX_THREADS) *threads = DEV_MAX_THREADS;
  if (*threads > most) *threads = most > 0 ? most : 1;
  int rc = dev_open(o, *threads, &pk->gpu, err, errlen);
  if (!rc && (rc = dev_pinned(pk->gpu, threads, &pk->pinned, err, errlen))) {
    stk__gpu_close(pk->gpu);
    pk->gpu = NULL;
  }
  return rc;
}

void stk__pack_device_close(stk__packer *pk, int threads) {
  if (!pk->gpu) return;
  for (int k = 0; pk->pinned && k < threads; k++) stk__gpu_host_free(pk->gpu, pk->pinned[k]);
  free(pk->pinned);
  stk__gpu_close(pk->gpu);
  pk->pinned = NULL;
  pk->gpu = NULL;
}
