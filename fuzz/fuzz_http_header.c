/*
 * fuzz_http_header.c: the HTTP response header parser (stk__http_header,
 * the requests' header callback). Input: the header lines of a response,
 * split at '\n' and handed over one at a time with their line ends, as
 * libcurl hands them (each in a buffer of its own, not NUL-terminated).
 * What a header says must be read from the header alone: a status is a
 * three-digit code, a size one a file can have.
 */
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "fuzz.h"
#include "sources/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  stk__http_head h;
  memset(&h, 0, sizeof h);
  for (size_t at = 0; at < size;) {
    const uint8_t *nl = memchr(data + at, '\n', size - at);
    size_t n = nl ? (size_t)(nl - (data + at)) + 1 : size - at;
    /* a copy of exactly n bytes: the sanitizers see a read past it */
    char *line = malloc(n ? n : 1);
    if (!line) abort();
    memcpy(line, data + at, n);
    long before = h.status;
    int status_line = stk__http_header(&h, line, n);
    free(line);
    at += n;
    FUZZ_CHECK(status_line == 0 || status_line == 1);
    FUZZ_CHECK(status_line || h.status == before);
    FUZZ_CHECK(h.status == 0 || (h.status >= 100 && h.status <= 599));
    FUZZ_CHECK(h.size <= (uint64_t)INT64_MAX);
    FUZZ_CHECK(memchr(h.etag, 0, sizeof h.etag) != NULL);
  }
  size_t el = strlen(h.etag);
  FUZZ_CHECK(!el || (h.etag[0] != '"' && h.etag[el - 1] != '"'));
  fuzz_note("http_header: status %ld, size %llu, etag %s", h.status, (unsigned long long)h.size,
            h.etag);
  return 0;
}
