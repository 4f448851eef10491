/*
 * md5.h: MD5 (RFC 1321), for one purpose: S3's ETag of an object uploaded
 * in one PUT is the MD5 of its bytes, and of a multipart upload the MD5 of
 * its parts' MD5s, "-N". An index beside a shard records these, so that a
 * shard rewritten since (at the same size) is told by its listed ETag.
 * Not for security: MD5 is broken as a cryptographic hash.
 */
#ifndef STK_MD5_H
#define STK_MD5_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t h[4];
  uint64_t len;     /* bytes hashed */
  uint8_t buf[64];  /* a partial block */
} stk__md5;

void stk__md5_init(stk__md5 *m);
void stk__md5_update(stk__md5 *m, const void *p, size_t n);
/* The digest, 16 bytes. */
void stk__md5_final(stk__md5 *m, uint8_t out[16]);
/* stk__md5_update(m[k], p, n) for k = 0, 1, 2: the three ETag chains of a
 * shard (whole, 8 MiB parts, 16 MiB parts) over the same bytes. While the
 * three are at a block boundary their blocks are computed together, their
 * dependency chains interleaved: about 3.5x the speed of three updates (MD5
 * is one long chain of dependent additions, which leaves most of a core's
 * units idle). */
void stk__md5_update3(stk__md5 *const m[3], const void *p, size_t n);

/* The ETags S3 gives the local file at `path` once uploaded: the MD5 of its
 * bytes (one PUT), and for a multipart upload in parts of 8 MiB (the AWS
 * CLI's default) and of 16 MiB (stoker pack's) the MD5 of the parts' MD5s,
 * "-N"; as "MD5\nE8\nE16" into out. One pass over the file. STK_OK, or
 * STK_EIO / STK_ENOMEM with the reason in err. */
int stk__md5_s3_etags(const char *path, char *out, size_t cap, char *err, size_t errlen);

#endif
