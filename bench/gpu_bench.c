/*
 * gpu_bench.c: throughput of the GPU path (src/gpu) on a folder of JPEGs.
 *
 *   stk_gpu_bench DIR [--images N] [--batch B] [--threads T] [--seconds S]
 *
 * Reads up to N files under DIR (recursively, following symbolic links) into
 * memory, reads their headers on the CPU (as the loader does, to place the
 * crops), then measures, at batch size B:
 *   1. the hardware-backend batched decode alone, whole images;
 *   2. the same, of the regions RandomResizedCrop reads (ROI);
 *   3. train (RandomResizedCrop 224 + flip + normalise, float32 NCHW):
 *      decode + fused kernel, with 1 and with T submitting threads;
 *   4. eval (Resize 256 + CenterCrop 224): decode + kernel, T threads;
 *   5. device time of the decode and of the kernel per batch (profiled run).
 * and prints a table. Images per second count images delivered into device
 * tensors; file reading is not included (the files are in memory).
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
  int train, decode_only, roi, threads, profile;
} bmode;

typedef struct {
  stk__gpu *g;
  bimg *imgs;
  int nimg, batch, tid, nthreads, train;
  int64_t nbatches;
  int rc;
  uint64_t images, failed;
} worker;

static void *worker_main(void *p) {
  worker *w = p;
  stk__gpu_item *items = calloc((size_t)w->batch, sizeof *items);
  char msg[512];
  int slot_base = 2 * w->tid, turn = 0;
  for (int64_t b = w->tid; b < w->nbatches && !w->rc; b += w->nthreads) {
    int slot = slot_base + turn;
    turn ^= 1;
    /* the consumer side: the slot's previous batch must be finished */
    if ((w->rc = stk__gpu_slot_wait(w->g, slot, msg, sizeof msg))) break;
    for (int i = 0; i < w->batch; i++) {
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
    w->rc = stk__gpu_run_batch(w->g, slot, w->batch, items, msg, sizeof msg);
    for (int i = 0; i < w->batch; i++) {
      w->images += items[i].rc == STK_OK;
      w->failed += items[i].rc != STK_OK;
    }
  }
  for (int t = 0; t < 2 && !w->rc; t++) w->rc = stk__gpu_slot_wait(w->g, slot_base + t, msg, sizeof msg);
  if (w->rc) fprintf(stderr, "thread %d: %s\n", w->tid, msg);
  free(items);
  return NULL;
}

typedef struct {
  double ips, ms_batch, host_ms_batch, gpu_dec_ms, gpu_ker_ms;
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
  c.roi = m->roi;
  c.decode_only = m->decode_only;
  c.profile = m->profile;
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
      ws[t] = (worker){g, imgs, nimg, batch, t, m->threads, m->train, nb, 0, 0, 0};
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
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--images") && i + 1 < argc)
      max_paths = (size_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else
      dir = argv[i];
  }
  if (!dir || batch < 1 || threads < 1 || threads > 32) {
    fprintf(stderr, "usage: %s DIR [--images N] [--batch B] [--threads T] [--seconds S]\n", argv[0]);
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

  char n1[64], n2[64], n3[64], n4[64];
  snprintf(n1, sizeof n1, "train: decode + kernel, %d thread%s", threads, threads > 1 ? "s" : "");
  snprintf(n2, sizeof n2, "eval: decode + kernel, %d thread%s", threads, threads > 1 ? "s" : "");
  snprintf(n3, sizeof n3, "hw decode only, full, %d threads", threads);
  snprintf(n4, sizeof n4, "hw decode only, ROI, %d threads", threads);
  bmode modes[] = {
      {"hw decode only, full images, 1 thread", 1, 1, 0, 1, 0},
      {"hw decode only, ROI (train crops), 1 thread", 1, 1, 1, 1, 0},
      {n3, 1, 1, 0, threads, 0},
      {n4, 1, 1, 1, threads, 0},
      {"train: decode + kernel, 1 thread", 1, 0, 1, 1, 0},
      {n1, 1, 0, 1, threads, 0},
      {n2, 0, 0, 1, threads, 0},
      {"train: profiled (device time per batch)", 1, 0, 1, 1, 1},
  };
  int nm = (int)(sizeof modes / sizeof *modes);
  bresult res[16];
  for (int i = 0; i < nm; i++) {
    if (modes[i].threads == 1 && i >= 2 && i <= 3) {
      res[i].ok = 0;
      continue;
    }
    res[i] = run_mode(&modes[i], imgs, nimg, batch, seconds);
    if (res[i].ok)
      fprintf(stderr, "%-46s %9.0f img/s\n", modes[i].name, res[i].ips);
  }

  printf("\nbatch %d, %d images (%s)\n", batch, nimg, dir);
  printf("%-46s %10s %10s %10s  %s\n", "mode", "img/s", "ms/batch", "host ms", "paths (hw/cuda/cpu/big, failed)");
  for (int i = 0; i < nm; i++) {
    if (!res[i].ok) continue;
    const stk__gpu_stats *s = &res[i].st;
    printf("%-46s %10.0f %10.2f %10.2f  %llu/%llu/%llu/%llu, %llu\n", modes[i].name, res[i].ips,
           res[i].ms_batch, res[i].host_ms_batch, (unsigned long long)s->path[STK__GPU_PATH_HW],
           (unsigned long long)s->path[STK__GPU_PATH_CUDA],
           (unsigned long long)s->path[STK__GPU_PATH_CPU], (unsigned long long)s->path[STK__GPU_PATH_BIG],
           (unsigned long long)s->failed);
  }
  const bresult *p = &res[nm - 1];
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
