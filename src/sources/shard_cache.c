/* shard_cache.c: local copies of remote shards. See shard_cache.h. */
#define _DEFAULT_SOURCE /* flock, d_type */
#include "sources/shard_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/common.h"

enum { C_NONE, C_LOADING, C_READY, C_OFF };

typedef struct {
  int state;
  int fd;            /* the copy (complete, or the partial file being written) */
  stk__net_req *dl;  /* the download under way */
  uint64_t size;
  char *path;        /* the complete copy's name */
  int waiters;       /* reads waiting on dl: it is not freed under them */
} copy;

struct stk__shard_cache {
  pthread_mutex_t mu;
  char *dir;
  uint64_t bound;
  stk__net *net;
  copy *v;
  int n;
  int *active, nactive; /* the shards whose copy is under way */
  _Atomic uint64_t bytes;
};

static void finish_copy(copy *p);

/* Copies whose download ended are renamed into place (or given up) now,
 * not at their next read, which may never come (mutex held). */
static void reap(stk__shard_cache *c) {
  for (int i = 0; i < c->nactive;) {
    copy *p = &c->v[c->active[i]];
    if (p->dl && !p->waiters && stk__net_done(p->dl)) {
      finish_copy(p);
      c->active[i] = c->active[--c->nactive];
    } else {
      i++;
    }
  }
}

/* mkdir -p */
static int make_dirs(const char *dir) {
  char d[4096];
  if (snprintf(d, sizeof d, "%s", dir) >= (int)sizeof d) return -1;
  for (char *p = d + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(d, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(d, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

int stk__shard_cache_open(stk__shard_cache **out, const char *dir, uint64_t bound, stk__net *net,
                          int nshards, char *msg, size_t msglen) {
  *out = NULL;
  if (make_dirs(dir) != 0)
    return stk__fail(msg, msglen, STK_EIO, "cache_dir %s: cannot create it: %s", dir,
                     strerror(errno));
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return stk__fail(msg, msglen, STK_EINVAL, "cache_dir %s is not a folder", dir);
  if (access(dir, W_OK) != 0)
    return stk__fail(msg, msglen, STK_EIO, "cache_dir %s: cannot write in it: %s", dir,
                     strerror(errno));
  if (!bound) {
    struct statvfs vs;
    if (statvfs(dir, &vs) != 0)
      return stk__fail(msg, msglen, STK_EIO, "cache_dir %s: %s", dir, strerror(errno));
    bound = (uint64_t)vs.f_bavail * vs.f_frsize / 2;
  }
  stk__shard_cache *c = calloc(1, sizeof *c);
  if (c) c->v = calloc((size_t)(nshards ? nshards : 1), sizeof *c->v);
  if (c) c->active = calloc((size_t)(nshards ? nshards : 1), sizeof *c->active);
  if (c) c->dir = strdup(dir);
  if (!c || !c->v || !c->active || !c->dir) {
    if (c) {
      free(c->v);
      free(c->active);
      free(c->dir);
    }
    free(c);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  for (int k = 0; k < nshards; k++) c->v[k].fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  c->bound = bound;
  c->net = net;
  c->n = nshards;
  *out = c;
  return STK_OK;
}

void stk__shard_cache_close(stk__shard_cache *c) {
  if (!c) return;
  reap(c); /* (no other thread is left) what came in whole is kept */
  for (int k = 0; k < c->n; k++) {
    copy *p = &c->v[k];
    if (p->dl) { /* the client was cancelled: this returns at once */
      stk__net_wait(p->dl, NULL, NULL, 0);
      stk__net_free(p->dl);
      char partial[4200];
      snprintf(partial, sizeof partial, "%s.partial", p->path);
      unlink(partial); /* ours (we hold its lock): no one else will finish it */
    }
    if (p->fd >= 0) close(p->fd);
    free(p->path);
  }
  free(c->v);
  free(c->active);
  free(c->dir);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

uint64_t stk__shard_cache_bytes(stk__shard_cache *c) { return c ? atomic_load(&c->bytes) : 0; }

/* The final size of a copy under way: ours are known; another process's
 * counts as what it wrote so far. */
static uint64_t partial_size(const stk__shard_cache *c, const char *partial) {
  size_t l = strlen(partial) - 8; /* without ".partial" */
  for (int k = 0; k < c->n; k++)
    if (c->v[k].path && strlen(c->v[k].path) == l && !strncmp(c->v[k].path, partial, l))
      return c->v[k].size;
  struct stat st;
  return stat(partial, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Makes room for `need` bytes: complete copies in the folder go, oldest
 * access first, until the copies total at most bound - need (mutex held).
 * Files of other processes' datasets count too: the bound is the folder's. */
static void make_room(stk__shard_cache *c, uint64_t need) {
  for (int round = 0; round < 1000; round++) {
    DIR *d = opendir(c->dir);
    if (!d) return;
    uint64_t total = 0;
    char oldest[512] = "";
    time_t when = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      size_t l = strlen(e->d_name);
      int whole = l > 4 && !strcmp(e->d_name + l - 4, ".tar");
      /* copies under way count at their final size: they will be there */
      int partial = l > 12 && !strcmp(e->d_name + l - 12, ".tar.partial");
      if (strncmp(e->d_name, "shard-", 6) || (!whole && !partial)) continue;
      char p[4400];
      snprintf(p, sizeof p, "%s/%s", c->dir, e->d_name);
      struct stat st;
      if (stat(p, &st) != 0) continue;
      total += partial ? partial_size(c, p) : (uint64_t)st.st_size;
      if (!whole) continue;
      time_t t = st.st_atime > st.st_mtime ? st.st_atime : st.st_mtime;
      if (!oldest[0] || t < when) {
        when = t;
        snprintf(oldest, sizeof oldest, "%s", e->d_name);
      }
    }
    closedir(d);
    if (total + need <= c->bound || !oldest[0]) return;
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", c->dir, oldest);
    /* a reader that has it open keeps its bytes until it closes it */
    if (unlink(p) != 0) return;
  }
}

int stk__shard_cache_want(stk__shard_cache *c, int k, const char *url, uint64_t size,
                          const char *etag) {
  if (!c || k < 0 || k >= c->n) return 0;
  pthread_mutex_lock(&c->mu);
  reap(c);
  copy *p = &c->v[k];
  int ok = p->state == C_LOADING || p->state == C_READY;
  if (p->state != C_NONE) goto out;
  p->state = C_OFF; /* unless all below works */
  if (!etag || !etag[0] || !size || size > c->bound) goto out;
  char key[4400], path[4400];
  snprintf(key, sizeof key, "%s\n%llu\n%s", url, (unsigned long long)size, etag);
  snprintf(path, sizeof path, "%s/shard-%016llx.tar", c->dir,
           (unsigned long long)stk__hash64(key, strlen(key), 0x51ed));
  if (!(p->path = strdup(path))) goto out;
  p->size = size;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == size) {
    p->fd = fd;
    p->state = C_READY;
    ok = 1;
    goto out;
  }
  if (fd >= 0) close(fd);
  char partial[4410];
  snprintf(partial, sizeof partial, "%s.partial", path);
  fd = open(partial, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) goto out;
  /* another process of the node downloads it: read from the network */
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 || ftruncate(fd, 0) != 0) {
    close(fd);
    goto out;
  }
  make_room(c, size);
  p->dl = stk__net_get_file(c->net, url, size, fd);
  if (!p->dl) {
    close(fd);
    unlink(partial);
    goto out;
  }
  p->fd = fd;
  p->state = C_LOADING;
  c->active[c->nactive++] = k;
  ok = 1;
out:
  pthread_mutex_unlock(&c->mu);
  return ok;
}

/* The download of p ended (mutex held): the copy is complete and renamed
 * into place, or it is given up and its reads go to the network. */
static void finish_copy(copy *p) {
  char partial[4410];
  snprintf(partial, sizeof partial, "%s.partial", p->path);
  int rc = stk__net_wait(p->dl, NULL, NULL, 0);
  stk__net_free(p->dl);
  p->dl = NULL;
  if (rc == STK_OK && rename(partial, p->path) == 0) {
    p->state = C_READY; /* the fd is the same file under its final name */
    return;
  }
  unlink(partial);
  /* the fd stays open until the cache closes: a reader may be in pread on
   * it, and a closed number could be reused by another file meanwhile */
  p->state = C_OFF;
}

int stk__shard_cache_read(stk__shard_cache *c, int k, uint64_t off, uint64_t len, void *dst) {
  if (!c || k < 0 || k >= c->n) return 1;
  pthread_mutex_lock(&c->mu);
  copy *p = &c->v[k];
  stk__net_req *dl = p->state == C_LOADING ? p->dl : NULL;
  int state = p->state;
  if (dl) p->waiters++;
  pthread_mutex_unlock(&c->mu);
  if (state != C_READY && state != C_LOADING) return 1;
  if (dl) {
    uint64_t got = stk__net_wait_bytes(dl, off + len);
    pthread_mutex_lock(&c->mu);
    p->waiters--;
    reap(c);
    state = p->state;
    pthread_mutex_unlock(&c->mu);
    if (got < off + len && state != C_READY) return 1; /* the download failed */
  }
  /* the fd stays open until the cache closes: no lock needed to read */
  size_t put = 0;
  while (put < len) {
    ssize_t r = pread(p->fd, (char *)dst + put, (size_t)(len - put), (off_t)(off + put));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 1;
    put += (size_t)r;
  }
  atomic_fetch_add(&c->bytes, len);
  return STK_OK;
}
