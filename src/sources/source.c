/* source.c: opening a source by kind, and what the file-based sources
 * share. See source.h. */
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
#include "sources/net.h"
#include "sources/cache_format.h"

/* What a file that is not a regular one is, for messages. */
static const char *kind_of(mode_t m) {
  return S_ISDIR(m)    ? "a folder"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
                       : "a special file";
}

int stk__open_input(const char *path, int allow_pipe, struct stat *st, char *msg, size_t msglen) {
  /* O_NONBLOCK: opening a FIFO (or a device) for reading would block until
   * a writer comes; with it the open returns at once and fstat refuses
   * what is not wanted before anything is read. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    stk__fail(msg, msglen, STK_EIO, "cannot open: %s", strerror(e));
    errno = e; /* the caller may tell ENOENT from the rest */
    return -1;
  }
  int rc = STK_OK;
  if (fstat(fd, st) != 0) {
    rc = stk__fail(msg, msglen, STK_EIO, "cannot stat: %s", strerror(errno));
  } else if (!S_ISREG(st->st_mode) && !(allow_pipe && S_ISFIFO(st->st_mode))) {
    rc = stk__fail(msg, msglen, STK_EIO, "not a regular file (%s)", kind_of(st->st_mode));
  } else {
    /* back to ordinary blocking reads */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
      rc = stk__fail(msg, msglen, STK_EIO, "cannot set up the read: %s", strerror(errno));
  }
  if (rc) {
    close(fd);
    errno = 0;
    return -1;
  }
  return fd;
}

int stk__read_whole_file(const char *path, stk__buf *buf, uint64_t max_bytes, stk__bytes *out,
                         char *msg, size_t msglen) {
  out->data = NULL;
  out->len = 0;
  out->bytes_read = 0; /* nothing read yet: a file that cannot be opened adds nothing */
  struct stat st;
  int fd = stk__open_input(path, 0, &st, msg, msglen);
  if (fd < 0) return STK_EIO;
  int rc = STK_OK;
  if (max_bytes && (uint64_t)st.st_size > max_bytes) {
    rc = stk__fail(msg, msglen, STK_ELIMIT, "file is %lld bytes, over the limit of %llu",
                   (long long)st.st_size, (unsigned long long)max_bytes);
  } else if (STK__FAIL() || stk__buf_reserve(buf, (size_t)st.st_size + 1)) {
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory for %lld bytes", (long long)st.st_size);
  }
  size_t got = 0;
  while (rc == STK_OK && got < (size_t)st.st_size) {
    ssize_t r = STK__READ(fd, (char *)buf->p + got, (size_t)st.st_size - got, path);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = stk__fail(msg, msglen, STK_EIO, "read failed: %s", strerror(errno));
    if (r == 0) break; /* the file shrank while we read it: decode what is there */
    if (r > 0) got += (size_t)r;
  }
  close(fd);
  out->data = buf->p;
  out->len = got;
  out->bytes_read = got;
  return rc;
}

/* Folder and list sources: the sample's name is its file's path. */
static int files_read(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
                      stk__bytes *out, char *msg, size_t msglen) {
  return stk__read_whole_file(stk__dataset_path(&s->ds, i), buf, max_bytes, out, msg, msglen);
}
const stk__source_ops stk__folder_ops = {.kind = "folder", .read = files_read};
const stk__source_ops stk__list_ops = {.kind = "list", .read = files_read};

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
    if (has_suffix(e->d_name, ".tar")) {
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
  if (has_suffix(path, ".tar")) return "tar";
  return NULL;
}

int stk__source_open(stk__source *s, const stk_options *o, char *msg, size_t msglen) {
  memset(s, 0, sizeof *s);
  s->shuffle_buffer = o->shuffle_buffer > 0 ? o->shuffle_buffer : 1000;
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
