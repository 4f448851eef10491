/*
 * tar.h: WebDataset tar shards, read as a source and written by
 * `stoker pack --tar` (tar.c).
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

/* Writes the samples of ds (names: file paths) as tar shards into the
 * folder o->output, which must not exist or be empty. Files that cannot be
 * read or are not JPEG/PNG are left out and reported to o->bad_file.
 * STK_EEMPTY when none is left. */
int stk__tar_pack(const stk_pack_options *o, const stk__dataset *ds, stk_pack_result *res,
                  char *err, size_t errlen);

#endif
