/*
 * gpu.h: the GPU back end. JPEG decoding with nvJPEG (the hardware JPEG
 * engines where the GPU has them), then one fused CUDA kernel per batch that
 * crops, resamples (Pillow's antialiased bilinear filter, bit-exact with
 * src/ops/resample.c on the same source pixels), flips, normalises and writes
 * the batch tensor in its final dtype and layout straight into device memory.
 *
 * One build serves machines with and without a GPU: libcuda.so.1 and
 * libnvjpeg.so.* are opened at run time (dlopen), only the CUDA driver API is
 * used (no cudart dependency of our own), and the kernels are compiled at
 * build time into a fatbin that is embedded in the library. A build without
 * nvcc has no kernels: stk__gpu_open() then fails with STK_ENODEV.
 *
 * Objects
 * -------
 *  - a gpu (stk__gpu) owns: the device's primary context (retained), the
 *    kernel module, nvJPEG handles, `slots` output slots and `lanes` lanes.
 *  - a slot is where one batch lands: max_batch images of out_w x out_h in
 *    the configured dtype/layout, max_batch int64 labels, a device arena for
 *    the batch's decoded source pixels, a stream for everything that writes
 *    the output, and a "ready" event recorded after the last such write.
 *  - a lane is one batch in flight: a CUDA stream, nvJPEG decode states,
 *    pinned staging memory and a CPU decoder for fallbacks. run_batch()
 *    takes a free lane for the duration of the call, so up to `lanes`
 *    threads can run batches at the same time (host-side work of one
 *    overlaps device work of another).
 *
 * Every device and pinned buffer is allocated by stk__gpu_open(); running a
 * batch allocates nothing of ours (nvJPEG's internal buffers are pre-sized at
 * open by a warm-up decode).
 *
 * How one item is decoded (run_batch), in order of preference:
 *   1. "hw":   nvJPEG batched decode on the hardware JPEG engines
 *              (NVJPEG_BACKEND_HARDWARE), of only the region the geometry
 *              reads (ROI) when the engine accepts it, else the whole image;
 *   2. "cuda": nvJPEG's hybrid decoder (CPU Huffman + CUDA), ROI only; for
 *              JPEGs the hardware refuses (progressive, odd sampling);
 *   3. "cpu":  stoker's own decoder (libjpeg-turbo) on the calling thread,
 *              region only, copied up through pinned memory; for everything
 *              nvJPEG cannot do or does differently from PIL (CMYK/YCCK, RGB-
 *              coded JPEGs, files without an end marker, corrupt files it
 *              rejects, PNG);
 *   4. "host": an item that is already decoded RGB8 (STK__GPU_RGB8) is copied
 *              up through pinned memory;
 *   5. "big":  an item whose source region does not fit the lane's arena is
 *              decoded and resampled on the CPU (src/ops) and only the
 *              finished image is copied up.
 * Failures move an item down the list; only a failure of the last resort
 * fails the item (its rc), never the batch.
 *
 * Synchronisation: nothing here synchronises the device. run_batch() waits
 * (on the host) only for the previous batch of the same lane to have been
 * decoded, then queues the decoding into the slot's arena on the lane's
 * stream, and the kernel on the slot's stream, and records the slot's ready
 * event. The consumer makes its stream wait on that event
 * (cuStreamWaitEvent / torch.cuda.Stream.wait_event), and gives the slot
 * back with stk__gpu_slot_release(), which records a "free" event on the
 * consumer's stream. Only the slot's stream waits for that event, just
 * before the kernel: decoding never waits for a consumer that still reads
 * the slot (while training, the step that reads it may not have started
 * yet), and nvJPEG's calls, which block the calling thread on the lane's
 * stream, never block behind a training step. All our streams have the
 * device's greatest priority: our kernels are short, and a batch should not
 * wait for the blocks of a training step's kernels queued before it.
 *
 * Errors: every CUDA or nvJPEG failure is returned as STK_ECUDA with the
 * failing call and the library's own error name in msg; nothing aborts.
 * A sticky CUDA error (e.g. a faulting kernel) poisons the gpu: every later
 * call returns STK_ECUDA.
 *
 * Threads: stk__gpu_run_batch() may be called from up to `lanes` threads at
 * once (more wait for a lane), for different slots: calls for one slot must
 * not overlap. The slot functions may be called from any thread.
 * stk__gpu_close() must not race with other calls.
 */
#ifndef STK_GPU_H
#define STK_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ops/augment.h"
#include "ops/ops.h"
#include "stoker.h"

typedef struct stk__gpu stk__gpu;

typedef struct {
  int max_batch;          /* most items of one run_batch() call. 256 */
  int out_w, out_h;       /* output image size. 224 x 224 */
  stk_dtype dtype;        /* STK_DTYPE_FLOAT32 */
  stk_layout layout;      /* STK_LAYOUT_NCHW */
  float mean[3], std[3];  /* on the 0..1 scale, as stk_options. ImageNet's */
  int slots;              /* output slots. 4 */
  int lanes;              /* batches in flight at once. 2 */
  size_t arena_bytes;     /* per slot, device memory for decoded source
                             regions; 0 = max_batch * 768 KiB. A batch whose
                             sources do not fit is run in several chunks. */
  size_t staging_bytes;   /* per lane, pinned host memory for sources decoded
                             on the CPU; 0 = max(64 MiB, max_batch * 256 KiB) */
  int use_hw;             /* use the hardware JPEG engines when present. 1 */
  int use_cuda;           /* use nvJPEG's hybrid decoder for the JPEGs the
                             engines refuse. 1 */
  int roi;                /* decode only the region the resampler reads. 1 */
  int chroma_interp;      /* ask nvJPEG for interpolated (libjpeg-like)
                             chroma upsampling. 0. With it the engines' output
                             is bit-identical to libjpeg-turbo's for most
                             files (mean PSNR of the pipeline ~98 dB instead
                             of ~85 dB), but on an H200 the engines then run
                             3.5x slower (4,200 instead of 14,500 img/s). */
  uint64_t max_pixels;    /* limit for the CPU fallback decoder (see
                             stk_options.max_pixels). 178956970 */
  int planners;           /* header parsers for stk__gpu_plan_ahead(), one per
                             thread that calls it. 0 */
  int decode_only;        /* benchmarks: decode, but launch no kernel. 0 */
  int profile;            /* benchmarks: time the device's decode and kernel
                             work per chunk (waits for each chunk). 0 */
  int fail_cuda;          /* tests: the hybrid decoder fails every item, so
                             that its fallback runs. 0 */
  unsigned hw_flags;      /* benchmarks: nvJPEG flags (NVJPEG_FLAGS_*) added
                             to the hardware handle's, e.g. 1 for
                             HW_DECODE_NO_PIPELINE. 0 */
  int hw_sort;            /* the engines' batch in the order of chroma
                             subsampling, then source size: the same pixels,
                             and on an H200 with 2 lanes 18,300 instead of
                             17,100 img/s (train crops, kernel included) and
                             18,400 instead of 15,200 (decode alone). 1 */
  int hw_states;          /* the engines driven one image at a time through
                             nvJPEG's decoupled hardware decoder (host phase,
                             transfer, device phase), round-robin over this
                             many states per lane, each on its own stream with
                             two pinned buffers; 0: one batched call per
                             chunk. Beside a training model the decoupled
                             decoder feeds it better, alone the batched call
                             is faster (docs/gpu.md): the loader sets 4, the
                             pack keeps 0. 0 */
  const stk__aug_plan *aug; /* the augmentations after the crop
                             (augment.h), or NULL. With them the fused
                             kernel writes 8-bit tiles, which the
                             augmentation kernels turn into the batch;
                             every item then carries its draws (aug). */
  int mix_classes;        /* > 0: every slot also holds a mixed copy of its
                             batch and its soft labels of this many
                             columns, written by stk__gpu_slot_mix. 0 */
} stk__gpu_config;

/* Fills the defaults above. */
void stk__gpu_config_init(stk__gpu_config *c);

typedef enum {
  STK__GPU_JPEG = 0, /* encoded bytes (normally JPEG; anything stk__decoder
                        reads is accepted and decoded on the CPU) */
  STK__GPU_RGB8 = 1, /* already decoded 8-bit RGB in host memory */
} stk__gpu_kind;

/* How an item was decoded (stk__gpu_item.path). */
enum {
  STK__GPU_PATH_NONE = 0,
  STK__GPU_PATH_HW,   /* hardware engines, batched */
  STK__GPU_PATH_CUDA, /* nvJPEG hybrid (CPU Huffman + CUDA) */
  STK__GPU_PATH_CPU,  /* stoker's CPU decoder, source copied up */
  STK__GPU_PATH_HOST, /* an STK__GPU_RGB8 item, copied up */
  STK__GPU_PATH_BIG,  /* decoded and resampled on the CPU, image copied up */
  STK__GPU_NPATHS
};

/* What the planning of one item decided, and where its source goes in the
 * arena (private to src/gpu/; in the item so that the planning can be done
 * ahead, see stk__gpu_plan_ahead()). */
typedef struct {
  int planned;           /* stk__gpu_plan_ahead() filled it: run_batch() takes it */
  int path;              /* planned STK__GPU_PATH_* */
  int sx, sy, sw, sh;    /* the source rectangle to decode / copy (geometry coords) */
  int img_w, img_h;      /* JPEG: the image size as nvJPEG reads it (0: unknown) */
  int roi;               /* hardware: decode the rectangle only */
  size_t off, pitch;     /* place in the arena (set by run_batch) */
  int have_src;          /* the source is (queued to be) in the arena */
  int kx, ky;            /* Pillow's ksize per axis */
  int vfirst;            /* the CPU resampler would run the vertical pass first */
  int css;               /* JPEG: nvJPEG's chroma subsampling, -1 unknown */
} stk__gpu_pre;

typedef struct {
  stk__gpu_kind kind;
  /* STK__GPU_JPEG: the file's bytes, valid until run_batch() returns. */
  const uint8_t *data;
  size_t len;
  /* STK__GPU_RGB8: rows of interleaved RGB, `stride` bytes apart; pixel
   * (0,0) of the buffer is pixel (x, y) of the geometry's coordinates and the
   * buffer is w x h. It must cover what the geometry reads (the `need`
   * rectangle of stk__resampler_plan()), e.g. an stk__region from
   * stk__decoder_decode(). Valid until run_batch() returns. */
  const uint8_t *pixels;
  size_t stride;
  int x, y, w, h;
  /* Where output pixel (i, j) samples the source, as in ops.h. For JPEG
   * items: in full-resolution coordinates of the file (stk__geom_crop /
   * stk__geom_eval on the header's size, not downscaled). geom.x.out and
   * geom.y.out must equal out_w, out_h (or the item's own size below).
   * geom.flip mirrors the output. */
  stk__geom geom;
  /* 0, 0: the image is cfg.out_w x cfg.out_h. Otherwise the item's own
   * output size, at most cfg.out_w x cfg.out_h, with cfg.dtype UINT8,
   * cfg.layout NHWC and no cfg.aug: its out_w * out_h * 3 bytes are packed
   * at the start of image dst (a pack writes each image at its own size). */
  int out_w, out_h;
  int64_t label;      /* written to the slot's device labels at [dst] */
  int dst;            /* image index in the slot, 0..max_batch-1 */
  stk__gpu_pre pre;   /* zero, or filled by stk__gpu_plan_ahead() */
  const stk__aug *aug; /* with cfg.aug: what was drawn for the item
                         (valid until run_batch() returns) */
  /* results */
  int rc;             /* STK_OK, or why this item failed (its image and label
                         in the slot are then left as they were) */
  int path;           /* STK__GPU_PATH_* that produced it */
  char *msg;          /* optional: the failure reason goes here */
  size_t msglen;
} stk__gpu_item;

typedef struct {
  uint64_t batches, items, failed;
  uint64_t path[STK__GPU_NPATHS]; /* items per path */
  uint64_t chunks;                /* kernel launches (> batches: arena too small) */
  uint64_t hw_batch_failures;     /* batched hardware decodes that failed as a whole
                                     (cfg.hw_states: images the decoupled decoder
                                     failed or refused) */
  uint64_t hw_roi_full;           /* hardware items decoded whole: ROI refused */
  double host_seconds;            /* summed over threads, inside run_batch() */
  double host_plan_seconds;       /* of which: reading headers, choosing paths */
  double host_hw_seconds;         /*   inside the engines' batched decode call */
  double host_cpu_seconds;        /*   decoding and copying on the CPU */
  double host_lane_wait_seconds;  /*   waiting for a free lane */
  double host_sync_seconds;       /*   waiting for the lane's previous decode */
  double gpu_decode_seconds;      /* cfg.profile: device time up to the kernel */
  double gpu_kernel_seconds;      /* cfg.profile: device time of the kernel */
  uint64_t device_bytes;          /* device memory we allocated */
  uint64_t device_bytes_used;     /* device memory in use after open minus
                                     before (includes nvJPEG and the context) */
  uint64_t pinned_bytes;          /* pinned host memory we allocated */
  uint64_t late_allocs;           /* device/pinned allocations nvJPEG made
                                     after open (process-wide: all gpus) */
  int hw_available;               /* the hardware engines are in use */
  int hw_states;                  /* the decoupled decoder's states per lane in
                                     use (cfg.hw_states), 0: the batched call */
  int hw_roi;                     /* ROI decode on the engines is in use */
  int chroma_interp;              /* interpolated chroma upsampling is on */
  int cuda_available;             /* the hybrid decoder is in use */
  char notes[320];                /* why a decode path is off, "" if none */
} stk__gpu_stats;

/* Opens CUDA device `device` and allocates everything for cfg. On failure
 * returns STK_ENODEV (no driver, no such device, build without kernels),
 * STK_ECUDA, STK_EINVAL or STK_ENOMEM, with the reason in msg. */
int stk__gpu_open(int device, const stk__gpu_config *cfg, stk__gpu **out, char *msg,
                  size_t msglen);

/* Frees everything: waits for the gpu's own streams first. NULL is a no-op. */
void stk__gpu_close(stk__gpu *g);

/* Whether a file whose header is `in` goes to the GPU's decoders at all:
 * the first rule of the one decision where a file is decoded (route() in
 * decode.c). 0 for what a CPU decodes: not a JPEG, progressive, neither
 * grey nor 3 components. The loader's GPU sink decodes those on its CPU
 * workers; a device pack's items meet the same rule in the planning, and
 * take the device's CPU path. */
int stk__gpu_takes_header(const stk__image_info *in);

/* Plans a JPEG item (reads its header with nvJPEG, chooses its decoder and
 * the region to decode) on the calling thread, before run_batch(): the
 * planning then leaves the lane, whose thread is what bounds the engines'
 * rate (one lane's batch holds its thread ~25 ms in the engines' call and
 * ~3.5 ms in planning). `who` picks one of cfg.planners parsers; when it is
 * in use by another thread (or there is none), nothing is done and
 * run_batch() plans the item itself. The loader passes the position, so
 * that workers, which mostly hold neighbouring positions, meet free parsers. The item's data, len and geom
 * must be set; the result goes to it->pre. Thread-safe. */
void stk__gpu_plan_ahead(stk__gpu *g, int who, stk__gpu_item *it);

/* Decodes and resamples items[0..n) (n <= max_batch) into slot `slot`, each
 * into image items[i].dst, and records the slot's ready event. Returns STK_OK
 * when the batch was queued (check items[i].rc), or STK_EINVAL / STK_ECUDA /
 * STK_ENOMEM for the batch as a whole. A slot may receive several calls (to
 * fill holes); its ready event then covers all of them. */
int stk__gpu_run_batch(stk__gpu *g, int slot, int n, stk__gpu_item *items, char *msg,
                       size_t msglen);

/* The slot's images (CUdeviceptr, as a pointer), its max_batch int64 labels
 * on the device, and its ready event (CUevent). */
void *stk__gpu_slot_data(stk__gpu *g, int slot);
int64_t *stk__gpu_slot_labels(stk__gpu *g, int slot);
void *stk__gpu_slot_event(stk__gpu *g, int slot);
size_t stk__gpu_image_bytes(const stk__gpu *g);

/* The consumer is done with the slot once the work queued so far on
 * `consumer_stream` (a CUstream; NULL = the context's default stream)
 * completes: the next write into the slot waits for that on the device. */
int stk__gpu_slot_release(stk__gpu *g, int slot, void *consumer_stream, char *msg, size_t msglen);

/* MixUp or CutMix (m, as stk__mix_draw drew it) of a finished batch of n
 * images in the gpu's output shape, dtype and layout: dst = src mixed with
 * itself rolled by one, as stk__mix_apply mixes a host batch (the same
 * values); and, when soft is not 0, the soft labels float32[n][classes]
 * from the int64 labels. All device addresses of this gpu's context; dst
 * must not overlap src. Queued on `stream` (a CUstream); nothing waits. */
typedef struct {
  uint64_t src, dst, labels, soft;
  int n, classes;
  float on, off; /* the soft labels' one-hot values: 1 and 0, or label smoothing's */
} stk__gpu_mix_io;
int stk__gpu_mix(stk__gpu *g, const stk__mix *m, const stk__gpu_mix_io *io, void *stream,
                 char *msg, size_t msglen);

/* cfg.mix_classes > 0: MixUp or CutMix of the first n images of `slot`
 * into the slot's mixed copy, and their soft labels (one-hot values on and
 * off), on the slot's stream after everything written into it so far; the
 * slot's ready event is recorded again after it. *data and *soft: the
 * device addresses of the mixed images and of the soft labels. */
int stk__gpu_slot_mix(stk__gpu *g, int slot, const stk__mix *m, int n, float on, float off,
                      void **data, float **soft, char *msg, size_t msglen);

/* Makes `stream` (a CUstream; NULL = the legacy default stream) wait on the
 * device for the slot's ready event; the calling thread does not wait. */
int stk__gpu_slot_wait_on(stk__gpu *g, int slot, void *stream, char *msg, size_t msglen);

/* Blocks the calling thread until the slot's ready event has completed. */
int stk__gpu_slot_wait(stk__gpu *g, int slot, char *msg, size_t msglen);

/* Moves images and labels inside a slot to close holes: image k becomes
 * image from[k], for k in [0, n); from[] must be increasing with from[k] >= k.
 * Queued after the slot's last writes; re-records its ready event. */
int stk__gpu_slot_compact(stk__gpu *g, int slot, int n, const int *from, char *msg,
                          size_t msglen);

/* Tests and tools: waits for the slot, then copies `bytes` of its images (and,
 * when labels != NULL, n labels) to host memory. */
int stk__gpu_download(stk__gpu *g, int slot, void *host, size_t bytes, int64_t *labels, int n,
                      char *msg, size_t msglen);

/* Copies the first bytes[k] (at most an image's) of the slot's image
 * index[k] to host[k], for k < n, after the slot's last writes, and waits
 * for them: items of their own size (a pack). host[] should be pinned
 * (stk__gpu_host_alloc): pageable memory is copied at a fraction of the rate. */
int stk__gpu_download_images(stk__gpu *g, int slot, int n, const int *index, const size_t *bytes,
                             void *const *host, char *msg, size_t msglen);

/* Pinned host memory of g's context, and its release (NULL is a no-op). */
int stk__gpu_host_alloc(stk__gpu *g, size_t bytes, void **p, char *msg, size_t msglen);
void stk__gpu_host_free(stk__gpu *g, void *p);

/* Whether the engines can be driven both ways (cfg.hw_states > 0 and the
 * decoupled decoder opened): only then does the next call choose. */
int stk__gpu_engine_ways(const stk__gpu *g);
/* How many batches can be decoding at once (threads in run_batch). */
int stk__gpu_lanes(const stk__gpu *g);
/* Drives the engines by the batched call (on = 1) or through the decoupled
 * decoder (0) from the next chunk a lane decodes; the pixels are the same
 * either way. Any thread may call it. */
void stk__gpu_set_engine_batched(stk__gpu *g, int on);

void stk__gpu_get_stats(stk__gpu *g, stk__gpu_stats *out);

/* For `stoker info`: human-readable lines about the GPUs, the driver,
 * nvJPEG (version, hardware engines) and whether this build has kernels.
 * Never fails: without a GPU it says why. Returns STK_OK when at least one
 * usable device was found, STK_ENODEV otherwise. */
int stk__gpu_probe(char *buf, size_t len);

/* 1 when this build embeds the CUDA kernels (nvcc was found). */
int stk__gpu_built(void);

#endif
