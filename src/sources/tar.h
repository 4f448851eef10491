/*
 * tar.h: WebDataset tar shards, read as a source and written by
 * `stoker pack --tar` (tar.c reads, tar_write.c writes).
 *
 * Reading: a folder of *.tar shards (or one .tar file). A sample is a key's
 * image member (KEY.jpg, KEY.png, any torchvision image extension) and its
 * KEY.cls member (an ASCII class index); the key is the member path up to
 * the first '.' of its last path component, as webdataset has it. Class
 * names come from classes.txt beside the shards (line i names label i), or
 * are the label numbers. The source's order is shard by shard: see
 * docs/storage.md for the rule.
 *
 * Writing: shards shard-000000.tar, ... of POSIX ustar members KEY.jpg or
 * KEY.png (the file's bytes) and KEY.cls, each with its index beside it
 * (shard-000000.tar.stkidx, read by remote opens), plus classes.txt, in a temporary
 * folder renamed to the output at the end.
 */
#ifndef STK_TAR_H
#define STK_TAR_H

#include <stddef.h>

#include "sources/dataset.h"
#include "sources/source.h"
#include "stoker.h"

/* Bounds on what an untrusted shard may make the reader allocate. */
#define STK__TAR_EXT_MAX (64 * 1024) /* a GNU long name or a pax header */
#define STK__TAR_CLS_MAX 64          /* a .cls member */
#define STK__TAR_LABEL_MAX (1 << 20) /* labels without classes.txt */

#define STK__TAR_BLOCK 512            /* ustar's record */
#define STK__TAR_INDEX_EXT ".stkidx"  /* the index beside a shard: SHARD.tar.stkidx */

/* The compressed-tar suffix of name (".tar.gz", ".tgz", ".tar.zst", ...), or
 * NULL: such shards are refused by name, never skipped silently. */
const char *stk__tar_compressed(const char *name);

/* The writer (tar_write.c) is the row stk__tar_writer of pack_writer.h. */

/* Scans the shard at the local path `shard` as a reader would and writes
 * its index beside it (SHARD.tar.stkidx), which remote opens read instead
 * of the shard. */
int stk__tar_write_index(const char *shard, char *err, size_t errlen);

/* A shard's saved scan (STK__TAR_INDEX_EXT beside it, or the index
 * folder's copy) read back as stk__tar_open reads a remote shard's: data
 * (len bytes, untrusted) must name `key` ("beside\nSIZE" for an index
 * beside a shard of SIZE bytes), and every member it lists must lie in the
 * shard's shard_size bytes. STK_OK with the shard's samples in ds
 * (SHARD:NAME and label, then the stand-ins of what was left out, label
 * 0) and in *span (malloc'ed) each sample's offset and size in the shard,
 * two numbers a sample ((0, 0) for a stand-in); STK_EFORMAT or STK_ESTALE
 * when the file is refused (stk__tar_open then scans the shard), or
 * STK_ENOMEM. nclasses: classes.txt's count, 0 without one. For
 * fuzz/fuzz_shard_index.c. */
int stk__tar_index_load(const uint8_t *data, size_t len, const char *key, const char *shard,
                        uint64_t shard_size, int nclasses, stk__dataset *ds, uint64_t **span,
                        char *msg, size_t msglen);
/* Writes the checksum of a saved scan into its header (as the writer does),
 * so that a fuzzer's mutations reach the fields behind it. */
void stk__tar_index_seal(uint8_t *data, size_t len);

#endif
