/*
 * pack.h: what the two producers of stk_pack share: the reorder ring and
 * its states, and the device producer's entry points (pack_device.c).
 *
 * Producers (the CPU threads of pack.c, or the device threads of
 * pack_device.c) claim samples in order, fill their ring entries, and mark
 * them done; the ordered loop (pack.c) hands done entries to the writer
 * (sources/pack_writer.h) strictly in sample order. The ring bounds memory:
 * a producer claims only within nring samples of the loop.
 *
 *   FREE --claim--> CLAIMED --fill--> DONE --loop writes--> FREE
 *                                          \--loop places--> PLACED --producer writes--> FREE
 *
 * PLACED is a device pack's: the loop only gives each result its offset in
 * the output, and the device thread that made a block writes the whole
 * block there once every entry of it is placed (one thread copying several
 * GB/s into the page cache would bound the pack).
 */
#ifndef STK_PACK_H
#define STK_PACK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "sources/dataset.h"
#include "loader/pipeline.h"
#include "sources/pack_writer.h"
#include "stoker.h"

typedef enum { SLOT_FREE, SLOT_CLAIMED, SLOT_DONE, SLOT_PLACED } stk__pack_slot;

/* One entry of the reorder ring: sample i's result. */
typedef struct {
  stk__pack_slot state;
  uint64_t off;  /* PLACED: where its bytes go in the output */
  int rc;
  char msg[256];
  uint8_t *data; /* malloc'd (jpeg), in buf (raw, tar) or, with `lent`, in
                    a device thread's pinned buffer until it writes it */
  int lent;
  int cpu;       /* made by a CPU producer (a device pack has both kinds) */
  size_t len;
  stk__buf buf;
  int w, h;
  const char *ext; /* tar: the member's extension, from the content */
  uint64_t hash;
  stk__cache_stat fst; /* the source file as it was before the read */
} stk__pack_result;

typedef struct stk__gpu stk__gpu;

typedef struct {
  const stk_pack_options *o;
  const stk__plan *plan;  /* the limits and the decode budget the CPU
                             producers share, as a loader's workers do */
  const stk__dataset *ds;
  const stk__pack_writer_ops *wops;
  void *writer;
  stk__pack_result *ring;
  int64_t nring;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t next_claim, written;
  int stop;
  /* device packs (pack_device.c) */
  stk__gpu *gpu;
  int next_slot;          /* each device thread takes one */
  int dev_rc;             /* a failure of the GPU itself stops the pack */
  char dev_msg[320];
  int64_t device_items;   /* decoded on the GPU (stk_pack_result.device_packed) */
  uint8_t **pinned;       /* a pinned buffer per device thread */
  int device_threads;     /* of the producers, how many are device threads */
  /* What each kind of producer did, under mu: busy seconds and files, from
   * which a device pack stops its device threads when the CPU producers
   * alone are faster (stk__pack_device_slower) */
  double cpu_busy_s;
  int64_t cpu_done, dev_done;
  double dev_t0, dev_t1; /* the first device block's claim; the device's stop */
  int cpu_threads;
  int dev_stopped;
} stk__packer;

/* Mutex held: whether the device threads pack slower than the CPU
 * producers could alone, once both have done enough to tell. The device's
 * rate is its files per second since its first block (its threads share
 * the GPU, so their busy times overlap); the CPU's, its files per busy
 * second times its threads (the CPU producers wait behind the device's
 * blocks, which their rate must not count). *dev and *cpu get the rates. */
int stk__pack_device_slower(const stk__packer *pk, double *dev, double *cpu);

/* The cache's bytes of an image of nw x nh RGB8 pixels px (in r->buf or a
 * pinned buffer): the pixels themselves, or their JPEG; and their hash. */
void stk__pack_finish_result(const stk_pack_options *o, stk__pack_result *r, uint8_t *px, int nw,
                             int nh);
/* The source file's stat before it is read, into r->fst. */
void stk__pack_stat_source(const char *path, stk__pack_result *r);
/* Frees what r holds beyond its buffer (encoded bytes), unless lent. */
void stk__pack_result_release(stk__pack_result *r);

/* ---- the device producer (pack_device.c) ---- */
#define STK__PACK_DEV_BLOCK 64 /* files of one GPU batch: a device thread's claim */

/* Opens device o->device with a slot and a pinned block per thread, for at
 * most *threads threads (fewer where pinned memory runs short: *threads
 * says how many). Before anything is written: a missing device fails the
 * pack at once. */
int stk__pack_device_open(stk__packer *pk, int *threads, char *err, size_t errlen);
void stk__pack_device_close(stk__packer *pk, int threads);
/* A device thread (stk__workers_spawn's function; arg: the packer). */
void stk__pack_device_main(void *arg);
/* Why a device pack stopped (pk->dev_rc set) after `done` of n files. */
int stk__pack_device_failure(const stk__packer *pk, int64_t done, int64_t n, char *err,
                             size_t errlen);

#endif
