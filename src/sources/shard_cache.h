/*
 * shard_cache.h: local copies of remote tar shards (the loader's
 * cache_dir), so that the epochs after the first read local disk.
 *
 * A shard is copied whole, once: the first time a started batch needs it,
 * its object is downloaded into DIR/shard-HASH.tar.partial (HASH of its
 * URL, size and ETag: a shard rewritten since is another copy) while the
 * reads of that epoch wait only for the bytes they need, then renamed to
 * DIR/shard-HASH.tar. The ranks of a node share the folder: the process
 * that holds the partial file's lock downloads, the others read that
 * shard from the network this time, and every process uses the complete
 * copy once it is there. Copies of other shards (or other datasets) go,
 * least recently used first, when the copies would exceed the bound. A
 * shard without an ETag, or larger than the bound, is never copied.
 *
 * Threads: every function may be called from any thread.
 */
#ifndef STK_SHARD_CACHE_H
#define STK_SHARD_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "sources/net.h"

typedef struct stk__shard_cache stk__shard_cache;

/* bound 0 = half the free space of dir's file system now. */
int stk__shard_cache_open(stk__shard_cache **out, const char *dir, uint64_t bound, stk__net *net,
                          int nshards, char *msg, size_t msglen);
void stk__shard_cache_close(stk__shard_cache *c);
/* Shard k (url, size, etag) will be read: start its copy when it has none.
 * 1 when its reads can go through the copy (complete or under way). */
int stk__shard_cache_want(stk__shard_cache *c, int k, const char *url, uint64_t size,
                          const char *etag);
/* Bytes [off, off + len) of shard k from its copy, waiting for a copy under
 * way to get there. STK_OK, or 1 when the copy cannot serve them (none, or
 * its download failed): the caller reads them from the network. */
int stk__shard_cache_read(stk__shard_cache *c, int k, uint64_t off, uint64_t len, void *dst);
/* Bytes read from copies. */
uint64_t stk__shard_cache_bytes(stk__shard_cache *c);

#endif
