/* source.c: the factory of sources: the kind of a root (stk__source_detect),
 * opening it by kind, closing it, and its epoch order. See source.h. The
 * bytes of files and objects come from object.c. */
#define _POSIX_C_SOURCE 200809L
#include "sources/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fault.h"
#include "core/options.h"
#include "sources/net.h"
#include "sources/cache_format.h"
#include "sources/redact.h"
#include "sources/tar.h"

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && strcasecmp(s + n - k, suf) == 0;
}

/* A folder is a set of tar shards when it holds .tar files and no
 * sub-folder (an image folder is made of class sub-folders). */
static int is_shard_folder(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 0;
  int tars = 0, subdirs = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    /* (a compressed shard makes it a shard folder too: the tar source
     * refuses it by name, where an image folder would ignore it) */
    if (has_suffix(e->d_name, ".tar") || stk__tar_compressed(e->d_name)) {
      tars++;
      continue;
    }
    char *full = stk__path_join(path, e->d_name);
    struct stat st;
    if (full && stat(full, &st) == 0 && S_ISDIR(st.st_mode)) subdirs++;
    free(full);
  }
  closedir(d);
  return tars > 0 && subdirs == 0;
}

const char *stk__source_detect(const char *path) {
  struct stat st;
  if (path && stk__is_url(path)) return "tar";
  if (!path || stat(path, &st) != 0) return NULL;
  if (S_ISDIR(st.st_mode)) return is_shard_folder(path) ? "tar" : "folder";
  if (!S_ISREG(st.st_mode)) return NULL;
  uint8_t magic[8] = {0};
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY); /* never block in open */
  if (fd < 0) return NULL;
  ssize_t r = read(fd, magic, sizeof magic);
  close(fd);
  if (r == (ssize_t)sizeof magic && memcmp(magic, STK__CACHE_MAGIC, 8) == 0) return "cache";
  if (has_suffix(path, ".tar") || stk__tar_compressed(path)) return "tar";
  return NULL;
}

static int source_open(stk__source *s, const stk_options *o, char *msg, size_t msglen);

/* Opens the source; its error and its note name URLs without their user
 * info or query (a pre-signed URL's signature). */
int stk__source_open(stk__source *s, const stk_options *o, char *msg, size_t msglen) {
  int rc = source_open(s, o, msg, msglen);
  if (rc && msg && msglen) stk__url_scrub(msg);
  stk__url_scrub(s->note);
  return rc;
}

static int source_open(stk__source *s, const stk_options *o, char *msg, size_t msglen) {
  memset(s, 0, sizeof *s);
  s->shuffle_buffer = o->shuffle_buffer > 0 ? o->shuffle_buffer : STK__SHUFFLE_BUFFER_DEFAULT;
  if (o->list_file) return stk__list_open(s, o, msg, msglen);
  if (stk__is_url(o->root)) return stk__tar_open(s, o->root, o, msg, msglen);
  struct stat st;
  if (stat(o->root, &st) != 0)
    return stk__fail(msg, msglen, STK_EIO, "cannot open %s: %s", o->root, strerror(errno));
  const char *kind = stk__source_detect(o->root);
  if (kind && !strcmp(kind, "cache")) return stk__cache_open(s, o->root, o, msg, msglen);
  if (kind && !strcmp(kind, "tar")) return stk__tar_open(s, o->root, o, msg, msglen);
  if (S_ISDIR(st.st_mode)) return stk__folder_open(s, o, msg, msglen);
  return stk__fail(msg, msglen, STK_EFORMAT,
                   "%s is neither an image folder, a stoker cache (.stkc) nor a tar shard",
                   o->root);
}

void stk__source_close(stk__source *s) {
  if (!s) return;
  if (s->ops && s->ops->close) s->ops->close(s);
  stk__dataset_free(&s->ds);
  memset(s, 0, sizeof *s);
}

void stk__source_order(const stk__source *s, stk__sampler *sampler, uint64_t epoch, int64_t *out) {
  if (s->ops->order)
    s->ops->order(s, sampler, epoch, out);
  else
    stk__sampler_epoch(sampler, epoch, out);
}
