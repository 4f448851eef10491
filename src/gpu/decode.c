/*
 * decode.c: one batch on one lane (gpu.h, gpu_internal.h): each item's plan
 * (its decoder and the region to decode, ahead on a worker's thread or
 * here), the packing of the sources into the slot's arena in chunks, the
 * decode paths (the engines, the per-image hybrid decoder,
 * the CPU, and the host copy of decoded pixels), and the launch of the fused
 * kernel of kernels.cu on the slot's stream.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpu/gpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "codecs/markers.h"
#include "gpu/plan.h"

/* ---- running a batch --------------------------------------------------------- */
/* ---- the engines' batched state of a lane ---- */
int stk__gpu_hw_init_lane(stk__gpu *g, glane *L, int n, char *msg, size_t msglen) {
  NJ(stk__nj.DecodeBatchedInitialize(g->hw, L->hw_state, n, 1, NVJPEG_OUTPUT_RGBI));
  L->hw_n = n;
  return STK_OK;
}

/* Pads the batched arrays from m to the initialised size with the dummy. */
void stk__gpu_hw_pad(stk__gpu *g, glane *L, int m) {
  for (int i = m; i < L->hw_n; i++) {
    L->hw_data[i] = g->dummy_jpeg;
    L->hw_len[i] = g->dummy_len;
    memset(&L->hw_dst[i], 0, sizeof L->hw_dst[i]);
    L->hw_dst[i].channel[0] = (unsigned char *)(uintptr_t)(L->dummy_out + (CUdeviceptr)i * DUMMY_SIDE * DUMMY_SIDE * 3);
    L->hw_dst[i].pitch[0] = DUMMY_SIDE * 3;
    stk__nj.DecodeParamsSetROI(L->hw_params[i], 0, 0, -1, -1);
  }
}

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

/* ---- routing ------------------------------------------------------------------ */
/* Why an item is routed. ROUTE_HEADER: the first rule alone, from the
 * file's header, before there is an item (stk__gpu_takes_header). */
enum { ROUTE_HEADER, ROUTE_PLAN, ROUTE_TOO_BIG, ROUTE_FAILED };

/* What the planning learnt of an item (ROUTE_HEADER, ROUTE_PLAN). */
typedef struct {
  int rgb8;     /* already decoded pixels (STK__GPU_RGB8) */
  int cpu_file; /* the header says a CPU decodes it: not a JPEG, progressive
                   (nvJPEG's hybrid decoder runs its scans one after another
                   on the lane's thread, slower than a CPU worker), or
                   neither grey nor 3 components */
  int nvjpeg;   /* nvJPEG decodes it as PIL does (YCbCr or grey, complete) */
  int engines;  /* ... and the engines accept it (whole, or its region) */
} route_facts;

/* Every choice of an item's decoder is made here: at planning, from what
 * its header said; when its source does not fit the arena or the kernel's
 * filter window (the CPU then resamples it too, "big"); and when its
 * decoder failed it, moving it down to a decoder later in the table of
 * run_decoders(), so that one pass over the table decodes every item.
 * Returns STK__GPU_PATH_*, or NONE when nothing is left to try (the item
 * has failed with its decoder's reason). */
static int route(const stk__gpu *g, int path, int why, const route_facts *f) {
  switch (why) {
    case ROUTE_HEADER:
      return f->cpu_file ? STK__GPU_PATH_CPU : STK__GPU_PATH_NONE;
    case ROUTE_PLAN:
      if (f->rgb8) return STK__GPU_PATH_HOST;
      if (f->cpu_file) return STK__GPU_PATH_CPU;
      if (f->engines) return STK__GPU_PATH_HW;
      if (f->nvjpeg && g->hy_dec) return STK__GPU_PATH_CUDA;
      return STK__GPU_PATH_CPU;
    case ROUTE_TOO_BIG:
      return STK__GPU_PATH_BIG;
    default: /* ROUTE_FAILED */
      if (path == STK__GPU_PATH_HW) return g->hy_dec ? STK__GPU_PATH_CUDA : STK__GPU_PATH_CPU;
      if (path == STK__GPU_PATH_CUDA) return STK__GPU_PATH_CPU;
      return STK__GPU_PATH_NONE;
  }
}

static int header_cpu_file(int jpeg, int progressive, int components) {
  return !jpeg || progressive || (components != 1 && components != 3);
}

int stk__gpu_takes_header(const stk__image_info *in) {
  route_facts f = {0, header_cpu_file(in->format == STK__FMT_JPEG, in->progressive,
                                      in->components), 0, 0};
  return route(NULL, STK__GPU_PATH_NONE, ROUTE_HEADER, &f) != STK__GPU_PATH_CPU;
}

/* Whether the engines accept the item whose header js holds, at the region
 * p asks for (p->roi) or whole; adjusts p's rectangle to what they decode. */
static int engines_accept(stk__gpu *g, nvjpegJpegStream_t js, nvjpegDecodeParams_t chk,
                          stk__gpu_rect *r, int w, int h, iplan *p) {
  int sup = 1;
  for (int a = 0; a < 2 && g->hw_roi; a++) {
    /* the exact rectangle, then one aligned outwards to 16 pixels */
    if (a) {
      if (!stk__gpu_align16(r, w, h)) break;
      p->sx = r->sx;
      p->sy = r->sy;
      p->sw = r->sw;
      p->sh = r->sh;
    }
    stk__nj.DecodeParamsSetROI(chk, p->sx, p->sy, p->sw, p->sh);
    if (stk__nj.DecodeBatchedSupportedEx(g->hw, js, chk, &sup) != NVJPEG_STATUS_SUCCESS) sup = 1;
    if (sup == 0) {
      p->roi = 1;
      return 1;
    }
  }
  stk__nj.DecodeParamsSetROI(chk, 0, 0, -1, -1);
  if (stk__nj.DecodeBatchedSupportedEx(g->hw, js, chk, &sup) != NVJPEG_STATUS_SUCCESS) sup = 1;
  if (sup != 0) return 0;
  p->roi = 0;
  p->sx = p->sy = 0;
  p->sw = w;
  p->sh = h;
  if (g->hw_roi) {
    pthread_mutex_lock(&g->mu);
    g->st.hw_roi_full++;
    pthread_mutex_unlock(&g->mu);
  }
  return 1;
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
  p->css = -1;
  route_facts f = {it->kind == STK__GPU_RGB8, 0, 0, 0};
  p->path = route(g, STK__GPU_PATH_NONE, ROUTE_PLAN, &f);
  if (f.rgb8 || !js) return;
  /* What nvJPEG would decode differently from PIL stays on the CPU: RGB-
   * coded files (nvJPEG assumes YCbCr), CMYK/YCCK, and files without an end
   * marker (PIL fails them; nvJPEG decodes whatever is there). */
  stk__jpeg_markers jm;
  if (!stk__jpeg_scan(it->data, it->len, &jm) || jm.rgb || !jm.eoi || (jm.comps != 1 && jm.comps != 3))
    return;
  /* the header rule the loader's GPU sink applies before an item is made
   * (stk__gpu_takes_header), here for items made without it (a device pack) */
  int progressive = jm.sof == 0xC2 || jm.sof == 0xC6 || jm.sof == 0xCA || jm.sof == 0xCE;
  if ((f.cpu_file = header_cpu_file(1, progressive, jm.comps))) {
    p->path = route(g, STK__GPU_PATH_NONE, ROUTE_PLAN, &f);
    return;
  }
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
  if (stk__nj.JpegStreamGetChromaSubsampling &&
      stk__nj.JpegStreamGetChromaSubsampling(js, &p->css) != NVJPEG_STATUS_SUCCESS)
    p->css = -1;
  f.nvjpeg = 1;
  f.engines = g->hw && engines_accept(g, js, chk, &r, (int)w, (int)h, p);
  p->path = route(g, STK__GPU_PATH_NONE, ROUTE_PLAN, &f);
}

/* The path an item takes after its decoder failed it (route()). */
static void fall_back(const stk__gpu *g, iplan *p) {
  p->path = route(g, p->path, ROUTE_FAILED, NULL);
}

static void plan_item(stk__gpu *g, glane *L, stk__gpu_item *it, iplan *p) {
  plan_with(g, L->js_handle, L->js, L->chk_params, it, p);
}

void stk__gpu_plan_ahead(stk__gpu *g, int who, stk__gpu_item *it) {
  if (!g || g->nparsers <= 0 || it->kind != STK__GPU_JPEG || !it->data) return;
  parser *P = &g->parsers[(unsigned)who % (unsigned)g->nparsers];
  /* a parser busy with another thread (two workers' positions share it):
   * the lane plans this item instead. An item whose geometry run_batch()
   * then refuses fails there, and its plan is never used. */
  if (pthread_mutex_trylock(&P->mu)) return;
  /* nvJPEG may grow the parser's buffers with our pinned allocator, which
   * needs the context on this thread */
  if (stk__cu.CtxPushCurrent(g->ctx) == CUDA_SUCCESS) {
    iplan p;
    memset(&p, 0, sizeof p);
    plan_with(g, g->parse_handle, P->js, P->chk, it, &p);
    stk__cu.CtxPopCurrent(NULL);
    p.planned = 1;
    it->pre = p;
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
  *p = *q;
}

/* The CUDA (hybrid) path for one item, on the lane's aux stream. Returns
 * STK_OK or a non-zero code (the item then goes to the CPU). */
static int hybrid_decode(stk__gpu *g, glane *L, stk__gpu_item *it, iplan *p) {
  if (g->cfg.fail_cuda) return STK_EDECODE;
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
  if (stk__buf_reserve(&L->big, g->work_bytes + 8)) {
    item_fail(it, STK_ENOMEM, "out of memory");
    return STK_ENOMEM;
  }
  /* an item of its own size (uint8 NHWC only, gpu.h): a packed prefix of
   * its image, written by a store of that size */
  stk__store own;
  const stk__store *st = &g->work_store;
  if (it->out_w) {
    stk__store_init(&own, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, it->out_w, it->out_h, g->cfg.mean,
                    g->cfg.std);
    st = &own;
  }
  rc = stk__resampler_run(&L->rs, px, stride, ox, oy, st, L->big.p);
  if (rc) {
    item_fail(it, rc, "resampling failed");
    return rc;
  }
  size_t bytes = it->out_w ? (size_t)it->out_w * it->out_h * 3 : g->work_bytes;
  *batch_rc = upload_rows(g, L, L->arena + p->off, bytes, L->big.p, bytes, bytes, 1, msg, msglen);
  if (!*batch_rc)
    *batch_rc = upload_rows(g, L, L->arena + p->off + align_up(g->work_bytes, 8), 8,
                            (const uint8_t *)&it->label, 8, 8, 1, msg, msglen);
  return *batch_rc;
}

static int launch(stk__gpu *g, glane *L, gslot *s, int base, int n, int kxm, int kym, char *msg,
                  size_t msglen);
static int upload_aug(stk__gpu *g, glane *L, gslot *s, int n, const stk__gpu_item *items, int *naug,
                      char *msg, size_t msglen);

/* The slot's stream waits for what the lane queued so far (the decoders, the
 * uploads) and, once per batch, for the consumer to have let go of the
 * slot's images. */
static int slot_after_lane(stk__gpu *g, glane *L, gslot *s, char *msg, size_t msglen) {
  CU(stk__cu.EventRecord(L->decoded, L->stream));
  CU(stk__cu.StreamWaitEvent(s->stream, L->decoded, 0));
  pthread_mutex_lock(&g->mu);
  int wait_freed = s->freed_pending;
  s->freed_pending = 0;
  pthread_mutex_unlock(&g->mu);
  if (wait_freed) CU(stk__cu.StreamWaitEvent(s->stream, s->freed, 0));
  return STK_OK;
}
static int launch_aug(stk__gpu *g, glane *L, gslot *s, int naug, char *msg, size_t msglen);

/* cfg.hw_sort's order: chroma subsampling, then source size. */
static long long engine_key(const iplan *p) {
  return (long long)p->css * (1LL << 40) + (long long)p->sw * p->sh;
}

/* cfg.hw_sort: the chunk's positions in L->order, by engine_key (an
 * insertion sort: at most max_batch items); else the chunk as it is. */
static const int *engine_order(const stk__gpu *g, glane *L, const int *chunk, int k) {
  if (!g->cfg.hw_sort) return chunk;
  for (int c = 0; c < k; c++) {
    long long key = engine_key(&L->plan[chunk[c]]);
    int j = c;
    for (; j > 0 && engine_key(&L->plan[L->order[j - 1]]) > key; j--) L->order[j] = L->order[j - 1];
    L->order[j] = chunk[c];
  }
  return L->order;
}

/* One image through the decoupled hardware decoder on state h, into dst.
 * Returns 0; -1 when the decoder refuses the image; or nvJPEG's failure
 * (the item is then routed on). A failed wait for the state's stream also
 * sets *cu. */
int stk__gpu_engine_one(stk__gpu *g, hwstate *h, const stk__gpu_item *it, const iplan *p,
                        nvjpegImage_t *dst, CUresult *cu) {
  /* h->buf is the buffer of the last image whose host phase succeeded; its
   * transfer may still be reading it, so this image takes the other one,
   * and keeps it only once its own host phase has filled it. */
  int b = h->buf ^ 1;
  int sup = 1;
  nvjpegStatus_t st;
  if ((st = stk__nj.JpegStreamParse(g->hw, it->data, it->len, 0, 0, h->js[b])) ||
      (st = stk__nj.DecodeParamsSetROI(h->params, p->roi ? p->sx : 0, p->roi ? p->sy : 0,
                                       p->roi ? p->sw : -1, p->roi ? p->sh : -1)) ||
      (st = stk__nj.DecoderJpegSupported(g->hw_dec, h->js[b], h->params, &sup)))
    return st;
  if (sup != 0) return -1;
  if ((st = stk__nj.StateAttachPinnedBuffer(h->state, h->pinned[b])) ||
      (st = stk__nj.DecodeJpegHost(g->hw, g->hw_dec, h->state, h->params, h->js[b])))
    return st;
  h->buf = b;
  /* The state's previous image (its transfer read the other pinned buffer,
   * its device phase this state's buffers) must be done before this one's
   * transfer; with twice as many states as engines it normally is. */
  if ((*cu = stk__cu.StreamSynchronize(h->stream)) != CUDA_SUCCESS) return -1;
  h->used = 1; /* from here on, work of this image may be queued */
  if ((st = stk__nj.DecodeJpegTransferToDevice(g->hw, g->hw_dec, h->state, h->js[b], h->stream)) ||
      (st = stk__nj.DecodeJpegDevice(g->hw, g->hw_dec, h->state, dst, h->stream)))
    return st;
  return 0;
}

/* cfg.hw_states: the chunk's engine items one by one through the decoupled
 * hardware decoder, round-robin over the lane's states. No call waits for a
 * whole batch: the host phase of one image runs while the engines decode
 * the ones before it. The states' streams start after what the lane's
 * stream holds (the arena's previous reader) and the lane's stream then
 * waits for all of them. */
static int engines_one_by_one(stk__gpu *g, glane *L, const stk__gpu_item *items, const int *chunk,
                              int k, char *msg, size_t msglen) {
  double t = stk__now();
  for (int i = 0; i < L->nhs; i++) CU(stk__cu.StreamWaitEvent(L->hs[i].stream, L->ev_main, 0));
  int failed = 0, first = 0;
  for (int c = 0; c < k; c++) {
    iplan *p = &L->plan[chunk[c]];
    if (p->path != STK__GPU_PATH_HW || p->have_src) continue;
    hwstate *h = &L->hs[L->hs_next];
    L->hs_next = (L->hs_next + 1) % L->nhs;
    nvjpegImage_t dst;
    memset(&dst, 0, sizeof dst);
    dst.channel[0] = (unsigned char *)(uintptr_t)(L->arena + p->off);
    dst.pitch[0] = p->pitch;
    CUresult cu = CUDA_SUCCESS;
    int st = stk__gpu_engine_one(g, h, &items[chunk[c]], p, &dst, &cu);
    if (st == 0) {
      p->have_src = 1;
    } else {
      CU(cu);
      fall_back(g, p);
      if (!failed++) first = st;
    }
  }
  for (int i = 0; i < L->nhs; i++) {
    hwstate *h = &L->hs[i];
    if (!h->used) continue;
    CU(stk__cu.EventRecord(h->done, h->stream));
    CU(stk__cu.StreamWaitEvent(L->stream, h->done, 0));
    h->used = 0;
  }
  L->t_hw += stk__now() - t;
  if (failed) {
    pthread_mutex_lock(&g->mu);
    g->st.hw_batch_failures += (uint64_t)failed;
    if (!g->hw_dec_failed_noted) { /* once: the count is in hw_batch_failures */
      g->hw_dec_failed_noted = 1;
      if (first < 0)
        stk__gpu_note(g, "the decoupled hardware decoder refused an image");
      else
        stk__gpu_note(g, "the decoupled hardware decoder failed an image: %s", stk__nj_status(first));
    }
    pthread_mutex_unlock(&g->mu);
  }
  return STK_OK;
}

/* The chunk's items planned for the hardware engines, in one batched call
 * (or, cfg.hw_states, one by one). A failed call routes them on, to the
 * hybrid decoder or the CPU. */
static int chunk_engines(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk,
                         int k, char *msg, size_t msglen) {
  int rc;
  int m = 0;
  chunk = engine_order(g, L, chunk, k);
  if (L->nhs && !atomic_load_explicit(&g->hw_batched, memory_order_relaxed))
    return engines_one_by_one(g, L, items, chunk, k, msg, msglen);
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
    stk__gpu_hw_pad(g, L, m);
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
        g->hw_roi = 0;
        g->st.hw_roi = 0;
        stk__gpu_note(g, "engine ROI off: 3 batches in a row failed with %s", stk__nj_status(st));
      }
    } else if (roi_used) {
      g->roi_fail_streak = 0;
    }
    pthread_mutex_unlock(&g->mu);
    if (st != NVJPEG_STATUS_SUCCESS) {
      /* The state must be initialised again after a failed batch; then each
       * item goes down the list on its own. */
      if ((rc = stk__gpu_hw_init_lane(g, L, L->hw_n, msg, msglen))) return rc;
      for (int i = 0; i < m; i++) fall_back(g, &L->plan[L->hw_item[i]]);
    } else {
      for (int i = 0; i < m; i++) L->plan[L->hw_item[i]].have_src = 1;
    }
  }
  return STK_OK;
}

/* The chunk's items already decoded by the loader's workers (STK__GPU_RGB8),
 * copied up through the lane's pinned staging. */
static int host_items(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk,
                      int k, char *msg, size_t msglen) {
  (void)s;
  for (int c = 0; c < k; c++) {
    iplan *p = &L->plan[chunk[c]];
    stk__gpu_item *it = &items[chunk[c]];
    if (p->path != STK__GPU_PATH_HOST || p->have_src || it->rc) continue;
    if (it->x > p->sx || it->y > p->sy || it->x + it->w < p->sx + p->sw ||
        it->y + it->h < p->sy + p->sh || !it->pixels) {
      item_fail(it, STK_EINVAL, "the pixels do not cover what the geometry reads");
      continue;
    }
    const uint8_t *src = it->pixels + (size_t)(p->sy - it->y) * it->stride + (size_t)(p->sx - it->x) * 3;
    int rc = upload_rows(g, L, L->arena + p->off, p->pitch, src, it->stride, (size_t)p->sw * 3,
                         p->sh, msg, msglen);
    if (rc) return rc;
    p->have_src = 1;
  }
  return STK_OK;
}

/* The chunk's items for stoker's own decoder (cpu) or, too large for the
 * arena or the kernel's window, for the CPU's decoder and resampler (big),
 * on this thread. */
static int cpu_items(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk,
                     int k, char *msg, size_t msglen, int path) {
  (void)s;
  for (int c = 0; c < k; c++) {
    iplan *p = &L->plan[chunk[c]];
    stk__gpu_item *it = &items[chunk[c]];
    if (p->path != path || p->have_src || it->rc) continue;
    int brc = 0;
    if ((path == STK__GPU_PATH_BIG ? big_item(g, L, it, p, msg, msglen, &brc)
                                   : cpu_decode(g, L, it, p, msg, msglen, &brc)) == STK_OK)
      p->have_src = 1;
    if (brc) return brc;
  }
  return STK_OK;
}

static int cpu_path(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk, int k,
                    char *msg, size_t msglen) {
  return cpu_items(g, L, s, items, chunk, k, msg, msglen, STK__GPU_PATH_CPU);
}

static int big_path(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk, int k,
                    char *msg, size_t msglen) {
  return cpu_items(g, L, s, items, chunk, k, msg, msglen, STK__GPU_PATH_BIG);
}

/* The chunk's items for nvJPEG's hybrid decoder, one by one on the aux
 * stream once the arena is free; one that fails is routed on (to the CPU,
 * later in the table). */
static int chunk_cuda(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk,
                      int k, char *msg, size_t msglen) {
  (void)s;
  CU(stk__cu.StreamWaitEvent(L->aux, L->ev_main, 0));
  for (int c = 0; c < k; c++) {
    iplan *p = &L->plan[chunk[c]];
    if (p->path != STK__GPU_PATH_CUDA || p->have_src || items[chunk[c]].rc) continue;
    if (hybrid_decode(g, L, &items[chunk[c]], p) == STK_OK)
      p->have_src = 1;
    else
      fall_back(g, p);
  }
  CU(stk__cu.EventRecord(L->ev_aux, L->aux));
  CU(stk__cu.StreamWaitEvent(L->stream, L->ev_aux, 0));
  return STK_OK;
}

/* The decoders, behind one interface: each takes the chunk's items routed
 * to its path that have no source yet, queues their sources into their
 * arena places, and routes on those it fails (route()). They run in this
 * order: the engines first, which then work while this thread copies and
 * decodes on the CPU; the hybrid decoder before the CPU, which takes what
 * it fails. route() only ever moves an item later in the table, so one
 * pass decodes every item that can be. */
typedef int (*decoder_fn)(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk,
                          int k, char *msg, size_t msglen);
static const struct {
  int path;
  int on_cpu; /* counted in t_cpu */
  decoder_fn run;
} decoders[] = {
    {STK__GPU_PATH_HW, 0, chunk_engines},  {STK__GPU_PATH_HOST, 1, host_items},
    {STK__GPU_PATH_BIG, 1, big_path},      {STK__GPU_PATH_CUDA, 0, chunk_cuda},
    {STK__GPU_PATH_CPU, 1, cpu_path},
};

static int run_decoders(stk__gpu *g, glane *L, gslot *s, stk__gpu_item *items, const int *chunk,
                        int k, char *msg, size_t msglen) {
  for (size_t d = 0; d < sizeof decoders / sizeof decoders[0]; d++) {
    int any = 0;
    for (int c = 0; c < k && !any; c++) {
      const iplan *p = &L->plan[chunk[c]];
      any = p->path == decoders[d].path && !p->have_src && items[chunk[c]].rc == STK_OK;
    }
    if (!any) continue;
    double t = stk__now();
    int rc = decoders[d].run(g, L, s, items, chunk, k, msg, msglen);
    if (decoders[d].on_cpu) L->t_cpu += stk__now() - t;
    if (rc) return rc;
  }
  return STK_OK;
}

/* The kernel's descriptors (at L->desc_host + base) of the chunk's items
 * that have their source; *n of them, and the largest filter windows.
 * Items the CPU finished ("big") are copied later. */
static void chunk_descriptors(const stk__gpu *g, glane *L, stk__gpu_item *items, const int *chunk,
                              int k, int base, int *nout, int *kxout, int *kyout) {
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
    q->filter = it->geom.x.filter; /* both axes have it (stk__geom_set_filter) */
    q->ow = it->out_w ? it->out_w : g->cfg.out_w;
    q->oh = it->out_h ? it->out_h : g->cfg.out_h;
    if (p->kx > kxm) kxm = p->kx;
    if (p->ky > kym) kym = p->ky;
  }
  *nout = n;
  *kxout = kxm;
  *kyout = kym;
}

/* cfg.profile: waits for the chunk and adds its device time up to the
 * kernel and of the kernel to the stats (events prof[0..2]). */
static int chunk_profile(stk__gpu *g, glane *L, gslot *s, char *msg, size_t msglen) {
  float a = 0, b = 0;
  CU(stk__cu.EventRecord(L->prof[2], s->stream));
  CU(stk__cu.EventSynchronize(L->prof[2]));
  CU(stk__cu.EventElapsedTime(&a, L->prof[0], L->prof[1]));
  CU(stk__cu.EventElapsedTime(&b, L->prof[1], L->prof[2]));
  pthread_mutex_lock(&g->mu);
  g->st.gpu_decode_seconds += a * 1e-3;
  g->st.gpu_kernel_seconds += b * 1e-3;
  pthread_mutex_unlock(&g->mu);
  return STK_OK;
}

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
  /* the decoders (their table's order lets the engines work while this
   * thread decodes on the CPU), then the kernel's descriptors */
  if ((rc = run_decoders(g, L, s, items, chunk, k, msg, msglen))) return rc;
  int n, kxm, kym;
  chunk_descriptors(g, L, items, chunk, k, base, &n, &kxm, &kym);
  stk__kitem *d = L->desc_host + base;
  int run_kernel = n > 0 && !g->cfg.decode_only;
  if (run_kernel)
    CU(stk__cu.MemcpyHtoDAsync(L->desc_dev + (CUdeviceptr)base * sizeof(stk__kitem), d,
                            (size_t)n * sizeof(stk__kitem), L->stream));
  if (g->cfg.profile) CU(stk__cu.EventRecord(L->prof[1], L->stream));
  /* then on the slot's stream, after the decoders and after the consumer
   * has let go of the slot: the kernel and the copies of finished images */
  if ((rc = slot_after_lane(g, L, s, msg, msglen))) return rc;
  if (run_kernel && (rc = launch(g, L, s, base, n, kxm, kym, msg, msglen))) return rc;
  for (int c = 0; c < k; c++) {
    iplan *p = &L->plan[chunk[c]];
    if (p->path != STK__GPU_PATH_BIG || !p->have_src) continue;
    int dst = items[chunk[c]].dst;
    CU(stk__cu.MemcpyDtoDAsync(work_out(g, s) + (CUdeviceptr)dst * g->work_bytes,
                            L->arena + p->off, g->work_bytes, s->stream));
    CU(stk__cu.MemcpyDtoDAsync(s->labels + (CUdeviceptr)dst * 8,
                            L->arena + p->off + align_up(g->work_bytes, 8), 8, s->stream));
  }
  CU(stk__cu.EventRecord(s->consumed, s->stream));
  s->consumed_pending = 1;
  return g->cfg.profile ? chunk_profile(g, L, s, msg, msglen) : STK_OK;
}

_Static_assert(STK_KAUG_OPS == STK__AUG_MAX_OPS, "the kernels' op list holds every drawn op");

/* cfg.aug: each item's draws as the kernels take them (stk__kaug), with
 * what must round as on the CPU computed here: the warps' grid
 * coefficients and the blur taps. Uploaded on the lane's stream once the
 * slot's previous batch has read its own (s->consumed); *naug items. */
static int upload_aug(stk__gpu *g, glane *L, gslot *s, int n, const stk__gpu_item *items, int *naug,
                      char *msg, size_t msglen) {
  const stk__aug_plan *ap = g->cfg.aug;
  int m = 0;
  for (int i = 0; i < n; i++) {
    const stk__gpu_item *it = &items[i];
    if (it->rc != STK_OK || !it->aug) continue;
    const stk__aug *a = it->aug;
    stk__kaug *k = &L->aug_host[m++];
    memset(k, 0, sizeof *k);
    k->dst = it->dst;
    k->filter = ap->filter;
    k->has_fill = ap->has_fill;
    memcpy(k->fill, ap->fill, sizeof k->fill);
    k->erase = a->erase;
    for (int b = 0; b < a->erase; b++) {
      k->ex[b] = a->ex[b];
      k->ey[b] = a->ey[b];
      k->ew[b] = a->ew[b];
      k->eh[b] = a->eh[b];
      k->erase_key[b] = a->erase_key[b];
    }
    k->erase_random = ap->erase_random;
    k->erase_per_channel = ap->erase_per_channel;
    memcpy(k->erase_value, ap->erase_value, sizeof k->erase_value);
    k->n = a->n;
    for (int j = 0; j < k->n; j++) {
      stk__kop *o = &k->op[j];
      o->kind = a->op[j].kind;
      o->ksize = a->op[j].ksize;
      o->mag = a->op[j].mag;
      o->warp = a->op[j].warp;
      if (o->kind >= STK__OP_SHEAR_X && o->kind <= STK__OP_ROTATE) {
        stk__warp w;
        stk__warp_of(o->kind, o->mag, g->cfg.out_w, g->cfg.out_h, &w);
        memcpy(o->m, &w, sizeof o->m);
      } else if (o->kind == STK__OP_BLUR) {
        if (o->ksize > STK_KAUG_TAPS) o->ksize = STK_KAUG_TAPS; /* options refuse it */
        stk__blur_taps(o->ksize, o->mag, k->blur);
      }
    }
  }
  *naug = m;
  if (!m) return STK_OK;
  if (s->consumed_pending) CU(stk__cu.StreamWaitEvent(L->stream, s->consumed, 0));
  CU(stk__cu.MemcpyHtoDAsync(s->aug_dev, L->aug_host, (size_t)m * sizeof(stk__kaug), L->stream));
  return STK_OK;
}

/* cfg.aug, on the slot's stream after the last chunk: the ops on the tiles,
 * and the tiles into the batch (normalised, erased), one launch. */
static int launch_aug(stk__gpu *g, glane *L, gslot *s, int naug, char *msg, size_t msglen) {
  /* the upload (on the lane's stream) before the kernels, whatever the
   * chunks did; and the consumer done with the slot's images */
  int rc = slot_after_lane(g, L, s, msg, msglen);
  if (rc) return rc;
  stk__kaugparams kp;
  memset(&kp, 0, sizeof kp);
  kp.items = s->aug_dev;
  kp.tiles = s->tiles;
  kp.scratch = s->scratch;
  kp.out = s->data;
  kp.lut = g->lut;
  kp.w = g->cfg.out_w;
  kp.h = g->cfg.out_h;
  kp.dtype = (int)g->cfg.dtype;
  kp.layout = (int)g->cfg.layout;
  kp.smem = g->aug_smem;
  kp.n = naug;
  void *args[] = {&kp};
  CU(stk__cu.LaunchKernel(g->fn_aug, (unsigned)naug, 1, 1, STK_AUG_THREADS, 1, 1,
                          g->aug_smem_bytes, s->stream,
                          args, NULL));
  /* the tiles, the scratch and the draws are free again after these */
  CU(stk__cu.EventRecord(s->consumed, s->stream));
  s->consumed_pending = 1;
  return STK_OK;
}

/* Launches the kernel over the chunk's descriptors (already uploaded), on
 * the slot's stream. */
static int launch(stk__gpu *g, glane *L, gslot *s, int base, int n, int kxm, int kym, char *msg,
                  size_t msglen) {
  stk__kparams kp;
  memset(&kp, 0, sizeof kp);
  kp.items = L->desc_dev + (CUdeviceptr)base * sizeof(stk__kitem);
  kp.out = work_out(g, s);
  kp.labels = s->labels;
  kp.lut = g->lut;
  kp.out_w = g->cfg.out_w;
  kp.out_h = g->cfg.out_h;
  kp.dtype = g->cfg.aug ? (int)STK_DTYPE_UINT8 : (int)g->cfg.dtype;
  kp.layout = g->cfg.aug ? (int)STK_LAYOUT_NHWC : (int)g->cfg.layout;
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

int stk__gpu_run_locked(stk__gpu *g, glane *L, gslot *s, int n, stk__gpu_item *items, char *msg,
                        size_t msglen) {
  int rc;
  /* The previous batch of this lane has decoded (L->done is recorded on
   * the lane's stream, before any wait for a consumer): the staging, the
   * host descriptors and nvJPEG's state are free again. */
  double ts = stk__now();
  L->t_plan = L->t_hw = L->t_cpu = L->t_sync = 0;
  CU(stk__cu.EventSynchronize(L->done));
  L->t_sync = stk__now() - ts;
  L->staging_used = 0;
  L->arena = s->arena;
  L->desc_dev = s->desc_dev;

  double t0 = stk__now();
  for (int i = 0; i < n; i++)
    if (items[i].rc == STK_OK) take_plan(g, L, &items[i], &L->plan[i]);
  L->t_plan += stk__now() - t0;
  int naug = 0;
  if (g->cfg.aug && (rc = upload_aug(g, L, s, n, items, &naug, msg, msglen))) return rc;

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
      if (big) p->path = route(g, p->path, ROUTE_TOO_BIG, NULL);
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
  if (g->cfg.aug && naug > 0 && (rc = launch_aug(g, L, s, naug, msg, msglen))) return rc;
  CU(stk__cu.EventRecord(s->ready, s->stream));
  s->written = 1;
  CU(stk__cu.EventRecord(L->done, L->stream));
  return STK_OK;
}

