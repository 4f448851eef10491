/*
 * net.h: the HTTP(S) client behind remote datasets: libcurl's multi
 * interface driven by one I/O thread per client, with a keep-alive
 * connection pool, ranged GETs, SigV4 for s3:// URLs, retries and resume.
 *
 * libcurl is loaded at run time (dlopen of libcurl.so.4), as nvJPEG is:
 * the library and the wheel then need nothing at build time, and a system
 * without libcurl still reads local datasets; a remote root there fails
 * with "libcurl (libcurl.so.4) is not installed". libcurl keeps the ABI of
 * soname 4 stable, which is what makes the few declarations of net.c safe.
 *
 * URLs: s3://bucket/key, http://host/path, https://host/path. Messages name
 * a URL without its user name, password or query string (a pre-signed URL
 * carries its signature there).
 *
 * Faults: a 5xx, 429, 408, a connection reset, a refused connection or a
 * stalled body is retried with jittered exponential backoff until the
 * request's deadline (the loader's read_timeout; none when it is 0),
 * however many attempts that takes; a body cut short resumes
 * with a Range request from the last byte received. A 401/403, a 404 and a
 * 416 fail at once, naming the URL and the status.
 *
 * Threads: every function may be called from any thread.
 */
#ifndef STK_NET_H
#define STK_NET_H

#include <stddef.h>
#include <stdint.h>

typedef struct stk__net stk__net;
typedef struct stk__net_req stk__net_req;

/* 1 for s3://, http:// and https:// names. */
int stk__is_url(const char *name);

/* Starts a client. timeout: seconds a request may take, retries included
 * (<= 0: no limit; retries go on until the request succeeds or the client
 * is closed). STK_EIO when libcurl cannot be loaded, STK_EINVAL for a bad
 * S3 configuration, with the reason. */
int stk__net_open(stk__net **out, double timeout, char *msg, size_t msglen);
/* Fails what is in flight ("the loader was closed") and stops the I/O
 * thread; returns within the time of one poll (100 ms). */
void stk__net_close(stk__net *n);
/* Fails what is in flight and every later request at once, without
 * waiting: a closing loader's stuck reads come back. */
void stk__net_cancel(stk__net *n);

/* What a finished request got. */
typedef struct {
  uint8_t *data;  /* the body (malloc'ed; owned by the request) */
  size_t len;     /* bytes in data */
  uint64_t size;  /* the object's full size, when the server said it */
  char etag[96];  /* its ETag, quotes removed, "" when none */
} stk__net_body;

/* GET bytes [off, off + len) of url (len 0: to the end, at most max bytes,
 * 0 = no bound), or only its headers when head. Returns at once. */
stk__net_req *stk__net_get(stk__net *n, const char *url, uint64_t off, uint64_t len,
                           uint64_t max, int head);
/* A GET (or HEAD) of a whole object that may not exist by design
 * (classes.txt, an index beside a shard): its 404 fails the request as
 * any 404 does, but is not counted in the failures of the statistics. */
stk__net_req *stk__net_probe(stk__net *n, const char *url, uint64_t max, int head);
/* A request with a body: PUT, POST or DELETE of len bytes at body (NULL:
 * none), which must stay valid until the request is freed. Retried as a
 * GET is (the body is sent again). The response's body and ETag come back
 * as a GET's do. */
stk__net_req *stk__net_send(stk__net *n, const char *method, const char *url, const void *body,
                            size_t len);
/* GET the whole object (len bytes) into the file fd from its offset 0,
 * as it arrives (nothing is kept in memory): a shard's local copy. */
stk__net_req *stk__net_get_file(stk__net *n, const char *url, uint64_t len, int fd);
/* Waits until at least `want` bytes of a stk__net_get_file request are in
 * its file, or it finished; returns the bytes written. */
uint64_t stk__net_wait_bytes(stk__net_req *q, uint64_t want);
/* Waits for the request; STK_OK with *body filled (valid until free), or an
 * error code with "URL: reason" in msg. */
int stk__net_wait(stk__net_req *q, stk__net_body *body, char *msg, size_t msglen);
/* The same, with the reason alone in msg: for a sample's read, whose
 * message already names it. */
int stk__net_wait_reason(stk__net_req *q, stk__net_body *body, char *msg, size_t msglen);
/* 1 when the request has finished (wait would not block). */
int stk__net_done(stk__net_req *q);
void stk__net_free(stk__net_req *q);
/* The finished request's body, which the caller now owns (free()). */
uint8_t *stk__net_take(stk__net_req *q);

/* The bucket listing of s3://bucket/prefix: every key under it, sorted by
 * name (S3's order), with sizes and ETags, into a malloc'ed array. */
typedef struct {
  char *url; /* s3://bucket/key */
  uint64_t size;
  char etag[96];
} stk__net_object;
int stk__net_list(stk__net *n, const char *url, stk__net_object **out, int *count, char *msg,
                  size_t msglen);
void stk__net_objects_free(stk__net_object *v, int count);
/* One page of a ListObjectsV2 response (body, len bytes, not NUL-
 * terminated, from the server: untrusted): its objects are appended to
 * (*objs, *count, *cap), a realloc'ed array, as s3://bucket/KEY; *more is
 * 1 when the page says more follow, with the NextContinuationToken in
 * token. STK_OK; STK_EFORMAT for a <Size> that is no byte count (of at
 * most 2^63 - 1); STK_ENOMEM: with the reason in msg, and what was appended
 * stays, for the caller to free. stk__net_list's parser, apart for
 * fuzz/fuzz_s3_list.c. */
int stk__s3_list_page(const char *body, size_t len, const char *bucket, stk__net_object **objs,
                      int *count, int *cap, char *token, size_t token_cap, int *more, char *msg,
                      size_t msglen);

/* What the header lines of an HTTP response say, read one line at a time
 * as libcurl hands them over (p[0..n), not NUL-terminated, from the server:
 * untrusted). A status line ("HTTP/1.1 206 Partial Content") sets status
 * and returns 1; Content-Range's total ("bytes 0-99/1234"), or a 200's
 * Content-Length when no total came first, sets size; ETag sets etag,
 * without W/ and quotes. Other lines: 0, h unchanged. The request's header
 * callback, apart for fuzz/fuzz_http_header.c. */
typedef struct {
  long status;   /* the last status line's code */
  uint64_t size; /* the object's size; 0 when not said */
  char etag[96];
} stk__http_head;
int stk__http_header(stk__http_head *h, const char *p, size_t n);

/* Counters since the client opened (the loader's statistics). */
typedef struct {
  uint64_t bytes, requests, retries, failures;
  double seconds; /* summed over requests: from submission to completion */
} stk__net_stats;
void stk__net_get_stats(const stk__net *n, stk__net_stats *s);

/* "libcurl 7.88.1 (OpenSSL/3.0.15)", or why it cannot be loaded. */
const char *stk__net_version(void);

/* One blocking request outside any client (the credential providers'):
 * method, url, headers ("Name: value", NULL-terminated list or NULL), body
 * (NULL: none). No retries; timeout_ms bounds it. STK_OK with the body in
 * *out (malloc'ed, NUL-terminated, at most max bytes; the caller wipes and
 * frees it) and the HTTP status in *status, whatever it is; STK_EIO when
 * no response came, with the redacted URL and the reason. */
int stk__http_fetch(const char *method, const char *url, const char *const *headers,
                    const char *body, long timeout_ms, size_t max, char **out, long *status,
                    char *msg, size_t msglen);

/* url without credentials and query, for messages. */
void stk__url_redact(const char *url, char *out, size_t cap);

#endif
