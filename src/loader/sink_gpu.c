/* sink_gpu.c: the sink of the GPU back end (sink.h, gpu/gpu.h).
 *
 * Workers read each file, read its header and make the sample's random
 * choices (the same crops and flips as the CPU sink); each position keeps
 * its file's bytes and what to do with them (an stk__gpu_item) until the
 * batch is submitted, and the finaliser hands the whole batch to
 * stk__gpu_run_batch, which decodes it and writes it into the slot's device
 * memory. A share of the positions (the CPU share, share.h) is decoded by
 * the workers on the CPU, and the GPU resamples it as it does a cache image
 * (or, for an image whose decoded region is large, finished on the CPU as
 * raw RGB8, which the GPU only normalises). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "gpu/gpu.h"
#include "loader/share.h"
#include "loader/sink.h"

typedef struct {
  stk__buf *files;     /* per position: the file's bytes */
  stk__gpu_item *items;
  int *from;           /* scratch for closing up holes on the device */
  uint8_t *rgb8;       /* per position, size x size x 3: the images the
                          workers finished on the CPU (raw RGB8), which the
                          GPU only normalises and stores */
  stk__buf *regions;   /* per position: the region a worker decoded, which
                          the GPU resamples */
  stk__aug *augs;      /* per position: the augmentations drawn for it */
} gpu_slot;

typedef struct {
  const stk_options *opt;
  const stk__plan *plan;
  const stk__source *src;
  int nslots, B;
  stk__gpu *gpu;
  gpu_slot *slots;
  /* The share of each batch the workers finish on the CPU: fixed, or
   * (opt.gpu_cpu_share < 0) moved by share_ctl towards the share that
   * delivers batches fastest (loader/share.h). Under the loader's mutex. */
  double share;
  stk__share_ctl share_ctl;
  /* The workers' time in the positions they produced, what the share's
   * balance is measured from (share.h). Workers add without the mutex. */
  _Atomic int64_t cpu_ns, eng_ns, cpu_n, eng_n;
  /* The way the engines are driven, chosen by trials of the delivery rate
   * (loader/share.h) with STOKER_GPU_ENGINE_STATES=auto. Under the
   * loader's mutex. */
  int mode_auto;
  int in_trial;
  stk__mode_ctl mode_ctl;
  /* By default the way follows the consumer's time (share.h). Under the
   * loader's mutex. */
  int mode_consumer;
  stk__consumer_ctl consumer_ctl;
} gpu_sink;

static int gpu_slot_open(stk__sink *k, int i, uint8_t **data) {
  gpu_sink *g = k->impl;
  gpu_slot *s = &g->slots[i];
  *data = stk__gpu_slot_data(g->gpu, i);
  s->files = calloc((size_t)g->B, sizeof *s->files);
  s->items = calloc((size_t)g->B, sizeof *s->items);
  s->from = calloc((size_t)g->B, sizeof *s->from);
  /* untouched pages cost nothing: only positions decoded here are */
  s->rgb8 = malloc((size_t)g->B * g->opt->size * g->opt->size * 3);
  s->augs = calloc((size_t)g->B, sizeof *s->augs);
  s->regions = calloc((size_t)g->B, sizeof *s->regions);
  return *data && s->files && s->items && s->from && s->rgb8 && s->augs && s->regions ? STK_OK
                                                                                      : STK_ENOMEM;
}

static int produce_on_cpu(gpu_sink *g, gpu_slot *s, stk__worker *w, int j, stk__sample *smp,
                          char *reason, size_t reasonlen, int64_t *held);

/* Reads position j's file and plans it for the GPU, or finishes it on the
 * CPU (its share, and what the GPU's decoders cannot take). */
static int produce_position(gpu_sink *g, stk__worker *w, int slot, int j, uint64_t epoch,
                            int64_t idx, int on_cpu, char *reason, size_t reasonlen,
                            int64_t *held) {
  gpu_slot *s = &g->slots[slot];
  stk__sample smp;
  /* Read into the worker's own buffer (a stuck read may write it long after
   * the position was taken away); once the position is ours, the bytes move
   * into the slot by swapping the two buffers. */
  int rc = stk__sample_prepare(g->plan, w, g->src, &w->file, epoch, idx, &smp, reason, reasonlen);
  if (rc == STK__ELOST) return rc;
  stk__buf t = s->files[j];
  s->files[j] = w->file;
  w->file = t;
  *held += (int64_t)s->files[j].cap - (int64_t)t.cap;
  if (rc) return rc;
  stk__gpu_item *it = &s->items[j];
  memset(it, 0, sizeof *it);
  it->label = g->src->ds.labels[idx];
  it->dst = j;
  if (g->plan->aug.on) {
    /* run on the GPU for every path, the CPU share included (its tile is
     * finished here without them) */
    s->augs[j] = smp.aug;
    it->aug = &s->augs[j];
  }
  /* What the hardware engines cannot decode would be decoded on the
   * submitting thread, one file after another: decode it here instead. */
  const stk__image_info *in = &smp.info;
  if (smp.raw && !on_cpu) {
    /* Pre-decoded: the GPU back end copies up only the rows and columns
     * the crop reads, and resamples them in the same fused kernel. */
    it->kind = STK__GPU_RGB8;
    it->pixels = smp.px.px;
    it->stride = smp.px.stride;
    it->x = it->y = 0;
    it->w = smp.px.w;
    it->h = smp.px.h;
    it->geom = smp.geom;
    return STK_OK;
  }
  if (!smp.raw && !stk__gpu_takes_header(in)) on_cpu = 1;
  if (!on_cpu) {
    it->kind = STK__GPU_JPEG;
    it->data = smp.data;
    it->len = smp.len;
    it->geom = smp.geom;
    /* The header parse and the path choice, here rather than on the lane's
     * thread, whose time bounds the engines' rate. Workers mostly hold
     * neighbouring positions, so j picks parsers that are free. */
    stk__gpu_plan_ahead(g->gpu, j, it);
    return STK_OK;
  }
  return produce_on_cpu(g, s, w, j, &smp, reason, reasonlen, held);
}

/* Decodes position j on the CPU: the region the crop reads at the CPU
 * path's DCT scale, resampled by the GPU's fused kernel as a cache image
 * is: the same pixels and the same arithmetic as the CPU loader, and the
 * worker's time goes to the decoding alone (the resampling was 30% of it).
 * What the kernel reads is copied out of the decoder, whose buffer the
 * worker's next image reuses. */
static int produce_on_cpu(gpu_sink *g, gpu_slot *s, stk__worker *w, int j, stk__sample *smp,
                          char *reason, size_t reasonlen, int64_t *held) {
  stk__gpu_item *it = &s->items[j];
  int S = g->plan->size;
  stk__geom geom;
  stk__region reg;
  stk__rect need;
  int rc = stk__sample_decode(g->plan, w, smp, &geom, &reg, &need, reason, reasonlen);
  if (rc) return rc;
  /* What the kernel reads: the resampler's rectangle, one pixel wider each
   * side within the region (the GPU plans the same rectangle; the margin
   * costs little and keeps a rounding apart from failing the item). */
  int x0 = need.x - 1 > reg.x ? need.x - 1 : reg.x, y0 = need.y - 1 > reg.y ? need.y - 1 : reg.y;
  int x1 = need.x + need.w + 1 < reg.x + reg.w ? need.x + need.w + 1 : reg.x + reg.w;
  int y1 = need.y + need.h + 1 < reg.y + reg.h ? need.y + need.h + 1 : reg.y + reg.h;
  const size_t row = (size_t)(x1 - x0) * 3, bytes = row * (size_t)(y1 - y0);
  /* Pre-decoded images, and a region larger than 4 output tiles (a large
   * PNG, which has no DCT scaling), are resampled here as before: the
   * positions would hold too much. */
  if (!smp->raw && x1 > x0 && y1 > y0 && bytes <= (size_t)4 * S * S * 3) {
    stk__buf *b = &s->regions[j];
    size_t before = b->cap;
    if (stk__buf_reserve(b, bytes)) {
      stk__sample_release(g->plan, w);
      return stk__fail(reason, reasonlen, STK_ENOMEM, "out of memory for a %dx%d region", x1 - x0,
                       y1 - y0);
    }
    *held += (int64_t)b->cap - (int64_t)before;
    const uint8_t *from = reg.pixels + (size_t)(y0 - reg.y) * reg.stride + (size_t)(x0 - reg.x) * 3;
    for (int r = 0; r < y1 - y0; r++) memcpy(b->p + (size_t)r * row, from + (size_t)r * reg.stride, row);
    stk__sample_release(g->plan, w); /* the decoder's region is copied out */
    it->kind = STK__GPU_RGB8;
    it->pixels = b->p;
    it->stride = row;
    it->x = x0;
    it->y = y0;
    it->w = x1 - x0;
    it->h = y1 - y0;
    it->geom = geom;
    return STK_OK;
  }
  /* Finished here exactly as the CPU sink would (flip included), as raw
   * RGB8; the GPU applies an identity resample (exact) and normalises. */
  uint8_t *px = s->rgb8 + (size_t)j * S * S * 3;
  rc = stk__sample_resample(g->plan, w, smp, &reg, &g->plan->store_rgb8, px, reason, reasonlen);
  stk__sample_release(g->plan, w);
  if (rc) return rc;
  it->kind = STK__GPU_RGB8;
  it->pixels = px;
  it->stride = (size_t)S * 3;
  it->x = it->y = 0;
  it->w = it->h = S;
  stk__geom_crop(&(stk__rect){0, 0, S, S}, S, S, &it->geom);
  return STK_OK;
}

/* Produces position j, and counts the worker's time in it by where it
 * went: what the adaptive share balances (share.h). */
static int gpu_produce(stk__sink *k, stk__worker *w, int slot, int j, uint64_t epoch, int64_t idx,
                       int on_cpu, char *reason, size_t reasonlen, int64_t *held) {
  gpu_sink *g = k->impl;
  double t0 = stk__now();
  int rc = produce_position(g, w, slot, j, epoch, idx, on_cpu, reason, reasonlen, held);
  if (rc) return rc;
  int64_t ns = (int64_t)((stk__now() - t0) * 1e9);
  if (g->slots[slot].items[j].kind == STK__GPU_JPEG) {
    atomic_fetch_add_explicit(&g->eng_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->eng_n, 1, memory_order_relaxed);
  } else {
    atomic_fetch_add_explicit(&g->cpu_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->cpu_n, 1, memory_order_relaxed);
  }
  return STK_OK;
}

/* Nothing is decoded before the submission: only the plans move. */
static void gpu_move(stk__sink *k, int slot, int from, int to) {
  gpu_sink *g = k->impl;
  gpu_slot *s = &g->slots[slot];
  s->items[to] = s->items[from];
  s->items[to].dst = to;
  if (s->items[to].aug) {
    s->augs[to] = s->augs[from];
    s->items[to].aug = &s->augs[to];
  }
}

/* Spread evenly: round(share * n) of the first n positions. */
static int gpu_share(stk__sink *k, int j) {
  gpu_sink *g = k->impl;
  double p = g->share;
  return (int)((j + 1) * p + 0.5) > (int)(j * p + 0.5);
}

/* Decode + fused kernel, queued on the GPU's streams. Files that fail to
 * decode there fail their position (items[j].rc), not the batch. */
static int gpu_submit(stk__sink *k, int slot, int n, int32_t *codes, char *msgs, size_t msglen,
                      char *msg, size_t msgsize) {
  gpu_sink *g = k->impl;
  stk__gpu_item *items = g->slots[slot].items;
  for (int j = 0; j < n; j++) {
    items[j].msg = msgs + (size_t)j * msglen;
    items[j].msglen = msglen;
  }
  char why[STK__SINK_MSG_LEN];
  int rc = stk__gpu_run_batch(g->gpu, slot, n, items, why, sizeof why);
  if (rc) {
    snprintf(msg, msgsize, "GPU batch failed: %s", why);
    return rc;
  }
  for (int j = 0; j < n; j++) codes[j] = items[j].rc;
  return STK_OK;
}

/* Moves the engines' way and the adaptive share (see gpu_sink). */
static void gpu_finalised(stk__sink *k) {
  gpu_sink *g = k->impl;
  double now = stk__now();
  if (g->mode_consumer)
    stk__gpu_set_engine_batched(g->gpu,
                                stk__consumer_batch(&g->consumer_ctl, now, k->consumer_wait_s));
  if (g->mode_auto) {
    int trial = 0;
    stk__gpu_set_engine_batched(g->gpu, stk__mode_batch(&g->mode_ctl, now, &trial));
    /* the share waits out a trial, then measures afresh */
    if (g->in_trial && !trial) stk__share_restart(&g->share_ctl);
    g->in_trial = trial;
    if (trial) return;
  }
  /* Decoded pixels (a raw cache) cost the GPU a copy of the crop's rows and
   * the CPU a whole resample: the adaptive share stays at 0 for them. */
  if (g->opt->gpu_cpu_share >= 0 || g->src->ops->pixels) return;
  stk__gpu_stats gs;
  stk__gpu_get_stats(g->gpu, &gs);
  stk__share_work wk = {
      .cpu_s = 1e-9 * (double)atomic_load_explicit(&g->cpu_ns, memory_order_relaxed),
      .eng_s = 1e-9 * (double)atomic_load_explicit(&g->eng_ns, memory_order_relaxed),
      .cpu_n = (uint64_t)atomic_load_explicit(&g->cpu_n, memory_order_relaxed),
      .eng_n = (uint64_t)atomic_load_explicit(&g->eng_n, memory_order_relaxed),
      .hw_s = gs.host_hw_seconds,
      .hw_n = gs.path[STK__GPU_PATH_HW],
  };
  g->share = stk__share_batch(&g->share_ctl, now, &wk);
}

/* The batch is closed up on the device. */
static int gpu_compact(stk__sink *k, int slot, int n, const int32_t *codes, char *msg,
                       size_t msgsize) {
  gpu_sink *g = k->impl;
  int *from = g->slots[slot].from, m = 0;
  for (int j = 0; j < n; j++)
    if (!codes[j]) from[m++] = j;
  char why[STK__SINK_MSG_LEN];
  int rc = stk__gpu_slot_compact(g->gpu, slot, m, from, why, sizeof why);
  if (rc) snprintf(msg, msgsize, "GPU batch failed: %s", why);
  return rc;
}

static void gpu_lend(stk__sink *k, int slot, stk_batch *out) {
  gpu_sink *g = k->impl;
  out->device = g->opt->device;
  out->labels_device = stk__gpu_slot_labels(g->gpu, slot);
  out->ready_event = stk__gpu_slot_event(g->gpu, slot);
}

static int gpu_wait(stk__sink *k, int slot, char *msg, size_t msglen) {
  gpu_sink *g = k->impl;
  return stk__gpu_slot_wait(g->gpu, slot, msg, msglen);
}

static int gpu_wait_on(stk__sink *k, int slot, void *stream, char *msg, size_t msglen) {
  gpu_sink *g = k->impl;
  return stk__gpu_slot_wait_on(g->gpu, slot, stream, msg, msglen);
}

/* The next write into the slot waits, on the device, for the work queued
 * on `stream` so far. */
static int gpu_release(stk__sink *k, int slot, void *stream, char *msg, size_t msglen) {
  gpu_sink *g = k->impl;
  return stk__gpu_slot_release(g->gpu, slot, stream, msg, msglen);
}

static int gpu_mix(stk__sink *k, int slot, const stk__mix *m, float on, float off, stk_batch *out,
                   char *msg, size_t msglen) {
  gpu_sink *g = k->impl;
  void *data = NULL;
  float *soft = NULL;
  int rc = stk__gpu_slot_mix(g->gpu, slot, m, (int)out->n, on, off, &data, &soft, msg, msglen);
  if (rc) return rc;
  out->data = data;
  out->mix_labels_device = soft;
  return STK_OK;
}

static void gpu_reset(stk__sink *k) {
  gpu_sink *g = k->impl;
  stk__share_restart(&g->share_ctl); /* a refill is no measure of the rate */
  if (g->mode_auto) {
    stk__gpu_set_engine_batched(g->gpu, stk__mode_restart(&g->mode_ctl));
    g->in_trial = 0;
  }
}

static void gpu_stats(stk__sink *k, stk_stats *o) {
  gpu_sink *g = k->impl;
  stk__gpu_stats gs;
  stk__gpu_get_stats(g->gpu, &gs);
  o->device_bytes = gs.device_bytes;
  o->decoded_hw = gs.path[STK__GPU_PATH_HW];
  o->decoded_cuda = gs.path[STK__GPU_PATH_CUDA];
  o->decoded_cpu = gs.path[STK__GPU_PATH_CPU] + gs.path[STK__GPU_PATH_HOST] + gs.path[STK__GPU_PATH_BIG];
  o->host_bytes += gs.pinned_bytes;
  o->host_bytes += (uint64_t)g->nslots * g->B * g->opt->size * g->opt->size * 3; /* rgb8 */
  o->cpu_share = g->share;
  o->late_allocs = gs.late_allocs;
}

/* STOKER_GPU_PROFILE=1: where the time of queuing GPU batches went. */
static void gpu_finish(stk__sink *k) {
  gpu_sink *g = k->impl;
  const char *e = getenv("STOKER_GPU_PROFILE");
  if (!g || !g->gpu || !e || !*e || !strcmp(e, "0")) return;
  stk__gpu_stats gs;
  stk__gpu_get_stats(g->gpu, &gs);
  double b = gs.batches ? 1e3 / (double)gs.batches : 0;
  fprintf(stderr,
          "stoker gpu profile: %llu batches, cpu share %.3f; per batch, ms of host time: in "
          "run_batch %.2f = waiting for a lane %.2f + for the lane's previous decode %.2f + "
          "planning %.2f + the engines %.2f + CPU fallbacks %.2f + rest; the engines driven "
          "%s, %d states per lane (%s, %d changes); items: engines %llu, cuda %llu, "
          "cpu %llu, host %llu, big %llu\n",
          (unsigned long long)gs.batches, g->share, gs.host_seconds * b,
          gs.host_lane_wait_seconds * b, gs.host_sync_seconds * b, gs.host_plan_seconds * b,
          gs.host_hw_seconds * b, gs.host_cpu_seconds * b,
          gs.hw_states && !(g->mode_auto && g->mode_ctl.batched) &&
                  !(g->mode_consumer && g->consumer_ctl.batched)
              ? "one by one (decoupled decoder)"
              : "by the batched call",
          gs.hw_states,
          g->mode_auto       ? "chosen by trials"
          : g->mode_consumer ? "chosen by the consumer's time"
                             : "fixed",
          g->mode_auto ? g->mode_ctl.switches : g->consumer_ctl.switches,
          (unsigned long long)gs.path[STK__GPU_PATH_HW],
          (unsigned long long)gs.path[STK__GPU_PATH_CUDA],
          (unsigned long long)gs.path[STK__GPU_PATH_CPU],
          (unsigned long long)gs.path[STK__GPU_PATH_HOST],
          (unsigned long long)gs.path[STK__GPU_PATH_BIG]);
}

static void gpu_close(stk__sink *k) {
  gpu_sink *g = k->impl;
  if (!g) return;
  if (g->slots)
    for (int i = 0; i < g->nslots; i++) {
      gpu_slot *s = &g->slots[i];
      if (s->files)
        for (int j = 0; j < g->B; j++) stk__buf_free(&s->files[j]);
      free(s->files);
      free(s->items);
      free(s->from);
      free(s->rgb8);
      if (s->regions)
        for (int j = 0; j < g->B; j++) stk__buf_free(&s->regions[j]);
      free(s->regions);
      free(s->augs);
    }
  free(g->slots);
  stk__gpu_close(g->gpu); /* after the workers: none is inside run_batch */
  free(g);
}

static const stk__sink_ops gpu_ops = {
    .kind = "gpu",
    .slot_open = gpu_slot_open,
    .produce = gpu_produce,
    .move = gpu_move,
    .share = gpu_share,
    .submit = gpu_submit,
    .finalised = gpu_finalised,
    .compact = gpu_compact,
    .lend = gpu_lend,
    .wait = gpu_wait,
    .wait_on = gpu_wait_on,
    .release = gpu_release,
    .mix = gpu_mix,
    .reset = gpu_reset,
    .stats = gpu_stats,
    .finish = gpu_finish,
    .close = gpu_close,
};

/* The benchmark variables (docs/gpu.md): checked before the device is
 * opened, so that a bad value gets the same error with or without a GPU. */
static int gpu_env(gpu_sink *g, stk__gpu_config *cfg, char *err, size_t errlen) {
  /* STOKER_GPU_ENGINE_ORDER=arrival: the engines' batches in the order the
   * items came, for benchmarks of the sorted default against it */
  const char *eo = getenv("STOKER_GPU_ENGINE_ORDER");
  if (eo && *eo && strcmp(eo, "sorted")) {
    if (strcmp(eo, "arrival"))
      return stk__fail(err, errlen, STK_EINVAL,
                       "STOKER_GPU_ENGINE_ORDER must be \"arrival\" or \"sorted\", got \"%s\"", eo);
    cfg->hw_sort = 0;
  }
  /* Both ways of driving the engines are opened (the decoupled decoder with
   * 4 states per lane), and the consumer's time chooses between them
   * (loader/share.h): beside a model the decoupled decoder's per-image work
   * runs on our few streams instead of the batched call's many (ResNet-18
   * at 94% of its synthetic rate on an H100 against 80%); alone, the
   * batched call is faster (docs/gpu.md). STOKER_GPU_ENGINE_STATES=N
   * (0-64) fixes the way: N states, 0 for the batched call; "trials"
   * (or "auto") chooses by trials of the delivery rate instead. */
  cfg->hw_states = 4;
  /* STOKER_GPU_LANES=N: batches decoding at once (default 2) */
  const char *el = getenv("STOKER_GPU_LANES");
  if (el && *el) {
    char *end = NULL;
    long nl = strtol(el, &end, 10);
    if (*end || nl < 1 || nl > 8)
      return stk__fail(err, errlen, STK_EINVAL,
                       "STOKER_GPU_LANES must be a whole number in 1..8, got \"%s\"", el);
    cfg->lanes = (int)nl;
  }
  g->mode_auto = 0;
  g->mode_consumer = 1;
  const char *es = getenv("STOKER_GPU_ENGINE_STATES");
  if (es && *es) g->mode_consumer = 0;
  if (es && (!strcmp(es, "auto") || !strcmp(es, "trials"))) {
    g->mode_auto = 1;
  } else if (es && *es) {
    char *end = NULL;
    long ns = strtol(es, &end, 10);
    if (*end || ns < 0 || ns > 64)
      return stk__fail(err, errlen, STK_EINVAL,
                       "STOKER_GPU_ENGINE_STATES must be \"trials\" or a whole number in 0..64, "
                       "got \"%s\"",
                       es);
    cfg->hw_states = (int)ns;
  }
  return STK_OK;
}

/* Opens the GPU back end: every device and pinned buffer is allocated here,
 * and the cap on device memory is checked against what was allocated. */
int stk__sink_gpu_open(stk__sink *k, const stk__sink_config *c, char *err, size_t errlen) {
  k->ops = &gpu_ops;
  gpu_sink *g = calloc(1, sizeof *g);
  if (!g) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  k->impl = g;
  const stk_options *o = c->opt;
  g->opt = o;
  g->plan = c->plan;
  g->src = c->src;
  g->nslots = c->nslots;
  g->B = o->batch_size;
  g->slots = calloc((size_t)c->nslots, sizeof *g->slots);
  if (!g->slots) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  stk__gpu_config cfg;
  stk__gpu_config_init(&cfg);
  cfg.max_batch = o->batch_size;
  cfg.out_w = cfg.out_h = o->size;
  cfg.dtype = o->dtype;
  cfg.layout = o->layout;
  memcpy(cfg.mean, o->mean, sizeof cfg.mean);
  memcpy(cfg.std, o->std, sizeof cfg.std);
  cfg.slots = c->nslots;
  cfg.max_pixels = o->max_pixels;
  cfg.planners = o->threads; /* as many header parsers as workers (resolved by now) */
  cfg.aug = g->plan->aug.on ? &g->plan->aug : NULL;
  cfg.mix_classes = c->mix_classes;
  int rc = gpu_env(g, &cfg, err, errlen);
  if (rc) return rc;
  char why[1024] = "";
  rc = stk__gpu_open(o->device, &cfg, &g->gpu, why, sizeof why);
  if (rc)
    return stk__fail(err, errlen, rc, "CUDA device %d cannot be used: %s", o->device, why);
  stk__gpu_stats gs;
  stk__gpu_get_stats(g->gpu, &gs);
  if (o->max_device_bytes && gs.device_bytes > o->max_device_bytes)
    return stk__fail(err, errlen, STK_ENOMEM,
                     "the GPU buffers for batch %d of %dx%d need %llu bytes of device memory, over "
                     "max_device_bytes = %llu: lower batch_size or prefetch",
                     o->batch_size, o->size, o->size, (unsigned long long)gs.device_bytes,
                     (unsigned long long)o->max_device_bytes);
  g->share = o->gpu_cpu_share < 0 ? 0 : o->gpu_cpu_share;
  stk__share_init(&g->share_ctl, g->share, g->nslots, o->threads, stk__gpu_lanes(g->gpu), g->B);
  g->mode_auto = g->mode_auto && stk__gpu_engine_ways(g->gpu);
  g->mode_consumer = g->mode_consumer && stk__gpu_engine_ways(g->gpu);
  stk__mode_init(&g->mode_ctl, 0, g->nslots);
  stk__consumer_init(&g->consumer_ctl, 0);
  return STK_OK;
}
