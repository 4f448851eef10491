/*
 * fuzz_cache.c: the pre-decoded cache reader: stk__cache_open, then a few
 * samples through the source's ops (pixels or bytes), each verified.
 *
 * Input: the cache file. Its header and index carry checksums that a
 * mutation would almost never match, which would stop every input at the
 * first check; so unless bit 0 of the header's reserved field is set, the
 * harness writes the right checksums into its copy first and the bounds
 * checks behind them are reached. It also empties the source folder the
 * cache names, so that a mutated name never makes the open scan a folder
 * of this machine for staleness (that is the point of the name, not a
 * parser's).
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/cache_format.h"
#include "sources/source.h"

/* Where the source description starts in the file, when the header's
 * fields place it inside [0, size); 0 otherwise. */
static size_t source_desc(const stk__cache_header *hd, size_t size) {
  uint64_t off = hd->meta_off, len = hd->meta_len;
  if (off > size || len > size - off) return 0;
  if (hd->n > len / sizeof(stk__cache_entry)) return 0;
  uint64_t at = off + hd->n * sizeof(stk__cache_entry);
  if (hd->names_len > size || hd->classes_len > size) return 0;
  at += hd->names_len + hd->classes_len;
  return at < off + len ? (size_t)at : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < sizeof(stk__cache_header)) return 0;
  uint8_t *f = malloc(size);
  if (!f) abort();
  memcpy(f, data, size);
  stk__cache_header hd;
  memcpy(&hd, f, sizeof hd);
  if (!(hd.reserved & 1)) {
    size_t at = source_desc(&hd, size);
    if (at) {
      /* the kind, then the folder: its first byte ends it */
      const uint8_t *end = memchr(f + at, '\0', (size_t)(hd.meta_off + hd.meta_len - at));
      if (end && (size_t)(end + 1 - f) < hd.meta_off + hd.meta_len) f[end + 1 - f] = '\0';
    }
    if (hd.meta_off <= size && hd.meta_len <= size - hd.meta_off)
      hd.meta_hash = stk__hash64(f + hd.meta_off, (size_t)hd.meta_len, 0);
    hd.header_hash = stk__hash64(&hd, offsetof(stk__cache_header, header_hash), 0);
    memcpy(f, &hd, sizeof hd);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/fuzz.stkc", fuzz_tmpdir());
  fuzz_write(path, f, size);
  free(f);

  stk_options opt;
  stk_options_init(&opt);
  stk__source s;
  memset(&s, 0, sizeof s);
  char msg[512];
  int rc = stk__cache_open(&s, path, &opt, msg, sizeof msg);
  fuzz_note("cache: rc %d, %lld samples: %s", rc, (long long)s.ds.n, rc ? msg : "");
  if (rc == STK_OK) {
    FUZZ_CHECK(s.ds.n > 0 && s.ds.nclasses > 0 && s.ops->verify);
    FUZZ_CHECK((s.ops->read != NULL) != (s.ops->pixels != NULL));
    stk__buf buf = {0};
    for (int64_t i = 0; i < s.ds.n && i < 4; i++) {
      FUZZ_CHECK(s.ds.labels[i] >= 0 && s.ds.labels[i] < s.ds.nclasses);
      if (s.ops->pixels) {
        stk__pixels px;
        if (s.ops->pixels(&s, i, &px, msg, sizeof msg) == STK_OK) {
          FUZZ_CHECK(px.w > 0 && px.h > 0 && px.stride == (size_t)px.w * 3);
          for (int y = 0; y < px.h; y++) fuzz_touch(px.px + (size_t)y * px.stride, px.stride);
        }
      } else {
        stk__bytes b;
        if (s.ops->read(&s, i, &buf, 0, &b, msg, sizeof msg) == STK_OK) fuzz_touch(b.data, b.len);
      }
      s.ops->verify(&s, i, msg, sizeof msg);
    }
    stk__buf_free(&buf);
    stk_cache_encoding enc;
    int max_side, quality;
    FUZZ_CHECK(stk__cache_describe(&s, &enc, &max_side, &quality) == STK_OK);
  }
  stk__source_close(&s);
  return 0;
}
