/*
 * source.h: where samples come from. The loader, the CPU pipeline and the
 * GPU back end see only this interface; each storage format is one
 * implementation of it, in one file of src/sources/:
 *
 *   folder.c  an ImageFolder tree (root/<class>/<image>), with an index
 *   list.c    a list file of "path label" lines
 *   cache.c   a pre-decoded cache file (.stkc): raw RGB8 or re-encoded JPEG
 *   tar.c     WebDataset tar shards (key.jpg / key.png + key.cls members)
 *
 * Every source fills the same sample table (stk__dataset: a name for
 * messages, a label per sample, the class names) and gives sample i either
 * as encoded bytes, which the pipeline decodes, or as decoded RGB8 pixels,
 * which it only resamples. A source may also say in which order an epoch
 * visits its samples on a rank (tar shards: shard by shard); the default is
 * DistributedSampler's.
 *
 * Threads: read() and pixels() are called from every worker thread at once,
 * with per-call buffers; a source's own state is read-only after open.
 */
#ifndef STK_SOURCE_H
#define STK_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "sources/dataset.h"
#include "sources/sampler.h"
#include "stoker.h"

/* Decoded pixels of one sample, lent by the source: valid until the source
 * is closed. Rows of interleaved RGB8, `stride` bytes apart. */
typedef struct {
  const uint8_t *px;
  size_t stride;
  int w, h;
} stk__pixels;

/* Encoded bytes of one sample: either copied into the caller's buffer, or
 * lent from the source's memory (a mapped cache); valid until the buffer is
 * next used or the source is closed. */
typedef struct {
  const uint8_t *data;
  size_t len;
  uint64_t bytes_read; /* bytes taken from storage, for the statistics */
} stk__bytes;

typedef struct stk__source stk__source;

typedef struct {
  const char *kind; /* "folder", "list", "cache", "tar" */
  /* Encoded bytes of sample i. The reason for a failure (without the
   * sample's name) goes to msg. NULL for sources of decoded pixels. */
  int (*read)(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
              stk__bytes *out, char *msg, size_t msglen);
  /* Decoded pixels of sample i, or NULL for sources of encoded bytes. */
  int (*pixels)(const stk__source *s, int64_t i, stk__pixels *out, char *msg, size_t msglen);
  /* This rank's order for an epoch: sampler->num_samples sample indices
   * into out. NULL = DistributedSampler's order (stk__sampler_epoch). */
  void (*order)(const stk__source *s, stk__sampler *sampler, uint64_t epoch, int64_t *out);
  /* Checks the stored bytes of sample i against their checksum (sources
   * that keep one: the cache); NULL = nothing to check beyond decoding. */
  int (*verify)(const stk__source *s, int64_t i, char *msg, size_t msglen);
  /* Frees what open allocated (the table is freed by stk__source_close). */
  void (*close)(stk__source *s);
  /* Remote sources (NULL for the others). plan: the n samples idx[] of a
   * batch just started will be read soon, in this order (their bytes are
   * requested now). plan_reset: the batches planned were dropped. cancel:
   * the loader is closing; reads in flight fail at once. */
  void (*plan)(const stk__source *s, const int64_t *idx, int n, uint64_t epoch);
  void (*plan_reset)(const stk__source *s);
  void (*cancel)(const stk__source *s);
  /* The network's counters (remote sources; NULL for the others). */
  void (*net_stats)(const stk__source *s, stk_stats *out);
  /* How many samples sample i stands for when its read fails (a damaged
   * shard's stand-in: those the shard lost), for max_skipped_fraction.
   * NULL = 1 each. */
  int64_t (*weight)(const stk__source *s, int64_t i);
} stk__source_ops;

struct stk__source {
  const stk__source_ops *ops;
  stk__dataset ds;     /* names, labels, class names */
  void *impl;          /* the implementation's state */
  int shuffle_buffer;  /* for sources with their own order */
  char note[256];      /* a warning for the user ("" = none), e.g. a stale cache */
};

/* Opens the source the options name: opt->list_file, or opt->root, which
 * may be an image folder, a cache file, or a folder (or one file) of tar
 * shards, the kind detected from the content; or tar shards at a URL
 * (s3://bucket/prefix/, s3:// or http(s):// names with {a..b} ranges). */
int stk__source_open(stk__source *s, const stk_options *opt, char *msg, size_t msglen);
void stk__source_close(stk__source *s);

/* The detected kind of `path` without opening it: "cache", "tar", "folder"
 * or NULL (does not exist / unknown). */
const char *stk__source_detect(const char *path);

/* This rank's order of an epoch (the source's own, or the sampler's). */
void stk__source_order(const stk__source *s, stk__sampler *sampler, uint64_t epoch, int64_t *out);

/* The implementations' entry points (source.c dispatches). */
int stk__folder_open(stk__source *s, const stk_options *opt, char *msg, size_t msglen);
int stk__list_open(stk__source *s, const stk_options *opt, char *msg, size_t msglen);
int stk__cache_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                    size_t msglen);
int stk__tar_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                  size_t msglen);

/* A cache source's encoding, bound and quality; STK_EINVAL for others. */
int stk__cache_describe(const stk__source *s, stk_cache_encoding *enc, int *max_side,
                        int *quality);

/* The ops of the file-based sources (a sample's name is its path). */
extern const stk__source_ops stk__folder_ops, stk__list_ops;

#endif
