/*
 * fuzz_hf_tree.c: what comes from the Hugging Face Hub when an hf:// folder
 * is listed: a page of its tree API (stk__hf_tree_page, untrusted JSON, not
 * NUL-terminated) and the Link header that leads to the next page
 * (stk__link_next). The first byte picks what the input is: bit 0 a Link
 * header's value, else a page, appended to an earlier page's file when
 * bit 1 is set, as a listing's later pages are.
 */
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/hub.h"

static void link_header(const uint8_t *data, size_t size) {
  char *v = malloc(size + 1);
  if (!v) abort();
  memcpy(v, data, size);
  v[size] = '\0';
  char out[256];
  int got = stk__link_next(v, out, sizeof out);
  FUZZ_CHECK(got == 0 || got == 1);
  /* the URL is what stood between '<' and '>' in the header */
  FUZZ_CHECK(!got || (strlen(out) < sizeof out && strstr(v, out) && !strchr(out, '>')));
  fuzz_note("hf_tree: link %s", got ? out : "(none)");
  free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if (data[0] & 1) {
    link_header(data + 1, size - 1);
    return 0;
  }
  const char *root = "hf://datasets/o/n@refs%2Fpr%2F1";
  stk__net_object *v = NULL;
  int count = 0, cap = 0, rc = STK_OK;
  char msg[512];
  static const char first[] = "[{\"type\":\"file\",\"path\":\"a.tar\",\"size\":1,\"oid\":\"x\"}]";
  if (data[0] & 2) rc = stk__hf_tree_page(first, sizeof first - 1, root, &v, &count, &cap, msg,
                                          sizeof msg);
  FUZZ_CHECK(rc == STK_OK && count == (data[0] & 2 ? 1 : 0));
  int before = count;
  rc = stk__hf_tree_page((const char *)data + 1, size - 1, root, &v, &count, &cap, msg,
                         sizeof msg);
  fuzz_note("hf_tree: rc %d, %d files: %s", rc, count - before, rc ? msg : "");
  FUZZ_CHECK(rc == STK_OK || rc == STK_EFORMAT || rc == STK_ENOMEM);
  FUZZ_CHECK(count >= before && count <= cap);
  /* an entry is at least {"type":"file","path":"x","size":0}: 34 bytes */
  FUZZ_CHECK((size_t)(count - before) <= size / 34);
  size_t rl = strlen(root);
  for (int i = 0; i < count; i++) {
    /* every file is in the repository, under its root, its path no way
     * out of it, its size one a file can have */
    const char *p = v[i].url + rl + 1;
    FUZZ_CHECK(!strncmp(v[i].url, root, rl) && v[i].url[rl] == '/' && *p && *p != '/');
    FUZZ_CHECK(!strstr(p, "//") && strcmp(p + strlen(p) - 1, "/"));
    FUZZ_CHECK(strncmp(p, "../", 3) && !strstr(p, "/../") && strcmp(p, ".."));
    FUZZ_CHECK(v[i].size <= (uint64_t)INT64_MAX);
    FUZZ_CHECK(memchr(v[i].etag, 0, sizeof v[i].etag) != NULL);
  }
  stk__net_objects_free(v, count);
  return 0;
}
