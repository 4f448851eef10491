/*
 * pack.c: stk_pack, which turns an image folder or a list file into a
 * pre-decoded cache, tar shards, or tar shards in object storage.
 *
 * Producers and a writer, around a reorder ring (pack.h):
 * - the producers are `threads` workers (pack_main here; for a cache
 *   packed on a GPU, the device threads of pack_device.c with CPU workers
 *   beside them). Each claims the next sample (a device thread, a block), reads it (bounded by read_timeout, see bounded_read.h) and
 *   makes what the writer takes: decoded pixels bounded to max_side and
 *   encoded (a cache), or the file's own bytes, its header checked (tar);
 * - the calling thread runs the ordered loop: it hands each result to the
 *   writer (sources/pack_writer.h: cache, tar or store) strictly in sample
 *   order, reports progress and bad files, and frees the entry.
 * The output is the same whatever the thread count (a device pack's pixels
 * within the chroma rule of docs/storage.md, whichever producer made them), memory stays bounded
 * by the ring (4 results per CPU worker), and a cache and a tar pack give a
 * bad file the same reason, as both come from here.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codecs/encode.h"
#include "core/options.h"
#include "core/workers.h"
#include "loader/pack.h"
#include "loader/pipeline.h"
#include "sources/redact.h"
#include "sources/bounded_read.h"
#include "sources/source.h"

void stk__pack_finish_result(const stk_pack_options *o, stk__pack_result *r, uint8_t *px, int nw,
                             int nh) {
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

/* Stat first, read second: a file replaced between the two is recorded with
 * its old stat and so looks changed at the next open, never the reverse. A
 * failed stat records what no file has. */
void stk__pack_stat_source(const char *path, stk__pack_result *r) {
  struct stat fs;
  if (stat(path, &fs) == 0) {
    r->fst.size = (uint64_t)fs.st_size;
    r->fst.mtime_ns = (int64_t)fs.st_mtim.tv_sec * 1000000000 + fs.st_mtim.tv_nsec;
  } else {
    r->fst.size = UINT64_MAX;
    r->fst.mtime_ns = INT64_MIN;
  }
}

void stk__pack_result_release(stk__pack_result *r) {
  if (r->data && r->data != r->buf.p && !r->lent) free(r->data);
  r->data = NULL;
  r->lent = 0;
}

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

/* The file's own bytes into r (tar). */
static void keep_file(const stk__bytes *b, stk__pack_result *r) {
  if (stk__buf_reserve(&r->buf, b->len ? b->len : 1)) {
    r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory");
    return;
  }
  memcpy(r->buf.p, b->data, b->len);
  r->data = r->buf.p;
  r->len = b->len;
  r->ext = member_ext(b->data, b->len);
}

/* The decoded image bounded to max_side into r->buf, then encoded (cache). */
static void keep_pixels(const stk_pack_options *o, stk__resampler *rs, const stk__region *reg,
                        stk__pack_result *r) {
  int nw, nh;
  stk__bound_size(reg->w, reg->h, o->max_side, &nw, &nh);
  if (stk__buf_reserve(&r->buf, (size_t)nw * nh * 3)) {
    r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory");
    return;
  }
  uint8_t *px = r->buf.p;
  if (nw == reg->w && nh == reg->h) {
    for (int y = 0; y < nh; y++)
      memcpy(px + (size_t)y * nw * 3, reg->pixels + (size_t)y * reg->stride, (size_t)nw * 3);
  } else {
    /* Pillow's antialiased bilinear resize of the whole image: the cache
     * then holds what PIL's img.resize((nw, nh), BILINEAR) gives */
    stk__geom g;
    stk__geom_crop(&(stk__rect){0, 0, reg->w, reg->h}, nw, nh, &g);
    g.exact = 1;
    stk__rect need;
    stk__store st;
    const float m[3] = {0, 0, 0}, sd[3] = {1, 1, 1};
    stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, nw, nh, m, sd);
    if (stk__resampler_plan(rs, &g, &need) ||
        stk__resampler_run(rs, reg->pixels, reg->stride, 0, 0, &st, px)) {
      r->rc = stk__fail(r->msg, sizeof r->msg, STK_EDECODE, "cannot resize %dx%d to %dx%d",
                        reg->w, reg->h, nw, nh);
      return;
    }
  }
  stk__pack_finish_result(o, r, px, nw, nh);
}

/* The work of one file: read it, check its header, decode it in full where
 * the writer takes pixels (or `check` asks), and keep what the writer
 * takes. */
static void pack_one(const stk__packer *pk, stk__worker *w, stk__resampler *rs,
                     stk__bounded_reader *br, int64_t i, stk__pack_result *r) {
  const stk_pack_options *o = pk->o;
  int pixels = pk->wops->pixels;
  const char *path = stk__dataset_path(pk->ds, i);
  if (pixels) stk__pack_stat_source(path, r);
  stk__bytes b = {0};
  r->rc = stk__bounded_read_file(br, path, o->max_file_bytes, &b, r->msg, sizeof r->msg);
  stk__image_info info;
  memset(&info, 0, sizeof info); /* a failed read leaves it unread: copied below all the same */
  if (!r->rc) r->rc = stk__decoder_header(w->dec, b.data, b.len, &info, r->msg, sizeof r->msg);
  if (!r->rc && !pixels && b.len > 077777777777ULL)
    r->rc = stk__fail(r->msg, sizeof r->msg, STK_ELIMIT, "file is %zu bytes, too large for a tar "
                      "member", b.len);
  stk__region reg;
  stk__sample s = {.data = b.data, .len = b.len, .info = info};
  /* Within the decode budget the producers share; a decode larger than
   * all of it waits to run alone rather than be left out: the cache keeps
   * the image at max_side, which every loader takes. tar's --check only
   * vets the file, as stoker check does (a JPEG at 1/8 reads every
   * coefficient). */
  if (!r->rc && pixels)
    r->rc = stk__whole_decode(pk->plan, w, &s, 1, &reg, r->msg, sizeof r->msg);
  else if (!r->rc && o->check)
    r->rc = stk__whole_decode(pk->plan, w, &s, info.format == STK__FMT_JPEG ? 8 : 1, &reg, r->msg,
                              sizeof r->msg);
  if (!r->rc && pixels)
    keep_pixels(o, rs, &reg, r);
  else if (!r->rc)
    keep_file(&b, r);
  stk__sample_release(pk->plan, w); /* the share, and an outsized image's buffers */
}

/* A CPU producer: claims samples within the ring, fills them, marks them
 * done. */
static void pack_main(void *arg) {
  stk__packer *pk = arg;
  stk__worker w;
  int ok = stk__worker_init(&w, pk->plan) == STK_OK;
  stk__resampler rs;
  memset(&rs, 0, sizeof rs);
  stk__bounded_reader br;
  stk__bounded_init(&br, pk->o->read_timeout);
  /* claim only within the ring: the loop is at most nring behind; beside
   * device threads, short of the blocks they claim, or the CPU producers,
   * claiming each entry as it frees, would leave them none */
  int64_t window = pk->nring - (int64_t)pk->device_threads * STK__PACK_DEV_BLOCK;
  pthread_mutex_lock(&pk->mu);
  for (;;) {
    while (!pk->stop && pk->next_claim < pk->ds->n && pk->next_claim >= pk->written + window)
      pthread_cond_wait(&pk->cv, &pk->mu);
    if (pk->stop || pk->next_claim >= pk->ds->n) break;
    int64_t i = pk->next_claim++;
    stk__pack_result *r = &pk->ring[i % pk->nring];
    r->state = SLOT_CLAIMED;
    pthread_mutex_unlock(&pk->mu);
    r->data = NULL;
    r->cpu = 1;
    double t0 = stk__now();
    if (ok)
      pack_one(pk, &w, &rs, &br, i, r);
    else
      r->rc = stk__fail(r->msg, sizeof r->msg, STK_ENOMEM, "out of memory for decoder state");
    pthread_mutex_lock(&pk->mu);
    pk->cpu_busy_s += stk__now() - t0;
    pk->cpu_done++;
    r->state = SLOT_DONE;
    pthread_cond_broadcast(&pk->cv);
  }
  pthread_mutex_unlock(&pk->mu);
  stk__bounded_free(&br);
  stk__resampler_free(&rs);
  if (ok) stk__worker_free(&w);
}

/* Hands result i to the writer: written, or (a device pack) placed for its
 * device thread to write. A bad file is counted and reported instead. */
static int hand_over(stk__packer *pk, int dev, int64_t i, stk__pack_result *r,
                     stk_pack_result *res, char *err, size_t errlen) {
  const stk_pack_options *o = pk->o;
  const char *path = stk__dataset_path(pk->ds, i);
  int rc = STK_OK;
  /* a device thread's result is only placed (it writes its block itself);
   * a CPU producer's is written here, in a device pack too */
  int place = dev && !r->cpu;
  if (r->rc) {
    res->failed++;
    if (o->bad_file) {
      /* the report names URLs without user info or signatures */
      char shown[4400];
      stk__name_shown(path, shown, sizeof shown);
      stk__url_scrub(r->msg);
      o->bad_file(o->user, shown, r->msg);
    }
  } else {
    stk__pack_item it = {i, path, pk->ds->labels[i], place ? NULL : r->data, r->len, r->w, r->h,
                         r->ext, r->hash, r->fst};
    rc = pk->wops->add(pk->writer, &it, &r->off, res, err, errlen);
  }
  if (!place) stk__pack_result_release(r);
  pthread_mutex_lock(&pk->mu);
  /* (when a device thread failed meanwhile, it may have freed this block
   * already: PLACED then stays, harmless, as stop is set and nothing claims
   * the entry again) */
  r->state = place ? SLOT_PLACED : SLOT_FREE;
  r->cpu = 0;
  pk->written = i + 1;
  pthread_cond_broadcast(&pk->cv);
  pthread_mutex_unlock(&pk->mu);
  return rc;
}

/* The ordered loop: each result, in sample order, once it is done. */
static int ordered_loop(stk__packer *pk, int dev, stk_pack_result *res, char *err,
                        size_t errlen) {
  const stk_pack_options *o = pk->o;
  int64_t n = pk->ds->n;
  for (int64_t i = 0; i < n; i++) {
    if (o->cancel && i % 16 == 0 && o->cancel(o->user))
      return stk__fail(err, errlen, STK_ECANCELED, "cancelled after %lld of %lld files",
                       (long long)i, (long long)n);
    stk__pack_result *r = &pk->ring[i % pk->nring];
    pthread_mutex_lock(&pk->mu);
    while (!(r->state == SLOT_DONE && pk->written == i) && !pk->dev_rc)
      pthread_cond_wait(&pk->cv, &pk->mu);
    int dev_rc = pk->dev_rc;
    pthread_mutex_unlock(&pk->mu);
    if (dev_rc) return stk__pack_device_failure(pk, i, n, err, errlen);
    int rc = hand_over(pk, dev, i, r, res, err, errlen);
    if (rc) return rc;
    if (o->progress && ((i + 1) % 64 == 0 || i + 1 == n)) o->progress(o->user, i + 1, n);
  }
  return STK_OK;
}

/* Starts the producers, runs the ordered loop, stops them. */
static int run_producers(stk__packer *pk, int dev, int threads, stk_pack_result *res, char *err,
                         size_t errlen) {
  stk__work *th = calloc((size_t)threads, sizeof *th);
  stk__workers *pool = stk__workers_create(0, "stk-pack", NULL, 0);
  int rc = STK_OK, started = 0;
  if (!th || !pool) rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  /* a decoder each, for the whole pack; those that cannot start are done
   * without, as long as one did */
  /* a device pack: its device threads first, then CPU producers beside
   * them, which claim files one at a time while the GPU runs blocks, so
   * that the pack is never slower than the CPU's alone (each kind takes
   * work as fast as it finishes it) */
  for (int t = 0; rc == STK_OK && t < threads; t++) {
    int on_gpu = dev && t < pk->device_threads;
    if (stk__workers_spawn(pool, &th[t], on_gpu ? stk__pack_device_main : pack_main, NULL, pk))
      break;
    started++;
  }
  if (rc == STK_OK && !started) rc = stk__fail(err, errlen, STK_ENOMEM, "cannot start a pack thread");
  if (rc == STK_OK) rc = ordered_loop(pk, dev, res, err, errlen);
  pthread_mutex_lock(&pk->mu);
  pk->stop = 1;
  pthread_cond_broadcast(&pk->cv);
  pthread_mutex_unlock(&pk->mu);
  stk__workers_destroy(pool);
  /* the device threads write the last blocks after the loop has placed
   * them: a failure there is known only now */
  if (rc == STK_OK && pk->dev_rc)
    rc = stk__pack_device_failure(pk, pk->ds->n, pk->ds->n, err, errlen);
  free(th);
  return rc;
}

/* The CPU producers beside a device pack's device threads: as many as the
 * pack's threads (the device threads mostly wait on the GPU).
 * STOKER_PACK_DEVICE_CPU=N sets N (0: the GPU alone), for benchmarks. */
static int pack_device_cpu_threads(int threads) {
  const char *e = getenv("STOKER_PACK_DEVICE_CPU");
  if (e && *e) {
    char *end = NULL;
    long n = strtol(e, &end, 10);
    if (!*end && n >= 0 && n <= 1024) return (int)n;
  }
  return threads;
}

/* The plan of a loader with the pack's limits and thread count: its decode
 * budget, shared by the CPU producers, and the buffers they keep. */
static void pack_plan(stk__plan *plan, const stk_pack_options *o, int threads) {
  stk_options lo;
  stk_options_init(&lo);
  lo.max_pixels = o->max_pixels;
  lo.max_file_bytes = o->max_file_bytes;
  lo.max_decode_bytes = o->max_decode_bytes;
  lo.threads = threads;
  lo.pipeline = STK_PIPELINE_EVAL; /* no augmentation plan: pack has none */
  stk__plan_init(plan, &lo);
}

/* Packs ds through writer wops (src describes it for a cache). */
static int pack_run(const stk_pack_options *o, const stk__dataset *ds,
                    const stk__pack_writer_ops *wops, const stk__pack_source *src,
                    stk_pack_result *res, char *err, size_t errlen) {
  int dev = wops->pixels && wops->write_at && o->device >= 0;
  int threads = o->threads;
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  stk__packer pk;
  memset(&pk, 0, sizeof pk);
  pk.o = o;
  pk.ds = ds;
  pk.wops = wops;
  int cpu_threads = dev ? pack_device_cpu_threads(threads) : threads, dev_threads = threads;
  int rc = dev ? stk__pack_device_open(&pk, &dev_threads, err, errlen) : STK_OK;
  if (rc) return rc;
  pk.device_threads = dev ? dev_threads : 0;
  pk.cpu_threads = cpu_threads;
  rc = wops->open(&pk.writer, o, ds, src, err, errlen);
  if (rc) {
    stk__pack_device_close(&pk, dev_threads);
    return rc;
  }
  /* a device thread claims a block at a time: room for two each; a CPU
   * producer, a few files */
  pk.nring = (int64_t)pk.device_threads * STK__PACK_DEV_BLOCK * 2 + (int64_t)cpu_threads * 4;
  pk.ring = calloc((size_t)pk.nring, sizeof *pk.ring);
  stk__plan plan;
  pack_plan(&plan, o, cpu_threads);
  pk.plan = &plan;
  pthread_mutex_init(&pk.mu, NULL);
  pthread_cond_init(&pk.cv, NULL);
  rc = pk.ring ? run_producers(&pk, dev, pk.device_threads + cpu_threads, res, err, errlen)
               : stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  stk__pack_device_close(&pk, dev_threads);
  res->device_packed = pk.device_items;
  if (dev) {
    stk__pack_device_slower(&pk, &res->device_rate, &res->cpu_rate);
    res->device_stopped = pk.dev_stopped;
  }
  rc = wops->finish(pk.writer, rc, ds, res, err, errlen);
  for (int64_t k = 0; pk.ring && k < pk.nring; k++) {
    /* results done but never written (a failure or a cancel stopped the
     * loop): their encoded bytes too */
    stk__pack_result_release(&pk.ring[k]);
    stk__buf_free(&pk.ring[k].buf);
  }
  free(pk.ring);
  pthread_mutex_destroy(&pk.mu);
  pthread_cond_destroy(&pk.cv);
  stk__plan_free(&plan);
  stk__trim_heap(); /* the producers' buffers go back to the system */
  return rc;
}

int stk_pack_temp_path(const char *output, char *buf, size_t n) {
  if (!output || !buf || stk__pack_tmp_path(output, (long)getpid(), buf, n))
    return STK_EINVAL;
  return STK_OK;
}

/* Opens o's source by its real path, so that the fingerprint a cache keeps
 * is that of the list a later check sees. *real and *real_base are freed by
 * the caller. */
static int open_source(const stk_pack_options *o, stk__source *src, char **real,
                       char **real_base, int *piped, char *err, size_t errlen) {
  const char *given = o->root ? o->root : o->list_file;
  /* A list that is a pipe or FIFO (`--list <(...)`, /dev/stdin,
   * /proc/self/fd/N) has no real path to keep (realpath() fails on a pipe's
   * "pipe:[N]"), nor one a later check could read again: it is read where it
   * is, and the cache records no source (it is not checked for changes). */
  struct stat st;
  *piped = !o->root && stat(given, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
  *real = *piped ? strdup(given) : realpath(given, NULL);
  *real_base = o->list_base ? realpath(o->list_base, NULL) : NULL;
  if (!*real || (o->list_base && !*real_base))
    return stk__fail(err, errlen, STK_EIO, "cannot open %s: %s", *real ? o->list_base : given,
                     strerror(errno));
  stk_options lo;
  stk_options_init(&lo);
  lo.max_pixels = o->max_pixels;
  lo.max_file_bytes = o->max_file_bytes;
  lo.read_timeout = o->read_timeout; /* a FIFO or pipe list */
  if (!o->root) {
    lo.list_file = *real;
    lo.list_base = *real_base;
    return stk__list_open(src, &lo, err, errlen);
  }
  if (stat(*real, &st) != 0 || !S_ISDIR(st.st_mode))
    return stk__fail(err, errlen, STK_EINVAL,
                     "pack reads an image folder or a list file; %s is not a folder", given);
  lo.root = *real;
  return stk__folder_open(src, &lo, err, errlen);
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
  int rc = stk__pack_options_validate(&o, err, errlen);
  if (rc) return rc;
  const stk__pack_writer_ops *wops = stk__pack_writer_for(&o, err, errlen);
  if (!wops) return STK_EINVAL;
  stk__source src;
  memset(&src, 0, sizeof src);
  char *real = NULL, *real_base = NULL;
  int piped = 0;
  rc = open_source(&o, &src, &real, &real_base, &piped, err, errlen);
  if (rc == STK_OK) {
    stk__pack_source desc = {o.root ? "folder" : "list", piped ? "" : real,
                             real_base ? real_base : ""};
    stk__pack_writes_begin();
    rc = pack_run(&o, &src.ds, wops, &desc, res, err, errlen);
    stk__pack_writes_end();
    stk__pack_explain_efbig(rc, err, errlen);
  }
  stk__source_close(&src);
  free(real);
  free(real_base);
  return rc;
}
