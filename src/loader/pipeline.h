/*
 * pipeline.h: everything that happens to one sample, on one worker thread:
 * fetch the sample from its source, read the header, choose the crop, decode only what the crop
 * needs, resample it into its place in the batch slot.
 *
 * The plan is built once per loader and only read afterwards, but for its
 * decode budget (stk__budget, changed under its own mutex; stk__plan_free
 * destroys it); the worker state is per thread and reused from sample to
 * sample.
 */
#ifndef STK_PIPELINE_H
#define STK_PIPELINE_H

#include <pthread.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "ops/augment.h"
#include "ops/ops.h"
#include "sources/bounded_read.h"
#include "sources/source.h"
#include "stoker.h"

/* The decode memory of a loader (max_decode_bytes), shared by its worker
 * threads: each decode takes its share (its output pixels and the buffers
 * its header asks for) before it starts and gives it back once its pixels
 * are resampled. A decode that does not fit waits for others to finish; one
 * larger than the whole budget fails at once, naming the option. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t total, used; /* bytes; total 0 = no budget */
  int on;               /* initialised by stk__plan_init */
} stk__budget;

typedef struct {
  stk_pipeline pipeline;
  int size, resize;
  float scale[2], ratio[2], flip_prob;
  int max_denom;             /* 1 = no DCT scaling */
  int filter;                /* stk_interpolation: the resampling filter */
  uint64_t seed;
  uint64_t max_file_bytes, max_pixels;
  uint64_t max_decode_bytes; /* the decoder's budget, when max_decode_bytes_set
                                (a zeroed plan keeps the decoder's default) */
  int max_decode_bytes_set;
  stk__store store;
  size_t image_bytes;        /* one output image */
  stk__store store_rgb8;     /* GPU loaders: images the workers finish on the
                                CPU are resampled to raw RGB8 (uint8, NHWC,
                                unnormalised) and normalised on the GPU */
  stk__aug_plan aug;         /* the augmentations after the crop (aug.on) */
  stk__budget budget;        /* loaders only (a plan zeroed by hand has none) */
  size_t keep;               /* a worker's buffers past this are freed after
                                its sample (0: a zeroed plan, never) */
} stk__plan;

/* One sample between its header and its pixels. */
typedef struct {
  const uint8_t *data;       /* the file's bytes (encoded sources) */
  size_t len;
  int raw;                   /* decoded pixels from the source: px */
  stk__pixels px;
  stk__image_info info;
  stk__geom geom;            /* full-resolution coordinates */
  int denom;                 /* DCT scale the CPU decoder should use */
  stk__aug aug;              /* what the augmentations drew (plan->aug.on) */
} stk__sample;

typedef struct {
  stk__decoder *dec;
  stk__resampler rs;
  stk__buf file;
  stk__buf tile, aug_scratch, aug_mix; /* the augmentations' 8-bit tile, the
                                          ops' scratch, AugMix's chains */
  double t_read, t_decode, t_augment; /* seconds spent in the last sample */
  uint64_t bytes;                     /* bytes read for the last sample */
  /* Called right after the sample's bytes (or pixels) are fetched, before
   * anything is written outside the worker: nonzero = the position was
   * taken away meanwhile (its read timed out, or a reset dropped it), and
   * stk__sample_prepare returns STK__ELOST without going on. NULL = none.
   * The loader uses it to make a stuck read harmless (loader.c). */
  int (*on_read)(void *ctx);
  void *on_read_ctx;
  /* Added to the sample index in the key of the sample's random draws: the
   * loader sets copy * n for copy k of an index that repeated augmentation
   * (ra_reps) repeats, so that its copies are augmented apart. 0 = the key
   * is the index itself. */
  uint64_t key_offset;
  uint64_t held;                      /* this worker's share of plan->budget */
} stk__worker;

/* Internal: the sample's position was taken away during its read. */
#define STK__ELOST (-1000)

/* Fills a plan from loader options (already validated). */
void stk__plan_init(stk__plan *p, const stk_options *o);

int stk__worker_init(stk__worker *w, const stk__plan *p);
void stk__worker_free(stk__worker *w);

/* Fetches sample `index` from the source (its encoded bytes into `file`,
 * or its decoded pixels, lent), reads its header and makes every random
 * choice for (epoch, index): s describes what to decode and where to put it.
 * On failure returns a code and the reason (without the name) in msg. */
int stk__sample_prepare(const stk__plan *p, stk__worker *w, const stk__source *src,
                        stk__buf *file, uint64_t epoch, int64_t index, stk__sample *s, char *msg,
                        size_t msglen);

/* Decodes on the CPU the region of `s` that its crop reads, at the DCT scale
 * s->denom: *reg (the worker's decoder owns its pixels until its next
 * decode; a pre-decoded sample's are lent in place) and *g, the geometry in
 * the decoded image's coordinates, which stk__resampler_run reads it with;
 * *need (when not NULL): the rectangle of *reg the resampler reads. */
int stk__sample_decode(const stk__plan *p, stk__worker *w, const stk__sample *s, stk__geom *g,
                       stk__region *reg, stk__rect *need, char *msg, size_t msglen);

/* Gives back the share of the decode budget stk__sample_decode took, once
 * the region it gave is no longer read, and frees the worker's buffers that
 * an outsized image grew past plan->keep. stk__sample_finish_cpu calls it;
 * a caller of stk__sample_decode calls it itself. Safe to call twice. */
void stk__sample_release(const stk__plan *p, stk__worker *w);

/* Gives the heap's free memory back to the system (glibc keeps what is
 * freed below its mmap threshold): after an outsized image, and once a
 * loader, a check or a pack has freed its buffers. */
void stk__trim_heap(void);

/* Frees what stk__plan_init set up. */
void stk__plan_free(stk__plan *p);

/* The region stk__sample_decode gave, resampled (and augmented) into dst as
 * `store` says; the worker's resampler keeps the plan that call made. */
int stk__sample_resample(const stk__plan *p, stk__worker *w, const stk__sample *s,
                         const stk__region *reg, const stk__store *store, void *dst, char *msg,
                         size_t msglen);

/* Both: decodes the region `s` needs on the CPU and resamples it into dst,
 * written as `store` says (&p->store for the batch, or &p->store_rgb8). */
int stk__sample_finish_cpu(const stk__plan *p, stk__worker *w, const stk__sample *s,
                           const stk__store *store, void *dst, char *msg, size_t msglen);

/* prepare + finish_cpu: sample `index` of `epoch` into dst
 * (plan->image_bytes), through the worker's own file buffer. */
int stk__process_sample(const stk__plan *p, stk__worker *w, const stk__source *src,
                        uint64_t epoch, int64_t index, void *dst, char *msg, size_t msglen);

/* What check and pack share with the loader (one set of limits):
 *
 * stk__plan_refuses: STK_ELIMIT, with the loader's own message, when the
 * loader of plan p would refuse an image of this header for its decode
 * memory (eval: the decode its one geometry takes; train: the most any
 * crop RandomResizedCrop draws can take, which bounds each DCT scale's
 * tallest crop); STK_OK otherwise, or a resampler failure. */
int stk__plan_refuses(const stk__plan *p, stk__worker *w, const stk__image_info *info, char *msg,
                      size_t msglen);

/* The whole image of s (its data, len and info) decoded at 1/denom into
 * *reg, its share of p's budget taken first and held until
 * stk__sample_release. A decode larger than the whole budget waits for all
 * of it and runs alone (check's and pack's whole decodes are not the
 * loader's, which decodes a region: stk__plan_refuses says what it
 * refuses). */
int stk__whole_decode(const stk__plan *p, stk__worker *w, const stk__sample *s, int denom,
                      stk__region *reg, char *msg, size_t msglen);

/* The largest image, in pixels, that plan p decodes whole in any format:
 * max_pixels, or fewer where max_decode_bytes holds fewer (3 bytes a pixel,
 * and a MiB for the libraries; a format's own buffers lower it further). */
uint64_t stk__plan_pixel_ceiling(const stk__plan *p);

/* stoker check: sample i of a source decoded in full (and its checksum
 * verified, where the source keeps one). Size to *w, *h when not NULL. */
int stk__check_sample(const stk__source *src, int64_t i, const stk_options *opt, int *w, int *h,
                      char *msg, size_t msglen);
/* The same with the sample's read through br (its bytes; a cache's pixels
 * are mapped, not read). */
int stk__check_sample_bounded(const stk__source *src, int64_t i, const stk_options *opt,
                              stk__bounded_reader *br, int *w, int *h, char *msg, size_t msglen);

#endif
