/*
 * fuzz_list.c: the list-file parser (stk__dataset_from_list_buffer, which
 * the file reader calls). Input: the list's bytes. A table it accepts has
 * at least one sample, and every label is a class (numbered, not yet
 * named: the source names them when it opens).
 */
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  stk__dataset ds;
  char msg[512];
  /* The first byte picks whether relative paths start from the list's
   * folder or from a base folder given apart, as list_base does. */
  const char *base = size && (data[0] & 1) ? "/data/base" : NULL;
  int rc = stk__dataset_from_list_buffer(&ds, (const char *)data, size, "dir/train.txt", base,
                                         msg, sizeof msg);
  fuzz_note("list: rc %d, %lld samples: %s", rc, (long long)ds.n, rc ? msg : "");
  if (rc == STK_OK) {
    FUZZ_CHECK(ds.n > 0 && ds.nclasses > 0);
    for (int64_t i = 0; i < ds.n; i++) {
      FUZZ_CHECK(ds.labels[i] >= 0 && ds.labels[i] < ds.nclasses);
      FUZZ_CHECK(stk__dataset_path(&ds, i)[0] != '\0');
    }
    /* the classes are the label numbers 0..max, named later */
    FUZZ_CHECK(ds.classes == NULL);
  } else {
    FUZZ_CHECK(ds.n == 0 && ds.arena == NULL && ds.classes == NULL);
  }
  stk__dataset_free(&ds);
  return 0;
}
