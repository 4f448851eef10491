/*
 * ustar.h: the tar format's 512-byte headers (POSIX ustar, with GNU's
 * base-256 sizes and long names and pax records read), shared by the
 * shards' scan (tar_scan.c) and their writer (tar_write.c).
 */
#ifndef STK_USTAR_H
#define STK_USTAR_H

#include <stddef.h>
#include <stdint.h>

#include "sources/tar.h"

/* State of one shard's scan that the next member inherits from GNU 'L' and
 * pax 'x' headers. */
typedef struct {
  char *name;           /* the next member's name (pax path or GNU long name) */
  int name_from_pax;
  uint64_t size;        /* pax size */
  int has_size;
  const char *drop;     /* the next member is left out, for this reason */
} stk__ustar_pending;

/* A numeric header field of n bytes into *out: 1, or 0 when malformed. */
int stk__ustar_number(const unsigned char *f, size_t n, uint64_t *out);
/* Whether header h's checksum holds (either of its two forms). */
int stk__ustar_checksum_ok(const unsigned char *h);
/* Whether the block is all zeros (the end-of-archive blocks). */
int stk__ustar_all_zero(const unsigned char *h);
/* 1 for an absolute name or one with a ".." component: never a sample. */
int stk__ustar_unsafe_name(const char *name);
/* The member name of header h: prefix, '/', name (at most 256 bytes). */
void stk__ustar_name(const unsigned char *h, char out[260]);
/* The pax records "LEN key=value\n" of d[0..n) (path, size) into p: 1, or
 * 0 when malformed. clear: p emptied, its name freed. */
int stk__ustar_pax(const char *d, size_t n, stk__ustar_pending *p);
void stk__ustar_pax_clear(stk__ustar_pending *p);
/* A ustar header of a regular file `name` (under 100 bytes) of `size`
 * bytes, mtime 0, so that the same input packs to the same bytes. */
void stk__ustar_header(unsigned char h[STK__TAR_BLOCK], const char *name, uint64_t size);

#endif
