/* store_local.c: the store's row of local files (see store.h): a folder's
 * files or one file, read by pread; and the file helpers every source
 * uses (stk__open_input, stk__read_whole_file, stk__pread_all). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "core/fault.h"
#include "sources/object.h"
#include "sources/store.h"

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

ssize_t stk__pread_all(int fd, void *p, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)p + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends a name (taken) to the store's table. STK_ENOMEM. */
static int add_name(stk__objstore *st, int *cap, char *name) {
  if (!name) return STK_ENOMEM;
  if (st->n == *cap) {
    int c = *cap ? *cap * 2 : 64;
    char **v = realloc(st->name, (size_t)c * sizeof *v);
    if (!v) {
      free(name);
      return STK_ENOMEM;
    }
    st->name = v;
    *cap = c;
  }
  st->name[st->n++] = name;
  return STK_OK;
}

/* The folder's regular files that `keep` keeps, in sorted name order. */
static int list_folder(stk__objstore *st, const char *path, stk__objstore_keep keep, char *msg,
                       size_t msglen) {
  DIR *d = opendir(path);
  if (!d) return stk__fail(msg, msglen, STK_EIO, "cannot open folder %s: %s", path, strerror(errno));
  int rc = STK_OK, cap = 0, kept = 0;
  struct dirent *e;
  while (rc == STK_OK && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *full = stk__path_join(path, e->d_name);
    struct stat sb;
    if (!full) rc = STK_ENOMEM;
    else if ((rc = keep(full, &kept, msg, msglen)) || !kept ||
             stat(full, &sb) != 0 || !S_ISREG(sb.st_mode))
      free(full);
    else
      rc = add_name(st, &cap, full);
  }
  closedir(d);
  if (rc == STK_ENOMEM) return stk__fail(msg, msglen, rc, "out of memory");
  if (rc) return rc;
  /* Sorting full paths of one folder sorts their file names. */
  if (st->n > 1) qsort(st->name, (size_t)st->n, sizeof *st->name, cmp_str);
  return STK_OK;
}

/* A folder's files, or the one file `path` names (whatever its name: the
 * caller detected its kind); st->dir is the folder. */
static int local_list(stk__objstore *st, const char *path, stk__objstore_keep keep, char *msg,
                      size_t msglen) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return stk__fail(msg, msglen, STK_EIO, "cannot open %s: %s", path, strerror(errno));
  if (S_ISDIR(sb.st_mode)) {
    if (!(st->dir = strdup(path))) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    return list_folder(st, path, keep, msg, msglen);
  }
  const char *slash = strrchr(path, '/');
  st->dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  int cap = 0;
  if (!st->dir || add_name(st, &cap, strdup(path)))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  return STK_OK;
}

/* The file `name` in st->dir: *data NULL when there is none. */
static int local_sibling(stk__objstore *st, const char *name, uint8_t **data, size_t *len,
                         char *msg, size_t msglen) {
  *data = NULL;
  *len = 0;
  char *path = stk__path_join(st->dir, name);
  if (!path) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  stk__buf b = {0};
  stk__bytes by;
  char why[256];
  int rc = stk__read_whole_file(path, &b, 64u << 20, &by, why, sizeof why);
  if (rc == STK_EIO && errno == ENOENT) {
    rc = STK_OK; /* none */
  } else if (rc) {
    rc = stk__fail(msg, msglen, STK_EIO, "%s: %s", path, why);
  } else {
    *data = b.p; /* (one byte more than the file: room for a NUL) */
    *len = by.len;
    b.p = NULL;
  }
  stk__buf_free(&b);
  free(path);
  return rc;
}

static int local_reader(stk__objstore *st, int k, int parts, unsigned depth, stk__object **out,
                        char *msg, size_t msglen) {
  (void)parts, (void)depth;
  stk__object *o = malloc(sizeof *o);
  if (!o) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (stk__object_open(o, st->name[k], NULL, 0, 0, msg, msglen)) {
    free(o);
    return STK_EIO;
  }
  *out = o;
  return STK_OK;
}

/* Each read opens the file, preads the range and closes it again. A folder
 * may hold thousands of shards, more than the default limit of 1024 open
 * files, and an fd cache shared by every worker thread would need a lock
 * and eviction; open() of a file whose name the kernel has just looked up
 * costs microseconds, against a millisecond or more to decode the image. */
static int local_read(stk__objstore *st, int k, uint64_t off, uint64_t len, void *dst, uint64_t *got,
                      char *msg, size_t msglen) {
  /* Checked as a regular file when listed; O_NONBLOCK so that one replaced
   * by a FIFO since cannot block the open (pread on it then fails), without
   * stk__open_input's fstat and fcntl per read. */
  int fd = open(st->name[k], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return stk__fail(msg, msglen, STK_EIO, "cannot open the file: %s", strerror(errno));
  ssize_t r = stk__pread_all(fd, dst, (size_t)len, off);
  int e = errno;
  close(fd);
  if (r < 0) return stk__fail(msg, msglen, STK_EIO, "read failed: %s", strerror(e));
  *got = (uint64_t)r;
  return STK_OK;
}

static int local_get(stk__objstore *st, stk__objstore_req *q, const char *name, stk__buf *buf,
                     uint64_t max, stk__bytes *out, char *msg, size_t msglen) {
  (void)st, (void)q;
  return stk__read_whole_file(name, buf, max, out, msg, msglen);
}

const stk__objstore_ops stk__objstore_local = {.kind = "local",
                                         .list = local_list,
                                         .sibling = local_sibling,
                                         .reader = local_reader,
                                         .read = local_read,
                                         .get = local_get};
