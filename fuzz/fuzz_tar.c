/*
 * fuzz_tar.c: the WebDataset tar reader: stk__tar_open on one shard, then
 * a few samples read through the source's ops, and its epoch order.
 *
 * Input: one control byte, then the shard. Control bit 0: a classes.txt
 * goes beside the shard, its length in the next two bytes (little-endian)
 * and its bytes after them, the shard after that. Bit 1: the shard file is
 * opened by its path rather than through its folder. Bit 2: the order is
 * shuffled, with a shuffle buffer.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/sampler.h"
#include "sources/source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int flags = data[0];
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  char dir[512], shard[600], classes[600];
  snprintf(dir, sizeof dir, "%s/shards", fuzz_tmpdir());
  snprintf(shard, sizeof shard, "%s/shard-000000.tar", dir);
  snprintf(classes, sizeof classes, "%s/classes.txt", dir);
  static int made;
  if (!made) {
    if (mkdir(dir, 0755) != 0) abort();
    made = 1;
  }
  unlink(classes);
  if (flags & 1) {
    if (n < 2) return 0;
    size_t cl = (size_t)p[0] | (size_t)p[1] << 8;
    p += 2;
    n -= 2;
    if (cl > n) cl = n;
    fuzz_write(classes, p, cl);
    p += cl;
    n -= cl;
  }
  fuzz_write(shard, p, n);

  stk_options opt;
  stk_options_init(&opt);
  stk__source s;
  memset(&s, 0, sizeof s);
  char msg[512];
  int rc = stk__tar_open(&s, flags & 2 ? shard : dir, &opt, msg, sizeof msg);
  fuzz_note("tar: rc %d, %lld samples: %s%s", rc, (long long)s.ds.n, rc ? msg : "", s.note);
  if (rc == STK_OK) {
    FUZZ_CHECK(s.ds.n > 0 && s.ds.nclasses > 0 && s.ops->read);
    stk__buf buf = {0};
    for (int64_t i = 0; i < s.ds.n && i < 4; i++) {
      FUZZ_CHECK(s.ds.labels[i] >= 0 && s.ds.labels[i] < s.ds.nclasses);
      stk__bytes b;
      if (s.ops->read(&s, i, &buf, 1 << 20, &b, msg, sizeof msg) == STK_OK)
        fuzz_touch(b.data, b.len);
    }
    stk__buf_free(&buf);
    /* The epoch order visits every sample once on one rank. */
    stk__sampler sp;
    if (s.ds.n <= 4096 &&
        stk__sampler_init(&sp, s.ds.n, 0, 1, (flags & 4) != 0, 0, 7) == STK_OK) {
      s.shuffle_buffer = flags & 4 ? 3 : 0;
      int64_t *order = malloc((size_t)sp.num_samples * sizeof *order);
      char *seen = calloc((size_t)s.ds.n, 1);
      if (order && seen) {
        stk__source_order(&s, &sp, 1, order);
        for (int64_t j = 0; j < sp.num_samples; j++) {
          FUZZ_CHECK(order[j] >= 0 && order[j] < s.ds.n && !seen[order[j]]);
          seen[order[j]] = 1;
        }
      }
      free(order);
      free(seen);
      stk__sampler_free(&sp);
    }
  }
  stk__source_close(&s);
  return 0;
}
