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
 *   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
 *                AWS_SESSION_TOKEN); else the profile (AWS_PROFILE, else
 *                "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/
 *                credentials), then AWS_CONFIG_FILE (~/.aws/config);
 *                else anonymous, unsigned requests (public buckets), as
 *                with AWS_NO_SIGN_REQUEST=1
 *
 * Secrets live only in this struct: no message, log or file of stoker
 * ever contains the secret key or the session token.
 */
#ifndef STK_S3_H
#define STK_S3_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char scheme[8];    /* "http" or "https" */
  char host[256];    /* host[:port] of the endpoint */
  char base[256];    /* the endpoint's path prefix ("" or "/path") */
  int path_style;
  int anonymous;
  char region[64];
  char key_id[128];
  char secret[256];
  char token[4096];
} stk__s3;

/* Reads the configuration above. STK_OK, or STK_EINVAL with the reason (a
 * malformed endpoint URL). */
int stk__s3_load(stk__s3 *c, char *msg, size_t msglen);

/* The HTTP URL and the canonical path of object `key` of `bucket` (key may
 * be "" for the bucket itself); `query` is appended as given (already
 * canonical: sorted, encoded). */
int stk__s3_url(const stk__s3 *c, const char *bucket, const char *key, const char *query,
                char *url, size_t urllen, char *cpath, size_t cpathlen, char *host,
                size_t hostlen);

/* The SigV4 headers of a request: each "Name: value" into hdr[0..*n).
 * `payload` is the body's SHA-256 in hex (NULL: an empty body). `now` is the
 * request time (seconds since the epoch). Anonymous configurations add
 * only the payload hash. */
#define STK__S3_MAX_HEADERS 4
#define STK__S3_HEADER_LEN 4400
void stk__s3_sign(const stk__s3 *c, const char *method, const char *host, const char *cpath,
                  const char *query, const char *payload, int64_t now,
                  char hdr[][STK__S3_HEADER_LEN], int *n);

/* The SHA-256 of data, in lowercase hex (65 bytes with the NUL). */
void stk__sha256_hex(const void *data, size_t n, char out[65]);

/* RFC 3986 encoding: unreserved characters kept, '/' kept when keep_slash. */
int stk__uri_encode(const char *s, int keep_slash, char *out, size_t outlen);

#endif
