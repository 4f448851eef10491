/*
 * fuzz_shard_index.c: the reader of a tar shard's saved scan
 * (stk__tar_index_load): the .stkidx that `stoker pack --tar` writes beside
 * a shard, or the copy the index folder keeps, which a remote dataset's
 * open reads instead of the shard. Input: the index file. As in
 * fuzz_index.c, the harness seals its copy's checksum first (as a forger
 * would), and reads it for the key it names, so that the fields behind
 * both checks are reached. An index beside a shard names the shard's size
 * ("beside\nSIZE"), which is the size the harness gives (else 1 MiB):
 * every member the index lists must lie inside the shard.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  /* the first byte: classes.txt's count (0: none) */
  int nclasses = data[0] % 8;
  size_t n = size - 1;
  uint8_t *f = malloc(n ? n : 1);
  if (!f) abort();
  memcpy(f, data + 1, n);
  stk__tar_index_seal(f, n);
  char key[256] = "";
  if (n > 16) {
    const uint8_t *z = memchr(f + 16, 0, n - 16);
    size_t kl = z ? (size_t)(z - (f + 16)) : sizeof key;
    if (kl < sizeof key) memcpy(key, f + 16, kl + 1);
  }
  /* the shard's size: the one the key names, else 1 MiB */
  unsigned long long shard_size = 1u << 20;
  if (sscanf(key, "beside\n%llu", &shard_size) != 1) shard_size = 1u << 20;
  stk__dataset ds;
  uint64_t *span = NULL;
  char msg[512];
  int rc = stk__tar_index_load(f, n, key, "s3://b/shard-000000.tar", shard_size, nclasses, &ds,
                               &span, msg, sizeof msg);
  free(f);
  fuzz_note("shard_index: rc %d, %lld samples: %s", rc, (long long)ds.n, rc ? msg : "");
  FUZZ_CHECK(rc == STK_OK || rc == STK_EFORMAT || rc == STK_ESTALE || rc == STK_ENOMEM);
  if (rc == STK_OK) {
    for (int64_t i = 0; i < ds.n; i++) {
      const char *p = stk__dataset_path(&ds, i);
      FUZZ_CHECK(!strncmp(p, "s3://b/shard-000000.tar:", 24));
      FUZZ_CHECK(ds.labels[i] >= 0 && ds.labels[i] < (nclasses ? nclasses : STK__TAR_LABEL_MAX));
      uint64_t off = span[2 * i], len = span[2 * i + 1];
      /* a member after its header, inside the shard; (0, 0) for a stand-in */
      if (off || len) FUZZ_CHECK(off >= 512 && off <= shard_size && len <= shard_size - off);
    }
  } else {
    FUZZ_CHECK(ds.n == 0 && ds.arena == NULL && span == NULL);
  }
  stk__dataset_free(&ds);
  free(span);
  return 0;
}
