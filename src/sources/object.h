/*
 * object.h: bytes of an object, by range: a local file or a URL; below the
 * object store (store.h), whose rows read through it. The file helpers
 * (stk__open_input, stk__read_whole_file) are declared in store.h.
 *
 * A remote object is read in two ways:
 *   - sequentially (the scan that indexes a shard): through a window of one
 *     part, with the next part already requested, so that a scan costs the
 *     shard's transfer and not a round trip per member;
 *   - by sample, through a store of parts shared by the worker threads
 *     (stk__parts). The loader tells it which samples its started batches
 *     will read (plan), in the order they will be read; the store requests
 *     at once the parts that hold them: the whole aligned part (part_size)
 *     the first time a part is needed in an epoch, else the sample's bytes
 *     alone (a straggler of the shuffle buffer whose part was let go). A
 *     read then finds its bytes arrived, or waits for them. Parts stay
 *     while a planned sample needs them; those no plan holds are let go
 *     once the parts exceed `budget` bytes, the one read again furthest in
 *     the epoch's order first (the source tells the store the order). A
 *     read nothing planned (a refill, `stoker check`) fetches its own bytes.
 *   Memory: the budget, plus the parts that the started batches hold.
 */
#ifndef STK_OBJECT_H
#define STK_OBJECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/common.h"
#include "sources/net.h"
#include "sources/source.h"
#include "sources/store.h"

struct stk__parts;

typedef struct stk__object {
  const char *name; /* the path or URL (borrowed) */
  uint64_t size;
  int fd;           /* local files */
  stk__net *net;    /* remote objects */
  uint64_t part;    /* the window's size */
  uint8_t *win;     /* the window: bytes [win_off, win_off + win_len) */
  uint64_t win_off;
  size_t win_len;
  stk__net_req *win_req; /* the request whose body win is, when kept for `keep` */
  stk__net_req *ahead; /* the next window, requested */
  uint64_t ahead_off;
  char why[800];    /* the last failure */
  /* read through a store of parts instead (stk__object_parts) */
  struct stk__parts *parts;
  int obj;
  unsigned depth;   /* parts requested beyond the one read */
  uint64_t epoch;
  /* a plain read's windows, once passed, given to this store (as its
   * object keep_obj) while it has room (stk__object_keep) */
  struct stk__parts *keep;
  int keep_obj;
} stk__object;

/* Opens a local file (size from fstat) or a remote object of known size
 * (net != NULL; size from the listing or a HEAD). */
int stk__object_open(stk__object *o, const char *name, stk__net *net, uint64_t size,
                     uint64_t part, char *msg, size_t msglen);
/* Up to n bytes at off: fewer only at the object's end; -1 on an error
 * (the reason in o->why). */
ssize_t stk__object_pread(stk__object *o, void *dst, size_t n, uint64_t off);
void stk__object_close(stk__object *o);

/* ---- the store of parts of remote objects ---------------------------------- */
typedef struct stk__parts stk__parts;
/* For nobj objects of these sizes and URLs (both borrowed for the store's
 * life; urls NULL: no look-ahead), read in parts of part_size bytes. Once
 * an epoch's order is known (stk__parts_expect), each plan also requests
 * the whole parts that the reads after it will need, as far ahead as the
 * loader reads in twice the time a request takes now (measured: the rate
 * of planned bytes, the mean time of a request), between 2 parts and half
 * the budget. */
int stk__parts_open(stk__parts **out, stk__net *net, uint64_t part_size, uint64_t budget, int nobj,
                    const uint64_t *sizes, const char *const *urls);
void stk__parts_close(stk__parts *p);
/* The reads an epoch's order holds (this rank's, in full): the object and
 * the offset of each (obj -1: none). Eviction then lets go first of the
 * part read again furthest in the future. STK_ENOMEM leaves it to recency. */
int stk__parts_expect(stk__parts *p, uint64_t epoch, int64_t n, const int32_t *obj,
                      const uint64_t *off);
/* Bytes [off, off + len) of object `obj` (url, size) will be read soon, in
 * this epoch; one call per planned read, in the order of the reads. */
void stk__parts_plan(stk__parts *p, int obj, const char *url, uint64_t size, uint64_t off,
                     uint64_t len, uint64_t epoch);
/* The plans are void (the loader dropped its batches). */
void stk__parts_reset(stk__parts *p);
/* Copies bytes [off, off + len) of obj into dst. STK_OK, or the error with
 * the reason in msg. */
int stk__parts_read(stk__parts *p, int obj, const char *url, uint64_t off, uint64_t len,
                    uint8_t *dst, char *msg, size_t msglen);
/* Part of object `obj` holding byte off will be read soon: the whole part
 * is requested now unless a piece holds that byte (no plan holds it: it
 * stays while the budget allows, least recently used first). */
void stk__parts_want(stk__parts *p, int obj, const char *url, uint64_t size, uint64_t off,
                     uint64_t epoch);
uint64_t stk__parts_budget(stk__parts *p);
/* How far ahead of the plans parts are wanted now (see stk__parts_open). */
uint64_t stk__parts_reach(stk__parts *p);
/* Makes the remote object o read through the store p as its object `obj`
 * (a streamed scan: its bytes then serve the sample reads too), with
 * `depth` parts requested ahead of the one read. */
void stk__object_parts(stk__object *o, stk__parts *p, int obj, unsigned depth, uint64_t epoch);
/* Makes the passed windows of the plain remote read o pieces of p (as its
 * object `obj`) while p has room to spare: the bytes an open's scan reads
 * then serve the first epoch's sample reads instead of being fetched
 * again. A window that finds no room, or that a piece overlaps, is freed. */
void stk__object_keep(stk__object *o, stk__parts *p, int obj);
/* Bytes the parts hold now, and their peak. */
void stk__parts_memory(stk__parts *p, uint64_t *now, uint64_t *peak);

#endif
