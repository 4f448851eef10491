/*
 * bounded_read.h: reads that give up after a timeout, for the tools that
 * read files outside the loader (stk_pack, stoker check).
 *
 * A read() on a hung network mount cannot be interrupted, so the read runs
 * in a helper thread and the caller waits for it at most `timeout` seconds.
 * A helper that overruns is abandoned: it owns its buffer and a copy of
 * its request, and frees them itself when its read returns, so nothing the
 * caller frees is touched afterwards. The next read starts a new helper.
 * With timeout 0 the read runs in the caller's thread, as before.
 */
#ifndef STK_BOUNDED_READ_H
#define STK_BOUNDED_READ_H

#include <stdint.h>

#include "core/common.h"
#include "sources/source.h"

typedef struct stk__bread_ctx stk__bread_ctx;

typedef struct {
  double timeout;       /* seconds; 0 = no limit */
  stk__bread_ctx *ctx;  /* the live helper, NULL before the first read */
  stk__buf own;         /* the buffer of reads without a helper */
  uint64_t abandoned;   /* helpers left behind in reads that overran */
} stk__bounded_reader;

void stk__bounded_init(stk__bounded_reader *br, double timeout_s);
/* Ends the live helper (a stuck one has already been left behind). */
void stk__bounded_free(stk__bounded_reader *br);

/* The whole file `path`, as stk__read_whole_file reads it; the bytes are
 * valid until the next read through br. A read past the timeout fails with
 * STK_EIO and "read timed out after T s", the loader's wording. */
int stk__bounded_read_file(stk__bounded_reader *br, const char *path, uint64_t max_bytes,
                           stk__bytes *out, char *msg, size_t msglen);

/* Sample i of src through its read op. src must stay open while a helper
 * may still be in it: a caller that saw br->abandoned > 0 keeps it open. */
int stk__bounded_read_sample(stk__bounded_reader *br, const stk__source *src, int64_t i,
                             uint64_t max_bytes, stk__bytes *out, char *msg, size_t msglen);

/* Helpers abandoned by every reader so far that have not yet returned. */
int64_t stk__bounded_stuck(void);

#endif
