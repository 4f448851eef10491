/*
 * pack.h: what stk_pack does beyond its public options, for `stoker pack`
 * and the tests (pack.c), and the tar shard writer it drives (tar.c).
 */
#ifndef STK_PACK_H
#define STK_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "sources/dataset.h"
#include "stoker.h"

typedef struct {
  double read_timeout; /* seconds a file read may take before the file is
                          left out ("read timed out after T s"), the list
                          file of a FIFO or pipe read as a whole; 0 = no
                          limit. stk_pack: 300, the loader's default */
  int check;           /* tar: decode every image in full, as a cache pack
                          does, so a truncated file is left out; 0 = its
                          header only (stk_pack) */
  /* Raw cache: called once before anything is written, with the estimated
   * size of the output, the bytes free where it goes (UINT64_MAX when
   * unknown) and how many files' headers the estimate read. When the
   * estimate exceeds the free bytes the pack then fails. May be NULL. */
  void (*estimate)(void *user, uint64_t bytes, uint64_t avail, int64_t sampled, int64_t files);
} stk__pack_extra;

void stk__pack_extra_init(stk__pack_extra *x);

/* stk_pack with the extra settings (x NULL = stk__pack_extra_init's). */
int stk__pack_ex(const stk_pack_options *o, const stk__pack_extra *x, int header_version,
                 stk_pack_result *res, char *err, size_t errlen);

/* The engine under both: packs ds (opened from o's source) into o's
 * format. stk__tar_pack is this with x NULL. */
int stk__pack_dataset(const stk_pack_options *o, const stk__pack_extra *x, const stk__dataset *ds,
                      stk_pack_result *res, char *err, size_t errlen);

/* The temporary name the output is written under until it is renamed:
 * OUTPUT.tmp-PID, for a cache a file and for tar shards a folder (OUTPUT
 * without its trailing slashes). 0, or -1 when it does not fit. */
int stk__pack_tmp_path(const char *output, long pid, char *buf, size_t n);

/* ---- the tar shard writer (tar.c) ---- */
typedef struct stk__tar_writer stk__tar_writer;

/* Checks that o->output does not exist or is an empty folder and creates
 * its temporary folder. */
int stk__tar_writer_open(stk__tar_writer **tw, const stk_pack_options *o, char *err,
                         size_t errlen);
/* Appends sample i (its file `file`, label) as KEY.jpg or KEY.png and
 * KEY.cls, opening and closing shards at o->shard_bytes. */
int stk__tar_writer_add(stk__tar_writer *tw, int64_t i, const char *file, int png,
                        const uint8_t *data, size_t len, int32_t label, stk_pack_result *res,
                        char *err, size_t errlen);
/* Closes the last shard, writes classes.txt and renames the folder to the
 * output; on failure (or when rc is not STK_OK) removes what was written.
 * Frees tw. Returns rc, or the first error of its own. */
int stk__tar_writer_finish(stk__tar_writer *tw, int rc, const stk__dataset *ds,
                           stk_pack_result *res, char *err, size_t errlen);

#endif
