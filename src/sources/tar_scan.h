/*
 * tar_scan.h: one tar shard's scan, shared by the tar source's files:
 * tar_scan.c reads a shard's headers into a shard_scan and keeps it (the
 * saved form: an index beside the shard, or the index folder's copy);
 * tar.c makes samples of it. See tar.h.
 */
#ifndef STK_TAR_SCAN_H
#define STK_TAR_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "sources/store.h"
#include "sources/tar.h"
#include "sources/ustar.h"

/* What was left out, for the note. */
typedef struct {
  int64_t unsafe, link, special, other, dup, no_cls, bad_cls, no_img, bad_ext;
  int64_t truncated, bad_header, zeroed, empty; /* shards */
  char first[200];               /* the first thing left out, with its reason */
} tally;

/* One key of a shard while it is scanned. */
typedef struct {
  char *key;
  char *img_name; /* NULL until the key's image member is met */
  uint64_t img_off, img_size, img_hhash;
  int has_cls, cls_ok;
  int32_t label;
} rec;

/* The keys of one shard: records in the order keys first appear, and an
 * open-addressing table (a power of two, at most half full) to find them. */
typedef struct {
  rec *r;
  size_t n, cap;
  int64_t *slot; /* index into r, or -1 */
  size_t nslot;
} keyset;

/* The damage that ended a shard's scan, made a stand-in sample. */
typedef struct {
  char name[300]; /* member, or "offset N" */
  char why[600];
} damage;

/* What the scan of one shard found, before classes.txt is applied: the
 * keys' records, what was left out, the damage that ended the scan. For a
 * remote shard this is what the index cache keeps. */
typedef struct {
  keyset ks;
  tally ta;
  damage dm;
  /* image members left out (a link, a duplicate key, no usable .cls, ...):
   * each becomes a sample whose read fails with the reason, so that
   * on_error=raise raises, skip counts and lists it, and check fails */
  char **lost_name, **lost_why;
  size_t nlost;
} shard_scan;

/* One shard's scan in progress: its steps share it. */
typedef struct {
  const char *path;
  stk__object *fd; /* the store's reader */
  uint64_t fsize, off;
  shard_scan *sc;
  keyset ks;
  stk__ustar_pending pd;
  char *ext; /* scratch for GNU long names and pax headers */
  damage dm;
  char prev[300]; /* the last member read, to place the damage */
  char where[64];
  unsigned char h[STK__TAR_BLOCK];
  char *msg;
  size_t msglen;
  int rc;
} scan_state;

/* Adds one shard's tally to the source's: the first thing left out stays
 * the first. */
void stk__tar_tally_add(tally *t, const tally *u);
/* Counts a thing left out; the first one is named in the note. */
void stk__tar_left_out(tally *t, int64_t *counter, const char *shard, const char *name,
                       const char *why);
/* Notes a left-out image member (see shard_scan.lost_*). STK_ENOMEM. */
int stk__tar_lose(shard_scan *sc, const char *name, const char *why);
void stk__tar_scan_free(shard_scan *sc);

/* A scan of the shard `path` read by fd (the store's reader, closed by
 * scan_done), into sc: NULL without memory. step: one header and what it
 * holds; 0 to go on, 1 when the scan ends. done: the reader closed, the
 * state freed, its keys and damage to sc (dropped when sc is NULL);
 * returns the scan's result. */
scan_state *stk__tar_scan_begin(const char *path, stk__object *fd, shard_scan *sc, char *msg,
                                size_t msglen);
int stk__tar_scan_step(scan_state *st);
int stk__tar_scan_done(scan_state *st, shard_scan *sc);
/* Scans object k of the store, front to back (an open's scan). An error
 * only for what makes the whole source unusable (the shard cannot be opened
 * or read, out of memory); damage inside the shard ends the scan, in sc->dm. */
int stk__tar_read_scan(stk__objstore *store, int k, shard_scan *sc, char *msg, size_t msglen);

/* The saved form: written to path under `key`; read back from a file or
 * from memory (untrusted: STK_EFORMAT or STK_ESTALE when refused, and the
 * shard is scanned instead). */
int stk__tar_save_scan(const char *path, const char *key, const shard_scan *sc);
int stk__tar_load_scan(const char *path, const char *key, uint64_t shard_size, shard_scan *sc);
int stk__tar_load_scan_mem(const uint8_t *data, size_t len, const char *key, uint64_t shard_size,
                           shard_scan *sc);

#endif
