/*
 * fuzz_index.c: the folder-index reader (stk__index_read). Input: the index
 * file. Its checksum would stop almost every mutation at the first check,
 * so the harness always seals its copy first (as a forger would) and the
 * field checks behind it are reached; test_index.c covers the checksum's
 * own refusals. The root the index is read for is the one it
 * records, so that a mutated file is also judged on its paths; the folder
 * checks then stat that tree, which mismatches and stops there.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/index.h"

#define HEADER 96

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *f = malloc(size ? size : 1);
  if (!f) abort();
  memcpy(f, data, size);
  stk__index_seal(f, size);
  char path[512], root[256] = "/nonexistent";
  snprintf(path, sizeof path, "%s/index.stkidx", fuzz_tmpdir());
  fuzz_write(path, f, size);
  /* the recorded root, when there is a terminated one of a sane length */
  if (size > HEADER) {
    const uint8_t *z = memchr(f + HEADER, 0, size - HEADER);
    size_t n = z ? (size_t)(z - (f + HEADER)) : sizeof root;
    if (n < sizeof root) memcpy(root, f + HEADER, n + 1);
  }
  free(f);
  stk__dataset ds;
  char why[512];
  int rc = stk__index_read(path, root, root, &ds, NULL, why, sizeof why);
  fuzz_note("index: rc %d: %s", rc, rc ? why : "");
  FUZZ_CHECK(rc == STK__INDEX_USED || rc == STK__INDEX_ABSENT || rc == STK__INDEX_CORRUPT ||
             rc == STK__INDEX_STALE || rc == STK_ENOMEM);
  if (rc == STK__INDEX_USED) {
    /* every sample below the root, in a class */
    size_t rl = strlen(root);
    for (int64_t i = 0; i < ds.n; i++) {
      const char *p = stk__dataset_path(&ds, i);
      FUZZ_CHECK(strncmp(p, root, rl) == 0 && !strstr(p + rl, "/../"));
      FUZZ_CHECK(ds.labels[i] >= 0 && ds.labels[i] < ds.nclasses);
    }
  } else {
    FUZZ_CHECK(ds.n == 0 && ds.arena == NULL);
  }
  stk__dataset_free(&ds);
  return 0;
}
