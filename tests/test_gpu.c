/*
 * The GPU path (src/gpu) against the CPU path (src/ops): nvJPEG + the fused
 * kernel on the same samples and geometries. Skips, exiting 0, when no GPU
 * can be opened.
 *
 *  - pre-decoded sources (STK__GPU_RGB8): the kernel must be bit-identical
 *    to stk__resampler_run for every dtype and layout, with and without flip;
 *  - JPEG sources: nvJPEG's pixels differ from libjpeg-turbo's (IDCT, chroma
 *    upsampling), so the output is compared by PSNR; the eval pipeline must
 *    reach a mean of 40 dB;
 *  - the fallbacks (CPU decoder, too-large sources, chunked batches), bad
 *    files, labels, concurrent batches and slot compaction.
 *
 * STK_TEST_IMAGES=<folder> adds up to 64 real JPEGs from that folder.
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <math.h>
#include <pthread.h>

#include "check.h"
#include "codecs/codec.h"
#include "codecs/encode.h"
#include "gpu/gpu.h"
#include "ops/ops.h"
#include "synth/synth.h"
#include "util.h"

#define OUT 224
#define RESIZE 256
#define MAXIMG 96

typedef struct {
  char name[80];
  uint8_t *data;
  size_t len;
  int w, h, real;
} timg;

static timg imgs[MAXIMG];
static int nimg;
static stk__decoder *dec;

/* A copy of a decoded region: the decoder's own buffer is reused. */
typedef struct {
  uint8_t *px;
  size_t stride;
  int x, y, w, h;
} region;

static int add_image(const char *name, uint8_t *data, size_t len, int real) {
  if (nimg == MAXIMG) {
    free(data);
    return 0;
  }
  stk__image_info info;
  char msg[256];
  if (stk__decoder_header(dec, data, len, &info, msg, sizeof msg)) {
    fprintf(stderr, "skipping %s: %s\n", name, msg);
    free(data);
    return 0;
  }
  timg *t = &imgs[nimg++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->data = data;
  t->len = len;
  t->w = info.width;
  t->h = info.height;
  t->real = real;
  return 1;
}

static void add_synth(const char *name, int w, int h, int quality, int hs, int vs, int progressive,
                      stk__jpeg_color color, int restart) {
  int ch = color == STK__JCOLOR_GREY ? 1 : color == STK__JCOLOR_CMYK ? 4 : 3;
  uint8_t *rgb = malloc((size_t)w * h * 3), *px = malloc((size_t)w * h * ch);
  stk__synth_render(rgb, w, h, (uint64_t)(w * 31 + h));
  for (size_t i = 0; i < (size_t)w * h; i++) {
    if (ch == 1) px[i] = (uint8_t)((rgb[3 * i] * 77 + rgb[3 * i + 1] * 150 + rgb[3 * i + 2] * 29) >> 8);
    if (ch == 3) memcpy(px + 3 * i, rgb + 3 * i, 3);
    if (ch == 4) {
      px[4 * i] = 255 - rgb[3 * i];
      px[4 * i + 1] = 255 - rgb[3 * i + 1];
      px[4 * i + 2] = 255 - rgb[3 * i + 2];
      px[4 * i + 3] = 20;
    }
  }
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  o.quality = quality;
  o.h_samp = hs;
  o.v_samp = vs;
  o.progressive = progressive;
  o.color = color;
  o.restart_interval = restart;
  uint8_t *buf = NULL;
  size_t n = 0;
  if (stk__jpeg_encode(px, w, h, &o, &buf, &n) == STK_OK) add_image(name, buf, n, 0);
  free(rgb);
  free(px);
}

static void load_real(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char *names[512];
  int k = 0;
  struct dirent *e;
  while ((e = readdir(d)) && k < 512)
    if (e->d_name[0] != '.') names[k++] = strdup(e->d_name);
  closedir(d);
  /* sorted, for a stable selection */
  for (int i = 1; i < k; i++)
    for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      char *t = names[j];
      names[j] = names[j - 1];
      names[j - 1] = t;
    }
  int taken = 0;
  for (int i = 0; i < k; i++) {
    if (taken < 64) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", dir, names[i]);
      FILE *f = fopen(p, "rb");
      if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *b = malloc((size_t)n + 1);
        if (b && fread(b, 1, (size_t)n, f) == (size_t)n) taken += add_image(names[i], b, (size_t)n, 1);
        else free(b);
        fclose(f);
      }
    }
    free(names[i]);
  }
}

static void geom_eval(const timg *t, stk__geom *g) { stk__geom_eval(t->w, t->h, RESIZE, OUT, g); }

static void geom_train(const timg *t, int i, stk__geom *g) {
  const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
  stk__rng rng;
  stk__rng_init(&rng, 7, 1, (uint64_t)i);
  stk__rect r;
  stk__rrc_params(t->w, t->h, scale, ratio, &rng, &r);
  stk__geom_crop(&r, OUT, OUT, g);
  g->flip = i & 1;
}

/* CPU reference of the whole pipeline, and a copy of the decoded source. */
static int cpu_ref(const timg *t, const stk__geom *g, const stk__store *st, void *out, region *src) {
  stk__resampler rs;
  memset(&rs, 0, sizeof rs);
  stk__rect need;
  char msg[256];
  int rc = stk__resampler_plan(&rs, g, &need);
  stk__region reg;
  if (!rc) rc = stk__decoder_decode(dec, t->data, t->len, &need, 1, &reg, msg, sizeof msg);
  if (!rc) rc = stk__resampler_run(&rs, reg.pixels, reg.stride, reg.x, reg.y, st, out);
  if (!rc && src) {
    src->stride = (size_t)reg.w * 3;
    src->px = malloc(src->stride * reg.h);
    for (int y = 0; y < reg.h; y++)
      memcpy(src->px + y * src->stride, reg.pixels + y * reg.stride, src->stride);
    src->x = reg.x;
    src->y = reg.y;
    src->w = reg.w;
    src->h = reg.h;
  }
  stk__resampler_free(&rs);
  return rc;
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    se += d * d;
  }
  if (se == 0) return 100.0;
  return 10.0 * log10(255.0 * 255.0 / (se / n));
}

static void item_jpeg(stk__gpu_item *it, const timg *t, const stk__geom *g, int dst) {
  memset(it, 0, sizeof *it);
  it->kind = STK__GPU_JPEG;
  it->data = t->data;
  it->len = t->len;
  it->geom = *g;
  it->dst = dst;
  it->label = 1000 + dst;
}

static void item_rgb(stk__gpu_item *it, const region *r, const stk__geom *g, int dst) {
  memset(it, 0, sizeof *it);
  it->kind = STK__GPU_RGB8;
  it->pixels = r->px;
  it->stride = r->stride;
  it->x = r->x;
  it->y = r->y;
  it->w = r->w;
  it->h = r->h;
  it->geom = *g;
  it->dst = dst;
  it->label = 1000 + dst;
}

/* decoder mix for the runs below: -1 = default */
static int mix_hw = -1;

static stk__gpu_config base_cfg(int n) {
  stk__gpu_config c;
  stk__gpu_config_init(&c);
  if (mix_hw >= 0) c.use_hw = mix_hw;
  c.max_batch = n;
  c.out_w = c.out_h = OUT;
  c.slots = 3;
  return c;
}

/* Opens device 0 with c, or fails the check with the reason: NULL. */
static stk__gpu *open_gpu(const stk__gpu_config *c) {
  stk__gpu *g = NULL;
  char msg[512];
  int rc = stk__gpu_open(0, c, &g, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "open: %s", msg);
  return rc ? NULL : g;
}

static const char *path_name(int p) {
  static const char *n[] = {"none", "hw", "cuda", "cpu", "host", "big"};
  return p >= 0 && p < STK__GPU_NPATHS ? n[p] : "?";
}

/* --- bit-exactness of the kernel on pre-decoded sources ------------------- */
/* filter: STK_FILTER_BILINEAR or STK_FILTER_BICUBIC (window.h) on every geometry */
static void test_exact(int train, int filter) {
  static const stk_dtype dts[] = {STK_DTYPE_UINT8, STK_DTYPE_FLOAT32, STK_DTYPE_FLOAT16,
                                  STK_DTYPE_BFLOAT16};
  static const stk_layout lys[] = {STK_LAYOUT_NCHW, STK_LAYOUT_NHWC};
  region *src = calloc((size_t)nimg, sizeof *src);
  stk__geom *geo = calloc((size_t)nimg, sizeof *geo);
  stk__gpu_item *items = calloc((size_t)nimg, sizeof *items);
  for (int d = 0; d < 4; d++)
    for (int l = 0; l < 2; l++) {
      stk__gpu_config c = base_cfg(nimg);
      c.dtype = dts[d];
      c.layout = lys[l];
      stk__gpu *g = NULL;
      char msg[512];
      int rc = stk__gpu_open(0, &c, &g, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "open: %s", msg);
      if (rc) continue;
      stk__store st;
      stk__store_init(&st, c.dtype, c.layout, OUT, OUT, c.mean, c.std);
      size_t ib = stk__gpu_image_bytes(g);
      uint8_t *ref = malloc(ib * nimg), *got = malloc(ib * nimg);
      int n = 0;
      for (int i = 0; i < nimg; i++) {
        if (train)
          geom_train(&imgs[i], i, &geo[i]);
        else
          geom_eval(&imgs[i], &geo[i]);
        stk__geom_set_filter(&geo[i], filter);
        free(src[i].px);
        memset(&src[i], 0, sizeof src[i]);
        if (cpu_ref(&imgs[i], &geo[i], &st, ref + (size_t)i * ib, &src[i])) continue;
        item_rgb(&items[n++], &src[i], &geo[i], i);
      }
      rc = stk__gpu_run_batch(g, 0, n, items, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "run_batch: %s", msg);
      int64_t labels[MAXIMG];
      rc = stk__gpu_download(g, 0, got, ib * nimg, labels, nimg, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "download: %s", msg);
      int bad = 0;
      for (int k = 0; k < n; k++) {
        int i = items[k].dst;
        CHECK_MSG(items[k].rc == STK_OK && items[k].path == STK__GPU_PATH_HOST, "item %d rc %d path %s",
                  k, items[k].rc, path_name(items[k].path));
        CHECK_EQ_INT(labels[i], 1000 + i);
        if (memcmp(ref + (size_t)i * ib, got + (size_t)i * ib, ib)) {
          bad++;
          if (c.dtype == STK_DTYPE_UINT8) {
            size_t diff = 0;
            int maxd = 0;
            for (size_t q = 0; q < ib; q++) {
              int dd = abs((int)ref[(size_t)i * ib + q] - got[(size_t)i * ib + q]);
              diff += dd != 0;
              if (dd > maxd) maxd = dd;
            }
            fprintf(stderr, "  %s: %zu of %zu values differ, max %d\n", imgs[i].name, diff, ib, maxd);
          }
        }
      }
      const char *fn = filter == STK_FILTER_BICUBIC ? "bicubic" : "bilinear";
      CHECK_MSG(bad == 0, "%s %s geometry, dtype %d, layout %d: %d of %d images differ from the CPU",
                train ? "train" : "eval", fn, (int)c.dtype, (int)c.layout, bad, n);
      printf("exact %s %s dtype=%d layout=%d: %d/%d images bit-identical to the CPU resampler\n",
             train ? "train" : "eval ", fn, (int)c.dtype, (int)c.layout, n - bad, n);
      free(ref);
      free(got);
      stk__gpu_close(g);
    }
  for (int i = 0; i < nimg; i++) free(src[i].px);
  free(src);
  free(geo);
  free(items);
}

/* --- JPEG sources: PSNR against the CPU path ------------------------------- */
typedef struct {
  double mean_hw, mean_all, min_hw;
  int n_hw;
} psnr_result;

static psnr_result run_psnr(int train, int roi, int chroma_interp, int verbose, uint8_t *keep_out) {
  if (chroma_interp < 0) chroma_interp = 0;
  psnr_result res = {0, 0, 1000, 0};
  stk__gpu_config c = base_cfg(nimg);
  c.dtype = STK_DTYPE_UINT8;
  c.roi = roi;
  c.chroma_interp = chroma_interp;
  stk__gpu *g = NULL;
  char msg[512];
  int rc = stk__gpu_open(0, &c, &g, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "open: %s", msg);
  if (rc) return res;
  stk__store st;
  stk__store_init(&st, c.dtype, c.layout, OUT, OUT, c.mean, c.std);
  size_t ib = stk__gpu_image_bytes(g);
  uint8_t *ref = malloc(ib * nimg), *got = keep_out ? keep_out : malloc(ib * nimg);
  stk__gpu_item *items = calloc((size_t)nimg, sizeof *items);
  int *ok = calloc((size_t)nimg, sizeof *ok);
  for (int i = 0; i < nimg; i++) {
    stk__geom ge;
    if (train)
      geom_train(&imgs[i], i, &ge);
    else
      geom_eval(&imgs[i], &ge);
    ok[i] = cpu_ref(&imgs[i], &ge, &st, ref + (size_t)i * ib, NULL) == STK_OK;
    item_jpeg(&items[i], &imgs[i], &ge, i);
  }
  rc = stk__gpu_run_batch(g, 1, nimg, items, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "run_batch: %s", msg);
  rc = stk__gpu_download(g, 1, got, ib * nimg, NULL, 0, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "download: %s", msg);
  double sum_all = 0;
  int n_all = 0;
  int npath[STK__GPU_NPATHS] = {0};
  for (int i = 0; i < nimg; i++) {
    if (!ok[i]) continue;
    CHECK_MSG(items[i].rc == STK_OK, "%s: rc %d", imgs[i].name, items[i].rc);
    if (items[i].rc) continue;
    double p = psnr(ref + (size_t)i * ib, got + (size_t)i * ib, ib);
    npath[items[i].path]++;
    if (items[i].path == STK__GPU_PATH_HW || items[i].path == STK__GPU_PATH_CUDA) {
      res.mean_hw += p;
      res.n_hw++;
      if (p < res.min_hw) res.min_hw = p;
    } else {
      /* the CPU decoder: the same pixels, so the same output */
      CHECK_MSG(p == 100.0, "%s (path %s): %.2f dB, expected identical", imgs[i].name,
                path_name(items[i].path), p);
    }
    sum_all += p;
    n_all++;
    if (verbose)
      printf("  %-40s %5dx%-5d %-4s %6.2f dB\n", imgs[i].name, imgs[i].w, imgs[i].h,
             path_name(items[i].path), p);
  }
  if (res.n_hw) res.mean_hw /= res.n_hw;
  if (n_all) res.mean_all = sum_all / n_all;
  stk__gpu_stats s;
  stk__gpu_get_stats(g, &s);
  printf("psnr %s roi=%d chroma_interp=%d(%s) use_hw=%d: nvJPEG-decoded %d images: mean %.2f dB, min %.2f dB; "
         "paths hw=%d cuda=%d cpu=%d; engines %s, engine ROI %s\n",
         train ? "train" : "eval ", roi, chroma_interp, s.chroma_interp ? "on" : "off", c.use_hw,
         res.n_hw, res.mean_hw, res.n_hw ? res.min_hw : 0.0, npath[STK__GPU_PATH_HW],
         npath[STK__GPU_PATH_CUDA], npath[STK__GPU_PATH_CPU], s.hw_available ? "yes" : "no",
         s.hw_roi ? "yes" : "no");
  if (s.notes[0]) printf("  notes: %s\n", s.notes);
  if (s.hw_roi_full) printf("  %llu images decoded whole: the engines refused their region\n",
                            (unsigned long long)s.hw_roi_full);
  free(ref);
  if (!keep_out) free(got);
  free(items);
  free(ok);
  stk__gpu_close(g);
  return res;
}

/* --- fallbacks, bad input, chunking ------------------------------------------- */
static void test_fallbacks(const uint8_t *normal_eval) {
  /* A tiny arena and staging: batches run in chunks, big sources go to the
   * CPU entirely. */
  stk__gpu_config c = base_cfg(nimg);
  c.dtype = STK_DTYPE_UINT8;
  c.arena_bytes = 600 << 10;
  c.staging_bytes = 256 << 10;
  char msg[512];
  int rc;
  stk__gpu *g = open_gpu(&c);
  if (!g) return;
  stk__store st;
  stk__store_init(&st, c.dtype, c.layout, OUT, OUT, c.mean, c.std);
  size_t ib = stk__gpu_image_bytes(g);
  uint8_t *ref = malloc(ib * nimg), *got = malloc(ib * nimg);
  stk__gpu_item *items = calloc((size_t)nimg, sizeof *items);
  for (int i = 0; i < nimg; i++) {
    stk__geom ge;
    geom_eval(&imgs[i], &ge);
    cpu_ref(&imgs[i], &ge, &st, ref + (size_t)i * ib, NULL);
    item_jpeg(&items[i], &imgs[i], &ge, i);
  }
  rc = stk__gpu_run_batch(g, 2, nimg, items, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "run_batch: %s", msg);
  rc = stk__gpu_download(g, 2, got, ib * nimg, NULL, 0, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "download: %s", msg);
  int same = 0, big = 0;
  for (int i = 0; i < nimg; i++) {
    if (items[i].rc) {
      CHECK_MSG(0, "%s failed: %d", imgs[i].name, items[i].rc);
      continue;
    }
    if (items[i].path == STK__GPU_PATH_BIG) {
      big++;
      CHECK_MSG(!memcmp(ref + (size_t)i * ib, got + (size_t)i * ib, ib), "%s: big path differs from CPU",
                imgs[i].name);
    } else if (!memcmp(normal_eval + (size_t)i * ib, got + (size_t)i * ib, ib)) {
      same++; /* the same decode as in the one-chunk run */
    } else {
      fprintf(stderr, "  %s (%s): chunked output differs from the one-chunk run\n", imgs[i].name,
              path_name(items[i].path));
    }
  }
  stk__gpu_stats s;
  stk__gpu_get_stats(g, &s);
  printf("small arena: %llu chunks, %d images on the big path, %d/%d others identical to the "
         "one-chunk run\n",
         (unsigned long long)s.chunks, big, same, nimg - big);
  CHECK_MSG(s.chunks > 1, "expected several chunks");
  CHECK_EQ_INT(same, nimg - big);

  /* Bad files fail alone: garbage, a truncated JPEG, and a good one. */
  uint8_t junk[4000];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 7919 >> 3);
  timg tj = {"junk", junk, sizeof junk, 400, 300, 0};
  timg tt = imgs[0];
  tt.len = tt.len / 3;
  const timg *bad[3] = {&tj, &tt, &imgs[1]};
  char why[3][256];
  for (int i = 0; i < 3; i++) {
    stk__geom ge;
    geom_eval(bad[i], &ge);
    item_jpeg(&items[i], bad[i], &ge, i);
    items[i].msg = why[i];
    items[i].msglen = sizeof why[i];
    why[i][0] = '\0';
  }
  rc = stk__gpu_run_batch(g, 0, 3, items, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "run_batch: %s", msg);
  rc = stk__gpu_slot_wait(g, 0, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "wait: %s", msg);
  CHECK_MSG(items[0].rc != STK_OK, "junk decoded");
  CHECK_MSG(items[2].rc == STK_OK, "a good file next to bad ones failed: %s", why[2]);
  printf("junk file: rc %d (%s): %s\n", items[0].rc, stk_strerror(items[0].rc), why[0]);
  printf("truncated JPEG: rc %d, path %s%s%s\n", items[1].rc, path_name(items[1].path),
         items[1].rc ? ": " : "", why[1]);
  free(ref);
  free(got);
  free(items);
  stk__gpu_close(g);
}

/* Planning ahead (stk__gpu_plan_ahead, as the loader's workers do) gives
 * the same plans as the lane's own: the output must equal the one-chunk run
 * byte for byte, item by item. Every other item is planned ahead, so both
 * kinds meet in one batch. */
static void test_plan_ahead(const uint8_t *normal_eval) {
  stk__gpu_config c = base_cfg(nimg);
  c.dtype = STK_DTYPE_UINT8;
  c.planners = 2;
  char msg[512];
  int rc;
  stk__gpu *g = open_gpu(&c);
  if (!g) return;
  size_t ib = stk__gpu_image_bytes(g);
  uint8_t *got = malloc(ib * nimg);
  stk__gpu_item *items = calloc((size_t)nimg, sizeof *items);
  int ahead = 0;
  for (int i = 0; i < nimg; i++) {
    stk__geom ge;
    geom_eval(&imgs[i], &ge);
    item_jpeg(&items[i], &imgs[i], &ge, i);
    if (i % 2 == 0) {
      stk__gpu_plan_ahead(g, i, &items[i]);
      ahead += items[i].pre.planned;
    }
  }
  rc = stk__gpu_run_batch(g, 1, nimg, items, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "run_batch: %s", msg);
  rc = stk__gpu_download(g, 1, got, ib * nimg, NULL, 0, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "download: %s", msg);
  int same = 0;
  for (int i = 0; i < nimg; i++) {
    if (!items[i].rc && !memcmp(normal_eval + (size_t)i * ib, got + (size_t)i * ib, ib))
      same++;
    else
      fprintf(stderr, "  %s (%s, %s): differs from the run planned on the lane\n", imgs[i].name,
              path_name(items[i].path), i % 2 ? "lane" : "ahead");
  }
  printf("plan ahead: %d of %d items planned ahead, %d/%d images identical to the lane's plans\n",
         ahead, (nimg + 1) / 2, same, nimg);
  CHECK_EQ_INT(ahead, (nimg + 1) / 2);
  CHECK_EQ_INT(same, nimg);
  free(got);
  free(items);
  stk__gpu_close(g);
}

/* The switches that drive the engines differently (gpu.h): the decoupled
 * decoder over a few states (run twice, so that the states and their double
 * buffers are reused), the batch in arrival order (the default sorts it)
 * and NO_PIPELINE must produce what the default run did. An item the
 * engines decode must be within 40 dB of it (the same engines, so normally
 * identical, which is counted); one the switch routed elsewhere must still
 * be a good decode (35 dB against the CPU). */
static void test_engine_drives(const uint8_t *normal_eval) {
  static const char *names[] = {"decoupled, 3 states", "in arrival order", "HW_DECODE_NO_PIPELINE",
                                "batched, then decoupled (switched)"};
  for (int v = 0; v < 4; v++) {
    stk__gpu_config c = base_cfg(nimg);
    c.dtype = STK_DTYPE_UINT8;
    if (v == 0 || v == 3) c.hw_states = 3;
    if (v == 1) c.hw_sort = 0;
    if (v == 2) c.hw_flags = 1;
    char msg[512];
    stk__gpu *g = open_gpu(&c);
    if (!g) return;
    stk__store st;
    stk__store_init(&st, c.dtype, c.layout, OUT, OUT, c.mean, c.std);
    size_t ib = stk__gpu_image_bytes(g);
    uint8_t *got = malloc(ib * nimg), *ref = malloc(ib);
    stk__gpu_item *items = calloc((size_t)nimg, sizeof *items);
    int same = 0, hw = 0, elsewhere = 0;
    for (int round = 0; round < 2; round++) {
      /* the loader switches ways between batches (loader/share.h) */
      if (v == 3) stk__gpu_set_engine_batched(g, round == 0);
      for (int i = 0; i < nimg; i++) {
        stk__geom ge;
        geom_eval(&imgs[i], &ge);
        item_jpeg(&items[i], &imgs[i], &ge, i);
      }
      int rc = stk__gpu_run_batch(g, round, nimg, items, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "%s: run_batch: %s", names[v], msg);
      rc = stk__gpu_download(g, round, got, ib * nimg, NULL, 0, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "%s: download: %s", names[v], msg);
      if (rc) break;
      for (int i = 0; i < nimg; i++) {
        const uint8_t *a = normal_eval + (size_t)i * ib, *b = got + (size_t)i * ib;
        CHECK_MSG(items[i].rc == STK_OK, "%s: %s failed", names[v], imgs[i].name);
        if (items[i].rc) continue;
        int ident = !memcmp(a, b, ib);
        same += ident;
        if (items[i].path == STK__GPU_PATH_HW) {
          hw++;
          double q = ident ? 99.0 : psnr(a, b, ib);
          CHECK_MSG(q >= 40.0, "%s: %s: %.1f dB from the default run", names[v], imgs[i].name, q);
        } else if (!ident) {
          elsewhere++;
          stk__geom ge;
          geom_eval(&imgs[i], &ge);
          cpu_ref(&imgs[i], &ge, &st, ref, NULL);
          double q = psnr(ref, b, ib);
          CHECK_MSG(q >= 35.0, "%s: %s (%s): %.1f dB from the CPU", names[v], imgs[i].name,
                    path_name(items[i].path), q);
        }
      }
    }
    stk__gpu_stats s;
    stk__gpu_get_stats(g, &s);
    printf("engines %s: %d/%d images identical to the default run, %d on the engines, %d routed "
           "elsewhere and different; engine failures %llu%s%s\n",
           names[v], same, 2 * nimg, hw, elsewhere, (unsigned long long)s.hw_batch_failures,
           s.notes[0] ? "; notes: " : "", s.notes);
    if (s.hw_available) CHECK_MSG(hw > 0, "%s: no image on the engines", names[v]);
    /* the decoupled decoder ran, and took every image the plans gave it */
    if ((v == 0 || v == 3) && s.hw_available) {
      CHECK_EQ_INT(s.hw_states, 3);
      CHECK(stk__gpu_engine_ways(g));
      CHECK_MSG(s.hw_batch_failures == 0, "decoupled: %llu images failed or refused",
                (unsigned long long)s.hw_batch_failures);
    }
    if (v == 1 || v == 2) CHECK_EQ_INT(s.hw_states, 0);
    free(got);
    free(ref);
    free(items);
    stk__gpu_close(g);
  }
}

/* --- concurrency, slots, compaction --------------------------------------- */
typedef struct {
  stk__gpu *g;
  int slot, n, rounds, rc;
  stk__gpu_item *items;
} thr_arg;

static void *thr_main(void *p) {
  thr_arg *a = p;
  char msg[256];
  for (int r = 0; r < a->rounds && !a->rc; r++) {
    a->rc = stk__gpu_run_batch(a->g, a->slot, a->n, a->items, msg, sizeof msg);
    if (!a->rc) a->rc = stk__gpu_slot_wait(a->g, a->slot, msg, sizeof msg);
    if (a->rc) fprintf(stderr, "thread: %s\n", msg);
  }
  return NULL;
}

static void test_threads_and_compact(void) {
  stk__gpu_config c = base_cfg(nimg);
  c.dtype = STK_DTYPE_FLOAT16;
  c.layout = STK_LAYOUT_NHWC;
  c.lanes = 3;
  c.slots = 3;
  char msg[512];
  int rc;
  stk__gpu *g = open_gpu(&c);
  if (!g) return;
  size_t ib = stk__gpu_image_bytes(g);
  stk__gpu_item *items[3];
  thr_arg args[3];
  pthread_t th[3];
  for (int t = 0; t < 3; t++) {
    items[t] = calloc((size_t)nimg, sizeof **items);
    for (int i = 0; i < nimg; i++) {
      stk__geom ge;
      geom_train(&imgs[i], i + 17 * t, &ge);
      item_jpeg(&items[t][i], &imgs[i], &ge, nimg - 1 - i);
    }
    args[t] = (thr_arg){g, t, nimg, 4, 0, items[t]};
  }
  /* reference: one batch at a time */
  uint8_t *ref[3], *got = malloc(ib * nimg);
  for (int t = 0; t < 3; t++) {
    ref[t] = malloc(ib * nimg);
    rc = stk__gpu_run_batch(g, t, nimg, items[t], msg, sizeof msg);
    if (!rc) rc = stk__gpu_download(g, t, ref[t], ib * nimg, NULL, 0, msg, sizeof msg);
    CHECK_MSG(rc == STK_OK, "%s", msg);
  }
  for (int t = 0; t < 3; t++) pthread_create(&th[t], NULL, thr_main, &args[t]);
  for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < 3; t++) {
    CHECK_EQ_INT(args[t].rc, STK_OK);
    rc = stk__gpu_download(g, t, got, ib * nimg, NULL, 0, msg, sizeof msg);
    CHECK_MSG(rc == STK_OK && !memcmp(got, ref[t], ib * nimg), "thread %d: output differs", t);
  }
  /* compaction: keep every third image */
  int from[MAXIMG], k = 0;
  for (int i = 0; i < nimg; i += 3) from[k++] = i;
  rc = stk__gpu_slot_compact(g, 0, k, from, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "compact: %s", msg);
  int64_t labels[MAXIMG];
  rc = stk__gpu_download(g, 0, got, ib * nimg, labels, nimg, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "download: %s", msg);
  int good = 0;
  for (int j = 0; j < k; j++)
    good += !memcmp(got + (size_t)j * ib, ref[0] + (size_t)from[j] * ib, ib) && labels[j] == 1000 + from[j];
  CHECK_EQ_INT(good, k);
  stk__gpu_stats s;
  stk__gpu_get_stats(g, &s);
  printf("threads: 3 threads x 4 batches on 3 lanes identical to serial runs; compaction of %d "
         "images ok; %llu batches, host %.3f s; device memory ours %.1f MiB, in use %.1f MiB; "
         "pinned %.1f MiB\n",
         k, (unsigned long long)s.batches, s.host_seconds, s.device_bytes / 1048576.0,
         s.device_bytes_used / 1048576.0, s.pinned_bytes / 1048576.0);
  for (int t = 0; t < 3; t++) {
    free(items[t]);
    free(ref[t]);
  }
  free(got);
  stk__gpu_close(g);
}

/* --- items of their own output size (a pack on the GPU) -------------------- */
/* Each image shrunk whole to its own size, as stk_pack(device=) asks: from
 * pre-decoded sources bit-identical to the CPU resampler at that size, from
 * JPEGs close to it; sizes the slot cannot hold, or own sizes with another
 * dtype, fail the item alone. */
static void test_own_size(void) {
  const int side = 320;
  stk__gpu_config c = base_cfg(nimg + 2);
  c.out_w = c.out_h = side;
  c.dtype = STK_DTYPE_UINT8;
  c.layout = STK_LAYOUT_NHWC;
  for (int k = 0; k < 3; k++) c.mean[k] = 0, c.std[k] = 1;
  char msg[512];
  int rc;
  stk__gpu *g = open_gpu(&c);
  if (!g) return;
  size_t ib = stk__gpu_image_bytes(g);
  region *src = calloc((size_t)nimg, sizeof *src);
  stk__geom *geo = calloc((size_t)nimg, sizeof *geo);
  stk__gpu_item *items = calloc((size_t)nimg + 2, sizeof *items);
  uint8_t *ref = malloc(ib * nimg), *got = malloc(ib);
  int ow[MAXIMG], oh[MAXIMG], ok[MAXIMG];
  /* 0: RGB8 sources, 1: the JPEGs, 2: RGB8 sources with an arena so small
   * that most go the "big" way (resampled on the CPU at their own size) */
  for (int pass = 0; pass < 3; pass++) {
    if (pass == 2) {
      stk__gpu_close(g);
      c.arena_bytes = 1; /* raised to the least the big path needs */
      rc = stk__gpu_open(0, &c, &g, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "open: %s", msg);
      if (rc) break;
    }
    int n = 0;
    for (int i = 0; i < nimg; i++) {
      const timg *t = &imgs[i];
      /* the longer side to at most `side`, and odd sizes in between */
      double f = (t->w > t->h ? t->w : t->h) > side ? (double)side / (t->w > t->h ? t->w : t->h)
                                                     : (i % 3 == 0 ? 1.0 : 0.61);
      ow[i] = (int)(t->w * f + 0.5);
      oh[i] = (int)(t->h * f + 0.5);
      if (ow[i] < 1) ow[i] = 1;
      if (oh[i] < 1) oh[i] = 1;
      stk__geom_crop(&(stk__rect){0, 0, t->w, t->h}, ow[i], oh[i], &geo[i]);
      geo[i].exact = 1;
      stk__store st;
      stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, ow[i], oh[i], c.mean, c.std);
      free(src[i].px);
      memset(&src[i], 0, sizeof src[i]);
      ok[i] = cpu_ref(t, &geo[i], &st, ref + (size_t)i * ib, &src[i]) == STK_OK;
      if (!ok[i]) continue;
      if (pass != 1)
        item_rgb(&items[n], &src[i], &geo[i], i);
      else
        item_jpeg(&items[n], t, &geo[i], i);
      items[n].out_w = ow[i];
      items[n++].out_h = oh[i];
    }
    /* two that must fail alone: larger than the slot, and no size on one axis */
    int bad0 = n;
    item_rgb(&items[n], &src[0], &geo[0], nimg);
    items[n].out_w = side + 1;
    items[n++].out_h = oh[0];
    item_rgb(&items[n], &src[0], &geo[0], nimg + 1);
    items[n].out_w = ow[0];
    items[n++].out_h = 0;
    rc = stk__gpu_run_batch(g, 0, n, items, msg, sizeof msg);
    CHECK_MSG(rc == STK_OK, "run_batch: %s", msg);
    CHECK_EQ_INT(items[bad0].rc, STK_EINVAL);
    CHECK_EQ_INT(items[bad0 + 1].rc, STK_EINVAL);
    int exact = 0, close = 0, big = 0;
    double worst = 100;
    for (int k = 0; k < bad0; k++) {
      int i = items[k].dst;
      size_t bytes = (size_t)ow[i] * oh[i] * 3;
      CHECK_MSG(items[k].rc == STK_OK, "%s: rc %d", imgs[i].name, items[k].rc);
      void *host = got;
      rc = stk__gpu_download_images(g, 0, 1, &i, &bytes, &host, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "download: %s", msg);
      big += items[k].path == STK__GPU_PATH_BIG;
      if (pass != 1) {
        exact += !memcmp(got, ref + (size_t)i * ib, bytes);
        if (memcmp(got, ref + (size_t)i * ib, bytes))
          fprintf(stderr, "  own size %dx%d of %s differs from the CPU\n", ow[i], oh[i],
                  imgs[i].name);
      } else {
        double p = psnr(got, ref + (size_t)i * ib, bytes);
        int path = items[k].path;
        if (path == STK__GPU_PATH_HW && p < worst) worst = p;
        /* libjpeg-turbo's pixels (the CPU decoder, or the CPU's resize
         * too): the CPU reference exactly; nvJPEG's: close to it */
        if (path == STK__GPU_PATH_CPU || path == STK__GPU_PATH_BIG)
          close += !memcmp(got, ref + (size_t)i * ib, bytes);
        else
          close += p >= 35.0;
      }
    }
    if (pass != 1)
      CHECK_MSG(exact == bad0, "own sizes: %d of %d images bit-identical", exact, bad0);
    else
      CHECK_MSG(close == bad0,
                "own sizes from JPEGs: %d of %d within 35 dB (nvJPEG) or equal (CPU)", close, bad0);
    if (pass == 2) CHECK_MSG(big > 0, "no item went the big way with a tiny arena");
    if (pass != 1)
      printf("own sizes, RGB8 sources%s: %d images bit-identical to the CPU resampler (%d big)\n",
             pass ? ", tiny arena" : "", exact, big);
    else
      printf("own sizes, JPEG sources: %d images, worst engine PSNR %.1f dB\n", bad0, worst);
  }
  stk__gpu_close(g);
  /* own sizes need a uint8 NHWC output */
  c = base_cfg(1);
  rc = stk__gpu_open(0, &c, &g, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "open: %s", msg);
  if (!rc) {
    item_rgb(&items[0], &src[0], &geo[0], 0);
    items[0].out_w = ow[0];
    items[0].out_h = oh[0];
    CHECK_EQ_INT(stk__gpu_run_batch(g, 0, 1, items, msg, sizeof msg), STK_OK);
    CHECK_EQ_INT(items[0].rc, STK_EINVAL);
    stk__gpu_close(g);
  }
  for (int i = 0; i < nimg; i++) free(src[i].px);
  free(src);
  free(geo);
  free(items);
  free(ref);
  free(got);
}

/* --- a decoder that fails routes its items on --------------------------------- */
/* Without the engines every JPEG nvJPEG can read goes to its hybrid
 * decoder; with that failing them all (a test switch), each must be routed
 * on to the CPU decoder in the same batch and come out as the CPU path's
 * own output: libjpeg-turbo's pixels through the kernel, bit-identical. */
static void test_cuda_failure(void) {
  stk__gpu_config c = base_cfg(nimg);
  c.use_hw = 0;
  c.fail_cuda = 1;
  c.dtype = STK_DTYPE_UINT8;
  c.layout = STK_LAYOUT_NHWC;
  char msg[512];
  int rc;
  stk__gpu *g = open_gpu(&c);
  if (!g) return;
  stk__gpu_stats st0;
  stk__gpu_get_stats(g, &st0);
  stk__store st;
  stk__store_init(&st, c.dtype, c.layout, OUT, OUT, c.mean, c.std);
  size_t ib = stk__gpu_image_bytes(g);
  uint8_t *ref = malloc(ib * nimg), *got = malloc(ib * nimg);
  stk__gpu_item *items = calloc((size_t)nimg, sizeof *items);
  stk__geom *geo = calloc((size_t)nimg, sizeof *geo);
  int n = 0;
  for (int i = 0; i < nimg; i++) {
    geom_eval(&imgs[i], &geo[i]);
    if (cpu_ref(&imgs[i], &geo[i], &st, ref + (size_t)i * ib, NULL)) continue;
    item_jpeg(&items[n++], &imgs[i], &geo[i], i);
  }
  rc = stk__gpu_run_batch(g, 0, n, items, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "run_batch: %s", msg);
  rc = stk__gpu_download(g, 0, got, ib * nimg, NULL, 0, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "download: %s", msg);
  int exact = 0, cpu = 0;
  for (int k = 0; k < n; k++) {
    int i = items[k].dst;
    CHECK_MSG(items[k].rc == STK_OK, "%s: rc %d", imgs[i].name, items[k].rc);
    cpu += items[k].path == STK__GPU_PATH_CPU || items[k].path == STK__GPU_PATH_BIG;
    exact += !memcmp(ref + (size_t)i * ib, got + (size_t)i * ib, ib);
  }
  stk__gpu_stats st1;
  stk__gpu_get_stats(g, &st1);
  CHECK_MSG(cpu == n, "%d of %d items through the CPU decoder", cpu, n);
  CHECK_MSG(exact == n, "%d of %d items bit-identical to the CPU path", exact, n);
  CHECK_MSG(st1.path[STK__GPU_PATH_CUDA] == st0.path[STK__GPU_PATH_CUDA], "cuda path counted");
  printf("hybrid decoder failing: %d of %d items routed on to the CPU, all bit-identical\n", cpu, n);
  stk__gpu_close(g);
  free(ref);
  free(got);
  free(items);
  free(geo);
}

int main(void) {
  char probe[2048];
  stk__gpu_probe(probe, sizeof probe);
  printf("%s", probe);
  stk__gpu_config c = base_cfg(8);
  stk__gpu *g = NULL;
  char msg[512];
  int rc = stk__gpu_open(0, &c, &g, msg, sizeof msg);
  if (rc == STK_ENODEV) {
    printf("SKIP: no GPU (%s)\n", msg);
    return 0;
  }
  CHECK_MSG(rc == STK_OK, "open: %s", msg);
  if (rc) return CHECK_DONE();
  stk__gpu_close(g);

  /* argument checks */
  c.max_batch = 0;
  CHECK_EQ_INT(stk__gpu_open(0, &c, &g, msg, sizeof msg), STK_EINVAL);
  c = base_cfg(8);
  CHECK_EQ_INT(stk__gpu_open(99, &c, &g, msg, sizeof msg), STK_ENODEV);

  dec = stk__decoder_create();
  add_synth("synth-420-q90-640x480", 640, 480, 90, 2, 2, 0, STK__JCOLOR_YCC, 0);
  add_synth("synth-444-q95-500x375", 500, 375, 95, 1, 1, 0, STK__JCOLOR_YCC, 0);
  add_synth("synth-422-q85-333x500", 333, 500, 85, 2, 1, 0, STK__JCOLOR_YCC, 0);
  add_synth("synth-440-q90-375x500", 375, 500, 90, 1, 2, 0, STK__JCOLOR_YCC, 0);
  add_synth("synth-411-q90-480x360", 480, 360, 90, 4, 1, 0, STK__JCOLOR_YCC, 0);
  add_synth("synth-grey-q90-400x300", 400, 300, 90, 1, 1, 0, STK__JCOLOR_GREY, 0);
  add_synth("synth-progressive-512x384", 512, 384, 90, 2, 2, 1, STK__JCOLOR_YCC, 0);
  add_synth("synth-restart-420-600x400", 600, 400, 90, 2, 2, 0, STK__JCOLOR_YCC, 2);
  add_synth("synth-cmyk-300x200", 300, 200, 90, 1, 1, 0, STK__JCOLOR_CMYK, 0);
  add_synth("synth-rgb-256x256", 256, 256, 90, 1, 1, 0, STK__JCOLOR_RGB, 0);
  add_synth("synth-small-17x23", 17, 23, 90, 2, 2, 0, STK__JCOLOR_YCC, 0);
  add_synth("synth-wide-1500x120", 1500, 120, 90, 2, 2, 0, STK__JCOLOR_YCC, 0);
  add_synth("synth-large-2400x1800", 2400, 1800, 85, 2, 2, 0, STK__JCOLOR_YCC, 0);
  {
    /* a PNG handed over as an encoded file: the CPU decoder takes it */
    uint8_t *rgb = malloc(320 * 240 * 3), *buf = NULL;
    size_t n = 0;
    stk__synth_render(rgb, 320, 240, 5);
    if (stk__png_encode(rgb, 320, 240, STK__PNG_RGB, 8, NULL, 0, &buf, &n) == STK_OK)
      add_image("synth-png-320x240", buf, n, 0);
    free(rgb);
  }
  const char *dir = getenv("STK_TEST_IMAGES");
  int quick = getenv("STK_TEST_QUICK") != NULL; /* for the slow sanitizers */
  if (quick) {
    for (int i = 6; i < nimg; i++) free(imgs[i].data);
    nimg = 6;
  } else if (dir) {
    load_real(dir);
  }
  int nreal = 0;
  for (int i = 0; i < nimg; i++) nreal += imgs[i].real;
  printf("%d test images (%d real)\n", nimg, nreal);

  if (quick) {
    test_exact(1, STK_FILTER_BILINEAR);
    test_exact(1, STK_FILTER_BICUBIC);
    run_psnr(0, 1, 1, 1, NULL);
    test_own_size();
    /* the ways of driving the engines, the decoupled decoder the loader
     * uses among them, under the sanitizers too */
    uint8_t *quick_eval = malloc((size_t)OUT * OUT * 3 * nimg);
    run_psnr(0, 1, 0, 1, quick_eval);
    test_engine_drives(quick_eval);
    free(quick_eval);
    for (int i = 0; i < nimg; i++) free(imgs[i].data);
    stk__decoder_destroy(dec);
    return CHECK_DONE();
  }
  test_exact(0, STK_FILTER_BILINEAR);
  test_exact(1, STK_FILTER_BILINEAR);
  test_exact(0, STK_FILTER_BICUBIC);
  test_exact(1, STK_FILTER_BICUBIC);

  /* the defaults: engines, plain chroma upsampling */
  uint8_t *eval_out = malloc(stk__dtype_size(STK_DTYPE_UINT8) * OUT * OUT * 3 * nimg);
  psnr_result pe = run_psnr(0, 1, 0, 1, eval_out);
  CHECK_MSG(pe.n_hw == 0 || pe.mean_hw >= 40.0, "eval PSNR %.2f dB < 40", pe.mean_hw);
  psnr_result pt = run_psnr(1, 1, 0, 0, NULL);
  CHECK_MSG(pt.n_hw == 0 || pt.mean_hw >= 35.0, "train PSNR %.2f dB", pt.mean_hw);
  run_psnr(0, 0, 0, 0, NULL); /* whole-image decode */
  run_psnr(0, 1, 1, 0, NULL); /* interpolated chroma upsampling */
  /* no engines: everything through the per-image hybrid decoder */
  mix_hw = 0;
  psnr_result p3 = run_psnr(0, 1, 0, 0, NULL);
  mix_hw = -1;
  CHECK_MSG(p3.n_hw == 0 || p3.mean_hw >= 40.0, "no engines: %.2f dB", p3.mean_hw);

  test_own_size();
  test_cuda_failure();
  test_fallbacks(eval_out);
  test_plan_ahead(eval_out);
  test_engine_drives(eval_out);
  test_threads_and_compact();

  free(eval_out);
  for (int i = 0; i < nimg; i++) free(imgs[i].data);
  stk__decoder_destroy(dec);
  return CHECK_DONE();
}
