/*
 * gpu.c: the GPU back end (see gpu.h): the CUDA driver and nvJPEG opened at
 * run time, device buffers and streams, batched decoding, and the launch of
 * the fused kernel of kernels.cu.
 *
 * Neither cuda.h nor nvjpeg.h is needed to build this file: the few types,
 * constants and entry points used are declared below, and the libraries are
 * opened with dlopen() on first use.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpu/gpu.h"
#include "gpu/kernel_abi.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "codecs/encode.h"
#include "codecs/markers.h"
#include "core/common.h"

#include "gpu/binding.h"
#include "gpu/plan.h"
#include "gpu/pool.h"

#define DUMMY_SIDE 16

#if defined(STK_HAVE_GPU) && STK_HAVE_GPU
extern const unsigned char stk__gpu_fatbin[];
#define HAVE_KERNELS 1
static const void *kernel_image(void) { return stk__gpu_fatbin; }
#else
#define HAVE_KERNELS 0
static const void *kernel_image(void) { return NULL; }
#endif

int stk__gpu_built(void) { return HAVE_KERNELS; }

/* ---- objects -------------------------------------------------------------- */
/* A slot owns the device memory a batch is decoded into (its arena, and
 * the kernel's item descriptors) as well as the output, and a stream on
 * which everything that writes the output runs. The decoders of a lane
 * fill the arena on the lane's stream; only then does the slot's stream
 * wait for the consumer to let go of the output ("freed") and run the
 * kernel. So decoding the next batch never waits for the training step
 * that still reads the slot: it waits only for the slot's own previous
 * kernel to have read the arena ("consumed"), long done by then. */
typedef struct {
  CUdeviceptr data, labels;
  CUdeviceptr arena, desc_dev;
  CUstream stream;
  CUevent ready, freed, consumed;
  int written;          /* ready was recorded at least once */
  int freed_pending;    /* freed was recorded by a release: the next write waits */
  int consumed_pending; /* consumed was recorded: the next decode waits */
} gslot;

/* What run_batch() decided for one item. */
typedef struct {
  int path;              /* planned STK__GPU_PATH_* */
  int sx, sy, sw, sh;    /* the source rectangle to decode / copy (geometry coords) */
  int img_w, img_h;      /* JPEG: the image size as nvJPEG reads it (0: unknown) */
  int roi;               /* hardware: decode the rectangle only */
  size_t off, pitch;     /* place in the arena */
  int have_src;          /* the source is (queued to be) in the arena */
  int kx, ky;            /* Pillow's ksize per axis */
  int vfirst;            /* the CPU resampler would run the vertical pass first */
} iplan;

/* One batched nvJPEG decoder of a lane (engines or GPU-hybrid). */
typedef struct {
  nvjpegJpegState_t state;
  const unsigned char **data; /* max_batch */
  size_t *len;
  nvjpegImage_t *dst;
  int *item;
  int n;                      /* the batch size it is initialised for */
  CUdeviceptr pad_out;        /* where the padding images go */
} batched;

typedef struct {
  CUstream stream, aux;    /* aux: the hybrid decoder, joined back by events */
  CUevent done, ev_main, ev_aux, decoded;
  CUevent prof[3]; /* cfg.profile: chunk start, before the kernel, after it */
  CUstream gstream; /* the GPU-hybrid batched decoder */
  CUevent ev_gpu;
  batched gb;
  double t_plan, t_hw, t_gpu, t_cpu, t_sync; /* host seconds, this batch */
  int busy;
  /* hardware, batched */
  nvjpegJpegState_t hw_state;
  nvjpegDecodeParams_t *hw_params; /* max_batch */
  nvjpegDecodeParams_t chk_params; /* for support checks */
  const unsigned char **hw_data;
  size_t *hw_len;
  nvjpegImage_t *hw_dst;
  int *hw_item;
  int hw_n;                        /* the batch size it is initialised for */
  /* hybrid */
  nvjpegJpegState_t hy_state;
  nvjpegBufferPinned_t hy_pinned;
  nvjpegBufferDevice_t hy_dev;
  nvjpegJpegStream_t hy_js;
  nvjpegDecodeParams_t hy_params;
  nvjpegJpegStream_t js;           /* header parsing, with js_handle */
  nvjpegHandle_t js_handle;
  /* memory */
  CUdeviceptr arena, desc_dev; /* the slot's, for the batch being run */
  CUdeviceptr dummy_out;
  size_t arena_bytes;
  uint8_t *staging;
  size_t staging_bytes, staging_used;
  stk__kitem *desc_host;
  /* CPU fallbacks */
  stk__decoder *dec;
  stk__resampler rs;
  stk__buf big;
  /* per batch */
  iplan *plan;
  int *chunk;
} glane;

/* A header parser for stk__gpu_plan_ahead(), used by one thread at a time. */
typedef struct {
  pthread_mutex_t mu;
  nvjpegJpegStream_t js;
  nvjpegDecodeParams_t chk;
} parser;

struct stk__gpu {
  stk__gpu_config cfg;
  int device;
  CUdevice dev;
  CUcontext ctx;
  int ctx_retained;
  CUmodule mod;
  CUfunction fn;
  stk__store store;
  size_t image_bytes;
  CUdeviceptr lut;
  uint64_t pool_at_open; /* stk__pool_fresh() at the end of open */
  int prio;      /* the greatest stream priority: our work is small and
                    should not queue behind a training step's kernels */
  nvjpegHandle_t hw, gen, gh;
  nvjpegJpegDecoder_t hy_dec;
  int hw_roi;
  int roi_fail_streak;
  uint8_t *dummy_jpeg;
  size_t dummy_len;
  gslot *slots;
  glane *lanes;
  parser *parsers;
  int nparsers;
  nvjpegHandle_t parse_handle; /* what the parsers were made with */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int poisoned;
  char poison_msg[256];
  stk__gpu_stats st;
};

void stk__gpu_config_init(stk__gpu_config *c) {
  memset(c, 0, sizeof *c);
  c->max_batch = 256;
  c->out_w = c->out_h = 224;
  c->dtype = STK_DTYPE_FLOAT32;
  c->layout = STK_LAYOUT_NCHW;
  c->mean[0] = 0.485f;
  c->mean[1] = 0.456f;
  c->mean[2] = 0.406f;
  c->std[0] = 0.229f;
  c->std[1] = 0.224f;
  c->std[2] = 0.225f;
  c->slots = 4;
  c->lanes = 2;
  c->use_hw = 1;
  c->use_cuda = 1;
  c->roi = 1;
  c->use_gpu_hybrid = 0; /* slower than the engines on an H200, see gpu.h */
  c->hw_share = 0.35f;
  c->chroma_interp = 0;  /* 3.5x slower engines for ~85 -> ~98 dB, see gpu.h */
  c->max_pixels = 178956970ULL;
}

/* ---- error helpers -------------------------------------------------------- */
static int cu_fail(stk__gpu *g, CUresult r, const char *what, char *msg, size_t msglen) {
  if (g && stk__cu_sticky(r)) {
    pthread_mutex_lock(&g->mu);
    if (!g->poisoned) {
      g->poisoned = 1;
      snprintf(g->poison_msg, sizeof g->poison_msg, "%s: %s (%s)", what, stk__cu_name(r), stk__cu_str(r));
    }
    pthread_mutex_unlock(&g->mu);
  }
  return stk__fail(msg, msglen, STK_ECUDA, "%s: %s (%s)", what, stk__cu_name(r), stk__cu_str(r));
}

/* Remembers why a decode path is off (stats.notes). */
static void note(stk__gpu *g, const char *fmt, ...) STK__PRINTF(2, 3);
static void note(stk__gpu *g, const char *fmt, ...) {
  size_t at = strlen(g->st.notes);
  if (at + 3 >= sizeof g->st.notes) return;
  if (at) {
    memcpy(g->st.notes + at, "; ", 3);
    at += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->st.notes + at, sizeof g->st.notes - at, fmt, ap);
  va_end(ap);
}

#define CU(call)                                              \
  do {                                                        \
    CUresult r_ = (call);                                     \
    if (r_ != CUDA_SUCCESS) return cu_fail(g, r_, #call, msg, msglen); \
  } while (0)

#define NJ(call)                                                                             \
  do {                                                                                       \
    nvjpegStatus_t s_ = (call);                                                              \
    if (s_ != NVJPEG_STATUS_SUCCESS)                                                         \
      return stk__fail(msg, msglen, STK_ECUDA, "%s: %s", #call, stk__nj_status(s_));               \
  } while (0)

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Arena room for an item of the "big" path: its finished image, then its
 * label, both copied into the slot afterwards. */
static size_t big_need(const stk__gpu *g) { return align_up(align_up(g->image_bytes, 8) + 8, 256); }

/* ---- geometry --------------------------------------------------------------- */
static int check_geom(const stk__gpu *g, const stk__geom *ge, char *msg, size_t msglen) {
  const stk__axis *ax[2] = {&ge->x, &ge->y};
  int outs[2] = {g->cfg.out_w, g->cfg.out_h};
  for (int k = 0; k < 2; k++) {
    const stk__axis *a = ax[k];
    if (a->out != outs[k])
      return stk__fail(msg, msglen, STK_EINVAL, "geometry makes %d pixels on %c, not %d", a->out,
                       "xy"[k], outs[k]);
    if (a->hi <= a->lo || a->lo < 0)
      return stk__fail(msg, msglen, STK_EINVAL, "empty source range [%d, %d) on %c", a->lo, a->hi,
                       "xy"[k]);
    /* (a shrink beyond the kernel's 1/31 goes to the CPU: see run_locked) */
    if (!(a->scale > 0))
      return stk__fail(msg, msglen, STK_EINVAL, "cannot resample by 1/%.1f on %c", a->scale,
                       "xy"[k]);
  }
  return STK_OK;
}

/* ---- opening --------------------------------------------------------------- */
static int validate_cfg(const stk__gpu_config *c, char *msg, size_t msglen) {
  if (c->max_batch < 1 || c->max_batch > 65535)
    return stk__fail(msg, msglen, STK_EINVAL, "max_batch must be in 1..65535, got %d", c->max_batch);
  if (c->out_w < 1 || c->out_h < 1 || c->out_w > 8192 || c->out_h > 8192)
    return stk__fail(msg, msglen, STK_EINVAL, "output size %dx%d out of range", c->out_w, c->out_h);
  if (c->dtype < STK_DTYPE_FLOAT32 || c->dtype > STK_DTYPE_UINT8)
    return stk__fail(msg, msglen, STK_EINVAL, "unknown dtype %d", (int)c->dtype);
  if (c->layout != STK_LAYOUT_NCHW && c->layout != STK_LAYOUT_NHWC)
    return stk__fail(msg, msglen, STK_EINVAL, "unknown layout %d", (int)c->layout);
  if (c->slots < 1 || c->slots > 1024)
    return stk__fail(msg, msglen, STK_EINVAL, "slots must be in 1..1024, got %d", c->slots);
  if (!(c->hw_share >= 0.0f && c->hw_share <= 1.0f))
    return stk__fail(msg, msglen, STK_EINVAL, "hw_share must be in [0, 1]");
  if (c->planners < 0 || c->planners > 4096)
    return stk__fail(msg, msglen, STK_EINVAL, "planners must be in 0..4096, got %d", c->planners);
  if (c->lanes < 0 || c->lanes > 64)
    return stk__fail(msg, msglen, STK_EINVAL, "lanes must be in 0..64, got %d", c->lanes);
  for (int i = 0; i < 3; i++)
    if (!(c->std[i] != 0))
      return stk__fail(msg, msglen, STK_EINVAL, "std[%d] must not be 0", i);
  return STK_OK;
}

static int dev_alloc(stk__gpu *g, CUdeviceptr *p, size_t n, const char *what, char *msg,
                     size_t msglen) {
  CUresult r = stk__cu.MemAlloc(p, n ? n : 1);
  if (r != CUDA_SUCCESS) {
    *p = 0;
    return stk__fail(msg, msglen, r == 2 ? STK_ENOMEM : STK_ECUDA,
                     "cannot allocate %zu bytes of device memory for %s: %s", n, what, stk__cu_name(r));
  }
  g->st.device_bytes += n;
  return STK_OK;
}

static int host_alloc(stk__gpu *g, void **p, size_t n, const char *what, char *msg, size_t msglen) {
  CUresult r = stk__cu.MemHostAlloc(p, n ? n : 1, 0);
  if (r != CUDA_SUCCESS) {
    *p = NULL;
    return stk__fail(msg, msglen, STK_ENOMEM, "cannot allocate %zu bytes of pinned memory for %s: %s",
                     n, what, stk__cu_name(r));
  }
  g->st.pinned_bytes += n;
  return STK_OK;
}

static CUresult make_stream(stk__gpu *g, CUstream *st) {
  return stk__cu.StreamCreateWithPriority(st, CU_STREAM_NON_BLOCKING, g->prio);
}

/* A tiny baseline JPEG the batched decoder is padded with: nvJPEG wants the
 * batch size it was initialised with. */
static int make_dummy(stk__gpu *g) {
  uint8_t px[DUMMY_SIDE * DUMMY_SIDE * 3];
  memset(px, 128, sizeof px);
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  return stk__jpeg_encode(px, DUMMY_SIDE, DUMMY_SIDE, &o, &g->dummy_jpeg, &g->dummy_len);
}

static int hw_init_lane(stk__gpu *g, glane *L, int n, char *msg, size_t msglen) {
  NJ(stk__nj.DecodeBatchedInitialize(g->hw, L->hw_state, n, 1, NVJPEG_OUTPUT_RGBI));
  L->hw_n = n;
  return STK_OK;
}

/* Pads the batched arrays from m to the initialised size with the dummy. */
static void hw_pad(stk__gpu *g, glane *L, int m) {
  for (int i = m; i < L->hw_n; i++) {
    L->hw_data[i] = g->dummy_jpeg;
    L->hw_len[i] = g->dummy_len;
    memset(&L->hw_dst[i], 0, sizeof L->hw_dst[i]);
    L->hw_dst[i].channel[0] = (unsigned char *)(uintptr_t)(L->dummy_out + (CUdeviceptr)i * DUMMY_SIDE * DUMMY_SIDE * 3);
    L->hw_dst[i].pitch[0] = DUMMY_SIDE * 3;
    stk__nj.DecodeParamsSetROI(L->hw_params[i], 0, 0, -1, -1);
  }
}

/* Decodes a full batch of dummies and waits: sizes nvJPEG's internal
 * buffers, and tells whether the engines work at all. */
static int hw_warmup(stk__gpu *g, glane *L, char *msg, size_t msglen) {
  hw_pad(g, L, 0);
  nvjpegStatus_t s = stk__nj.DecodeBatchedEx(g->hw, L->hw_state, L->hw_data, L->hw_len, L->hw_dst,
                                          L->hw_params, L->stream);
  if (s != NVJPEG_STATUS_SUCCESS) {
    hw_init_lane(g, L, L->hw_n, NULL, 0);
    return stk__fail(msg, msglen, STK_ECUDA, "nvjpegDecodeBatchedEx: %s", stk__nj_status(s));
  }
  CU(stk__cu.StreamSynchronize(L->stream));
  return STK_OK;
}

static int gb_open(stk__gpu *g, nvjpegHandle_t h, batched *b, int B, char *msg, size_t msglen) {
  b->data = calloc((size_t)B, sizeof *b->data);
  b->len = calloc((size_t)B, sizeof *b->len);
  b->dst = calloc((size_t)B, sizeof *b->dst);
  b->item = calloc((size_t)B, sizeof *b->item);
  if (!b->data || !b->len || !b->dst || !b->item)
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  NJ(stk__nj.JpegStateCreate(h, &b->state));
  NJ(stk__nj.DecodeBatchedInitialize(h, b->state, B, 1, NVJPEG_OUTPUT_RGBI));
  b->n = B;
  return STK_OK;
}

static void gb_close(batched *b) {
  if (b->state) stk__nj.JpegStateDestroy(b->state);
  b->state = NULL;
  free(b->data);
  free(b->len);
  free(b->dst);
  free(b->item);
  b->data = NULL;
  b->len = NULL;
  b->dst = NULL;
  b->item = NULL;
}

static void gb_pad(stk__gpu *g, batched *b, int m) {
  for (int i = m; i < b->n; i++) {
    b->data[i] = g->dummy_jpeg;
    b->len[i] = g->dummy_len;
    memset(&b->dst[i], 0, sizeof b->dst[i]);
    b->dst[i].channel[0] = (unsigned char *)(uintptr_t)(b->pad_out + (CUdeviceptr)i * DUMMY_SIDE * DUMMY_SIDE * 3);
    b->dst[i].pitch[0] = DUMMY_SIDE * 3;
  }
}

static int open_lane(stk__gpu *g, glane *L, char *msg, size_t msglen) {
  const stk__gpu_config *c = &g->cfg;
  int B = c->max_batch, rc;
  CU(make_stream(g, &L->stream));
  CU(make_stream(g, &L->aux));
  CU(stk__cu.EventCreate(&L->done, CU_EVENT_DISABLE_TIMING));
  CU(stk__cu.EventCreate(&L->decoded, CU_EVENT_DISABLE_TIMING));
  CU(stk__cu.EventCreate(&L->ev_main, CU_EVENT_DISABLE_TIMING));
  CU(stk__cu.EventCreate(&L->ev_aux, CU_EVENT_DISABLE_TIMING));
  CU(stk__cu.EventRecord(L->done, L->stream));
  if (c->profile)
    for (int i = 0; i < 3; i++) CU(stk__cu.EventCreate(&L->prof[i], 0));
  L->staging_bytes = c->staging_bytes ? c->staging_bytes : (size_t)B << 18;
  if (!c->staging_bytes && L->staging_bytes < ((size_t)64 << 20)) L->staging_bytes = (size_t)64 << 20;
  if ((rc = dev_alloc(g, &L->dummy_out, (size_t)2 * B * DUMMY_SIDE * DUMMY_SIDE * 3, "padding", msg,
                      msglen)))
    return rc;
  L->gb.pad_out = L->dummy_out + (CUdeviceptr)B * DUMMY_SIDE * DUMMY_SIDE * 3;
  if ((rc = host_alloc(g, (void **)&L->staging, L->staging_bytes, "staging", msg, msglen))) return rc;
  if ((rc = host_alloc(g, (void **)&L->desc_host, (size_t)B * sizeof(stk__kitem),
                       "item descriptors", msg, msglen)))
    return rc;
  L->hw_params = calloc((size_t)B, sizeof *L->hw_params);
  L->hw_data = calloc((size_t)B, sizeof *L->hw_data);
  L->hw_len = calloc((size_t)B, sizeof *L->hw_len);
  L->hw_dst = calloc((size_t)B, sizeof *L->hw_dst);
  L->hw_item = calloc((size_t)B, sizeof *L->hw_item);
  L->plan = calloc((size_t)B, sizeof *L->plan);
  L->chunk = calloc((size_t)B, sizeof *L->chunk);
  L->dec = stk__decoder_create();
  if (!L->hw_params || !L->hw_data || !L->hw_len || !L->hw_dst || !L->hw_item || !L->plan ||
      !L->chunk || !L->dec)
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  stk__decoder_set_limits(L->dec, c->max_pixels);
  L->js_handle = g->hw ? g->hw : g->gen;
  if (L->js_handle) {
    NJ(stk__nj.JpegStreamCreate(L->js_handle, &L->js));
    NJ(stk__nj.DecodeParamsCreate(L->js_handle, &L->chk_params));
    NJ(stk__nj.DecodeParamsSetOutputFormat(L->chk_params, NVJPEG_OUTPUT_RGBI));
  }
  if (g->hw) {
    NJ(stk__nj.JpegStateCreate(g->hw, &L->hw_state));
    for (int i = 0; i < B; i++) {
      NJ(stk__nj.DecodeParamsCreate(g->hw, &L->hw_params[i]));
      NJ(stk__nj.DecodeParamsSetOutputFormat(L->hw_params[i], NVJPEG_OUTPUT_RGBI));
    }
    if ((rc = hw_init_lane(g, L, B, msg, msglen))) return rc;
    if (stk__nj.DecodeBatchedPreAllocate)
      stk__nj.DecodeBatchedPreAllocate(g->hw, L->hw_state, B, 1024, 1024, NVJPEG_CSS_444,
                                    NVJPEG_OUTPUT_RGBI);
  }
  if (g->gh) {
    CU(make_stream(g, &L->gstream));
    CU(stk__cu.EventCreate(&L->ev_gpu, CU_EVENT_DISABLE_TIMING));
    if ((rc = gb_open(g, g->gh, &L->gb, B, msg, msglen))) return rc;
  }
  if (g->hy_dec) {
    NJ(stk__nj.DecoderStateCreate(g->gen, g->hy_dec, &L->hy_state));
    NJ(stk__nj.BufferPinnedCreate(g->gen, NULL, &L->hy_pinned));
    NJ(stk__nj.BufferDeviceCreate(g->gen, NULL, &L->hy_dev));
    NJ(stk__nj.StateAttachPinnedBuffer(L->hy_state, L->hy_pinned));
    NJ(stk__nj.StateAttachDeviceBuffer(L->hy_state, L->hy_dev));
    NJ(stk__nj.JpegStreamCreate(g->gen, &L->hy_js));
    NJ(stk__nj.DecodeParamsCreate(g->gen, &L->hy_params));
    NJ(stk__nj.DecodeParamsSetOutputFormat(L->hy_params, NVJPEG_OUTPUT_RGBI));
  }
  return STK_OK;
}

/* Destroys the lane's objects made with the hardware handle. */
static void drop_lane_hw(stk__gpu *g, glane *L) {
  if (L->hw_params)
    for (int i = 0; i < g->cfg.max_batch; i++) {
      if (L->hw_params[i]) stk__nj.DecodeParamsDestroy(L->hw_params[i]);
      L->hw_params[i] = NULL;
    }
  if (L->chk_params) stk__nj.DecodeParamsDestroy(L->chk_params);
  if (L->js) stk__nj.JpegStreamDestroy(L->js);
  if (L->hw_state) stk__nj.JpegStateDestroy(L->hw_state);
  L->chk_params = NULL;
  L->js = NULL;
  L->hw_state = NULL;
  L->hw_n = 0;
}

static void close_lane(stk__gpu *g, glane *L) {
  if (L->stream) stk__cu.StreamSynchronize(L->stream);
  if (L->aux) stk__cu.StreamSynchronize(L->aux);
  if (L->gstream) stk__cu.StreamSynchronize(L->gstream);
  drop_lane_hw(g, L);
  gb_close(&L->gb);
  if (L->ev_gpu) stk__cu.EventDestroy(L->ev_gpu);
  if (L->gstream) stk__cu.StreamDestroy(L->gstream);
  if (L->hy_params) stk__nj.DecodeParamsDestroy(L->hy_params);
  if (L->hy_js) stk__nj.JpegStreamDestroy(L->hy_js);
  if (L->hy_state) stk__nj.JpegStateDestroy(L->hy_state);
  if (L->hy_pinned) stk__nj.BufferPinnedDestroy(L->hy_pinned);
  if (L->hy_dev) stk__nj.BufferDeviceDestroy(L->hy_dev);
  if (L->dummy_out) stk__cu.MemFree(L->dummy_out);
  if (L->staging) stk__cu.MemFreeHost(L->staging);
  if (L->desc_host) stk__cu.MemFreeHost(L->desc_host);
  if (L->done) stk__cu.EventDestroy(L->done);
  if (L->decoded) stk__cu.EventDestroy(L->decoded);
  if (L->ev_main) stk__cu.EventDestroy(L->ev_main);
  if (L->ev_aux) stk__cu.EventDestroy(L->ev_aux);
  for (int i = 0; i < 3; i++)
    if (L->prof[i]) stk__cu.EventDestroy(L->prof[i]);
  if (L->stream) stk__cu.StreamDestroy(L->stream);
  if (L->aux) stk__cu.StreamDestroy(L->aux);
  free(L->hw_params);
  free(L->hw_data);
  free(L->hw_len);
  free(L->hw_dst);
  free(L->hw_item);
  free(L->plan);
  free(L->chunk);
  stk__decoder_destroy(L->dec);
  stk__resampler_free(&L->rs);
  stk__buf_free(&L->big);
}

/* nvJPEG's own memory comes from gpu/pool.c */
#define NJ_ALLOC stk__pool_dev_allocator(), stk__pool_pinned_allocator()

/* Creates the nvJPEG handles. Failures here are not fatal: the affected
 * decode path is switched off and the CPU takes over. */
static void open_nvjpeg(stk__gpu *g) {
  if (!stk__nj_ok) {
    note(g, "nvJPEG off: %s", stk__nj_why);
    return;
  }
  unsigned flags = g->cfg.chroma_interp ? NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION : 0;
  if (stk__nj.CreateEx(NVJPEG_BACKEND_DEFAULT, NJ_ALLOC, flags, &g->gen) != NVJPEG_STATUS_SUCCESS) {
    g->gen = NULL;
    flags = 0;
    nvjpegStatus_t st = stk__nj.CreateEx(NVJPEG_BACKEND_DEFAULT, NJ_ALLOC, 0, &g->gen);
    if (st != NVJPEG_STATUS_SUCCESS) {
      note(g, "nvJPEG off: nvjpegCreateEx: %s", stk__nj_status(st));
      g->gen = NULL;
      return;
    }
  }
  g->st.chroma_interp = flags != 0;
  if (g->cfg.use_hw) {
    nvjpegStatus_t st = stk__nj.CreateEx(NVJPEG_BACKEND_HARDWARE, NJ_ALLOC, flags, &g->hw);
    if (st != NVJPEG_STATUS_SUCCESS && flags) {
      /* without the upsampling flag, which this version may not know */
      st = stk__nj.CreateEx(NVJPEG_BACKEND_HARDWARE, NJ_ALLOC, 0, &g->hw);
      if (st == NVJPEG_STATUS_SUCCESS) g->st.chroma_interp = 0; /* as the engines do it */
    }
    if (st != NVJPEG_STATUS_SUCCESS) {
      g->hw = NULL;
      note(g, "hardware decoder not available: %s", stk__nj_status(st));
    }
  }
  if (g->cfg.use_cuda && stk__nj.DecoderCreate(g->gen, NVJPEG_BACKEND_HYBRID, &g->hy_dec) !=
                             NVJPEG_STATUS_SUCCESS)
    g->hy_dec = NULL;
  if (g->cfg.use_gpu_hybrid) {
    nvjpegStatus_t st = stk__nj.CreateEx(NVJPEG_BACKEND_GPU_HYBRID, NJ_ALLOC, flags, &g->gh);
    if (st != NVJPEG_STATUS_SUCCESS && flags)
      st = stk__nj.CreateEx(NVJPEG_BACKEND_GPU_HYBRID, NJ_ALLOC, 0, &g->gh);
    if (st != NVJPEG_STATUS_SUCCESS) {
      g->gh = NULL;
      note(g, "GPU-hybrid decoder not available: %s", stk__nj_status(st));
    }
  }
}

int stk__gpu_open(int device, const stk__gpu_config *cfg, stk__gpu **out, char *msg,
                  size_t msglen) {
  if (out) *out = NULL;
  if (!cfg || !out) return stk__fail(msg, msglen, STK_EINVAL, "cfg and out must not be NULL");
  int rc = validate_cfg(cfg, msg, msglen);
  if (rc) return rc;
  if (device < 0) return stk__fail(msg, msglen, STK_EINVAL, "device must be >= 0, got %d", device);
  if (!kernel_image())
    return stk__fail(msg, msglen, STK_ENODEV,
                     "device %d asked for, but this build of stoker has no GPU kernels (nvcc was "
                     "not found when it was built)",
                     device);
  stk__gpu_load();
  if (!stk__cu_ok) return stk__fail(msg, msglen, STK_ENODEV, "%s", stk__cu_why);
  CUresult r = stk__cu.Init(0);
  if (r != CUDA_SUCCESS)
    return stk__fail(msg, msglen, STK_ENODEV, "the CUDA driver cannot start: %s (%s)", stk__cu_name(r),
                     stk__cu_str(r));
  int count = 0;
  if (stk__cu.DeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  if (device >= count)
    return stk__fail(msg, msglen, STK_ENODEV, "device %d asked for, but %d CUDA device%s present",
                     device, count, count == 1 ? " is" : "s are");

  stk__gpu *g = calloc(1, sizeof *g);
  if (!g) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  g->cfg = *cfg;
  if (g->cfg.lanes == 0) g->cfg.lanes = 2;
  g->device = device;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  int pushed = 0;
  size_t free0 = 0, free1 = 0, total = 0;

  r = stk__cu.DeviceGet(&g->dev, device);
  if (r != CUDA_SUCCESS) {
    rc = cu_fail(NULL, r, "cuDeviceGet", msg, msglen);
    goto fail;
  }
  int ccmaj = 0, ccmin = 0;
  stk__cu.DeviceGetAttribute(&ccmaj, CU_DEVICE_ATTRIBUTE_CC_MAJOR, g->dev);
  stk__cu.DeviceGetAttribute(&ccmin, CU_DEVICE_ATTRIBUTE_CC_MINOR, g->dev);
  if (ccmaj < 8) {
    rc = stk__fail(msg, msglen, STK_ENODEV,
                   "device %d has compute capability %d.%d; stoker's kernels need 8.0 or newer",
                   device, ccmaj, ccmin);
    goto fail;
  }
  r = stk__cu.DevicePrimaryCtxRetain(&g->ctx, g->dev);
  if (r != CUDA_SUCCESS) {
    rc = cu_fail(NULL, r, "cuDevicePrimaryCtxRetain", msg, msglen);
    goto fail;
  }
  g->ctx_retained = 1;
  r = stk__cu.CtxPushCurrent(g->ctx);
  if (r != CUDA_SUCCESS) {
    rc = cu_fail(NULL, r, "cuCtxPushCurrent", msg, msglen);
    goto fail;
  }
  pushed = 1;
  stk__cu.MemGetInfo(&free0, &total);
  r = stk__cu.ModuleLoadData(&g->mod, kernel_image());
  if (r != CUDA_SUCCESS) {
    rc = cu_fail(NULL, r, "cuModuleLoadData (the embedded kernels)", msg, msglen);
    goto fail;
  }
  r = stk__cu.ModuleGetFunction(&g->fn, g->mod, "stk_resample_kernel");
  if (r != CUDA_SUCCESS) {
    rc = cu_fail(NULL, r, "cuModuleGetFunction", msg, msglen);
    goto fail;
  }
  {
    int least = 0;
    if (stk__cu.CtxGetStreamPriorityRange(&least, &g->prio) != CUDA_SUCCESS) g->prio = 0;
  }

  stk__store_init(&g->store, g->cfg.dtype, g->cfg.layout, g->cfg.out_w, g->cfg.out_h, g->cfg.mean,
                  g->cfg.std);
  g->image_bytes = (size_t)g->cfg.out_w * g->cfg.out_h * 3 * stk__dtype_size(g->cfg.dtype);
  /* per slot; at least two finished images (the "big" path's need) */
  size_t arena = g->cfg.arena_bytes ? g->cfg.arena_bytes : (size_t)g->cfg.max_batch * (768 << 10);
  if (arena < 2 * big_need(g)) arena = 2 * big_need(g);
  if ((rc = dev_alloc(g, &g->lut, sizeof g->store.lut_f32 + sizeof g->store.lut_u16, "tables", msg,
                      msglen)))
    goto fail;
  {
    uint8_t tab[sizeof g->store.lut_f32 + sizeof g->store.lut_u16];
    memcpy(tab, g->store.lut_f32, sizeof g->store.lut_f32);
    memcpy(tab + sizeof g->store.lut_f32, g->store.lut_u16, sizeof g->store.lut_u16);
    r = stk__cu.MemcpyHtoD(g->lut, tab, sizeof tab);
    if (r != CUDA_SUCCESS) {
      rc = cu_fail(NULL, r, "cuMemcpyHtoD", msg, msglen);
      goto fail;
    }
  }

  g->slots = calloc((size_t)g->cfg.slots, sizeof *g->slots);
  g->lanes = calloc((size_t)g->cfg.lanes, sizeof *g->lanes);
  if (!g->slots || !g->lanes) {
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < g->cfg.slots; i++) {
    gslot *s = &g->slots[i];
    if ((rc = dev_alloc(g, &s->data, (size_t)g->cfg.max_batch * g->image_bytes, "batch slots", msg,
                        msglen)) ||
        (rc = dev_alloc(g, &s->labels, (size_t)g->cfg.max_batch * sizeof(int64_t), "labels", msg,
                        msglen)) ||
        (rc = dev_alloc(g, &s->arena, arena, "the source arena", msg, msglen)) ||
        (rc = dev_alloc(g, &s->desc_dev, (size_t)g->cfg.max_batch * sizeof(stk__kitem),
                        "item descriptors", msg, msglen)))
      goto fail;
    if ((r = stk__cu.EventCreate(&s->ready, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = stk__cu.EventCreate(&s->freed, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = stk__cu.EventCreate(&s->consumed, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = make_stream(g, &s->stream)) != CUDA_SUCCESS) {
      rc = cu_fail(NULL, r, "cuEventCreate/cuStreamCreate", msg, msglen);
      goto fail;
    }
  }

  if (make_dummy(g)) {
    rc = stk__fail(msg, msglen, STK_ENOMEM, "cannot make the padding JPEG");
    goto fail;
  }
  open_nvjpeg(g);
  for (int i = 0; i < g->cfg.lanes; i++) {
    if ((rc = open_lane(g, &g->lanes[i], msg, msglen))) goto fail;
    g->lanes[i].arena_bytes = arena;
  }
  if (g->hw) {
    /* The engines must decode a batch, else they are switched off (and the
     * lanes parse headers with the generic handle). */
    char why[160];
    for (int i = 0; i < g->cfg.lanes && g->hw; i++)
      if (hw_warmup(g, &g->lanes[i], why, sizeof why)) {
        note(g, "hardware decoder off: %s", why);
        for (int k = 0; k < g->cfg.lanes; k++) drop_lane_hw(g, &g->lanes[k]);
        stk__nj.Destroy(g->hw);
        g->hw = NULL;
        for (int k = 0; k < g->cfg.lanes; k++) {
          glane *L = &g->lanes[k];
          L->js_handle = g->gen;
          if (g->gen && (stk__nj.JpegStreamCreate(g->gen, &L->js) != NVJPEG_STATUS_SUCCESS ||
                         stk__nj.DecodeParamsCreate(g->gen, &L->chk_params) != NVJPEG_STATUS_SUCCESS)) {
            rc = stk__fail(msg, msglen, STK_ECUDA, "nvJPEG: cannot create a stream parser");
            goto fail;
          }
        }
      }
    g->hw_roi = g->hw && g->cfg.roi;
  }
  g->parse_handle = g->hw ? g->hw : g->gen;
  if (g->cfg.planners > 0 && g->parse_handle) {
    g->parsers = calloc((size_t)g->cfg.planners, sizeof *g->parsers);
    if (!g->parsers) {
      rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
      goto fail;
    }
    for (; g->nparsers < g->cfg.planners; g->nparsers++) {
      parser *P = &g->parsers[g->nparsers];
      pthread_mutex_init(&P->mu, NULL);
      if (stk__nj.JpegStreamCreate(g->parse_handle, &P->js) != NVJPEG_STATUS_SUCCESS ||
          stk__nj.DecodeParamsCreate(g->parse_handle, &P->chk) != NVJPEG_STATUS_SUCCESS ||
          stk__nj.DecodeParamsSetOutputFormat(P->chk, NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS) {
        /* the lanes plan what these would have */
        if (P->js) stk__nj.JpegStreamDestroy(P->js);
        if (P->chk) stk__nj.DecodeParamsDestroy(P->chk);
        pthread_mutex_destroy(&P->mu);
        note(g, "planning ahead with %d of %d header parsers", g->nparsers, g->cfg.planners);
        break;
      }
    }
  }
  for (int i = 0; i < g->cfg.lanes && g->gh; i++) {
    glane *L = &g->lanes[i];
    gb_pad(g, &L->gb, 0);
    nvjpegStatus_t st = stk__nj.DecodeBatched(g->gh, L->gb.state, L->gb.data, L->gb.len, L->gb.dst,
                                           L->gstream);
    r = st == NVJPEG_STATUS_SUCCESS ? stk__cu.StreamSynchronize(L->gstream) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) {
      rc = cu_fail(g, r, "GPU-hybrid warm-up", msg, msglen);
      goto fail;
    }
    if (st != NVJPEG_STATUS_SUCCESS) {
      note(g, "GPU-hybrid decoder off: nvjpegDecodeBatched: %s", stk__nj_status(st));
      for (int k = 0; k < g->cfg.lanes; k++) gb_close(&g->lanes[k].gb);
      stk__nj.Destroy(g->gh);
      g->gh = NULL;
    }
  }
  g->st.hw_available = g->hw != NULL;
  g->st.hw_roi = g->hw_roi;
  g->st.cuda_available = g->hy_dec != NULL;
  g->st.gpu_hybrid_available = g->gh != NULL;
  stk__cu.MemGetInfo(&free1, &total);
  g->st.device_bytes_used = free0 > free1 ? free0 - free1 : 0;
  g->pool_at_open = stk__pool_fresh();
  stk__cu.CtxPopCurrent(NULL);
  *out = g;
  return STK_OK;
fail:
  if (pushed) stk__cu.CtxPopCurrent(NULL);
  stk__gpu_close(g);
  return rc;
}

void stk__gpu_close(stk__gpu *g) {
  if (!g) return;
  if (g->ctx) stk__cu.CtxPushCurrent(g->ctx);
  if (g->lanes)
    for (int i = 0; i < g->cfg.lanes; i++) close_lane(g, &g->lanes[i]);
  if (g->slots)
    for (int i = 0; i < g->cfg.slots; i++) {
      gslot *s = &g->slots[i];
      if (s->stream) stk__cu.StreamSynchronize(s->stream);
      if (s->data) stk__cu.MemFree(s->data);
      if (s->labels) stk__cu.MemFree(s->labels);
      if (s->arena) stk__cu.MemFree(s->arena);
      if (s->desc_dev) stk__cu.MemFree(s->desc_dev);
      if (s->ready) stk__cu.EventDestroy(s->ready);
      if (s->freed) stk__cu.EventDestroy(s->freed);
      if (s->consumed) stk__cu.EventDestroy(s->consumed);
      if (s->stream) stk__cu.StreamDestroy(s->stream);
    }
  for (int i = 0; i < g->nparsers; i++) {
    stk__nj.JpegStreamDestroy(g->parsers[i].js);
    stk__nj.DecodeParamsDestroy(g->parsers[i].chk);
    pthread_mutex_destroy(&g->parsers[i].mu);
  }
  free(g->parsers);
  if (g->hy_dec) stk__nj.DecoderDestroy(g->hy_dec);
  if (g->gh) stk__nj.Destroy(g->gh);
  if (g->hw) stk__nj.Destroy(g->hw);
  if (g->gen) stk__nj.Destroy(g->gen);
  if (g->ctx) stk__pool_release(g->ctx);
  if (g->lut) stk__cu.MemFree(g->lut);
  if (g->mod) stk__cu.ModuleUnload(g->mod);
  if (g->ctx) stk__cu.CtxPopCurrent(NULL);
  if (g->ctx_retained) stk__cu.DevicePrimaryCtxRelease(g->dev);
  free(g->slots);
  free(g->lanes);
  free(g->dummy_jpeg);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

/* ---- running a batch --------------------------------------------------------- */
/* Copies `rows` rows of `row_bytes` to device memory through the lane's
 * pinned staging, waiting for the lane's stream when the staging is full. */
static int upload_rows(stk__gpu *g, glane *L, CUdeviceptr dst, size_t dst_pitch, const uint8_t *src,
                       size_t src_stride, size_t row_bytes, int rows, char *msg, size_t msglen) {
  int r0 = 0;
  while (r0 < rows) {
    size_t room = L->staging_bytes - L->staging_used;
    if (room < row_bytes) {
      CU(stk__cu.StreamSynchronize(L->stream)); /* earlier copies have left the staging */
      L->staging_used = 0;
      room = L->staging_bytes;
    }
    if (row_bytes > room) {
      /* a single row longer than the staging: copy it in pieces */
      for (size_t done = 0; done < row_bytes;) {
        size_t part = row_bytes - done < L->staging_bytes ? row_bytes - done : L->staging_bytes;
        CU(stk__cu.StreamSynchronize(L->stream));
        memcpy(L->staging, src + (size_t)r0 * src_stride + done, part);
        CU(stk__cu.MemcpyHtoDAsync(dst + (CUdeviceptr)r0 * dst_pitch + done, L->staging, part,
                                L->stream));
        done += part;
      }
      CU(stk__cu.StreamSynchronize(L->stream));
      L->staging_used = 0;
      r0++;
      continue;
    }
    int k = (int)(room / row_bytes);
    if (k > rows - r0) k = rows - r0;
    uint8_t *st = L->staging + L->staging_used;
    for (int i = 0; i < k; i++)
      memcpy(st + (size_t)i * row_bytes, src + (size_t)(r0 + i) * src_stride, row_bytes);
    size_t bytes = (size_t)k * row_bytes;
    if (dst_pitch == row_bytes) {
      CU(stk__cu.MemcpyHtoDAsync(dst + (CUdeviceptr)r0 * dst_pitch, st, bytes, L->stream));
    } else {
      for (int i = 0; i < k; i++)
        CU(stk__cu.MemcpyHtoDAsync(dst + (CUdeviceptr)(r0 + i) * dst_pitch, st + (size_t)i * row_bytes,
                                row_bytes, L->stream));
    }
    L->staging_used = align_up(L->staging_used + bytes, 64);
    if (L->staging_used > L->staging_bytes) L->staging_used = L->staging_bytes;
    r0 += k;
  }
  return STK_OK;
}

static void item_fail(stk__gpu_item *it, int rc, const char *why) {
  it->rc = rc;
  if (it->msg && it->msglen) snprintf(it->msg, it->msglen, "%s", why);
}

/* Decides the path and the source rectangle of one item, reading its
 * header with parser js (made with handle jh) and support-check params chk. */
static void plan_with(stk__gpu *g, nvjpegHandle_t jh, nvjpegJpegStream_t js,
                      nvjpegDecodeParams_t chk, stk__gpu_item *it, iplan *p) {
  stk__gpu_rect r;
  stk__gpu_plan_rect(&it->geom, &r);
  p->sx = r.sx;
  p->sy = r.sy;
  p->sw = r.sw;
  p->sh = r.sh;
  p->kx = r.kx;
  p->ky = r.ky;
  p->vfirst = r.vfirst;
  int x1 = r.sx + r.sw, y1 = r.sy + r.sh;
  p->img_w = p->img_h = 0;
  p->roi = 0;
  p->have_src = 0;
  if (it->kind == STK__GPU_RGB8) {
    p->path = STK__GPU_PATH_HOST;
    return;
  }
  p->path = STK__GPU_PATH_CPU;
  if (!js) return;
  /* What nvJPEG would decode differently from PIL stays on the CPU: RGB-
   * coded files (nvJPEG assumes YCbCr), CMYK/YCCK, and files without an end
   * marker (PIL fails them; nvJPEG decodes whatever is there). */
  stk__jpeg_markers jm;
  if (!stk__jpeg_scan(it->data, it->len, &jm) || jm.rgb || !jm.eoi || (jm.comps != 1 && jm.comps != 3))
    return;
  if (stk__nj.JpegStreamParseHeader(jh, it->data, it->len, js) != NVJPEG_STATUS_SUCCESS)
    return;
  unsigned w = 0, h = 0, comps = 0;
  if (stk__nj.JpegStreamGetFrameDimensions(js, &w, &h) != NVJPEG_STATUS_SUCCESS ||
      stk__nj.JpegStreamGetComponentsNum(js, &comps) != NVJPEG_STATUS_SUCCESS)
    return;
  /* CMYK/YCCK and two-channel files: nvJPEG's conversions are not PIL's. */
  if (comps != 1 && comps != 3) return;
  if ((int)w < x1 || (int)h < y1 || w == 0 || h == 0) return; /* geometry outside the image */
  p->img_w = (int)w;
  p->img_h = (int)h;
  int sup = 1;
  if (g->hw) {
    for (int a = 0; a < 2 && g->hw_roi; a++) {
      /* the exact rectangle, then one aligned outwards to 16 pixels */
      if (a) {
        if (!stk__gpu_align16(&r, (int)w, (int)h)) break;
        p->sx = r.sx;
        p->sy = r.sy;
        p->sw = r.sw;
        p->sh = r.sh;
      }
      stk__nj.DecodeParamsSetROI(chk, p->sx, p->sy, p->sw, p->sh);
      if (stk__nj.DecodeBatchedSupportedEx(g->hw, js, chk, &sup) != NVJPEG_STATUS_SUCCESS)
        sup = 1;
      if (sup == 0) {
        p->path = STK__GPU_PATH_HW;
        p->roi = 1;
        return;
      }
    }
    stk__nj.DecodeParamsSetROI(chk, 0, 0, -1, -1);
    if (stk__nj.DecodeBatchedSupportedEx(g->hw, js, chk, &sup) != NVJPEG_STATUS_SUCCESS)
      sup = 1;
    if (sup == 0) {
      p->path = STK__GPU_PATH_HW;
      p->roi = 0;
      p->sx = p->sy = 0;
      p->sw = (int)w;
      p->sh = (int)h;
      if (g->hw_roi) {
        pthread_mutex_lock(&g->mu);
        g->st.hw_roi_full++;
        pthread_mutex_unlock(&g->mu);
      }
      return;
    }
  }
  if (g->gh && !g->hw && (jm.sof == 0xC0 || jm.sof == 0xC1)) {
    /* no engines: baseline files go to the batched GPU-hybrid decoder */
    p->path = STK__GPU_PATH_GPU;
    p->sx = p->sy = 0;
    p->sw = (int)w;
    p->sh = (int)h;
    return;
  }
  if (g->hy_dec) p->path = STK__GPU_PATH_CUDA;
}

static void plan_item(stk__gpu *g, glane *L, stk__gpu_item *it, iplan *p) {
  plan_with(g, L->js_handle, L->js, L->chk_params, it, p);
}

void stk__gpu_plan_ahead(stk__gpu *g, int who, stk__gpu_item *it) {
  if (!g || g->nparsers <= 0 || it->kind != STK__GPU_JPEG || !it->data) return;
  parser *P = &g->parsers[(unsigned)who % (unsigned)g->nparsers];
  /* a parser busy with another thread (a detached worker's replacement
   * shares its number): the lane plans this item instead */
  if (pthread_mutex_trylock(&P->mu)) return;
  iplan p;
  memset(&p, 0, sizeof p);
  /* nvJPEG may grow the parser's buffers with our pinned allocator, which
   * needs the context on this thread */
  if (stk__cu.CtxPushCurrent(g->ctx) == CUDA_SUCCESS) {
    plan_with(g, g->parse_handle, P->js, P->chk, it, &p);
    stk__cu.CtxPopCurrent(NULL);
    stk__gpu_pre *q = &it->pre;
    q->path = p.path;
    q->sx = p.sx;
    q->sy = p.sy;
    q->sw = p.sw;
    q->sh = p.sh;
    q->img_w = p.img_w;
    q->img_h = p.img_h;
    q->roi = p.roi;
    q->kx = p.kx;
    q->ky = p.ky;
    q->vfirst = p.vfirst;
    q->planned = 1;
  }
  pthread_mutex_unlock(&P->mu);
}

/* The plan made ahead for an item, or the lane's own. */
static void take_plan(stk__gpu *g, glane *L, stk__gpu_item *it, iplan *p) {
  const stk__gpu_pre *q = &it->pre;
  /* an engine region asked for before the engines' regions were switched off */
  if (!q->planned || (q->roi && !g->hw_roi)) {
    plan_item(g, L, it, p);
    return;
  }
  memset(p, 0, sizeof *p);
  p->path = q->path;
  p->sx = q->sx;
  p->sy = q->sy;
  p->sw = q->sw;
  p->sh = q->sh;
  p->img_w = q->img_w;
  p->img_h = q->img_h;
  p->roi = q->roi;
  p->kx = q->kx;
  p->ky = q->ky;
  p->vfirst = q->vfirst;
}

/* The CUDA (hybrid) path for one item, on the lane's aux stream. Returns
 * STK_OK or a non-zero code (the item then goes to the CPU). */
static int hybrid_decode(stk__gpu *g, glane *L, stk__gpu_item *it, iplan *p) {
  if (stk__nj.JpegStreamParse(g->gen, it->data, it->len, 0, 0, L->hy_js) != NVJPEG_STATUS_SUCCESS)
    return STK_EDECODE;
  int full = p->sx == 0 && p->sy == 0 && p->sw == p->img_w && p->sh == p->img_h;
  if (full)
    stk__nj.DecodeParamsSetROI(L->hy_params, 0, 0, -1, -1);
  else
    stk__nj.DecodeParamsSetROI(L->hy_params, p->sx, p->sy, p->sw, p->sh);
  int sup = 1;
  if (stk__nj.DecoderJpegSupported(g->hy_dec, L->hy_js, L->hy_params, &sup) != NVJPEG_STATUS_SUCCESS ||
      sup != 0)
    return STK_EDECODE;
  nvjpegImage_t dst;
  memset(&dst, 0, sizeof dst);
  dst.channel[0] = (unsigned char *)(uintptr_t)(L->arena + p->off);
  dst.pitch[0] = p->pitch;
  if (stk__nj.DecodeJpeg(g->gen, g->hy_dec, L->hy_state, L->hy_js, &dst, L->hy_params, L->aux) !=
      NVJPEG_STATUS_SUCCESS)
    return STK_EDECODE;
  /* The state's pinned buffer is reused by the next image. */
  if (stk__cu.StreamSynchronize(L->aux) != CUDA_SUCCESS) return STK_ECUDA;
  return STK_OK;
}

/* The CPU path for one JPEG (or other format) item: decodes the source
 * rectangle and copies it up. */
static int cpu_decode(stk__gpu *g, glane *L, stk__gpu_item *it, iplan *p, char *msg, size_t msglen,
                      int *batch_rc) {
  stk__region reg;
  stk__rect want = {p->sx, p->sy, p->sw, p->sh};
  char why[256];
  int rc = stk__decoder_decode(L->dec, it->data, it->len, &want, 1, &reg, why, sizeof why);
  if (rc) {
    item_fail(it, rc, why);
    return rc;
  }
  if (reg.x > p->sx || reg.y > p->sy || reg.x + reg.w < p->sx + p->sw ||
      reg.y + reg.h < p->sy + p->sh) {
    item_fail(it, STK_EDECODE, "decoded region does not cover the crop");
    return STK_EDECODE;
  }
  const uint8_t *src = reg.pixels + (size_t)(p->sy - reg.y) * reg.stride + (size_t)(p->sx - reg.x) * 3;
  *batch_rc = upload_rows(g, L, L->arena + p->off, p->pitch, src, reg.stride, (size_t)p->sw * 3,
                          p->sh, msg, msglen);
  return *batch_rc;
}

/* The last resort for a source too large for the arena: everything on the
 * CPU; the finished image and its label go into the arena (p->off), from
 * where the slot's stream copies them into the slot. */
static int big_item(stk__gpu *g, glane *L, stk__gpu_item *it, iplan *p, char *msg,
                    size_t msglen, int *batch_rc) {
  char why[256];
  stk__rect need;
  const uint8_t *px;
  size_t stride;
  int ox, oy, rc = stk__resampler_plan(&L->rs, &it->geom, &need);
  if (rc) {
    item_fail(it, rc, "cannot resample this geometry");
    return rc;
  }
  if (it->kind == STK__GPU_RGB8) {
    px = it->pixels;
    stride = it->stride;
    ox = it->x;
    oy = it->y;
  } else {
    stk__region reg;
    rc = stk__decoder_decode(L->dec, it->data, it->len, &need, 1, &reg, why, sizeof why);
    if (rc) {
      item_fail(it, rc, why);
      return rc;
    }
    px = reg.pixels;
    stride = reg.stride;
    ox = reg.x;
    oy = reg.y;
  }
  if (stk__buf_reserve(&L->big, g->image_bytes + 8)) {
    item_fail(it, STK_ENOMEM, "out of memory");
    return STK_ENOMEM;
  }
  rc = stk__resampler_run(&L->rs, px, stride, ox, oy, &g->store, L->big.p);
  if (rc) {
    item_fail(it, rc, "resampling failed");
    return rc;
  }
  *batch_rc = upload_rows(g, L, L->arena + p->off, g->image_bytes, L->big.p, g->image_bytes,
                          g->image_bytes, 1, msg, msglen);
  if (!*batch_rc)
    *batch_rc = upload_rows(g, L, L->arena + p->off + align_up(g->image_bytes, 8), 8,
                            (const uint8_t *)&it->label, 8, 8, 1, msg, msglen);
  return *batch_rc;
}

static int launch(stk__gpu *g, glane *L, gslot *s, int base, int n, int kxm, int kym, char *msg,
                  size_t msglen);

/* Decodes the sources of items chunk[0..k) into the arena (places already
 * assigned), then launches the kernel over those that made it. `base` is
 * where this chunk's descriptors go. */
static int run_chunk(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk, int k,
                     int base, char *msg, size_t msglen) {
  int rc;
  /* The arena is free once the slot's previous kernel (an earlier batch, or
   * an earlier chunk of this one) has read it. */
  if (s->consumed_pending) CU(stk__cu.StreamWaitEvent(L->stream, s->consumed, 0));
  /* The hybrid decoder's stream may write this chunk's arena places once the
   * work queued so far is done. */
  CU(stk__cu.EventRecord(L->ev_main, L->stream));
  if (g->cfg.profile) CU(stk__cu.EventRecord(L->prof[0], L->stream));
  /* 0. the GPU-hybrid decoder, on its own stream, first: it runs on the SMs
   * while the call to the engines below holds this thread */
  int mg = 0;
  for (int c = 0; c < k && g->gh; c++) {
    iplan *p = &L->plan[chunk[c]];
    if (p->path != STK__GPU_PATH_GPU) continue;
    stk__gpu_item *it = &items[chunk[c]];
    L->gb.data[mg] = it->data;
    L->gb.len[mg] = it->len;
    memset(&L->gb.dst[mg], 0, sizeof L->gb.dst[mg]);
    L->gb.dst[mg].channel[0] = (unsigned char *)(uintptr_t)(L->arena + p->off);
    L->gb.dst[mg].pitch[0] = p->pitch;
    L->gb.item[mg++] = chunk[c];
  }
  if (mg > 0) {
    double t = stk__now();
    CU(stk__cu.StreamWaitEvent(L->gstream, L->ev_main, 0));
    gb_pad(g, &L->gb, mg);
    nvjpegStatus_t st =
        stk__nj.DecodeBatched(g->gh, L->gb.state, L->gb.data, L->gb.len, L->gb.dst, L->gstream);
    if (st == NVJPEG_STATUS_SUCCESS) {
      CU(stk__cu.EventRecord(L->ev_gpu, L->gstream));
      for (int i = 0; i < mg; i++) L->plan[L->gb.item[i]].have_src = 1;
    } else {
      pthread_mutex_lock(&g->mu);
      g->st.hw_batch_failures++;
      pthread_mutex_unlock(&g->mu);
      NJ(stk__nj.DecodeBatchedInitialize(g->gh, L->gb.state, L->gb.n, 1, NVJPEG_OUTPUT_RGBI));
      for (int i = 0; i < mg; i++)
        L->plan[L->gb.item[i]].path = g->hy_dec ? STK__GPU_PATH_CUDA : STK__GPU_PATH_CPU;
      mg = 0;
    }
    L->t_gpu += stk__now() - t;
  }
  /* 1. the hardware engines, for the whole chunk at once */
  int m = 0;
  for (int c = 0; c < k; c++) {
    iplan *p = &L->plan[chunk[c]];
    if (p->path != STK__GPU_PATH_HW) continue;
    stk__gpu_item *it = &items[chunk[c]];
    L->hw_data[m] = it->data;
    L->hw_len[m] = it->len;
    memset(&L->hw_dst[m], 0, sizeof L->hw_dst[m]);
    L->hw_dst[m].channel[0] = (unsigned char *)(uintptr_t)(L->arena + p->off);
    L->hw_dst[m].pitch[0] = p->pitch;
    if (p->roi)
      stk__nj.DecodeParamsSetROI(L->hw_params[m], p->sx, p->sy, p->sw, p->sh);
    else
      stk__nj.DecodeParamsSetROI(L->hw_params[m], 0, 0, -1, -1);
    L->hw_item[m++] = chunk[c];
  }
  if (m > 0) {
    double t = stk__now();
    /* The engines write through nvJPEG's own streams, which need not wait
     * for what is queued on L->stream: the arena must already be free when
     * the call is made. Under compute-sanitizer (slow kernels) the previous
     * chunk's kernel was still reading it. Between batches the slot's last
     * kernel is long done, so this rarely waits. */
    if (s->consumed_pending) CU(stk__cu.EventSynchronize(s->consumed));
    hw_pad(g, L, m);
    int roi_used = 0;
    for (int i = 0; i < m; i++) roi_used |= L->plan[L->hw_item[i]].roi;
    nvjpegStatus_t st =
        roi_used ? stk__nj.DecodeBatchedEx(g->hw, L->hw_state, L->hw_data, L->hw_len, L->hw_dst,
                                        L->hw_params, L->stream)
                 : stk__nj.DecodeBatched(g->hw, L->hw_state, L->hw_data, L->hw_len, L->hw_dst, L->stream);
    L->t_hw += stk__now() - t;
    pthread_mutex_lock(&g->mu);
    if (st != NVJPEG_STATUS_SUCCESS) {
      g->st.hw_batch_failures++;
      /* Repeated whole-batch failures with regions: stop asking for them. */
      if (roi_used && ++g->roi_fail_streak >= 3 && g->hw_roi) {
        g->hw_roi = g->st.hw_roi = 0;
        note(g, "engine ROI off: 3 batches in a row failed with %s", stk__nj_status(st));
      }
    } else if (roi_used) {
      g->roi_fail_streak = 0;
    }
    pthread_mutex_unlock(&g->mu);
    if (st != NVJPEG_STATUS_SUCCESS) {
      /* The state must be initialised again after a failed batch; then each
       * item goes down the list on its own. */
      if ((rc = hw_init_lane(g, L, L->hw_n, msg, msglen))) return rc;
      for (int i = 0; i < m; i++) {
        iplan *p = &L->plan[L->hw_item[i]];
        p->path = g->hy_dec ? STK__GPU_PATH_CUDA : STK__GPU_PATH_CPU;
      }
    } else {
      for (int i = 0; i < m; i++) L->plan[L->hw_item[i]].have_src = 1;
    }
  }

  /* 2. the CPU: decodes here while the engines work */
  double tc = stk__now();
  for (int c = 0; c < k; c++) {
    int i = chunk[c];
    iplan *p = &L->plan[i];
    stk__gpu_item *it = &items[i];
    if (p->path == STK__GPU_PATH_HOST) {
      if (it->x > p->sx || it->y > p->sy || it->x + it->w < p->sx + p->sw ||
          it->y + it->h < p->sy + p->sh || !it->pixels) {
        item_fail(it, STK_EINVAL, "the pixels do not cover what the geometry reads");
        continue;
      }
      const uint8_t *src = it->pixels + (size_t)(p->sy - it->y) * it->stride + (size_t)(p->sx - it->x) * 3;
      if ((rc = upload_rows(g, L, L->arena + p->off, p->pitch, src, it->stride, (size_t)p->sw * 3,
                            p->sh, msg, msglen)))
        return rc;
      p->have_src = 1;
    } else if (p->path == STK__GPU_PATH_CPU) {
      int brc = 0;
      if (cpu_decode(g, L, it, p, msg, msglen, &brc) == STK_OK) p->have_src = 1;
      if (brc) return brc;
    } else if (p->path == STK__GPU_PATH_BIG) {
      int brc = 0;
      if (big_item(g, L, it, p, msg, msglen, &brc) == STK_OK) p->have_src = 1;
      if (brc) return brc;
    }
  }

  L->t_cpu += stk__now() - tc;
  /* 3. nvJPEG's hybrid decoder, on the aux stream after the arena is free */
  int any_cuda = 0;
  for (int c = 0; c < k; c++) any_cuda |= L->plan[chunk[c]].path == STK__GPU_PATH_CUDA;
  if (any_cuda) {
    CU(stk__cu.StreamWaitEvent(L->aux, L->ev_main, 0));
    for (int c = 0; c < k; c++) {
      int i = chunk[c];
      iplan *p = &L->plan[i];
      if (p->path != STK__GPU_PATH_CUDA) continue;
      if (hybrid_decode(g, L, &items[i], p) == STK_OK) {
        p->have_src = 1;
        continue;
      }
      p->path = STK__GPU_PATH_CPU;
      int brc = 0;
      if (cpu_decode(g, L, &items[i], p, msg, msglen, &brc) == STK_OK) p->have_src = 1;
      if (brc) return brc;
    }
    CU(stk__cu.EventRecord(L->ev_aux, L->aux));
    CU(stk__cu.StreamWaitEvent(L->stream, L->ev_aux, 0));
  }

  if (mg > 0) CU(stk__cu.StreamWaitEvent(L->stream, L->ev_gpu, 0));
  /* 4. the kernel */
  int n = 0, kxm = 1, kym = 1;
  stk__kitem *d = L->desc_host + base;
  for (int c = 0; c < k; c++) {
    int i = chunk[c];
    iplan *p = &L->plan[i];
    stk__gpu_item *it = &items[i];
    if (!p->have_src) continue;
    it->path = p->path;
    if (p->path == STK__GPU_PATH_BIG) continue; /* copied below */
    stk__kitem *q = &d[n++];
    memset(q, 0, sizeof *q);
    q->src = L->arena + p->off;
    q->label = it->label;
    q->in0x = it->geom.x.in0;
    q->scalex = it->geom.x.scale;
    q->in0y = it->geom.y.in0;
    q->scaley = it->geom.y.scale;
    q->pitch = (int)p->pitch;
    q->sx = p->sx;
    q->sy = p->sy;
    q->sw = p->sw;
    q->sh = p->sh;
    q->lox = it->geom.x.lo;
    q->hix = it->geom.x.hi;
    q->loy = it->geom.y.lo;
    q->hiy = it->geom.y.hi;
    q->flip = it->geom.flip != 0;
    q->dst = it->dst;
    q->vfirst = p->vfirst;
    if (p->kx > kxm) kxm = p->kx;
    if (p->ky > kym) kym = p->ky;
  }
  int run_kernel = n > 0 && !g->cfg.decode_only;
  if (run_kernel)
    CU(stk__cu.MemcpyHtoDAsync(L->desc_dev + (CUdeviceptr)base * sizeof(stk__kitem), d,
                            (size_t)n * sizeof(stk__kitem), L->stream));
  if (g->cfg.profile) CU(stk__cu.EventRecord(L->prof[1], L->stream));
  /* 5. on the slot's stream: after the decoders, and after the consumer has
   * let go of the slot, the kernel and the copies of finished images */
  CU(stk__cu.EventRecord(L->decoded, L->stream));
  CU(stk__cu.StreamWaitEvent(s->stream, L->decoded, 0));
  pthread_mutex_lock(&g->mu);
  int wait_freed = s->freed_pending;
  s->freed_pending = 0;
  pthread_mutex_unlock(&g->mu);
  if (wait_freed) CU(stk__cu.StreamWaitEvent(s->stream, s->freed, 0));
  if (run_kernel && (rc = launch(g, L, s, base, n, kxm, kym, msg, msglen))) return rc;
  for (int c = 0; c < k; c++) {
    iplan *p = &L->plan[chunk[c]];
    if (p->path != STK__GPU_PATH_BIG || !p->have_src) continue;
    int dst = items[chunk[c]].dst;
    CU(stk__cu.MemcpyDtoDAsync(s->data + (CUdeviceptr)dst * g->image_bytes, L->arena + p->off,
                            g->image_bytes, s->stream));
    CU(stk__cu.MemcpyDtoDAsync(s->labels + (CUdeviceptr)dst * 8,
                            L->arena + p->off + align_up(g->image_bytes, 8), 8, s->stream));
  }
  CU(stk__cu.EventRecord(s->consumed, s->stream));
  s->consumed_pending = 1;
  if (g->cfg.profile) {
    float a = 0, b = 0;
    CU(stk__cu.EventRecord(L->prof[2], s->stream));
    CU(stk__cu.EventSynchronize(L->prof[2]));
    CU(stk__cu.EventElapsedTime(&a, L->prof[0], L->prof[1]));
    CU(stk__cu.EventElapsedTime(&b, L->prof[1], L->prof[2]));
    pthread_mutex_lock(&g->mu);
    g->st.gpu_decode_seconds += a * 1e-3;
    g->st.gpu_kernel_seconds += b * 1e-3;
    pthread_mutex_unlock(&g->mu);
  }
  return STK_OK;
}

/* Launches the kernel over the chunk's descriptors (already uploaded), on
 * the slot's stream. */
static int launch(stk__gpu *g, glane *L, gslot *s, int base, int n, int kxm, int kym, char *msg,
                  size_t msglen) {
  stk__kparams kp;
  memset(&kp, 0, sizeof kp);
  kp.items = L->desc_dev + (CUdeviceptr)base * sizeof(stk__kitem);
  kp.out = s->data;
  kp.labels = s->labels;
  kp.lut = g->lut;
  kp.out_w = g->cfg.out_w;
  kp.out_h = g->cfg.out_h;
  kp.dtype = (int)g->cfg.dtype;
  kp.layout = (int)g->cfg.layout;
  kp.kx = kxm;
  kp.ky = kym;
  kp.tiles_x = (g->cfg.out_w + STK_TILE_W - 1) / STK_TILE_W;
  kp.n = n;
  int tiles_y = (g->cfg.out_h + STK_TILE_H - 1) / STK_TILE_H;
  unsigned smem =
      (unsigned)((STK_TILE_W * kxm + STK_TILE_H * kym + 2 * STK_TILE_W + 2 * STK_TILE_H) * sizeof(int) +
                 768 * sizeof(float) + 768 * sizeof(uint16_t));
  void *args[] = {&kp};
  CU(stk__cu.LaunchKernel(g->fn, (unsigned)(kp.tiles_x * tiles_y), (unsigned)n, 1, STK_TILE_W,
                          STK_TILE_H, 1, smem, s->stream, args, NULL));
  pthread_mutex_lock(&g->mu);
  g->st.chunks++;
  pthread_mutex_unlock(&g->mu);
  return STK_OK;
}

static glane *take_lane(stk__gpu *g) {
  pthread_mutex_lock(&g->mu);
  glane *L = NULL;
  for (;;) {
    for (int i = 0; i < g->cfg.lanes && !L; i++)
      if (!g->lanes[i].busy) L = &g->lanes[i];
    if (L) break;
    pthread_cond_wait(&g->cv, &g->mu);
  }
  L->busy = 1;
  pthread_mutex_unlock(&g->mu);
  return L;
}

static void give_lane(stk__gpu *g, glane *L) {
  pthread_mutex_lock(&g->mu);
  L->busy = 0;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static int run_locked(stk__gpu *g, glane *L, gslot *s, int n, stk__gpu_item *items, char *msg,
                      size_t msglen) {
  int rc;
  /* The previous batch of this lane has decoded (L->done is recorded on
   * the lane's stream, before any wait for a consumer): the staging, the
   * host descriptors and nvJPEG's state are free again. */
  double ts = stk__now();
  L->t_plan = L->t_hw = L->t_gpu = L->t_cpu = L->t_sync = 0;
  CU(stk__cu.EventSynchronize(L->done));
  L->t_sync = stk__now() - ts;
  L->staging_used = 0;
  L->arena = s->arena;
  L->desc_dev = s->desc_dev;

  double t0 = stk__now();
  for (int i = 0; i < n; i++)
    if (items[i].rc == STK_OK) take_plan(g, L, &items[i], &L->plan[i]);
  /* Share the engines' files with the GPU-hybrid decoder, spread evenly. */
  if (g->hw && g->gh) {
    int elig = 0, to_hw = 0;
    for (int i = 0; i < n; i++) {
      iplan *p = &L->plan[i];
      if (items[i].rc != STK_OK || p->path != STK__GPU_PATH_HW) continue;
      elig++;
      if ((int)(g->cfg.hw_share * elig + 0.5f) > to_hw) {
        to_hw++;
        continue;
      }
      p->path = STK__GPU_PATH_GPU;
      p->roi = 0;
      p->sx = p->sy = 0;
      p->sw = p->img_w;
      p->sh = p->img_h;
    }
  }
  L->t_plan += stk__now() - t0;

  /* Pack sources into the arena in order; a full arena closes a chunk. */
  int k = 0, base = 0;
  stk__gpu_packer pk;
  stk__gpu_packer_init(&pk, L->arena_bytes);
  for (int i = 0; i <= n; i++) {
    size_t need = 0;
    if (i < n) {
      if (items[i].rc != STK_OK) continue;
      iplan *p = &L->plan[i];
      p->pitch = (size_t)p->sw * 3;
      /* too large for the arena, or shrunk more than the kernel's filter
       * window allows (a 4000-pixel image to a small output): decoded and
       * resampled on the CPU, as the CPU loader would */
      stk__gpu_rect r = {p->sx, p->sy, p->sw, p->sh, p->kx, p->ky, p->vfirst};
      int big = 0;
      need = stk__gpu_item_bytes(&r, &items[i].geom, L->arena_bytes, big_need(g), &big);
      if (big) p->path = STK__GPU_PATH_BIG;
    }
    if (i == n || stk__gpu_packer_full(&pk, need)) {
      if (k > 0 && (rc = run_chunk(g, L, s, items, L->chunk, k, base, msg, msglen))) return rc;
      base += k;
      k = 0;
      stk__gpu_packer_close(&pk);
      if (i == n) break;
    }
    L->plan[i].off = stk__gpu_packer_add(&pk, need);
    L->chunk[k++] = i;
  }
  CU(stk__cu.EventRecord(s->ready, s->stream));
  s->written = 1;
  CU(stk__cu.EventRecord(L->done, L->stream));
  return STK_OK;
}

int stk__gpu_run_batch(stk__gpu *g, int slot, int n, stk__gpu_item *items, char *msg,
                       size_t msglen) {
  if (!g || (!items && n)) return stk__fail(msg, msglen, STK_EINVAL, "bad arguments");
  if (slot < 0 || slot >= g->cfg.slots)
    return stk__fail(msg, msglen, STK_EINVAL, "slot %d out of range (%d slots)", slot, g->cfg.slots);
  if (n < 0 || n > g->cfg.max_batch)
    return stk__fail(msg, msglen, STK_EINVAL, "%d items, the limit is %d", n, g->cfg.max_batch);
  pthread_mutex_lock(&g->mu);
  int poisoned = g->poisoned;
  pthread_mutex_unlock(&g->mu);
  if (poisoned) return stk__fail(msg, msglen, STK_ECUDA, "the GPU failed earlier: %s", g->poison_msg);
  double t0 = stk__now();
  for (int i = 0; i < n; i++) {
    stk__gpu_item *it = &items[i];
    it->rc = STK_OK;
    it->path = STK__GPU_PATH_NONE;
    char why[160];
    if (it->dst < 0 || it->dst >= g->cfg.max_batch)
      item_fail(it, STK_EINVAL, "dst out of range");
    else if (it->kind == STK__GPU_JPEG ? !it->data || !it->len : it->kind != STK__GPU_RGB8)
      item_fail(it, STK_EINVAL, "no data");
    else if (check_geom(g, &it->geom, why, sizeof why))
      item_fail(it, STK_EINVAL, why);
  }
  double tl = stk__now();
  glane *L = take_lane(g);
  tl = stk__now() - tl;
  int rc;
  CUresult r = stk__cu.CtxPushCurrent(g->ctx);
  if (r != CUDA_SUCCESS) {
    rc = cu_fail(g, r, "cuCtxPushCurrent", msg, msglen);
  } else {
    rc = run_locked(g, L, &g->slots[slot], n, items, msg, msglen);
    stk__cu.CtxPopCurrent(NULL);
  }
  double tp = L->t_plan, th = L->t_hw, tg = L->t_gpu, tc = L->t_cpu, tsy = L->t_sync;
  give_lane(g, L);
  pthread_mutex_lock(&g->mu);
  g->st.batches++;
  for (int i = 0; i < n; i++) {
    g->st.items++;
    if (rc == STK_OK && items[i].rc == STK_OK && items[i].path == STK__GPU_PATH_NONE)
      item_fail(&items[i], STK_EDECODE, "not decoded");
    if (items[i].rc != STK_OK)
      g->st.failed++;
    else
      g->st.path[items[i].path]++;
  }
  g->st.host_seconds += stk__now() - t0;
  g->st.host_plan_seconds += tp;
  g->st.host_hw_seconds += th;
  g->st.host_gpu_seconds += tg;
  g->st.host_cpu_seconds += tc;
  g->st.host_lane_wait_seconds += tl;
  g->st.host_sync_seconds += tsy;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* ---- slots ------------------------------------------------------------------- */
void *stk__gpu_slot_data(stk__gpu *g, int slot) {
  return g && slot >= 0 && slot < g->cfg.slots ? (void *)(uintptr_t)g->slots[slot].data : NULL;
}

int64_t *stk__gpu_slot_labels(stk__gpu *g, int slot) {
  return g && slot >= 0 && slot < g->cfg.slots ? (int64_t *)(uintptr_t)g->slots[slot].labels : NULL;
}

void *stk__gpu_slot_event(stk__gpu *g, int slot) {
  return g && slot >= 0 && slot < g->cfg.slots ? (void *)g->slots[slot].ready : NULL;
}

size_t stk__gpu_image_bytes(const stk__gpu *g) { return g ? g->image_bytes : 0; }
void *stk__gpu_context(stk__gpu *g) { return g ? (void *)g->ctx : NULL; }
int stk__gpu_device(const stk__gpu *g) { return g ? g->device : -1; }

#define ENTER()                                                              \
  do {                                                                       \
    CUresult r0_ = stk__cu.CtxPushCurrent(g->ctx);                              \
    if (r0_ != CUDA_SUCCESS) return cu_fail(g, r0_, "cuCtxPushCurrent", msg, msglen); \
  } while (0)

int stk__gpu_slot_release(stk__gpu *g, int slot, void *consumer_stream, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots) return stk__fail(msg, msglen, STK_EINVAL, "bad slot");
  ENTER();
  gslot *s = &g->slots[slot];
  CUresult r = stk__cu.EventRecord(s->freed, (CUstream)consumer_stream);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return cu_fail(g, r, "cuEventRecord", msg, msglen);
  pthread_mutex_lock(&g->mu);
  s->freed_pending = 1;
  pthread_mutex_unlock(&g->mu);
  return STK_OK;
}

int stk__gpu_slot_wait_on(stk__gpu *g, int slot, void *stream, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots) return stk__fail(msg, msglen, STK_EINVAL, "bad slot");
  if (!g->slots[slot].written) return STK_OK;
  ENTER();
  CUresult r = stk__cu.StreamWaitEvent((CUstream)stream, g->slots[slot].ready, 0);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return cu_fail(g, r, "cuStreamWaitEvent", msg, msglen);
  return STK_OK;
}

int stk__gpu_slot_wait(stk__gpu *g, int slot, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots) return stk__fail(msg, msglen, STK_EINVAL, "bad slot");
  if (!g->slots[slot].written) return STK_OK;
  ENTER();
  CUresult r = stk__cu.EventSynchronize(g->slots[slot].ready);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return cu_fail(g, r, "cuEventSynchronize", msg, msglen);
  return STK_OK;
}

/* On the slot's stream: after every earlier write into the slot. */
static int compact_locked(stk__gpu *g, gslot *s, int n, const int *from, char *msg, size_t msglen) {
  for (int k = 0; k < n; k++) {
    if (from[k] == k) continue;
    CU(stk__cu.MemcpyDtoDAsync(s->data + (CUdeviceptr)k * g->image_bytes,
                            s->data + (CUdeviceptr)from[k] * g->image_bytes, g->image_bytes, s->stream));
    CU(stk__cu.MemcpyDtoDAsync(s->labels + (CUdeviceptr)k * 8, s->labels + (CUdeviceptr)from[k] * 8, 8,
                            s->stream));
  }
  CU(stk__cu.EventRecord(s->ready, s->stream));
  s->written = 1;
  return STK_OK;
}

int stk__gpu_slot_compact(stk__gpu *g, int slot, int n, const int *from, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots || n < 0 || n > g->cfg.max_batch || (n && !from))
    return stk__fail(msg, msglen, STK_EINVAL, "bad arguments");
  for (int k = 0; k < n; k++)
    if (from[k] < k || from[k] >= g->cfg.max_batch || (k && from[k] <= from[k - 1]))
      return stk__fail(msg, msglen, STK_EINVAL, "from[] must increase, with from[k] >= k");
  ENTER();
  pthread_mutex_lock(&g->mu); /* the slot's flags */
  int rc = compact_locked(g, &g->slots[slot], n, from, msg, msglen);
  pthread_mutex_unlock(&g->mu);
  stk__cu.CtxPopCurrent(NULL);
  return rc;
}

int stk__gpu_download(stk__gpu *g, int slot, void *host, size_t bytes, int64_t *labels, int n,
                      char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots ||
      bytes > (size_t)g->cfg.max_batch * g->image_bytes || n < 0 || n > g->cfg.max_batch)
    return stk__fail(msg, msglen, STK_EINVAL, "bad arguments");
  int rc = stk__gpu_slot_wait(g, slot, msg, msglen);
  if (rc) return rc;
  ENTER();
  CUresult r = bytes ? stk__cu.MemcpyDtoH(host, g->slots[slot].data, bytes) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS && labels && n)
    r = stk__cu.MemcpyDtoH(labels, g->slots[slot].labels, (size_t)n * sizeof(int64_t));
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return cu_fail(g, r, "cuMemcpyDtoH", msg, msglen);
  return STK_OK;
}

void stk__gpu_get_stats(stk__gpu *g, stk__gpu_stats *out) {
  if (!g || !out) return;
  pthread_mutex_lock(&g->mu);
  *out = g->st;
  pthread_mutex_unlock(&g->mu);
  out->late_allocs = stk__pool_fresh() - g->pool_at_open;
}
