/*
 * pack_writer.h: the outputs of stk_pack, one writer per row of a table.
 *
 * loader/pack.c produces each sample's bytes (decoded pixels for a cache,
 * the file itself for tar shards) on its workers and hands them to one
 * writer strictly in sample order, from one thread. A writer owns its
 * output from open to finish: the temporary name it writes under, what it
 * refuses up front, its index, and the rename that makes it visible.
 *
 *   cache  sources/cache_write.c   one .stkc file (cache_format.h)
 *   tar    sources/tar_write.c     a folder of WebDataset shards
 *   store  sources/upload.c        tar shards uploaded to s3://bucket/prefix/
 *
 * The row is chosen by the options (stk__pack_writer_for): the output's
 * scheme, then the format. A new output format is a new row: its file
 * defines one stk__pack_writer_ops and the table in pack_writer.c names it.
 */
#ifndef STK_PACK_WRITER_H
#define STK_PACK_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "sources/cache_format.h"
#include "sources/dataset.h"
#include "stoker.h"

/* Where the samples came from, as a cache records it (cache_format.h): the
 * source's kind ("folder" or "list"), its real path ("" for a piped list)
 * and the list's base folder (""). */
typedef struct {
  const char *kind, *where, *base;
} stk__pack_source;

/* Sample i as the producer left it. */
typedef struct {
  int64_t index;
  const char *path;    /* the source file */
  int32_t label;
  const uint8_t *data; /* the bytes to write; NULL: place them only (see place) */
  size_t len;
  int w, h;            /* pixels: the image's size in a cache */
  const char *ext;     /* tar: the member's extension, from the content */
  uint64_t hash;       /* stk__hash64 of the bytes (cache) */
  stk__cache_stat fst; /* the source file as it was before it was read */
} stk__pack_item;

typedef struct {
  const char *name;
  /* What the producer makes for this writer: 1 decoded pixels, bounded to
   * max_side and encoded as o->encoding says; 0 the file's own bytes, its
   * header checked (the whole image with o->check). */
  int pixels;
  /* Checks what can be checked before any sample (the output's name, the
   * room for it) and creates the temporary output. *w is the writer's
   * state, freed by finish. */
  int (*open)(void **w, const stk_pack_options *o, const stk__dataset *ds,
              const stk__pack_source *src, char *err, size_t errlen);
  /* Appends item (in sample order). With item->data NULL the item is
   * placed, not written: *off says where its bytes go, and the producer
   * writes them there itself with write_at (a device pack's threads write
   * their own blocks). */
  int (*add)(void *w, const stk__pack_item *item, uint64_t *off, stk_pack_result *res, char *err,
             size_t errlen);
  /* Writes n bytes at off, from any thread; NULL where placing is not
   * supported. 0, or an errno value. */
  int (*write_at)(void *w, const void *p, size_t n, uint64_t off);
  /* The temporary output's name, for messages. */
  const char *(*temp_name)(void *w);
  /* Completes the output when rc is STK_OK (index, sync, rename), removes
   * what was written otherwise. Frees w. Returns rc, or its own failure. */
  int (*finish)(void *w, int rc, const stk__dataset *ds, stk_pack_result *res, char *err,
                size_t errlen);
} stk__pack_writer_ops;

extern const stk__pack_writer_ops stk__cache_writer, stk__tar_writer, stk__store_writer;

/* The tar writer's shards as they grow, for the store writer (upload.c),
 * which uploads them while the pack goes on. On the writer's thread,
 * grown(ctx, shard, path, bytes, state, ...) says that the first `bytes`
 * bytes of shard number `shard` (its file at path) are on disk: each time
 * at least `step` more are (state STK__SHARD_GROWING), once the shard is
 * complete and closed (STK__SHARD_COMPLETE: before its index, which reads
 * the whole shard, so that its last bytes can leave meanwhile), and once
 * its index is written beside it (STK__SHARD_INDEXED). A failure it
 * returns (message in err) fails the pack. A watched writer does not
 * fsync its shards: they are a staging copy, removed once uploaded. */
enum { STK__SHARD_GROWING, STK__SHARD_COMPLETE, STK__SHARD_INDEXED };
typedef struct {
  uint64_t step;
  int (*grown)(void *ctx, int shard, const char *path, uint64_t bytes, int state, char *err,
               size_t errlen);
  void *ctx;
} stk__tar_watch;
/* Watches the shards of w, a writer of stk__tar_writer.open. */
void stk__tar_writer_watch(void *w, const stk__tar_watch *watch);

/* The writer of o's output, or NULL with the reason in err. */
const stk__pack_writer_ops *stk__pack_writer_for(const stk_pack_options *o, char *err,
                                                 size_t errlen);

/* The temporary name an output is written under until it is renamed:
 * OUTPUT.tmp-PID, for a cache a file and for tar shards a folder (OUTPUT
 * without its trailing slashes). 0, or -1 when it does not fit. */
int stk__pack_tmp_path(const char *output, long pid, char *buf, size_t n);

/* pwrite until done: 0, or -1 with errno set (EIO for a 0-byte write). */
int stk__pwrite_all(int fd, const void *p, size_t n, uint64_t off);

/* Around the packs of a process: SIGXFSZ ignored while one runs, so that a
 * write past RLIMIT_FSIZE fails (EFBIG) instead of killing the process. */
void stk__pack_writes_begin(void);
void stk__pack_writes_end(void);
/* Adds the file size limit to a failed write's "File too large". */
void stk__pack_explain_efbig(int rc, char *err, size_t errlen);

#endif
