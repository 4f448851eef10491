/*
 * gpu_bench.c: throughput of the GPU path (src/gpu) on a folder of JPEGs.
 *
 *   stk_gpu_bench DIR [--images N] [--batch B] [--threads T] [--seconds S]
 *                 [--cpu-threads C] [--only SUBSTRING]
 *
 * Reads up to N files under DIR (recursively, following symbolic links) into
 * memory, reads their headers on the CPU (as the loader does, to place the
 * crops), then measures, at batch size B:
 *   1. the hardware-backend batched decode alone, whole images and the
 *      regions RandomResizedCrop reads (ROI), with and without nvJPEG's
 *      interpolated chroma upsampling;
 *   2. the per-image hybrid decoder alone (no engines);
 *   3. train (RandomResizedCrop 224 + flip + normalise, float32 NCHW):
 *      decode + fused kernel with the engines, 1 and T submitting threads;
 *   4. the same with a share of each batch decoded by CPU threads first
 *      (what the loader's workers would do: region + DCT-scaled decode,
 *      handed over as RGB8 items);
 *   5. eval (Resize 256 + CenterCrop 224): decode + kernel;
 *   6. device time of the decode and of the kernel per batch (profiled run);
 *   7. the engines with nvJPEG's HW_DECODE_NO_PIPELINE flag, and with their
 *      batch sorted by chroma subsampling and size (decode alone, train).
 * and prints a table. Images per second count images delivered into device
 * tensors; file reading is not included (the files are in memory).
 *
 *   --cpu-threads C   CPU helper threads per submitting thread (default 6)
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "gpu/gpu.h"
#include "ops/ops.h"

typedef struct {
  uint8_t *data;
  size_t len;
  int w, h;
  stk__geom train, eval;
} bimg;

static char **paths;
static size_t npaths, cap_paths, max_paths = 10000;

static int walk_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)ftw;
  if (flag == FTW_F && S_ISREG(sb->st_mode)) {
    if (npaths == cap_paths) {
      cap_paths = cap_paths ? cap_paths * 2 : 1024;
      paths = realloc(paths, cap_paths * sizeof *paths);
    }
    paths[npaths++] = strdup(p);
  }
  return npaths >= max_paths ? 1 : 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct {
  const char *name;
  int decode_only, threads, profile;
  int chroma_interp;
  float cpu_share; /* share of each batch decoded by CPU helper threads */
  unsigned hw_flags; /* stk__gpu_config.hw_flags */
  int hw_sort;       /* stk__gpu_config.hw_sort: 1 on, -1 off, 0 the default */
  int hw_states;     /* stk__gpu_config.hw_states */
  int eval, whole, no_hw; /* not the defaults: eval crops instead of train
                             crops, whole images instead of regions, no
                             engines */
} bmode;

static int cpu_threads = 6;

/* A CPU helper: decodes items [h, h + C, ...) of the CPU share of a batch,
 * as the loader's workers would (region, DCT scaling), into its buffers. */
typedef struct helper helper;
typedef struct worker worker;
struct helper {
  worker *w;
  int h;
  pthread_t th;
  stk__decoder *dec;
  stk__resampler rs;
};

struct worker {
  stk__gpu *g;
  bimg *imgs;
  int nimg, batch, tid, nthreads, train;
  int64_t nbatches;
  int rc;
  uint64_t images, failed;
  /* CPU share */
  int ncpu, nhelp, stop;
  int64_t cur;                  /* batch being prepared */
  stk__gpu_item *items;
  uint8_t **buf;                /* per item: a copy of its decoded region */
  size_t *cap;
  pthread_barrier_t go, done;
  helper *helpers;
};

static void cpu_item(helper *hp, int i) {
  worker *w = hp->w;
  const bimg *im = &w->imgs[(w->cur * w->batch + i) % w->nimg];
  stk__gpu_item *it = &w->items[i];
  stk__geom g = w->train ? im->train : im->eval;
  int denom = 1;
  if (w->train) {
    stk__rect crop = {g.x.lo, g.y.lo, g.x.hi - g.x.lo, g.y.hi - g.y.lo};
    denom = stk__choose_denom(&crop, 224, 224, 8);
  }
  stk__geom_downscale(&g, im->w, im->h, denom);
  stk__rect need;
  char msg[256];
  stk__region reg;
  it->rc = STK_EDECODE;
  if (stk__resampler_plan(&hp->rs, &g, &need)) return;
  stk__rect want = {need.x * denom, need.y * denom, need.w * denom, need.h * denom};
  if (want.x + want.w > im->w) want.w = im->w - want.x;
  if (want.y + want.h > im->h) want.h = im->h - want.y;
  if (stk__decoder_decode(hp->dec, im->data, im->len, &want, denom, &reg, msg, sizeof msg)) return;
  size_t row = (size_t)reg.w * 3, need_b = row * reg.h;
  if (w->cap[i] < need_b) {
    free(w->buf[i]);
    w->buf[i] = malloc(need_b);
    w->cap[i] = w->buf[i] ? need_b : 0;
    if (!w->buf[i]) return;
  }
  for (int y = 0; y < reg.h; y++) memcpy(w->buf[i] + y * row, reg.pixels + y * reg.stride, row);
  memset(it, 0, sizeof *it);
  it->kind = STK__GPU_RGB8;
  it->pixels = w->buf[i];
  it->stride = row;
  it->x = reg.x;
  it->y = reg.y;
  it->w = reg.w;
  it->h = reg.h;
  it->geom = g;
  it->dst = i;
  it->label = i;
}

static void *helper_main(void *p) {
  helper *hp = p;
  worker *w = hp->w;
  for (;;) {
    pthread_barrier_wait(&w->go);
    if (w->stop) break;
    for (int i = hp->h; i < w->ncpu; i += w->nhelp) cpu_item(hp, i);
    pthread_barrier_wait(&w->done);
  }
  return NULL;
}

static void *worker_main(void *p) {
  worker *w = p;
  stk__gpu_item *items = calloc((size_t)w->batch, sizeof *items);
  w->items = items;
  char msg[512];
  if (w->ncpu > 0) {
    w->buf = calloc((size_t)w->batch, sizeof *w->buf);
    w->cap = calloc((size_t)w->batch, sizeof *w->cap);
    w->helpers = calloc((size_t)w->nhelp, sizeof *w->helpers);
    pthread_barrier_init(&w->go, NULL, (unsigned)w->nhelp + 1);
    pthread_barrier_init(&w->done, NULL, (unsigned)w->nhelp + 1);
    for (int h = 0; h < w->nhelp; h++) {
      w->helpers[h].w = w;
      w->helpers[h].h = h;
      w->helpers[h].dec = stk__decoder_create();
      pthread_create(&w->helpers[h].th, NULL, helper_main, &w->helpers[h]);
    }
  }
  int slot_base = 2 * w->tid, turn = 0;
  for (int64_t b = w->tid; b < w->nbatches && !w->rc; b += w->nthreads) {
    int slot = slot_base + turn;
    turn ^= 1;
    if (w->ncpu > 0) {
      w->cur = b;
      pthread_barrier_wait(&w->go);
    }
    for (int i = w->ncpu; i < w->batch; i++) {
      const bimg *im = &w->imgs[(b * w->batch + i) % w->nimg];
      stk__gpu_item *it = &items[i];
      memset(it, 0, sizeof *it);
      it->kind = STK__GPU_JPEG;
      it->data = im->data;
      it->len = im->len;
      it->geom = w->train ? im->train : im->eval;
      it->dst = i;
      it->label = i;
    }
    if (w->ncpu > 0) pthread_barrier_wait(&w->done);
    /* the consumer side: the slot's previous batch must be finished */
    if ((w->rc = stk__gpu_slot_wait(w->g, slot, msg, sizeof msg))) break;
    w->rc = stk__gpu_run_batch(w->g, slot, w->batch, items, msg, sizeof msg);
    for (int i = 0; i < w->batch; i++) {
      w->images += items[i].rc == STK_OK;
      w->failed += items[i].rc != STK_OK;
    }
  }
  for (int t = 0; t < 2 && !w->rc; t++) w->rc = stk__gpu_slot_wait(w->g, slot_base + t, msg, sizeof msg);
  if (w->rc) fprintf(stderr, "thread %d: %s\n", w->tid, msg);
  if (w->ncpu > 0) {
    w->stop = 1;
    pthread_barrier_wait(&w->go);
    for (int h = 0; h < w->nhelp; h++) {
      pthread_join(w->helpers[h].th, NULL);
      stk__decoder_destroy(w->helpers[h].dec);
      stk__resampler_free(&w->helpers[h].rs);
    }
    for (int i = 0; i < w->batch; i++) free(w->buf[i]);
    free(w->buf);
    free(w->cap);
    free(w->helpers);
    pthread_barrier_destroy(&w->go);
    pthread_barrier_destroy(&w->done);
  }
  free(items);
  return NULL;
}

typedef struct {
  double ips, ms_batch, host_ms_batch, gpu_dec_ms, gpu_ker_ms;
  double plan_ms, hw_ms, cpu_ms; /* host ms per batch inside run_batch */
  stk__gpu_stats st;
  int ok;
} bresult;

static bresult run_mode(const bmode *m, bimg *imgs, int nimg, int batch, double seconds) {
  bresult r;
  memset(&r, 0, sizeof r);
  stk__gpu_config c;
  stk__gpu_config_init(&c);
  c.max_batch = batch;
  c.slots = 2 * m->threads;
  c.lanes = m->threads;
  c.roi = !m->whole;
  c.use_hw = !m->no_hw;
  c.chroma_interp = m->chroma_interp;
  c.decode_only = m->decode_only;
  c.profile = m->profile;
  c.hw_flags = m->hw_flags;
  if (m->hw_sort) c.hw_sort = m->hw_sort > 0; /* -1: off */
  c.hw_states = m->hw_states;
  stk__gpu *g = NULL;
  char msg[512];
  if (stk__gpu_open(0, &c, &g, msg, sizeof msg)) {
    fprintf(stderr, "%s: %s\n", m->name, msg);
    return r;
  }
  /* warm-up: one batch per thread */
  worker ws[64];
  pthread_t th[64];
  int64_t nb = m->threads;
  for (int pass = 0; pass < 2; pass++) {
    stk__gpu_stats s0;
    stk__gpu_get_stats(g, &s0);
    double t0 = stk__now();
    for (int t = 0; t < m->threads; t++) {
      memset(&ws[t], 0, sizeof ws[t]);
      ws[t].g = g;
      ws[t].imgs = imgs;
      ws[t].nimg = nimg;
      ws[t].batch = batch;
      ws[t].tid = t;
      ws[t].nthreads = m->threads;
      ws[t].train = !m->eval;
      ws[t].nbatches = nb;
      ws[t].ncpu = (int)(m->cpu_share * batch + 0.5f);
      ws[t].nhelp = cpu_threads;
      pthread_create(&th[t], NULL, worker_main, &ws[t]);
    }
    uint64_t images = 0;
    int rc = 0;
    for (int t = 0; t < m->threads; t++) {
      pthread_join(th[t], NULL);
      images += ws[t].images;
      rc |= ws[t].rc;
    }
    double dt = stk__now() - t0;
    if (rc) break;
    if (pass == 0) {
      /* size the measured run from the warm-up's speed */
      double per = dt / (double)nb;
      nb = (int64_t)(seconds / (per > 1e-4 ? per : 1e-4));
      if (nb < 4 * m->threads) nb = 4 * m->threads;
      continue;
    }
    stk__gpu_stats s1;
    stk__gpu_get_stats(g, &s1);
    r.ok = 1;
    r.ips = images / dt;
    r.ms_batch = dt * 1e3 / nb * m->threads;
    r.host_ms_batch = (s1.host_seconds - s0.host_seconds) * 1e3 / nb;
    r.gpu_dec_ms = (s1.gpu_decode_seconds - s0.gpu_decode_seconds) * 1e3 / nb;
    r.gpu_ker_ms = (s1.gpu_kernel_seconds - s0.gpu_kernel_seconds) * 1e3 / nb;
    r.plan_ms = (s1.host_plan_seconds - s0.host_plan_seconds) * 1e3 / nb;
    r.hw_ms = (s1.host_hw_seconds - s0.host_hw_seconds) * 1e3 / nb;
    r.cpu_ms = (s1.host_cpu_seconds - s0.host_cpu_seconds) * 1e3 / nb;
    r.st = s1;
    for (int p = 0; p < STK__GPU_NPATHS; p++) r.st.path[p] -= s0.path[p];
    r.st.failed -= s0.failed;
  }
  stk__gpu_close(g);
  return r;
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  int batch = 256, threads = 2;
  double seconds = 4.0;
  const char *only = NULL; /* --only S: the modes whose name contains S */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--images") && i + 1 < argc)
      max_paths = (size_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--cpu-threads") && i + 1 < argc)
      cpu_threads = atoi(argv[++i]);
    else
      dir = argv[i];
  }
  if (!dir || batch < 1 || threads < 1 || threads > 32 || cpu_threads < 1 || cpu_threads > 64) {
    fprintf(stderr, "usage: %s DIR [--images N] [--batch B] [--threads T] [--seconds S]\n"
                    "       [--cpu-threads C] [--only SUBSTRING]\n", argv[0]);
    return 2;
  }
  char info[2048];
  stk__gpu_probe(info, sizeof info);
  printf("%s", info);
  if (!stk__gpu_built()) return 1;

  nftw(dir, walk_cb, 64, 0);
  if (!npaths) {
    fprintf(stderr, "no files under %s\n", dir);
    return 1;
  }
  qsort(paths, npaths, sizeof *paths, cmp_str);
  bimg *imgs = calloc(npaths, sizeof *imgs);
  stk__decoder *dec = stk__decoder_create();
  int nimg = 0;
  uint64_t bytes = 0;
  double t_head = 0;
  const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
  for (size_t i = 0; i < npaths; i++) {
    FILE *f = fopen(paths[i], "rb");
    if (!f) continue;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    bimg *b = &imgs[nimg];
    b->data = malloc((size_t)n);
    if (n <= 0 || !b->data || fread(b->data, 1, (size_t)n, f) != (size_t)n) {
      free(b->data);
      fclose(f);
      continue;
    }
    fclose(f);
    b->len = (size_t)n;
    stk__image_info inf;
    char msg[256];
    double t0 = stk__now();
    int rc = stk__decoder_header(dec, b->data, b->len, &inf, msg, sizeof msg);
    t_head += stk__now() - t0;
    if (rc) {
      free(b->data);
      continue;
    }
    b->w = inf.width;
    b->h = inf.height;
    stk__rng rng;
    stk__rng_init(&rng, 0, 0, (uint64_t)nimg);
    stk__rect crop;
    stk__rrc_params(b->w, b->h, scale, ratio, &rng, &crop);
    stk__geom_crop(&crop, 224, 224, &b->train);
    b->train.flip = stk__rng_uniform(&rng) < 0.5;
    stk__geom_eval(b->w, b->h, 256, 224, &b->eval);
    bytes += b->len;
    nimg++;
  }
  printf("%d images, %.1f MB in memory; CPU header read %.1f us/image\n", nimg, bytes / 1e6,
         t_head * 1e6 / (nimg ? nimg : 1));

  /* T: the lanes (threads), as the loader runs them */
  enum { NMODES = 28 };
  char nm[NMODES][96];
  int T = threads;
  int mi = 0;
  bmode modes[NMODES];
  memset(modes, 0, sizeof modes);
#define MODE(...)                                                                            \
  do {                                                                                       \
    if (mi == NMODES) abort(); /* a mode added without raising NMODES (NAME writes nm[mi]) */ \
    bmode m_ = {__VA_ARGS__};                                                                \
    m_.threads = m_.threads ? m_.threads : 1;                                                \
    modes[mi++] = m_;                                                                        \
  } while (0)
#define NAME(...) (snprintf(nm[mi], sizeof nm[mi], __VA_ARGS__), nm[mi])
  MODE(.name = "decode: engines only, full images", .decode_only = 1, .whole = 1);
  MODE(.name = "decode: engines only, ROI (train crops)", .decode_only = 1);
  MODE(.name = NAME("decode: engines only, ROI, %d threads", T), .decode_only = 1, .threads = T);
  MODE(.name = NAME("decode: ROI, %d thr, HW_DECODE_NO_PIPELINE", T), .decode_only = 1,
       .threads = T, .hw_flags = 1);
  MODE(.name = NAME("decode: ROI, %d thr, in arrival order", T), .decode_only = 1,
       .threads = T, .hw_sort = -1);
  MODE(.name = NAME("decode: ROI, %d thr, decoupled, 2 states/thr", T), .decode_only = 1,
       .threads = T, .hw_states = 2);
  MODE(.name = NAME("decode: ROI, %d thr, decoupled, 4 states/thr", T), .decode_only = 1,
       .threads = T, .hw_states = 4);
  MODE(.name = NAME("decode: ROI, %d thr, decoupled, 14 states/thr", T), .decode_only = 1,
       .threads = T, .hw_states = 14);
  MODE(.name = "decode: engines, ROI, interpolated chroma", .decode_only = 1, .chroma_interp = 1);
  MODE(.name = "decode: per-image hybrid only (no engines)", .decode_only = 1, .no_hw = 1);
  MODE(.name = "train: engines, 1 thread");
  MODE(.name = NAME("train: engines, %d threads", T), .threads = T);
  MODE(.name = NAME("train: engines, %d thr, HW_DECODE_NO_PIPELINE", T), .threads = T, .hw_flags = 1);
  MODE(.name = NAME("train: engines, %d thr, in arrival order", T), .threads = T, .hw_sort = -1);
  MODE(.name = NAME("train: %d thr, decoupled, 4 states/thr", T), .threads = T, .hw_states = 4);
  MODE(.name = NAME("train: %d thr, decoupled, 14 states/thr", T), .threads = T, .hw_states = 14);
  MODE(.name = NAME("train: engines + 25%% CPU (%dx%d thr), %d thr", T, cpu_threads, T),
       .threads = T, .cpu_share = 0.25f);
  MODE(.name = NAME("train: engines + 40%% CPU (%dx%d thr), %d thr", T, cpu_threads, T),
       .threads = T, .cpu_share = 0.4f);
  MODE(.name = NAME("eval: engines, %d threads", T), .eval = 1, .threads = T);
  /* last: its figures are printed below */
  MODE(.name = "train: profiled (device time per batch)", .profile = 1);
#undef MODE
#undef NAME
  int nmodes = mi;
  bresult res[NMODES];
  memset(res, 0, sizeof res);
  for (int i = 0; i < nmodes; i++) {
    if (only && !strstr(modes[i].name, only)) continue;
    res[i] = run_mode(&modes[i], imgs, nimg, batch, seconds);
    if (res[i].ok)
      fprintf(stderr, "%-46s %9.0f img/s\n", modes[i].name, res[i].ips);
  }

  printf("\nbatch %d, %d images (%s)\n", batch, nimg, dir);
  printf("%-46s %8s %8s %7s %6s %6s %6s  %s\n", "mode", "img/s", "ms/batch", "host ms", "plan",
         "in hw", "cpu", "paths hw/cuda/cpu/host, failed, engine failures");
  for (int i = 0; i < nmodes; i++) {
    if (!res[i].ok) continue;
    const stk__gpu_stats *s = &res[i].st;
    printf("%-46s %8.0f %8.2f %7.2f %6.2f %6.2f %6.2f  %llu/%llu/%llu/%llu, %llu, %llu\n",
           modes[i].name, res[i].ips, res[i].ms_batch, res[i].host_ms_batch, res[i].plan_ms,
           res[i].hw_ms, res[i].cpu_ms, (unsigned long long)s->path[STK__GPU_PATH_HW],
           (unsigned long long)s->path[STK__GPU_PATH_CUDA],
           (unsigned long long)s->path[STK__GPU_PATH_CPU], (unsigned long long)s->path[STK__GPU_PATH_HOST],
           (unsigned long long)s->failed, (unsigned long long)s->hw_batch_failures);
    if (s->notes[0]) printf("    notes: %s\n", s->notes);
  }
  const bresult *p = &res[nmodes - 1];
  if (p->ok) {
    printf("device time per batch (train, profiled): decode %.2f ms, kernel %.3f ms -> kernel alone "
           "%.0f img/s\n",
           p->gpu_dec_ms, p->gpu_ker_ms, p->gpu_ker_ms > 0 ? batch * 1e3 / p->gpu_ker_ms : 0.0);
    printf("engines: %s, engine ROI: %s, interpolated chroma: %s; device memory: ours %.0f MiB, "
           "in use %.0f MiB; pinned %.0f MiB\n",
           p->st.hw_available ? "yes" : "no", p->st.hw_roi ? "yes" : "no",
           p->st.chroma_interp ? "yes" : "no", p->st.device_bytes / 1048576.0,
           p->st.device_bytes_used / 1048576.0, p->st.pinned_bytes / 1048576.0);
    if (p->st.notes[0]) printf("notes: %s\n", p->st.notes);
    printf("batched engine decodes that failed as a whole: %llu; ROI refused (decoded whole): %llu\n",
           (unsigned long long)p->st.hw_batch_failures, (unsigned long long)p->st.hw_roi_full);
  }
  for (int i = 0; i < nimg; i++) free(imgs[i].data);
  free(imgs);
  for (size_t i = 0; i < npaths; i++) free(paths[i]);
  free(paths);
  stk__decoder_destroy(dec);
  return 0;
}
