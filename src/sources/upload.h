/*
 * upload.h: writing to object storage, for `stoker pack DIR
 * s3://bucket/prefix/ --tar`: the store writer, stk__store_writer of
 * pack_writer.h (its row is in upload.c; nothing else is public).
 *
 * The shards are uploaded while the pack goes on. The tar writer writes
 * them into a local staging folder; each time 16 MiB more of a shard are
 * on disk, they go as a part of its multipart upload, and a complete shard
 * is finished (its last part, the upload completed, its index beside it)
 * while the next one is written. A file of at most 16 MiB goes in one PUT.
 * Four uploader threads ("stk-upload-N") each send one part at a time,
 * hashing it for SigV4 on their own thread (sha256.h), so that four parts
 * are in flight while the pack's threads produce the next ones.
 *
 * Bounds: memory, the four 16 MiB part buffers (64 MiB); local disk, the
 * shard being written and at most two complete shards whose upload has not
 * finished (the pack waits when a third would be). An uploaded shard and
 * its index leave the staging folder at once.
 *
 * classes.txt goes last, once every shard is uploaded: a prefix without it
 * is not a complete dataset. The prefix must be empty at the start, as a
 * local pack's output folder must. A failure (an upload refused, the store
 * unreachable past read_timeout) or a cancel fails the pack with the first
 * error, naming the object's URL (never a secret): the multipart uploads
 * under way are aborted, so that the store keeps no half object, and the
 * objects this pack completed are deleted (best effort; the prefix was
 * empty), so that the same pack may simply run again.
 */
#ifndef STK_UPLOAD_H
#define STK_UPLOAD_H

#include "sources/pack_writer.h"

#endif
