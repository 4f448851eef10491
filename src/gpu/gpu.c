/*
 * gpu.c: the GPU back end (see gpu.h): its objects (the context, the kernel
 * module, nvJPEG's handles, slots, lanes and parsers) made at open and freed
 * at close, a lane for each batch (decode.c runs it), and the slots'
 * events, compaction and statistics.
 *
 * Neither cuda.h nor nvjpeg.h is needed to build this file: the few types,
 * constants and entry points used are declared in binding.h, and the
 * libraries are opened with dlopen() on first use.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpu/gpu_internal.h"

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
#include "core/options.h" /* STK__GPU_MAX_SIDE, stk_options_init */

#include "gpu/binding.h"
#include "gpu/plan.h"
#include "gpu/pool.h"


#if defined(STK_HAVE_GPU) && STK_HAVE_GPU
extern const unsigned char stk__gpu_fatbin[];
#define HAVE_KERNELS 1
static const void *kernel_image(void) { return stk__gpu_fatbin; }
#else
#define HAVE_KERNELS 0
static const void *kernel_image(void) { return NULL; }
#endif

int stk__gpu_built(void) { return HAVE_KERNELS; }

void stk__gpu_config_init(stk__gpu_config *c) {
  memset(c, 0, sizeof *c);
  /* what a loader's options give, at their defaults (the options table) */
  stk_options o;
  stk_options_init(&o);
  c->max_batch = o.batch_size;
  c->out_w = c->out_h = o.size;
  c->dtype = o.dtype;
  c->layout = o.layout;
  memcpy(c->mean, o.mean, sizeof c->mean);
  memcpy(c->std, o.std, sizeof c->std);
  c->max_pixels = o.max_pixels;
  c->slots = 4;
  c->lanes = 2;
  c->use_hw = 1;
  c->use_cuda = 1;
  c->roi = 1;
  c->chroma_interp = 0;  /* 3.5x slower engines for ~85 -> ~98 dB, see gpu.h */
  c->hw_sort = 1;        /* 7-21% more from the engines on an H200, see gpu.h */
}

/* ---- geometry --------------------------------------------------------------- */
/* An item's own output size (gpu.h): only where an image's bytes are its
 * packed pixels, so that a smaller one is a prefix of its slot image. */
static int check_own_size(const stk__gpu *g, const stk__gpu_item *it, char *msg, size_t msglen) {
  if (!it->out_w && !it->out_h) return STK_OK;
  if (g->cfg.dtype != STK_DTYPE_UINT8 || g->cfg.layout != STK_LAYOUT_NHWC || g->cfg.aug)
    return stk__fail(msg, msglen, STK_EINVAL,
                     "an item's own output size needs uint8 NHWC output without augmentations");
  if (it->out_w < 1 || it->out_h < 1 || it->out_w > g->cfg.out_w || it->out_h > g->cfg.out_h)
    return stk__fail(msg, msglen, STK_EINVAL, "item output size %dx%d outside 1x1..%dx%d",
                     it->out_w, it->out_h, g->cfg.out_w, g->cfg.out_h);
  return STK_OK;
}

static int check_geom(const stk__gpu *g, const stk__gpu_item *it, char *msg, size_t msglen) {
  const stk__geom *ge = &it->geom;
  const stk__axis *ax[2] = {&ge->x, &ge->y};
  int outs[2] = {it->out_w ? it->out_w : g->cfg.out_w, it->out_h ? it->out_h : g->cfg.out_h};
  for (int k = 0; k < 2; k++) {
    const stk__axis *a = ax[k];
    if (a->out != outs[k])
      return stk__fail(msg, msglen, STK_EINVAL, "geometry makes %d pixels on %c, not %d", a->out,
                       "xy"[k], outs[k]);
    if (a->hi <= a->lo || a->lo < 0)
      return stk__fail(msg, msglen, STK_EINVAL, "empty source range [%d, %d) on %c", a->lo, a->hi,
                       "xy"[k]);
    /* (a shrink beyond the kernel's 1/31 goes to the CPU: see stk__gpu_run_locked) */
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
  if (c->out_w < 1 || c->out_h < 1 || c->out_w > STK__GPU_MAX_SIDE || c->out_h > STK__GPU_MAX_SIDE)
    return stk__fail(msg, msglen, STK_EINVAL, "output size %dx%d out of range", c->out_w, c->out_h);
  if (c->dtype < STK_DTYPE_FLOAT32 || c->dtype > STK_DTYPE_UINT8)
    return stk__fail(msg, msglen, STK_EINVAL, "unknown dtype %d", (int)c->dtype);
  if (c->layout != STK_LAYOUT_NCHW && c->layout != STK_LAYOUT_NHWC)
    return stk__fail(msg, msglen, STK_EINVAL, "unknown layout %d", (int)c->layout);
  if (c->slots < 1 || c->slots > 1024)
    return stk__fail(msg, msglen, STK_EINVAL, "slots must be in 1..1024, got %d", c->slots);
  if (c->planners < 0 || c->planners > 4096)
    return stk__fail(msg, msglen, STK_EINVAL, "planners must be in 0..4096, got %d", c->planners);
  if (c->hw_states < 0 || c->hw_states > 64)
    return stk__fail(msg, msglen, STK_EINVAL, "hw_states must be in 0..64, got %d", c->hw_states);
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

static void close_states(stk__gpu *g, glane *L);

/* cfg.hw_states: one padding image through each state, which sizes its
 * buffers. A state that fails turns the decoupled decoder off on every
 * lane (the batched call then drives the engines). */
static int warm_states(stk__gpu *g, glane *L, char *msg, size_t msglen) {
  stk__gpu_item it;
  iplan p;
  memset(&it, 0, sizeof it);
  memset(&p, 0, sizeof p);
  it.data = g->dummy_jpeg;
  it.len = g->dummy_len;
  nvjpegImage_t dst;
  memset(&dst, 0, sizeof dst);
  dst.channel[0] = (unsigned char *)(uintptr_t)L->dummy_out;
  dst.pitch[0] = DUMMY_SIDE * 3;
  for (int i = 0; i < L->nhs; i++) {
    CUresult cu = CUDA_SUCCESS;
    int bad = stk__gpu_engine_one(g, &L->hs[i], &it, &p, &dst, &cu);
    CU(cu);
    CU(stk__cu.StreamSynchronize(L->hs[i].stream));
    L->hs[i].used = 0;
    if (bad) {
      stk__gpu_note(g, "decoupled hardware decoder off: it failed the padding image");
      for (int k = 0; k < g->cfg.lanes; k++) close_states(g, &g->lanes[k]);
      return STK_OK;
    }
  }
  return STK_OK;
}

/* Decodes a full batch of dummies and waits: sizes nvJPEG's internal
 * buffers, and tells whether the engines work at all. */
static int hw_warmup(stk__gpu *g, glane *L, char *msg, size_t msglen) {
  stk__gpu_hw_pad(g, L, 0);
  nvjpegStatus_t s = stk__nj.DecodeBatchedEx(g->hw, L->hw_state, L->hw_data, L->hw_len, L->hw_dst,
                                          L->hw_params, L->stream);
  if (s != NVJPEG_STATUS_SUCCESS) {
    stk__gpu_hw_init_lane(g, L, L->hw_n, NULL, 0);
    return stk__fail(msg, msglen, STK_ECUDA, "nvjpegDecodeBatchedEx: %s", stk__nj_status(s));
  }
  CU(stk__cu.StreamSynchronize(L->stream));
  return warm_states(g, L, msg, msglen);
}

/* cfg.hw_states: the lane's states of the decoupled hardware decoder. */
static int open_states(stk__gpu *g, glane *L, char *msg, size_t msglen) {
  L->hs = calloc((size_t)g->cfg.hw_states, sizeof *L->hs);
  if (!L->hs) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  for (; L->nhs < g->cfg.hw_states; L->nhs++) {
    hwstate *h = &L->hs[L->nhs];
    CU(make_stream(g, &h->stream));
    CU(stk__cu.EventCreate(&h->done, CU_EVENT_DISABLE_TIMING));
    NJ(stk__nj.DecoderStateCreate(g->hw, g->hw_dec, &h->state));
    NJ(stk__nj.BufferDeviceCreate(g->hw, NULL, &h->dev));
    NJ(stk__nj.StateAttachDeviceBuffer(h->state, h->dev));
    for (int b = 0; b < 2; b++) {
      NJ(stk__nj.BufferPinnedCreate(g->hw, NULL, &h->pinned[b]));
      NJ(stk__nj.JpegStreamCreate(g->hw, &h->js[b]));
    }
    NJ(stk__nj.DecodeParamsCreate(g->hw, &h->params));
    NJ(stk__nj.DecodeParamsSetOutputFormat(h->params, NVJPEG_OUTPUT_RGBI));
  }
  return STK_OK;
}

/* Frees what open_states() made, a failed state's part included. */
static void close_states(stk__gpu *g, glane *L) {
  for (int i = 0; L->hs && i < g->cfg.hw_states; i++) {
    hwstate *h = &L->hs[i];
    if (h->stream) stk__cu.StreamSynchronize(h->stream);
    /* the state first: the buffers are attached to it */
    if (h->state) stk__nj.JpegStateDestroy(h->state);
    if (h->params) stk__nj.DecodeParamsDestroy(h->params);
    for (int b = 0; b < 2; b++) {
      if (h->js[b]) stk__nj.JpegStreamDestroy(h->js[b]);
      if (h->pinned[b]) stk__nj.BufferPinnedDestroy(h->pinned[b]);
    }
    if (h->dev) stk__nj.BufferDeviceDestroy(h->dev);
    if (h->done) stk__cu.EventDestroy(h->done);
    if (h->stream) stk__cu.StreamDestroy(h->stream);
  }
  free(L->hs);
  L->hs = NULL;
  L->nhs = 0;
}

static int open_lane(stk__gpu *g, glane *L, char *msg, size_t msglen) {
  const stk__gpu_config *c = &g->cfg;
  int B = c->max_batch, rc;
  char why[256];
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
  if ((rc = dev_alloc(g, &L->dummy_out, (size_t)B * DUMMY_SIDE * DUMMY_SIDE * 3, "padding", msg,
                      msglen)))
    return rc;
  if ((rc = host_alloc(g, (void **)&L->staging, L->staging_bytes, "staging", msg, msglen))) return rc;
  if ((rc = host_alloc(g, (void **)&L->desc_host, (size_t)B * sizeof(stk__kitem),
                       "item descriptors", msg, msglen)))
    return rc;
  if (c->aug && (rc = host_alloc(g, (void **)&L->aug_host, (size_t)B * sizeof(stk__kaug),
                                 "augmentation draws", msg, msglen)))
    return rc;
  L->hw_params = calloc((size_t)B, sizeof *L->hw_params);
  L->hw_data = calloc((size_t)B, sizeof *L->hw_data);
  L->hw_len = calloc((size_t)B, sizeof *L->hw_len);
  L->hw_dst = calloc((size_t)B, sizeof *L->hw_dst);
  L->hw_item = calloc((size_t)B, sizeof *L->hw_item);
  L->plan = calloc((size_t)B, sizeof *L->plan);
  L->chunk = calloc((size_t)B, sizeof *L->chunk);
  L->order = calloc((size_t)B, sizeof *L->order);
  L->dec = stk__decoder_create();
  if (!L->hw_params || !L->hw_data || !L->hw_len || !L->hw_dst || !L->hw_item || !L->plan ||
      !L->chunk || !L->order || !L->dec)
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
    if ((rc = stk__gpu_hw_init_lane(g, L, B, msg, msglen))) return rc;
    if (g->hw_dec && open_states(g, L, why, sizeof why)) {
      /* the batched call drives the engines instead, on every lane */
      stk__gpu_note(g, "decoupled hardware decoder off: %s", why);
      for (glane *l = g->lanes; l <= L; l++) close_states(g, l);
      stk__nj.DecoderDestroy(g->hw_dec);
      g->hw_dec = NULL;
    }
    if (stk__nj.DecodeBatchedPreAllocate)
      stk__nj.DecodeBatchedPreAllocate(g->hw, L->hw_state, B, 1024, 1024, NVJPEG_CSS_444,
                                    NVJPEG_OUTPUT_RGBI);
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
  close_states(g, L);
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
  drop_lane_hw(g, L);
  if (L->hy_params) stk__nj.DecodeParamsDestroy(L->hy_params);
  if (L->hy_js) stk__nj.JpegStreamDestroy(L->hy_js);
  if (L->hy_state) stk__nj.JpegStateDestroy(L->hy_state);
  if (L->hy_pinned) stk__nj.BufferPinnedDestroy(L->hy_pinned);
  if (L->hy_dev) stk__nj.BufferDeviceDestroy(L->hy_dev);
  if (L->dummy_out) stk__cu.MemFree(L->dummy_out);
  if (L->staging) stk__cu.MemFreeHost(L->staging);
  if (L->desc_host) stk__cu.MemFreeHost(L->desc_host);
  if (L->aug_host) stk__cu.MemFreeHost(L->aug_host);
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
  free(L->order);
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
    stk__gpu_note(g, "nvJPEG off: %s", stk__nj_why);
    return;
  }
  unsigned flags = g->cfg.chroma_interp ? NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION : 0;
  if (stk__nj.CreateEx(NVJPEG_BACKEND_DEFAULT, NJ_ALLOC, flags, &g->gen) != NVJPEG_STATUS_SUCCESS) {
    g->gen = NULL;
    flags = 0;
    nvjpegStatus_t st = stk__nj.CreateEx(NVJPEG_BACKEND_DEFAULT, NJ_ALLOC, 0, &g->gen);
    if (st != NVJPEG_STATUS_SUCCESS) {
      stk__gpu_note(g, "nvJPEG off: nvjpegCreateEx: %s", stk__nj_status(st));
      g->gen = NULL;
      return;
    }
  }
  g->st.chroma_interp = flags != 0;
  if (g->cfg.use_hw) {
    nvjpegStatus_t st =
        stk__nj.CreateEx(NVJPEG_BACKEND_HARDWARE, NJ_ALLOC, flags | g->cfg.hw_flags, &g->hw);
    if (st != NVJPEG_STATUS_SUCCESS && g->cfg.hw_flags) {
      stk__gpu_note(g, "engine flags %#x refused: %s", g->cfg.hw_flags, stk__nj_status(st));
      st = stk__nj.CreateEx(NVJPEG_BACKEND_HARDWARE, NJ_ALLOC, flags, &g->hw);
    }
    if (st != NVJPEG_STATUS_SUCCESS && flags) {
      /* without the upsampling flag, which this version may not know */
      st = stk__nj.CreateEx(NVJPEG_BACKEND_HARDWARE, NJ_ALLOC, 0, &g->hw);
      if (st == NVJPEG_STATUS_SUCCESS) g->st.chroma_interp = 0; /* as the engines do it */
    }
    if (st != NVJPEG_STATUS_SUCCESS) {
      g->hw = NULL;
      stk__gpu_note(g, "hardware decoder not available: %s", stk__nj_status(st));
    }
    if (g->hw && g->cfg.hw_states > 0) {
      if (!stk__nj.DecodeJpegHost || !stk__nj.DecodeJpegTransferToDevice || !stk__nj.DecodeJpegDevice)
        stk__gpu_note(g, "decoupled hardware decoder off: this nvJPEG lacks its calls");
      else if ((st = stk__nj.DecoderCreate(g->hw, NVJPEG_BACKEND_HARDWARE, &g->hw_dec)) !=
               NVJPEG_STATUS_SUCCESS) {
        g->hw_dec = NULL;
        stk__gpu_note(g, "decoupled hardware decoder off: %s", stk__nj_status(st));
      }
    }
  }
  if (g->cfg.use_cuda && stk__nj.DecoderCreate(g->gen, NVJPEG_BACKEND_HYBRID, &g->hy_dec) !=
                             NVJPEG_STATUS_SUCCESS)
    g->hy_dec = NULL;
}

/* How much of the tile the augmentation kernel keeps in shared memory
 * (kernel_abi.h): the tile and its scratch when both fit in what a block
 * may opt into beside the kernel's static tables, else the tile alone, else
 * nothing. Any failure here leaves the kernel on global memory, which is
 * slower and computes the same bytes. */
static void aug_shared_memory(stk__gpu *g) {
  int optin = 0, fixed = 0;
  g->aug_smem = STK_AUG_SMEM_NONE;
  g->aug_smem_bytes = 0;
  if (stk__cu.DeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                 g->dev) != CUDA_SUCCESS ||
      stk__cu.FuncGetAttribute(&fixed, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, g->fn_aug) != CUDA_SUCCESS)
    return;
  const long long tile = ((long long)g->cfg.out_w * g->cfg.out_h * 3 + 15) & ~15LL;
  const long long room = (long long)optin - fixed;
  int mode = 2 * tile <= room ? STK_AUG_SMEM_BOTH : tile <= room ? STK_AUG_SMEM_TILE : STK_AUG_SMEM_NONE;
  if (mode == STK_AUG_SMEM_NONE) return;
  unsigned bytes = (unsigned)(mode == STK_AUG_SMEM_BOTH ? 2 * tile : tile);
  if (stk__cu.FuncSetAttribute(g->fn_aug, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               (int)bytes) != CUDA_SUCCESS)
    return;
  g->aug_smem = mode;
  g->aug_smem_bytes = bytes;
}

/* Whether `device` can be opened at all: kernels in this build, the
 * driver, the device number (before anything is allocated). */
/* Why a build has no kernels: asked for, or no nvcc (cmake/gpu.cmake) */
#ifdef STK_GPU_OFF
#define STK__NO_KERNELS_WHY "a CPU-only build: STK_GPU=OFF, STOKER_CPU_ONLY=1 for pip"
#else
#define STK__NO_KERNELS_WHY "nvcc was not found when it was built"
#endif

static int check_device(int device, char *msg, size_t msglen) {
  if (device < 0) return stk__fail(msg, msglen, STK_EINVAL, "device must be >= 0, got %d", device);
  if (!kernel_image())
    return stk__fail(msg, msglen, STK_ENODEV,
                     "device %d asked for, but this build of stoker has no GPU kernels (%s)",
                     device, STK__NO_KERNELS_WHY);
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
  return STK_OK;
}

/* The device's primary context, retained and made current (*pushed). */
static int open_context(stk__gpu *g, int device, int *pushed, char *msg, size_t msglen) {
  CUresult r = stk__cu.DeviceGet(&g->dev, device);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(NULL, r, "cuDeviceGet", msg, msglen);
  int ccmaj = 0, ccmin = 0;
  stk__cu.DeviceGetAttribute(&ccmaj, CU_DEVICE_ATTRIBUTE_CC_MAJOR, g->dev);
  stk__cu.DeviceGetAttribute(&ccmin, CU_DEVICE_ATTRIBUTE_CC_MINOR, g->dev);
  if (ccmaj < 8)
    return stk__fail(msg, msglen, STK_ENODEV,
                     "device %d has compute capability %d.%d; stoker's kernels need 8.0 or newer",
                     device, ccmaj, ccmin);
  r = stk__cu.DevicePrimaryCtxRetain(&g->ctx, g->dev);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(NULL, r, "cuDevicePrimaryCtxRetain", msg, msglen);
  g->ctx_retained = 1;
  r = stk__cu.CtxPushCurrent(g->ctx);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(NULL, r, "cuCtxPushCurrent", msg, msglen);
  *pushed = 1;
  return STK_OK;
}

/* The embedded kernels, the stream priority, the output's store and
 * (cfg.aug) the 8-bit work store and the augmentation kernel. */
static int load_kernels(stk__gpu *g, char *msg, size_t msglen) {
  CUresult r = stk__cu.ModuleLoadData(&g->mod, kernel_image());
  if (r != CUDA_SUCCESS)
    return stk__gpu_fail(NULL, r, "cuModuleLoadData (the embedded kernels)", msg, msglen);
  r = stk__cu.ModuleGetFunction(&g->fn, g->mod, "stk_resample_kernel");
  if (r == CUDA_SUCCESS) r = stk__cu.ModuleGetFunction(&g->fn_mix, g->mod, "stk_mix_kernel");
  if (r != CUDA_SUCCESS) return stk__gpu_fail(NULL, r, "cuModuleGetFunction", msg, msglen);
  int least = 0;
  if (stk__cu.CtxGetStreamPriorityRange(&least, &g->prio) != CUDA_SUCCESS) g->prio = 0;

  stk__store_init(&g->store, g->cfg.dtype, g->cfg.layout, g->cfg.out_w, g->cfg.out_h, g->cfg.mean,
                  g->cfg.std);
  g->image_bytes = (size_t)g->cfg.out_w * g->cfg.out_h * 3 * stk__dtype_size(g->cfg.dtype);
  if (!g->cfg.aug) {
    g->work_store = g->store;
    g->work_bytes = g->image_bytes;
    return STK_OK;
  }
  stk__store_init(&g->work_store, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, g->cfg.out_w, g->cfg.out_h,
                  g->cfg.mean, g->cfg.std);
  g->work_bytes = (size_t)g->cfg.out_w * g->cfg.out_h * 3;
  if ((r = stk__cu.ModuleGetFunction(&g->fn_aug, g->mod, "stk_augment_kernel")) != CUDA_SUCCESS)
    return stk__gpu_fail(NULL, r, "cuModuleGetFunction (the augmentation kernel)", msg, msglen);
  aug_shared_memory(g);
  return STK_OK;
}

/* The normalisation tables, in device memory for the kernels. */
static int upload_tables(stk__gpu *g, char *msg, size_t msglen) {
  int rc = dev_alloc(g, &g->lut, sizeof g->store.lut_f32 + sizeof g->store.lut_u16, "tables", msg,
                     msglen);
  if (rc) return rc;
  uint8_t tab[sizeof g->store.lut_f32 + sizeof g->store.lut_u16];
  memcpy(tab, g->store.lut_f32, sizeof g->store.lut_f32);
  memcpy(tab + sizeof g->store.lut_f32, g->store.lut_u16, sizeof g->store.lut_u16);
  CUresult r = stk__cu.MemcpyHtoD(g->lut, tab, sizeof tab);
  return r != CUDA_SUCCESS ? stk__gpu_fail(NULL, r, "cuMemcpyHtoD", msg, msglen) : STK_OK;
}

/* The output slots, each with its arena of `arena` bytes (gpu_internal.h). */
static int open_slots(stk__gpu *g, size_t arena, char *msg, size_t msglen) {
  int rc;
  CUresult r;
  for (int i = 0; i < g->cfg.slots; i++) {
    gslot *s = &g->slots[i];
    if ((rc = dev_alloc(g, &s->data, (size_t)g->cfg.max_batch * g->image_bytes, "batch slots", msg,
                        msglen)) ||
        (rc = dev_alloc(g, &s->labels, (size_t)g->cfg.max_batch * sizeof(int64_t), "labels", msg,
                        msglen)) ||
        (rc = dev_alloc(g, &s->arena, arena, "the source arena", msg, msglen)) ||
        (rc = dev_alloc(g, &s->desc_dev, (size_t)g->cfg.max_batch * sizeof(stk__kitem),
                        "item descriptors", msg, msglen)))
      return rc;
    if (g->cfg.aug &&
        ((rc = dev_alloc(g, &s->tiles, (size_t)g->cfg.max_batch * g->work_bytes, "8-bit tiles", msg,
                         msglen)) ||
         (rc = dev_alloc(g, &s->scratch, (size_t)g->cfg.max_batch * g->work_bytes, "tile scratch",
                         msg, msglen)) ||
         (rc = dev_alloc(g, &s->aug_dev, (size_t)g->cfg.max_batch * sizeof(stk__kaug),
                         "augmentation draws", msg, msglen))))
      return rc;
    /* MixUp/CutMix is out of place (image i reads its partner, which
     * another block may be writing): a second buffer per slot */
    if (g->cfg.mix_classes > 0 &&
        ((rc = dev_alloc(g, &s->mixed, (size_t)g->cfg.max_batch * g->image_bytes, "mixed batches",
                         msg, msglen)) ||
         (rc = dev_alloc(g, &s->soft,
                         (size_t)g->cfg.max_batch * (size_t)g->cfg.mix_classes * sizeof(float),
                         "soft labels", msg, msglen))))
      return rc;
    if ((r = stk__cu.EventCreate(&s->ready, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = stk__cu.EventCreate(&s->freed, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = stk__cu.EventCreate(&s->consumed, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = make_stream(g, &s->stream)) != CUDA_SUCCESS)
      return stk__gpu_fail(NULL, r, "cuEventCreate/cuStreamCreate", msg, msglen);
  }
  return STK_OK;
}

/* The engines must decode a batch on every lane, else they are switched off
 * (and the lanes parse headers with the generic handle). */
static int warm_engines(stk__gpu *g, char *msg, size_t msglen) {
  char why[160];
  for (int i = 0; i < g->cfg.lanes && g->hw; i++) {
    if (!hw_warmup(g, &g->lanes[i], why, sizeof why)) continue;
    stk__gpu_note(g, "hardware decoder off: %s", why);
    for (int k = 0; k < g->cfg.lanes; k++) drop_lane_hw(g, &g->lanes[k]);
    if (g->hw_dec) stk__nj.DecoderDestroy(g->hw_dec);
    g->hw_dec = NULL;
    stk__nj.Destroy(g->hw);
    g->hw = NULL;
    for (int k = 0; k < g->cfg.lanes; k++) {
      glane *L = &g->lanes[k];
      L->js_handle = g->gen;
      if (g->gen && (stk__nj.JpegStreamCreate(g->gen, &L->js) != NVJPEG_STATUS_SUCCESS ||
                     stk__nj.DecodeParamsCreate(g->gen, &L->chk_params) != NVJPEG_STATUS_SUCCESS))
        return stk__fail(msg, msglen, STK_ECUDA, "nvJPEG: cannot create a stream parser");
    }
  }
  g->hw_roi = g->hw && g->cfg.roi;
  return STK_OK;
}

/* cfg.planners header parsers for stk__gpu_plan_ahead(); as many as nvJPEG
 * gives (the lanes plan what the missing ones would have). */
static int open_parsers(stk__gpu *g, char *msg, size_t msglen) {
  g->parse_handle = g->hw ? g->hw : g->gen;
  if (g->cfg.planners <= 0 || !g->parse_handle) return STK_OK;
  g->parsers = calloc((size_t)g->cfg.planners, sizeof *g->parsers);
  if (!g->parsers) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  for (; g->nparsers < g->cfg.planners; g->nparsers++) {
    parser *P = &g->parsers[g->nparsers];
    pthread_mutex_init(&P->mu, NULL);
    if (stk__nj.JpegStreamCreate(g->parse_handle, &P->js) != NVJPEG_STATUS_SUCCESS ||
        stk__nj.DecodeParamsCreate(g->parse_handle, &P->chk) != NVJPEG_STATUS_SUCCESS ||
        stk__nj.DecodeParamsSetOutputFormat(P->chk, NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS) {
      if (P->js) stk__nj.JpegStreamDestroy(P->js);
      if (P->chk) stk__nj.DecodeParamsDestroy(P->chk);
      pthread_mutex_destroy(&P->mu);
      stk__gpu_note(g, "planning ahead with %d of %d header parsers", g->nparsers, g->cfg.planners);
      break;
    }
  }
  return STK_OK;
}

int stk__gpu_open(int device, const stk__gpu_config *cfg, stk__gpu **out, char *msg,
                  size_t msglen) {
  if (out) *out = NULL;
  if (!cfg || !out) return stk__fail(msg, msglen, STK_EINVAL, "cfg and out must not be NULL");
  int rc = validate_cfg(cfg, msg, msglen);
  if (rc || (rc = check_device(device, msg, msglen))) return rc;

  stk__gpu *g = calloc(1, sizeof *g);
  if (!g) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  g->cfg = *cfg;
  if (g->cfg.lanes == 0) g->cfg.lanes = 2;
  g->device = device;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  int pushed = 0;
  size_t free0 = 0, free1 = 0, total = 0;

  if ((rc = open_context(g, device, &pushed, msg, msglen))) goto fail;
  stk__cu.MemGetInfo(&free0, &total);
  if ((rc = load_kernels(g, msg, msglen)) || (rc = upload_tables(g, msg, msglen))) goto fail;
  /* per slot; at least two finished images (the "big" path's need) */
  size_t arena = g->cfg.arena_bytes ? g->cfg.arena_bytes : (size_t)g->cfg.max_batch * (768 << 10);
  if (arena < 2 * big_need(g)) arena = 2 * big_need(g);
  g->slots = calloc((size_t)g->cfg.slots, sizeof *g->slots);
  g->lanes = calloc((size_t)g->cfg.lanes, sizeof *g->lanes);
  if (!g->slots || !g->lanes) {
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = open_slots(g, arena, msg, msglen))) goto fail;
  if (make_dummy(g)) {
    rc = stk__fail(msg, msglen, STK_ENOMEM, "cannot make the padding JPEG");
    goto fail;
  }
  open_nvjpeg(g);
  for (int i = 0; i < g->cfg.lanes; i++) {
    if ((rc = open_lane(g, &g->lanes[i], msg, msglen))) goto fail;
    g->lanes[i].arena_bytes = arena;
  }
  if ((g->hw && (rc = warm_engines(g, msg, msglen))) || (rc = open_parsers(g, msg, msglen)))
    goto fail;
  g->st.hw_available = g->hw != NULL;
  g->st.hw_states = g->lanes[0].nhs; /* every lane has them, or none (open_lane, warm_states) */
  g->st.hw_roi = g->hw_roi;
  g->st.cuda_available = g->hy_dec != NULL;
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
      if (s->tiles) stk__cu.MemFree(s->tiles);
      if (s->scratch) stk__cu.MemFree(s->scratch);
      if (s->aug_dev) stk__cu.MemFree(s->aug_dev);
      if (s->mixed) stk__cu.MemFree(s->mixed);
      if (s->soft) stk__cu.MemFree(s->soft);
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
  if (g->hw_dec) stk__nj.DecoderDestroy(g->hw_dec);
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
    else if (check_own_size(g, it, why, sizeof why) || check_geom(g, it, why, sizeof why))
      item_fail(it, STK_EINVAL, why);
  }
  double tl = stk__now();
  glane *L = take_lane(g);
  tl = stk__now() - tl;
  int rc;
  CUresult r = stk__cu.CtxPushCurrent(g->ctx);
  if (r != CUDA_SUCCESS) {
    rc = stk__gpu_fail(g, r, "cuCtxPushCurrent", msg, msglen);
  } else {
    rc = stk__gpu_run_locked(g, L, &g->slots[slot], n, items, msg, msglen);
    stk__cu.CtxPopCurrent(NULL);
  }
  double tp = L->t_plan, th = L->t_hw, tc = L->t_cpu, tsy = L->t_sync;
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

int stk__gpu_engine_ways(const stk__gpu *g) { return g && g->lanes && g->lanes[0].nhs > 0; }

int stk__gpu_lanes(const stk__gpu *g) { return g ? g->cfg.lanes : 0; }

void stk__gpu_set_engine_batched(stk__gpu *g, int on) {
  if (g) atomic_store_explicit(&g->hw_batched, on ? 1 : 0, memory_order_relaxed);
}

#define ENTER()                                                              \
  do {                                                                       \
    CUresult r0_ = stk__cu.CtxPushCurrent(g->ctx);                              \
    if (r0_ != CUDA_SUCCESS) return stk__gpu_fail(g, r0_, "cuCtxPushCurrent", msg, msglen); \
  } while (0)

int stk__gpu_slot_release(stk__gpu *g, int slot, void *consumer_stream, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots) return stk__fail(msg, msglen, STK_EINVAL, "bad slot");
  ENTER();
  gslot *s = &g->slots[slot];
  CUresult r = stk__cu.EventRecord(s->freed, (CUstream)consumer_stream);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(g, r, "cuEventRecord", msg, msglen);
  pthread_mutex_lock(&g->mu);
  s->freed_pending = 1;
  pthread_mutex_unlock(&g->mu);
  return STK_OK;
}

int stk__gpu_mix(stk__gpu *g, const stk__mix *m, const stk__gpu_mix_io *io, void *stream,
                 char *msg, size_t msglen) {
  if (!g || !m || !io || io->n < 1 || io->n > g->cfg.max_batch || !io->src || !io->dst ||
      (io->soft && (!io->labels || io->classes < 1)) || m->mode < 0 || m->mode > 2)
    return stk__fail(msg, msglen, STK_EINVAL, "bad arguments for the batch mixing");
  /* the soft labels' row of blocks covers n * classes floats with 32-bit
   * indices, as the images' rows cover one image */
  if (io->soft && (int64_t)io->n * io->classes > INT32_MAX)
    return stk__fail(msg, msglen, STK_EINVAL, "too many classes for the batch mixing");
  /* one row of blocks per image and one for the labels: gridDim.y <= 65535 */
  if (io->n > 65534)
    return stk__fail(msg, msglen, STK_EINVAL, "the batch mixing takes at most 65534 images, got %d",
                     io->n);
  stk__kmixparams kp;
  memset(&kp, 0, sizeof kp);
  kp.src = (unsigned long long)io->src;
  kp.dst = (unsigned long long)io->dst;
  kp.labels = (unsigned long long)io->labels;
  kp.soft = (unsigned long long)io->soft;
  kp.n = io->n;
  kp.classes = io->classes;
  kp.dtype = (int)g->cfg.dtype;
  kp.layout = (int)g->cfg.layout;
  kp.mode = m->mode;
  kp.w = g->cfg.out_w;
  kp.h = g->cfg.out_h;
  kp.x1 = m->x1, kp.y1 = m->y1, kp.x2 = m->x2, kp.y2 = m->y2;
  /* as the CPU's stk__mix_apply and torch's scalar multiplies round them */
  kp.a = (float)m->lam;
  kp.b = (float)(1.0 - m->lam);
  kp.pair = m->pair_flip;
  kp.on = io->on;
  kp.off = io->off;
  int64_t elems = (int64_t)kp.w * kp.h * 3, row = io->soft ? (int64_t)io->n * io->classes : 0;
  /* 16 bytes a thread when every image starts 16-byte aligned in both
   * buffers (torch's and the slots' allocations are; a tensor view need
   * not be) */
  const int64_t es = (int64_t)stk__dtype_size(g->cfg.dtype), per = 16 / es;
  kp.vec = (elems * es) % 16 == 0 && io->src % 16 == 0 && io->dst % 16 == 0;
  if (kp.vec) elems /= per; /* threads on an image's row of blocks */
  int64_t most = elems > row ? elems : row;
  unsigned gx = (unsigned)((most + STK_MIX_THREADS - 1) / STK_MIX_THREADS);
  void *args[] = {&kp};
  ENTER();
  CUresult r = stk__cu.LaunchKernel(g->fn_mix, gx, (unsigned)io->n + 1, 1, STK_MIX_THREADS, 1, 1, 0,
                                    (CUstream)stream, args, NULL);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(g, r, "cuLaunchKernel (the batch mixing)", msg, msglen);
  return STK_OK;
}

int stk__gpu_slot_mix(stk__gpu *g, int slot, const stk__mix *m, int n, float on, float off,
                      void **data, float **soft, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots || g->cfg.mix_classes < 1 || !m)
    return stk__fail(msg, msglen, STK_EINVAL, "bad arguments for the batch mixing");
  gslot *s = &g->slots[slot];
  stk__gpu_mix_io io = {s->data, s->mixed, s->labels, s->soft, n, g->cfg.mix_classes, on, off};
  /* on the slot's stream: after the batch's decode and any compaction */
  int rc = stk__gpu_mix(g, m, &io, (void *)s->stream, msg, msglen);
  if (rc) return rc;
  ENTER();
  pthread_mutex_lock(&g->mu); /* the slot's flags */
  CUresult r = stk__cu.EventRecord(s->ready, s->stream);
  if (r == CUDA_SUCCESS) s->written = 1;
  pthread_mutex_unlock(&g->mu);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(g, r, "cuEventRecord (the batch mixing)", msg, msglen);
  *data = (void *)(uintptr_t)s->mixed;
  *soft = (float *)(uintptr_t)s->soft;
  return STK_OK;
}

int stk__gpu_slot_wait_on(stk__gpu *g, int slot, void *stream, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots) return stk__fail(msg, msglen, STK_EINVAL, "bad slot");
  if (!g->slots[slot].written) return STK_OK;
  ENTER();
  CUresult r = stk__cu.StreamWaitEvent((CUstream)stream, g->slots[slot].ready, 0);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(g, r, "cuStreamWaitEvent", msg, msglen);
  return STK_OK;
}

int stk__gpu_slot_wait(stk__gpu *g, int slot, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots) return stk__fail(msg, msglen, STK_EINVAL, "bad slot");
  if (!g->slots[slot].written) return STK_OK;
  ENTER();
  CUresult r = stk__cu.EventSynchronize(g->slots[slot].ready);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(g, r, "cuEventSynchronize", msg, msglen);
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
  if (r != CUDA_SUCCESS) return stk__gpu_fail(g, r, "cuMemcpyDtoH", msg, msglen);
  return STK_OK;
}

void stk__gpu_get_stats(stk__gpu *g, stk__gpu_stats *out) {
  if (!g || !out) return;
  pthread_mutex_lock(&g->mu);
  *out = g->st;
  pthread_mutex_unlock(&g->mu);
  out->late_allocs = stk__pool_fresh() - g->pool_at_open;
}

int stk__gpu_download_images(stk__gpu *g, int slot, int n, const int *index, const size_t *bytes,
                             void *const *host, char *msg, size_t msglen) {
  if (!g || slot < 0 || slot >= g->cfg.slots || n < 0 || n > g->cfg.max_batch ||
      (n && (!index || !bytes || !host)))
    return stk__fail(msg, msglen, STK_EINVAL, "bad arguments");
  for (int k = 0; k < n; k++)
    if (index[k] < 0 || index[k] >= g->cfg.max_batch || bytes[k] > g->image_bytes)
      return stk__fail(msg, msglen, STK_EINVAL, "bad arguments");
  ENTER();
  /* On the slot's own stream, after its kernel, and one wait for them all:
   * a plain cuMemcpyDtoH would run on the legacy default stream, which
   * waits for every blocking stream of the context (nvJPEG's among them),
   * so each thread's copies would also wait for the other threads' decodes */
  gslot *s = &g->slots[slot];
  CUresult r = CUDA_SUCCESS;
  for (int k = 0; k < n && r == CUDA_SUCCESS; k++)
    if (bytes[k])
      r = stk__cu.MemcpyDtoHAsync(host[k], s->data + (CUdeviceptr)index[k] * g->image_bytes,
                                  bytes[k], s->stream);
  if (r == CUDA_SUCCESS) r = stk__cu.StreamSynchronize(s->stream);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) return stk__gpu_fail(g, r, "cuMemcpyDtoHAsync", msg, msglen);
  return STK_OK;
}

int stk__gpu_host_alloc(stk__gpu *g, size_t bytes, void **p, char *msg, size_t msglen) {
  *p = NULL;
  if (!g) return stk__fail(msg, msglen, STK_EINVAL, "bad arguments");
  ENTER();
  CUresult r = stk__cu.MemHostAlloc(p, bytes ? bytes : 1, 0);
  stk__cu.CtxPopCurrent(NULL);
  if (r != CUDA_SUCCESS) {
    *p = NULL;
    return stk__fail(msg, msglen, STK_ENOMEM, "cannot allocate %zu bytes of pinned memory: %s",
                     bytes, stk__cu_name(r));
  }
  return STK_OK;
}

void stk__gpu_host_free(stk__gpu *g, void *p) {
  if (!g || !p || stk__cu.CtxPushCurrent(g->ctx) != CUDA_SUCCESS) return;
  stk__cu.MemFreeHost(p);
  stk__cu.CtxPopCurrent(NULL);
}
