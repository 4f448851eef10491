/*
 * upload.h: writing to object storage: the files of a local folder to an
 * s3:// prefix, for `stoker pack DIR s3://bucket/prefix/ --tar`. A file up
 * to 16 MiB goes in one PUT, a larger one by multipart upload (16 MiB
 * parts, 4 in flight), aborted on a failure so that no half object stays.
 * classes.txt goes last. The prefix must be empty, as a local pack's
 * output folder must.
 */
#ifndef STK_UPLOAD_H
#define STK_UPLOAD_H

#include <stddef.h>

/* STK_OK, or the error with the reason in msg. timeout: per request. */
int stk__upload_folder(const char *dir, const char *prefix, double timeout, char *msg,
                       size_t msglen);

#endif
