/*
 * fuzz_s3_list.c: the S3 listing parser (stk__s3_list_page, which
 * stk__net_list runs on each page of a ListObjectsV2 response). Input: the
 * response body, as the server sent it (not NUL-terminated). The first
 * byte picks the bucket's name and whether the page is appended to the
 * objects of an earlier page, as a listing's later pages are.
 */
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *bucket = data[0] & 1 ? "b" : "my.bucket-01";
  stk__net_object *v = NULL;
  int count = 0, cap = 0, more = 0;
  char token[1024] = "";
  int rc = STK_OK;
  char msg[512];
  if (data[0] & 2) /* a page before this one */
    rc = stk__s3_list_page("<Contents><Key>first</Key><Size>1</Size></Contents>", 52, bucket,
                           &v, &count, &cap, token, sizeof token, &more, msg, sizeof msg);
  FUZZ_CHECK(rc == STK_OK && count == (data[0] & 2 ? 1 : 0));
  int before = count;
  rc = stk__s3_list_page((const char *)data + 1, size - 1, bucket, &v, &count, &cap, token,
                         sizeof token, &more, msg, sizeof msg);
  fuzz_note("s3_list: rc %d, %d objects, more %d: %s", rc, count - before, more, rc ? msg : "");
  FUZZ_CHECK(rc == STK_OK || rc == STK_EFORMAT || rc == STK_ENOMEM);
  FUZZ_CHECK(rc == STK_OK || !more);
  FUZZ_CHECK(count >= before && count <= cap);
  /* a page holds at most one object per <Contents> */
  FUZZ_CHECK((size_t)(count - before) <= size / 21);
  size_t bl = strlen(bucket);
  for (int i = 0; i < count; i++) {
    /* every object is in the bucket, its size one a file can have */
    FUZZ_CHECK(!strncmp(v[i].url, "s3://", 5) && !strncmp(v[i].url + 5, bucket, bl) &&
               v[i].url[5 + bl] == '/');
    FUZZ_CHECK(v[i].size <= (uint64_t)INT64_MAX);
    FUZZ_CHECK(memchr(v[i].etag, 0, sizeof v[i].etag) != NULL);
    size_t el = strlen(v[i].etag);
    FUZZ_CHECK(!el || (v[i].etag[0] != '"' && v[i].etag[el - 1] != '"'));
  }
  FUZZ_CHECK(memchr(token, 0, sizeof token) != NULL);
  FUZZ_CHECK(!more || token[0]);
  stk__net_objects_free(v, count);
  return 0;
}
