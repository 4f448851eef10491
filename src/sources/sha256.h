/*
 * sha256.h: the SHA-256 behind SigV4 (every signed request hashes its body).
 *
 * libcrypto's when it can be loaded at run time (dlopen of libcrypto.so.3,
 * then .so.1.1: the one libcurl's TLS already brought into the process, so
 * the load costs nothing), else the portable one of s3.c. The library then
 * needs no OpenSSL at build time, as it needs no libcurl (net.h), while an
 * upload hashes at libcrypto's speed (its SHA-NI / AVX2 code: about 6x the
 * portable one on the machine of docs/BENCHMARKS.md), which matters for a
 * pack to s3://, whose every byte is hashed once. STOKER_SHA256=portable
 * forces the portable one (benchmarks, tests).
 */
#ifndef STK_SHA256_H
#define STK_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* The digest of data[0..n): libcrypto's when loaded, else the portable one. */
void stk__sha256(const void *data, size_t n, uint8_t out[32]);
/* libcrypto's alone: 1 with out filled, 0 when libcrypto is not loaded. */
int stk__sha256_libcrypto(const void *data, size_t n, uint8_t out[32]);
/* The portable one alone (s3.c). */
void stk__sha256_portable(const void *data, size_t n, uint8_t out[32]);
/* "libcrypto.so.3", or "portable" when stk__sha256 uses the portable one. */
const char *stk__sha256_impl(void);

#endif
