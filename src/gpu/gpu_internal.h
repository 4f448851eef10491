/*
 * gpu_internal.h: what the parts of the GPU back end share, private to
 * src/gpu/. gpu.c makes and frees the objects below (stk__gpu_open/close),
 * takes a lane for each batch and runs the slot operations; decode.c runs
 * one batch on a lane: the planning, the decode paths and the launch of the
 * fused kernel. gpu.c calls into decode.c, never the other way; both report
 * through status.c.
 */
#ifndef STK_GPU_INTERNAL_H
#define STK_GPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "gpu/binding.h"
#include "gpu/gpu.h"
#include "gpu/kernel_abi.h"

#define DUMMY_SIDE 16

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
  CUdeviceptr tiles, scratch, aug_dev; /* cfg.aug: 8-bit tiles, their scratch,
                                          the items' draws (stk__kaug) */
  CUdeviceptr mixed, soft; /* cfg.mix_classes: the mixed batch, its soft labels */
  CUstream stream;
  CUevent ready, freed, consumed;
  int written;          /* ready was recorded at least once */
  int freed_pending;    /* freed was recorded by a release: the next write waits */
  int consumed_pending; /* consumed was recorded: the next decode waits */
} gslot;

/* cfg.hw_states: one state of the decoupled hardware decoder. Two pinned
 * buffers and two stream parsers, so that the host phase of an image can
 * run while the previous image's transfer may still read the other. */
typedef struct {
  nvjpegJpegState_t state;
  nvjpegBufferPinned_t pinned[2];
  nvjpegBufferDevice_t dev;
  nvjpegJpegStream_t js[2];
  nvjpegDecodeParams_t params;
  CUstream stream;
  CUevent done;
  int buf;  /* the buffer of the last image whose host phase succeeded */
  int used; /* work queued in this chunk, not yet joined to the lane */
} hwstate;

/* What run_batch() decided for one item (gpu.h). */
typedef stk__gpu_pre iplan;

typedef struct {
  CUstream stream, aux;    /* aux: the hybrid decoder, joined back by events */
  CUevent done, ev_main, ev_aux, decoded;
  CUevent prof[3]; /* cfg.profile: chunk start, before the kernel, after it */
  double t_plan, t_hw, t_cpu, t_sync; /* host seconds, this batch */
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
  /* cfg.hw_states */
  hwstate *hs;
  int nhs, hs_next;
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
  stk__kaug *aug_host;         /* cfg.aug: the batch's draws, pinned */
  /* CPU fallbacks */
  stk__decoder *dec;
  stk__resampler rs;
  stk__buf big;
  /* per batch */
  iplan *plan;
  int *chunk;
  int *order; /* cfg.hw_sort: the chunk's positions, sorted for the engines */
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
  CUfunction fn, fn_aug, fn_mix;
  int aug_smem;                /* STK_AUG_SMEM_*, and the dynamic shared bytes it takes */
  unsigned aug_smem_bytes;
  stk__store store;
  size_t image_bytes;
  /* what the fused kernel and the CPU-finished ("big") images write: the
   * batch's images, or with cfg.aug the 8-bit tiles the augmentation
   * kernels read */
  stk__store work_store;
  size_t work_bytes;
  CUdeviceptr lut;
  uint64_t pool_at_open; /* stk__pool_fresh() at the end of open */
  int prio;      /* the greatest stream priority: our work is small and
                    should not queue behind a training step's kernels */
  nvjpegHandle_t hw, gen;
  nvjpegJpegDecoder_t hy_dec;
  nvjpegJpegDecoder_t hw_dec; /* cfg.hw_states: the decoupled hardware decoder */
  _Atomic int hw_batched;     /* with states: the batched call for now instead
                                 (stk__gpu_set_engine_batched), read per chunk */
  int hw_dec_failed_noted;    /* the decoupled decoder's first failure is in the notes */
  /* the engines' regions are in use; read by workers planning ahead while a
   * lane may switch it off */
  _Atomic int hw_roi;
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

/* status.c */
/* Returns STK_ECUDA for a failed CUDA call (a sticky error poisons g). */
int stk__gpu_fail(stk__gpu *g, CUresult r, const char *what, char *msg, size_t msglen);
/* Remembers why a decode path is off (stats.notes). */
void stk__gpu_note(stk__gpu *g, const char *fmt, ...) STK__PRINTF(2, 3);

/* decode.c */
/* (Re)initialises the lane's engines' state for batches of n. */
int stk__gpu_hw_init_lane(stk__gpu *g, glane *L, int n, char *msg, size_t msglen);
/* Fills the engines' batch from position m on with the padding image. */
void stk__gpu_hw_pad(stk__gpu *g, glane *L, int m);
/* cfg.hw_states: one image (its plan p) through state h into dst; 0, -1
 * when refused, or nvJPEG's failure (a failed wait on h's stream also sets
 * *cu). */
int stk__gpu_engine_one(stk__gpu *g, hwstate *h, const stk__gpu_item *it, const iplan *p,
                        nvjpegImage_t *dst, CUresult *cu);
/* Runs n items into slot s on lane L (the context current, the lane taken). */
int stk__gpu_run_locked(stk__gpu *g, glane *L, gslot *s, int n, stk__gpu_item *items, char *msg,
                        size_t msglen);

#define CU(call)                                              \
  do {                                                        \
    CUresult r_ = (call);                                     \
    if (r_ != CUDA_SUCCESS) return stk__gpu_fail(g, r_, #call, msg, msglen); \
  } while (0)

#define NJ(call)                                                                             \
  do {                                                                                       \
    nvjpegStatus_t s_ = (call);                                                              \
    if (s_ != NVJPEG_STATUS_SUCCESS)                                                         \
      return stk__fail(msg, msglen, STK_ECUDA, "%s: %s", #call, stk__nj_status(s_));               \
  } while (0)

static inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Arena room for an item of the "big" path: its finished image, then its
 * label, both copied into the slot afterwards. */
static inline size_t big_need(const stk__gpu *g) { return align_up(align_up(g->work_bytes, 8) + 8, 256); }

/* Where the fused kernel writes slot s's images (see work_bytes). */
static inline CUdeviceptr work_out(const stk__gpu *g, const gslot *s) {
  return g->cfg.aug ? s->tiles : s->data;
}

/* An item fails alone, with its reason. */
static inline void item_fail(stk__gpu_item *it, int rc, const char *why) {
  it->rc = rc;
  if (it->msg && it->msglen) snprintf(it->msg, it->msglen, "%s", why);
}

#endif
