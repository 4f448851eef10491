/* list.c: the list-file source: lines of "path label". See dataset.h. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include "core/common.h"
#include "sources/source.h"
#include "sources/store.h"

/* A list has no class names: its classes are the label numbers 0..max, each
 * given a name (in one block) when the source opens, so the largest label
 * sizes an allocation. Labels are bounded
 * as the tar reader bounds them without classes.txt. */
#define LIST_LABEL_MAX (1 << 20)
/* A line holds one path and a label: both are bounded before the line is
 * copied out, so a file without newlines cannot make a huge line buffer. */
#define LIST_PATH_MAX 4096 /* PATH_MAX on Linux */
#define LIST_LINE_MAX (LIST_PATH_MAX + 64)

/* Milliseconds from now to the monotonic time t (stk__now()), for poll. */
static int ms_until(double t) {
  double ms = (t - stk__now()) * 1e3;
  return ms <= 0 ? 0 : ms < 2e9 ? (int)ms + 1 : 2000000000;
}

/* The list file's bytes, read to the end (a pipe too, as getline did). A
 * named FIFO is opened without waiting for its writer. A FIFO or a pipe is
 * then read within wait_s seconds (0: no limit) as a whole: a writer that
 * never comes, or that sends some lines and stalls, fails with a message
 * naming the list instead of hanging whoever opens it. */
static int read_list(const char *list, double wait_s, char **out, size_t *outlen, int *fifo_out,
                     char *msg, size_t msglen) {
  struct stat st;
  char why[256];
  int fd = stk__open_input(list, 1, &st, why, sizeof why);
  if (fd < 0) return stk__fail(msg, msglen, STK_EIO, "list file %s: %s", list, why);
  int fifo = S_ISFIFO(st.st_mode);
  *fifo_out = fifo;
  double deadline = fifo && wait_s > 0 ? stk__now() + wait_s : 0;
  char *b = NULL;
  size_t len = 0, cap = 0, lines = 0;
  int rc = STK_OK;
  for (;;) {
    if (len == cap) {
      size_t nc = cap ? cap * 2 : 1 << 16;
      char *nb = nc > cap ? realloc(b, nc) : NULL;
      if (!nb) {
        rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory reading list file %s", list);
        break;
      }
      b = nb;
      cap = nc;
    }
    if (deadline > 0) {
      /* (Linux: a FIFO no writer has opened yet is not readable, not hung
       * up, so the wait for the first writer is bounded too) */
      struct pollfd pf = {fd, POLLIN, 0};
      int r;
      while ((r = poll(&pf, 1, ms_until(deadline))) < 0 && errno == EINTR) {
      }
      if (r == 0 && len == 0) {
        rc = stk__fail(msg, msglen, STK_ETIMEDOUT,
                       "list file %s: nothing was written to the FIFO within %g s", list, wait_s);
        break;
      }
      if (r == 0) {
        rc = stk__fail(msg, msglen, STK_ETIMEDOUT,
                       "list file %s: not read to its end within %g s: its writer sent %zu "
                       "bytes (%zu lines), then stalled; a slow writer needs a longer "
                       "read_timeout (0 = no limit)",
                       list, wait_s, len, lines);
        break;
      }
    }
    ssize_t r = read(fd, b + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = stk__fail(msg, msglen, STK_EIO, "cannot read list file %s: %s", list, strerror(errno));
      break;
    }
    if (r == 0) break;
    if (fifo) /* for the message of a stalled writer */
      for (ssize_t k = 0; k < r; k++) lines += b[len + (size_t)k] == '\n';
    len += (size_t)r;
  }
  close(fd);
  if (rc) {
    free(b);
    return rc;
  }
  *out = b;
  *outlen = len;
  return STK_OK;
}

int stk__dataset_from_list(stk__dataset *ds, const char *list, const char *base, double wait_s,
                           char *msg, size_t msglen) {
  memset(ds, 0, sizeof *ds);
  char *text = NULL;
  size_t n = 0;
  int fifo = 0;
  int rc = read_list(list, wait_s, &text, &n, &fifo, msg, msglen);
  if (rc) return rc;
  /* A pipe the shell made (a process substitution's /dev/fd/N, /dev/stdin)
   * has no folder of its own: its relative paths are the current
   * directory's, as the command that wrote them meant them, not /dev/fd's.
   * A named FIFO elsewhere keeps its folder, as a file does. */
  if (!base && fifo && (!strncmp(list, "/dev/", 5) || !strncmp(list, "/proc/", 6))) base = ".";
  rc = stk__dataset_from_list_buffer(ds, text, n, list, base, msg, msglen);
  free(text);
  return rc;
}

/* The next line of text[*pos..n) copied out into *line (grown as needed),
 * NUL-terminated, newline included, as getline gives it, so that the
 * parsing works on a C string; *pos then past it. A line ends at LF, CRLF
 * or a lone CR (a list saved by an old Mac editor used to parse as one path
 * holding every line). */
static int next_line(const char *text, size_t n, size_t *pos, char **line, size_t *cap,
                     size_t *linelen, const char *list, int64_t lineno, char *msg, size_t msglen) {
  size_t len = 0, at = *pos;
  while (at + len < n && text[at + len] != '\n' && text[at + len] != '\r') len++;
  if (at + len < n) len += text[at + len] == '\r' && at + len + 1 < n && text[at + len + 1] == '\n' ? 2 : 1;
  if (len > LIST_LINE_MAX)
    return stk__fail(msg, msglen, STK_EINVAL, "%s:%lld: line of %zu bytes, over the limit of %d",
                     list, (long long)lineno + 1, len, LIST_LINE_MAX);
  if (len + 1 > *cap) {
    size_t nc = *cap ? *cap : 256;
    while (nc < len + 1) nc *= 2;
    char *nb = realloc(*line, nc);
    if (!nb) return STK_ENOMEM;
    *line = nb;
    *cap = nc;
  }
  memcpy(*line, text + at, len);
  (*line)[len] = '\0';
  *pos = at + len;
  *linelen = len;
  return STK_OK;
}

/* One line of len bytes (a NUL inside ends its path) "path label" (blank
 * lines and # comments are none) into the table; *maxlabel the largest
 * label so far. */
static int parse_line(stk__dataset *ds, char *line, size_t len, const char *list,
                      const char *base, int64_t lineno, int32_t *maxlabel, char *msg,
                      size_t msglen) {
  while (len > 0 && isspace((unsigned char)line[len - 1])) line[--len] = '\0';
  char *s = line;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '\0' || *s == '#') return STK_OK;
  char *sp = s + strlen(s);
  while (sp > s && !isspace((unsigned char)sp[-1])) sp--;
  char *end = NULL;
  errno = 0;
  long lab = sp > s ? strtol(sp, &end, 10) : -1;
  /* digits only: strtol also takes "+1" and " 1" */
  if (sp == s || !isdigit((unsigned char)*sp) || errno || !end || *end || lab < 0 ||
      lab > INT32_MAX)
    return stk__fail(msg, msglen, STK_EINVAL,
                     "%s:%lld: expected \"path label\" with a non-negative integer label", list,
                     (long long)lineno);
  if (lab >= LIST_LABEL_MAX)
    return stk__fail(msg, msglen, STK_EINVAL, "%s:%lld: label %ld is over the limit of %d", list,
                     (long long)lineno, lab, LIST_LABEL_MAX - 1);
  char *pe = sp;
  while (pe > s && isspace((unsigned char)pe[-1])) pe--;
  *pe = '\0';
  if ((size_t)(pe - s) > LIST_PATH_MAX)
    return stk__fail(msg, msglen, STK_EINVAL, "%s:%lld: path of %zu bytes, over the limit of %d",
                     list, (long long)lineno, (size_t)(pe - s), LIST_PATH_MAX);
  /* absolute paths and URLs are kept as they are */
  char *path = s[0] == '/' || stk__is_url(s) ? strdup(s) : stk__path_join(base, s);
  if (!path) return STK_ENOMEM;
  int rc = stk__dataset_add(ds, path, (int32_t)lab);
  free(path);
  if (lab > *maxlabel) *maxlabel = (int32_t)lab;
  return rc;
}

int stk__dataset_from_list_buffer(stk__dataset *ds, const char *text, size_t n, const char *list,
                                  const char *base, char *msg, size_t msglen) {
  memset(ds, 0, sizeof *ds);
  char *dirbuf = NULL;
  if (!base) {
    dirbuf = strdup(list);
    if (!dirbuf) return STK_ENOMEM;
    char *slash = strrchr(dirbuf, '/');
    if (slash)
      slash[slash == dirbuf ? 1 : 0] = '\0';
    else
      strcpy(dirbuf, ".");
    base = dirbuf;
  }
  char *line = NULL;
  size_t cap = 0, pos = 0, len = 0;
  int64_t lineno = 0;
  int rc = STK_OK;
  int32_t maxlabel = -1;
  /* A UTF-8 byte order mark (editors on Windows write one) is not part of
   * the first path: kept, it made an invisible character of it. */
  if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) pos = 3;
  while (rc == STK_OK && pos < n) {
    rc = next_line(text, n, &pos, &line, &cap, &len, list, lineno, msg, msglen);
    if (rc == STK_OK)
      rc = parse_line(ds, line, len, list, base, ++lineno, &maxlabel, msg, msglen);
  }
  free(line);
  free(dirbuf);
  if (rc == STK_OK && ds->n == 0)
    rc = stk__fail(msg, msglen, STK_EEMPTY, "list file %s names no samples", list);
  if (rc == STK_OK) {
    /* A list has no class names: classes are the label numbers, named when
     * the source opens (so the parser's work stays in the list's size). */
    ds->nclasses = maxlabel + 1;
  }
  if (rc) stk__dataset_free(ds);
  return rc;
}

/* ---- lists of URLs -------------------------------------------------------- */

/* Lines that are URLs are read with one GET each. The loader's plan of each
 * started batch requests them at once, many in flight; a read takes the
 * request planned for its sample (or makes one). Planned requests wait in
 * a table keyed by sample index; a sample planned twice (the padding of
 * the last rank) has two entries. */
#define PLAN_BUCKETS 4096

typedef struct planned {
  struct planned *next;
  int64_t idx;
  stk__objstore_req *req;
} planned;

typedef struct {
  stk__objstore *store; /* the remote row: the list's URLs are read through it */
  uint64_t max_bytes;
  pthread_mutex_t mu;
  planned *b[PLAN_BUCKETS];
} url_list;

static void url_plan(const stk__source *s, const int64_t *idx, int n, uint64_t epoch) {
  (void)epoch;
  url_list *u = s->impl;
  for (int k = 0; k < n; k++) {
    const char *name = stk__dataset_path(&s->ds, idx[k]);
    if (!stk__is_url(name)) continue;
    planned *p = malloc(sizeof *p);
    if (!p) return; /* the read fetches it itself */
    p->idx = idx[k];
    p->req = stk__objstore_fetch(u->store, name, u->max_bytes);
    if (!p->req) {
      free(p);
      return;
    }
    pthread_mutex_lock(&u->mu);
    planned **at = &u->b[(uint64_t)idx[k] % PLAN_BUCKETS];
    while (*at) at = &(*at)->next; /* first planned, first read */
    p->next = NULL;
    *at = p;
    pthread_mutex_unlock(&u->mu);
  }
}

static void drop_planned(stk__objstore *st, planned *p) {
  while (p) {
    planned *nx = p->next;
    stk__objstore_req_free(st, p->req);
    free(p);
    p = nx;
  }
}

static void url_plan_reset(const stk__source *s) {
  url_list *u = s->impl;
  planned *all[PLAN_BUCKETS];
  pthread_mutex_lock(&u->mu);
  memcpy(all, u->b, sizeof all);
  memset(u->b, 0, sizeof u->b);
  pthread_mutex_unlock(&u->mu);
  /* (outside the lock: dropping waits for transfers to end) */
  for (int i = 0; i < PLAN_BUCKETS; i++) drop_planned(u->store, all[i]);
}

static int url_read(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
                    stk__bytes *out, char *msg, size_t msglen) {
  const char *name = stk__dataset_path(&s->ds, i);
  url_list *u = s->impl;
  stk__objstore_req *q = NULL;
  pthread_mutex_lock(&u->mu);
  for (planned **at = &u->b[(uint64_t)i % PLAN_BUCKETS]; *at; at = &(*at)->next)
    if ((*at)->idx == i) {
      planned *p = *at;
      *at = p->next;
      q = p->req;
      free(p);
      break;
    }
  pthread_mutex_unlock(&u->mu);
  /* (a path in a list of URLs is a local file's, read there) */
  return stk__objstore_get(u->store, q, name, buf, max_bytes, out, msg, msglen);
}

static void url_cancel(const stk__source *s) {
  url_list *u = s->impl;
  stk__objstore_cancel(u->store);
}

static void url_net_stats(const stk__source *s, stk_stats *o) {
  url_list *u = s->impl;
  stk__objstore_stats(u->store, o);
}

static void url_close(stk__source *s) {
  url_list *u = s->impl;
  if (!u) return;
  stk__objstore_cancel(u->store);
  url_plan_reset(s);
  stk__objstore_close(u->store);
  pthread_mutex_destroy(&u->mu);
  free(u);
  s->impl = NULL;
}

static const stk__source_ops url_list_ops = {.kind = "list",
                                             .read = url_read,
                                             .close = url_close,
                                             .plan = url_plan,
                                             .plan_reset = url_plan_reset,
                                             .cancel = url_cancel,
                                             .net_stats = url_net_stats};

int stk__list_open(stk__source *s, const stk_options *opt, char *msg, size_t msglen) {
  s->ops = &stk__list_ops;
  /* a FIFO or pipe list is read within the time a file read may take */
  int rc = stk__dataset_from_list(&s->ds, opt->list_file, opt->list_base, opt->read_timeout, msg,
                                  msglen);
  int nc = s->ds.nclasses;
  if (rc == STK_OK && (rc = stk__dataset_number_classes(&s->ds, nc))) {
    stk__dataset_free(&s->ds);
    return stk__fail(msg, msglen, rc, "out of memory naming %d classes", nc);
  }
  const char *url = NULL;
  for (int64_t i = 0; rc == STK_OK && i < s->ds.n && !url; i++)
    if (stk__is_url(stk__dataset_path(&s->ds, i))) url = stk__dataset_path(&s->ds, i);
  if (url) {
    url_list *u = calloc(1, sizeof *u);
    if (!u) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    pthread_mutex_init(&u->mu, NULL);
    u->max_bytes = opt->max_file_bytes;
    s->impl = u;
    s->ops = &url_list_ops; /* close() frees what was made on any failure */
    stk__objstore_config cfg = {.read_timeout = opt->read_timeout};
    rc = stk__objstore_open(&u->store, url, &cfg, msg, msglen);
  }
  return rc;
}

/* A local list's sample is its file: the name is the path. */
static int file_read(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
                     stk__bytes *out, char *msg, size_t msglen) {
  return stk__read_whole_file(stk__dataset_path(&s->ds, i), buf, max_bytes, out, msg, msglen);
}
const stk__source_ops stk__list_ops = {.kind = "list", .read = file_read};
