/*
 * cache_format.h: the layout of a pre-decoded cache file (.stkc), shared by
 * its reader (cache.c) and its writer (pack.c). All integers little-endian.
 *
 *   [0, 4096)          header (struct below), then zeros
 *   [4096, data_end)   the samples, each starting at a multiple of 64:
 *                      raw: h rows of w*3 bytes of RGB8; jpeg: a JPEG file
 *   [meta_off, end)    the index (n entries), then the sample names, the
 *                      class names and the source description, each a run
 *                      of NUL-terminated strings
 *
 *   [stats_off, +n*16) with STK__CACHE_F_STATS: each sample's source file
 *                      as pack saw it (size, mtime), after the strings
 *
 * The header is written last, so a file whose header is intact was written
 * to the end; the writer also renames it into place only when complete.
 * meta_hash covers the index and the strings, header_hash the header.
 *
 * The per-file stats came later, as a flag rather than a new version: a
 * cache without them (flags 0) is still read, with the list check alone,
 * and a build that predates them reads a cache that has them (it ignores
 * the flag, the extension in the header's padding and the trailing table).
 */
#ifndef STK_CACHE_FORMAT_H
#define STK_CACHE_FORMAT_H

#include <stdint.h>

#define STK__CACHE_MAGIC "STKCACHE"
#define STK__CACHE_VERSION 1u
#define STK__CACHE_DATA_OFF 4096u
#define STK__CACHE_ALIGN 64u

enum { STK__CACHE_SRC_FOLDER = 0, STK__CACHE_SRC_LIST = 1 };

typedef struct {
  char magic[8];           /* "STKCACHE" */
  uint32_t version;        /* STK__CACHE_VERSION */
  uint32_t encoding;       /* stk_cache_encoding */
  uint32_t max_side;       /* the bound images were resized to (0 = none) */
  uint32_t quality;        /* jpeg encoding */
  uint64_t n;              /* samples */
  uint32_t nclasses;
  uint32_t source_kind;    /* STK__CACHE_SRC_* */
  uint64_t list_fp;        /* fingerprint of the source list: names, labels */
  uint64_t reserved;       /* flags: STK__CACHE_F_*; 0 before them. (Bit 0 is
                              left to fuzz/fuzz_cache.c, which marks inputs
                              whose checksums it must not fix with it.) */
  uint64_t data_end;       /* end of the sample data */
  uint64_t meta_off, meta_len;
  uint64_t names_len, classes_len, source_len; /* string runs after the index */
  uint64_t meta_hash;      /* stk__hash64 of [meta_off, meta_off + meta_len) */
  uint64_t header_hash;    /* stk__hash64 of the header up to this field */
} stk__cache_header;

/* reserved & STK__CACHE_F_STATS: the header's padding holds an
 * stk__cache_ext at STK__CACHE_EXT_OFF and the file a stats table. */
#define STK__CACHE_F_STATS (1ull << 1)
#define STK__CACHE_EXT_OFF 1024u

typedef struct {
  char magic[8];           /* "STKSTATS" */
  uint64_t stats_off;      /* n stk__cache_stat, 8-byte aligned */
  uint64_t stats_len;
  uint64_t stats_hash;     /* stk__hash64 of the table */
  uint64_t ext_hash;       /* stk__hash64 of this struct up to this field */
} stk__cache_ext;
#define STK__CACHE_EXT_MAGIC "STKSTATS"

/* Sample i's source file when it was packed (stat before the read, so a
 * change during the pack shows as a change). */
typedef struct {
  uint64_t size;           /* bytes */
  int64_t mtime_ns;        /* st_mtim in nanoseconds since the epoch */
} stk__cache_stat;

typedef struct {
  uint64_t off;            /* from the start of the file */
  uint64_t len;            /* bytes */
  uint32_t w, h;           /* pixels */
  int32_t label;
  uint32_t reserved;
  uint64_t hash;           /* stk__hash64 of the sample's bytes */
} stk__cache_entry;

#endif
