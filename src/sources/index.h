/*
 * index.h: the index of an image folder. A scan of a large ImageFolder tree
 * costs a readdir of every folder and a sort of every name; the index keeps
 * its result (the sample table, paths relative to the root) together with a
 * signature of the tree (every folder visited, with its mtime and inode), so
 * that the next open only stats those folders and reads one file.
 *
 * A folder's mtime changes when an entry is added to it, removed from it or
 * renamed in it, which are the only changes that can change the sample list
 * (its names and the types of its entries). A file rewritten in place
 * changes no folder's mtime, and no sample either.
 */
#ifndef STK_INDEX_H
#define STK_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "sources/dataset.h"
#include "sources/source.h"

/* One folder of the tree signature: its path relative to the root ("" for
 * the root itself), the mtime and inode a stat (following links) gave. */
typedef struct {
  size_t off; /* into stk__dirsig.arena */
  int64_t sec, nsec;
  uint64_t ino;
} stk__dirsig_ent;

typedef struct {
  stk__dirsig_ent *v;
  size_t n, cap;
  char *arena;
  size_t len, acap;
  int64_t scan_sec, scan_nsec; /* wall-clock time at which the scan began */
} stk__dirsig;

void stk__dirsig_free(stk__dirsig *g);
/* Appends a folder; `rel` is copied. STK_OK or STK_ENOMEM. */
int stk__dirsig_add(stk__dirsig *g, const char *rel, int64_t sec, int64_t nsec, uint64_t ino);

/* The ImageFolder scan (dataset.h's rules) with `threads` threads (0 = the
 * default: STOKER_SCAN_THREADS, else min(16, classes)). When sig is not
 * NULL, it receives every folder visited: the root first, then each class's
 * folders in sample order. `files` (may be NULL) receives the number of
 * entries that are not folders, images or not. */
int stk__folder_scan(stk__dataset *ds, const char *root, int threads, stk__dirsig *sig,
                     int64_t *files, char *msg, size_t msglen);

/* Where the index of the folder whose real path is `real` lives: in
 * index_dir, else $XDG_CACHE_HOME/stoker, else $HOME/.cache/stoker, named
 * from a hash of `real`. STK_OK, or STK_EINVAL when no place is known. */
int stk__index_path(char *out, size_t outlen, const char *index_dir, const char *real);
/* The same for other indexes: KIND-<hash of key>.stkidx in that folder. */
int stk__index_path_kind(char *out, size_t outlen, const char *index_dir, const char *kind,
                         const char *key);
/* Writes n bytes to path through a temporary file of this process's own in
 * its folder (created when missing), renamed into place: a reader never
 * sees half a file, and writers of the same file (the ranks of a node)
 * never share one. STK_OK or STK_EIO with the reason. */
int stk__write_file_atomic(const char *path, const void *data, size_t n, char *why,
                           size_t whylen);

/* What reading an index found. */
enum {
  STK__INDEX_USED = 0, /* fresh: ds holds the table */
  STK__INDEX_ABSENT,   /* no index file */
  STK__INDEX_CORRUPT,  /* unreadable, truncated, bad magic/version/checksum */
  STK__INDEX_STALE     /* valid, but for another root or a changed tree */
};

/* Reads the index at `path` for the folder `root` (as the caller names it;
 * sample paths are root + "/" + the recorded relative path) whose real path
 * is `real`. Every field is checked before anything is trusted; then every
 * recorded folder is stat'ed and must be unchanged. Returns one of the
 * STK__INDEX_* values (STK_ENOMEM when out of memory); why gets the reason
 * for anything but USED. st, when not NULL, gets the seconds spent on the
 * folders' stats (check_s), the folder count and the file's size. */
typedef struct stk__folder_stats stk__folder_stats;
int stk__index_read(const char *path, const char *root, const char *real, stk__dataset *ds,
                    stk__folder_stats *st, char *why, size_t whylen);

/* Writes the index of ds (scanned from `root`, real path `real`) with the
 * signature sig to `path`, through a temporary file renamed into place, so
 * a concurrent reader sees the old file or the new one, never a part.
 * Creates the folder if needed. STK_OK, or a code with the reason in why
 * (the caller goes on without an index). *bytes gets the file's size. */
int stk__index_write(const char *path, const char *root, const char *real,
                     const stk__dataset *ds, const stk__dirsig *sig, int64_t *bytes, char *why,
                     size_t whylen);

/* Writes the checksum of the index image b[0..n) into its header (a no-op
 * when n is shorter than the header). The checksum catches damage, not
 * forgery: anyone can compute it, so the reader checks every field anyway. */
void stk__index_seal(uint8_t *b, size_t n);

/* True when a signature holds a folder whose mtime is too close to the
 * scan's start to be trusted (see index.c). */
int stk__dirsig_racy(const stk__dirsig *g);

/* What the last stk__folder_open of this thread did, for tests and
 * benchmarks. */
struct stk__folder_stats {
  int from_index;    /* 1: the table came from the index */
  int written;       /* 1: an index was written */
  int index_state;   /* the STK__INDEX_* value the read gave, -1 = not read */
  double check_s;    /* stats of the recorded folders */
  double load_s;     /* the whole index read, checks included */
  double scan_s;     /* the scan, when there was one */
  double write_s;    /* writing the index */
  int64_t dirs;      /* folders in the signature */
  int64_t index_bytes;
  char why[512];     /* why the index was not used or not written ("" = it was) */
};
const stk__folder_stats *stk__folder_last(void);

#endif
