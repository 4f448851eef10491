/*
 * store.h: the object store (stk__objstore; stk__store is ops.h's output
 * store), the one interface to bytes of objects under the sources that
 * read them (tar.c, list.c): list what a root names, stat, read a range,
 * plan the ranges an epoch will need, cancel, statistics. A source never
 * sees where the bytes live. Two rows (stk__objstore_ops), as the writers of
 * pack_writer.h are rows:
 *
 *   store_local.c   local files: pread, one open per read
 *   store_remote.c  remote objects (s3://, http(s)://, hf://): the store of
 *                   parts (object.h) over the transport (net.h), the node's
 *                   copies of whole objects (shard_cache.h) behind it, the
 *                   listing, HEADs, and the requests made ahead at open
 *
 * store_stream.c runs a first epoch that reads objects while it indexes
 * them (the remote row's streamed first epoch), for a format's scan.
 *
 * Objects: once listed, the store holds a table of them (name, size,
 * ETag), and every later call names an object by its index in it.
 *
 * Threads: read, plan, cancel and stats may be called from any thread;
 * the rest by the one that opened the store.
 */
#ifndef STK_STORE_H
#define STK_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/common.h"
#include "sources/source.h"
#include "stoker.h"

/* ---- local files (every source, the tools) ------------------------------ */
/* Opens path for reading without ever blocking in open(): returns the
 * descriptor (blocking reads, close-on-exec) and its stat, or -1 with
 * "cannot open: ..." or "not a regular file (a FIFO)" in msg (errno is
 * open's when open itself failed, 0 otherwise). With allow_pipe, a FIFO or
 * pipe is accepted too (a list file given as <(command)). */
int stk__open_input(const char *path, int allow_pipe, struct stat *st, char *msg, size_t msglen);
/* Reads a whole file into buf (encoded sources of files): enforces
 * max_bytes (0 = none); a file that shrinks while read gives what is there. */
int stk__read_whole_file(const char *path, stk__buf *buf, uint64_t max_bytes, stk__bytes *out,
                         char *msg, size_t msglen);
/* pread of exactly n bytes at off, or fewer at the end of the file (EINTR
 * retried): the bytes read, or -1 with errno. pwrite's twin is
 * stk__pwrite_all (pack_writer.h). */
ssize_t stk__pread_all(int fd, void *p, size_t n, uint64_t off);

/* 1 for s3://, http:// and https:// names (net.c). */
int stk__is_url(const char *name);

/* ---- the store ---------------------------------------------------------- */
typedef struct stk__objstore stk__objstore;
typedef struct stk__object stk__object;       /* a sequential reader (object.h) */
typedef struct stk__objstore_req stk__objstore_req; /* a whole object requested */

typedef struct {
  double read_timeout;   /* seconds a remote request may take (<= 0: no limit) */
  uint64_t memory;       /* remote: the parts' budget (0: sized to the machine) */
  const char *cache_dir; /* remote: local copies of whole objects (NULL: none) */
  uint64_t cache_bytes;  /* their bound (0: half the free space) */
  const char *index_dir; /* where saved indexes of remote objects live (NULL: the default) */
} stk__objstore_config;

/* What a listing keeps: *keep 1 for a name that is one of the objects,
 * 0 for one passed over; an error refuses the root (with the reason). */
typedef int (*stk__objstore_keep)(const char *name, int *keep, char *msg, size_t msglen);

/* A row. NULL entries: the row has nothing to do there. */
typedef struct {
  const char *kind; /* "local", "remote" */
  int (*list)(stk__objstore *st, const char *root, stk__objstore_keep keep, char *msg, size_t msglen);
  /* The file `name` beside the objects (st->dir): *data NULL when none. */
  int (*sibling)(stk__objstore *st, const char *name, uint8_t **data, size_t *len, char *msg,
                 size_t msglen);
  /* A sequential reader of object k: through its own window (parts 0),
   * or through the store of parts with `depth` parts requested ahead. */
  int (*reader)(stk__objstore *st, int k, int parts, unsigned depth, stk__object **out, char *msg,
                size_t msglen);
  int (*read)(stk__objstore *st, int k, uint64_t off, uint64_t len, void *dst, uint64_t *got,
              char *msg, size_t msglen);
  void (*plan)(stk__objstore *st, int k, uint64_t off, uint64_t len, uint64_t epoch);
  void (*expect)(stk__objstore *st, uint64_t epoch, int64_t n, const int32_t *obj,
                 const uint64_t *off);
  void (*plan_reset)(stk__objstore *st);
  void (*want)(stk__objstore *st, int k, uint64_t off);
  uint64_t (*reach)(stk__objstore *st);
  uint64_t (*budget)(stk__objstore *st);
  int (*probe_beside)(stk__objstore *st, const char *suffix);
  void (*open_ahead)(stk__objstore *st, int k, int count, const char *suffix);
  int (*beside)(stk__objstore *st, int k, uint8_t **data, size_t *len);
  stk__objstore_req *(*fetch)(stk__objstore *st, const char *name, uint64_t max);
  int (*get)(stk__objstore *st, stk__objstore_req *q, const char *name, stk__buf *buf, uint64_t max,
             stk__bytes *out, char *msg, size_t msglen);
  void (*req_free)(stk__objstore_req *q);
  void (*cancel)(stk__objstore *st);
  void (*stats)(const stk__objstore *st, stk_stats *out);
  void (*close)(stk__objstore *st);
} stk__objstore_ops;

extern const stk__objstore_ops stk__objstore_local, stk__objstore_remote;
/* The remote row's set-up (store_remote.c): its transport, at open; and
 * before the listing, the request for the sibling in the folder the root
 * names, so that an open costs one round trip less. */
int stk__objstore_remote_open(stk__objstore *st, const stk__objstore_config *cfg, char *msg,
                           size_t msglen);
void stk__objstore_remote_early(stk__objstore *st, const char *root, stk__objstore_keep keep,
                             const char *sibling);

struct stk__objstore {
  const stk__objstore_ops *ops;
  int n;              /* objects listed */
  char **name;        /* each one's path or URL */
  uint64_t *size;     /* remote: from the listing or a HEAD (local: 0) */
  char (*etag)[96];   /* remote: "" when none (then no saved index) */
  char *dir;          /* where the files beside the objects live (classes.txt) */
  char *index_dir;    /* the config's, copied */
  int beside;         /* remote: the objects have indexes beside them */
  void *impl;         /* the row's */
};

/* Opens the store of `root`: the remote row for a URL, else the local
 * one. Nothing is listed yet. */
int stk__objstore_open(stk__objstore **out, const char *root, const stk__objstore_config *cfg, char *msg,
                    size_t msglen);
/* Cancels what is in flight, then frees everything. */
void stk__objstore_close(stk__objstore *st);
int stk__objstore_is_remote(const stk__objstore *st);

/* Lists the objects `root` names into st (a folder's, a prefix's, a brace
 * range's, or the one object), sorted by name; st->dir is their folder.
 * Remote: `sibling` (a file beside them, or NULL) is requested with the
 * listing, for stk__objstore_sibling. */
int stk__objstore_list(stk__objstore *st, const char *root, stk__objstore_keep keep, const char *sibling,
                    char *msg, size_t msglen);
int stk__objstore_sibling(stk__objstore *st, const char *name, uint8_t **data, size_t *len, char *msg,
                       size_t msglen);

/* Sequential readers (a scan): stk__object_pread, and why it failed. */
int stk__objstore_reader(stk__objstore *st, int k, int parts, unsigned depth, stk__object **out,
                      char *msg, size_t msglen);
ssize_t stk__objstore_reader_pread(stk__object *o, void *dst, size_t n, uint64_t off);
const char *stk__objstore_reader_why(const stk__object *o);
uint64_t stk__objstore_reader_size(const stk__object *o);
void stk__objstore_reader_close(stk__object *o);

/* Bytes [off, off + len) of object k into dst; *got the bytes read (fewer
 * only at a local file's end). Remote: from the node's copy, else the
 * store of parts. */
int stk__objstore_read(stk__objstore *st, int k, uint64_t off, uint64_t len, void *dst, uint64_t *got,
                    char *msg, size_t msglen);

/* The plan (remote; nothing for local files): a range an epoch reads soon
 * (one call per read, in order), the epoch's whole order of reads (object
 * -1: none), the plans void, the first part of an object wanted now, how
 * far ahead of the plans the read-ahead reaches, the parts' budget. */
void stk__objstore_plan(stk__objstore *st, int k, uint64_t off, uint64_t len, uint64_t epoch);
void stk__objstore_expect(stk__objstore *st, uint64_t epoch, int64_t n, const int32_t *obj,
                       const uint64_t *off);
void stk__objstore_plan_reset(stk__objstore *st);
void stk__objstore_want(stk__objstore *st, int k, uint64_t off);
uint64_t stk__objstore_reach(stk__objstore *st);
uint64_t stk__objstore_budget(stk__objstore *st);

/* Indexes of the objects (a format's scan, saved). Beside an object (its
 * name + suffix, written with it): probe_beside asks for the first object
 * without a saved copy and sets st->beside; open_ahead requests, for
 * objects k..k+count, their index beside them (st->beside) or else their
 * first part; beside takes object k's index so requested (STK_OK with
 * *data malloc'ed). In the index folder (remote objects with an ETag): the
 * file and the key of object k's saved index; has_index: 1 when there. */
int stk__objstore_probe_beside(stk__objstore *st, const char *suffix);
void stk__objstore_open_ahead(stk__objstore *st, int k, int count, const char *suffix);
int stk__objstore_beside(stk__objstore *st, int k, uint8_t **data, size_t *len);
int stk__objstore_index_path(const stk__objstore *st, int k, char *out, size_t cap);
void stk__objstore_index_key(const stk__objstore *st, int k, char *key, size_t cap);
int stk__objstore_has_index(const stk__objstore *st, int k);
/* Keys of indexes beside their objects: "beside\nSIZE" and the ETags S3
 * gives the object ("" when unknown, else a line each), as written; at an
 * open, the listed size and ETag. key_matches: whether a saved index's key
 * is the one looked for (beside its object: the same size, and the listed
 * ETag one of those recorded, when both are S3's). */
void stk__objstore_beside_key(uint64_t size, const char *etags, char *key, size_t cap);
int stk__objstore_key_matches(const char *stored, const char *want);

/* Whole objects by name (a list of URLs and paths): fetch starts a read
 * (NULL for a local file: get reads it then), get waits for it (q NULL:
 * reads now) into buf, req_free drops one never got. */
stk__objstore_req *stk__objstore_fetch(stk__objstore *st, const char *name, uint64_t max);
int stk__objstore_get(stk__objstore *st, stk__objstore_req *q, const char *name, stk__buf *buf,
                   uint64_t max, stk__bytes *out, char *msg, size_t msglen);
void stk__objstore_req_free(stk__objstore *st, stk__objstore_req *q);

/* Reads in flight and later fail at once (a closing loader). */
void stk__objstore_cancel(stk__objstore *st);
/* The remote counters of stk_stats (nothing for local files). */
void stk__objstore_stats(const stk__objstore *st, stk_stats *out);

/* ---- a first epoch streamed (store_stream.c) ---------------------------- */
/* Remote objects whose format has no index yet: a thread reads the rank's
 * objects front to back through the store of parts (so the bytes its scan
 * reads are those the sample reads then find there), and the format's
 * scan appends each item it meets to the stream. Position j of the epoch
 * is the stream's j-th item; past the last one the positions wrap round
 * (DistributedSampler's padding). The scan runs ahead of the positions
 * asked for by the read-ahead's measured reach, at most `ahead` bytes. */
typedef struct {
  uint64_t off, size; /* the item's bytes in its object */
  uint64_t hhash;     /* the format's check of them (tar: its header's hash) */
  int32_t obj;
  int32_t damage;     /* 0, or 1 + the index of the reason its read fails */
} stk__span;

typedef struct stk__stream stk__stream;
/* The format's scan of object k, whose bytes start at `base` in the
 * stream: stk__stream_push for each item, stk__stream_pace as it goes. */
typedef void (*stk__stream_scan)(void *ctx, stk__stream *ss, int k, uint64_t base);

/* This rank's objects (the permutation of (seed, epoch 0) when shuffling,
 * dealt round-robin over world ranks), a thread ready to run `scan`. */
int stk__stream_open(stk__stream **out, stk__objstore *st, const stk_options *o, uint64_t ahead,
                     stk__stream_scan scan, void *ctx, char *msg, size_t msglen);
int stk__stream_first(const stk__stream *ss); /* the rank's first object */
int stk__stream_start(stk__stream *ss, char *msg, size_t msglen);
/* An item: why != NULL makes its read fail with that reason. */
void stk__stream_push(stk__stream *ss, const stk__span *m, int32_t label, uint64_t at,
                      const char *why);
/* The scan is at byte `at` of the stream: waits while it is far enough
 * ahead; 1 when the stream is stopping. */
int stk__stream_pace(stk__stream *ss, uint64_t at);
/* How many parts a scan requests ahead of the one it reads. */
unsigned stk__stream_depth(stk__stream *ss);
/* Position i (waiting for the scan): its item and label, or the failure. */
int stk__stream_get(stk__stream *ss, int64_t i, stk__span *m, int32_t *label, char *msg,
                    size_t msglen);
/* Position i's item when the scan has got there: 1, else 0. */
int stk__stream_peek(stk__stream *ss, int64_t i, stk__span *m);
/* The rank's positions in an epoch (the loader's). */
void stk__stream_length(stk__stream *ss, int64_t L);
void stk__stream_stop(stk__stream *ss);
/* 1 once the stream is stopping (its reads may fail for that alone). */
int stk__stream_stopped(stk__stream *ss);
void stk__stream_close(stk__stream *ss);

#endif
