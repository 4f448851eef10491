/*
 * s3.h: what it takes to speak to an S3-compatible store: the endpoint and
 * addressing, the credentials found the standard way, and Signature Version
 * 4 request signing. No I/O beyond reading the AWS config files; the
 * requests themselves are net.c's.
 *
 * Configuration, as the AWS CLI reads it:
 *   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, S3_ENDPOINT_URL;
 *                else https://s3.REGION.amazonaws.com
 *   addressing   path-style for a custom endpoint, virtual-host for AWS;
 *                STOKER_S3_ADDRESSING=path|virtual overrides
 *   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region;
 *                else us-east-1
 *   credentials  the AWS chain (s3_creds.h), found at the first s3://
 *                request, renewed before they expire; with none found,
 *                or with AWS_NO_SIGN_REQUEST=1, unsigned requests (public
 *                buckets)
 *
 * Secrets live only in the credentials object (s3_creds.c): no message,
 * log or file of stoker ever contains the secret key or the session token.
 */
#ifndef STK_S3_H
#define STK_S3_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "sources/s3_creds.h"

typedef struct {
  char scheme[8];    /* "http" or "https" */
  char host[256];    /* host[:port] of the endpoint */
  char base[256];    /* the endpoint's path prefix ("" or "/path") */
  int path_style;
  int anonymous;      /* AWS_NO_SIGN_REQUEST, or no credentials found */
  char region[64];
  /* the credentials, looked for once, at the first s3:// request: an
   * http:// dataset never walks the chain (nor waits for instance
   * metadata) */
  pthread_mutex_t creds_mu;
  int creds_state;    /* 0: not looked for yet, 1: done, < 0: the error */
  stk__creds *creds;  /* NULL: unsigned requests */
  char creds_note[700]; /* where they came from, or the error */
} stk__s3;

/* Reads the configuration above. STK_OK, or STK_EINVAL with the reason (a
 * malformed endpoint URL). stk__s3_free() releases it either way. */
int stk__s3_load(stk__s3 *c, char *msg, size_t msglen);
void stk__s3_free(stk__s3 *c);
/* Finds the credentials, the first time only (any thread; it may wait for
 * a provider). STK_OK, or the chain's error with its message. */
int stk__s3_credentials(stk__s3 *c, char *msg, size_t msglen);
/* Where the credentials came from, or which sources were tried. */
void stk__s3_describe(stk__s3 *c, char *out, size_t cap);
/* A request signed with credentials of generation `gen` was refused as
 * expired (ExpiredToken): 1 when a renewal was asked for (the request may
 * be sent again once stk__s3_renewing() says 0). */
int stk__s3_expired(stk__s3 *c, uint64_t gen);
int stk__s3_renewing(stk__s3 *c, uint64_t gen);

/* The HTTP URL and the canonical path of object `key` of `bucket` (key may
 * be "" for the bucket itself); `query` is appended as given (already
 * canonical: sorted, encoded). */
int stk__s3_url(const stk__s3 *c, const char *bucket, const char *key, const char *query,
                char *url, size_t urllen, char *cpath, size_t cpathlen, char *host,
                size_t hostlen);

/* The SigV4 headers of a request: each "Name: value" into hdr[0..*n).
 * `payload` is the body's SHA-256 in hex (NULL: an empty body). `now` is the
 * request time (seconds since the epoch). Anonymous configurations add
 * nothing. Returns the generation of the credentials used (0: none). */
#define STK__S3_MAX_HEADERS 4
#define STK__S3_HEADER_LEN 4400
uint64_t stk__s3_sign(stk__s3 *c, const char *method, const char *host, const char *cpath,
                      const char *query, const char *payload, int64_t now,
                      char hdr[][STK__S3_HEADER_LEN], int *n);
/* The same for any service ("s3", "sts") with the given credentials. */
void stk__sigv4(const stk__aws_creds *cr, const char *region, const char *service,
                const char *method, const char *host, const char *cpath, const char *query,
                const char *payload, int64_t now, char hdr[][STK__S3_HEADER_LEN], int *n);

/* The SHA-256 of data, in lowercase hex (65 bytes with the NUL). */
void stk__sha256_hex(const void *data, size_t n, char out[65]);

/* RFC 3986 encoding: unreserved characters kept, '/' kept when keep_slash. */
int stk__uri_encode(const char *s, int keep_slash, char *out, size_t outlen);

/* The AWS CLI's file `name` ("config" or "credentials") into out: the
 * variable var's value when set, else $HOME/.aws/name, else "". */
void stk__aws_file(char *out, size_t cap, const char *var, const char *name);

#endif
