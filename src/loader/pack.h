/*
 * pack.h: the engine under stk_pack (pack.c) for the tar source's tests,
 * and the tar shard writer it drives (tar.c).
 */
#ifndef STK_PACK_H
#define STK_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "sources/dataset.h"
#include "stoker.h"

/* The engine under stk_pack: packs ds (opened from o's source) into o's
 * format. stk__tar_pack is this too. */
int stk__pack_dataset(const stk_pack_options *o, const stk__dataset *ds, stk_pack_result *res,
                      char *err, size_t errlen);

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
/* Appends sample i (its file `file`, label) as KEY.<ext> (jpg, png, webp,
 * tif, bmp, ppm or pgm: the content's format) and KEY.cls, opening and
 * closing shards at o->shard_bytes. */
int stk__tar_writer_add(stk__tar_writer *tw, int64_t i, const char *file, const char *ext,
                        const uint8_t *data, size_t len, int32_t label, stk_pack_result *res,
                        char *err, size_t errlen);
/* Closes the last shard, writes classes.txt and renames the folder to the
 * output; on failure (or when rc is not STK_OK) removes what was written.
 * Frees tw. Returns rc, or the first error of its own. */
int stk__tar_writer_finish(stk__tar_writer *tw, int rc, const stk__dataset *ds,
                           stk_pack_result *res, char *err, size_t errlen);

#endif
