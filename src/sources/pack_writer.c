/*
 * pack_writer.c: the table of pack writers (pack_writer.h) and what they
 * share: the temporary name, whole writes, and the file size limit.
 */
#define _XOPEN_SOURCE 700
#include "sources/pack_writer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/common.h"
#include "sources/net.h"

const stk__pack_writer_ops *stk__pack_writer_for(const stk_pack_options *o, char *err,
                                                 size_t errlen) {
  static const stk__pack_writer_ops *const by_format[] = {
      [STK_PACK_CACHE] = &stk__cache_writer,
      [STK_PACK_TAR] = &stk__tar_writer,
  };
  if (o->output && stk__is_url(o->output)) {
    if (o->format != STK_PACK_TAR) {
      stk__fail(err, errlen, STK_EINVAL,
                "%s: a pack to object storage writes tar shards (--tar), not a cache", o->output);
      return NULL;
    }
    return &stk__store_writer;
  }
  if ((unsigned)o->format >= sizeof by_format / sizeof by_format[0] || !by_format[o->format]) {
    stk__fail(err, errlen, STK_EINVAL, "unknown pack format %d", (int)o->format);
    return NULL;
  }
  return by_format[o->format];
}

int stk__pack_tmp_path(const char *output, long pid, char *buf, size_t n) {
  size_t ol = strlen(output);
  while (ol > 1 && output[ol - 1] == '/') ol--;
  int w = snprintf(buf, n, "%.*s.tmp-%ld", (int)ol, output, pid);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

int stk__pwrite_all(int fd, const void *p, size_t n, uint64_t off) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = pwrite(fd, b, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return -1;
    }
    b += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

/* SIGXFSZ ignored while packs run. A write past RLIMIT_FSIZE (ulimit -f)
 * raises SIGXFSZ, whose default action kills the process, leaving the
 * temporary file behind; ignored, the write fails with EFBIG instead, and
 * the pack fails, removes what it wrote, and says so. Only a default
 * disposition is replaced (a handler of the caller's stays), and it comes
 * back when the last pack of the process ends. */
static pthread_mutex_t g_xfsz_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_xfsz_users, g_xfsz_swapped;
static struct sigaction g_xfsz_old;

static void xfsz_ignore(int on) {
  pthread_mutex_lock(&g_xfsz_mu);
  if (on && g_xfsz_users++ == 0) {
    struct sigaction cur;
    g_xfsz_swapped = 0;
    if (sigaction(SIGXFSZ, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_DFL) {
      struct sigaction ign;
      memset(&ign, 0, sizeof ign);
      ign.sa_handler = SIG_IGN;
      sigemptyset(&ign.sa_mask);
      g_xfsz_old = cur;
      g_xfsz_swapped = sigaction(SIGXFSZ, &ign, NULL) == 0;
    }
  } else if (!on && --g_xfsz_users == 0 && g_xfsz_swapped) {
    struct sigaction cur;
    /* unless someone set another disposition meanwhile */
    if (sigaction(SIGXFSZ, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == SIG_IGN)
      sigaction(SIGXFSZ, &g_xfsz_old, NULL);
    g_xfsz_swapped = 0;
  }
  pthread_mutex_unlock(&g_xfsz_mu);
}

/* A failed write's "File too large" names the limit that caused it. */
void stk__pack_explain_efbig(int rc, char *err, size_t errlen) {
  struct rlimit rl;
  const char *tl = strerror(EFBIG);
  if (rc != STK_EIO || !err || !strstr(err, tl) || getrlimit(RLIMIT_FSIZE, &rl) != 0 ||
      rl.rlim_cur == RLIM_INFINITY)
    return;
  size_t l = strlen(err);
  snprintf(err + l, errlen - l,
           " (the file size limit of this process, ulimit -f / RLIMIT_FSIZE, is %llu bytes)",
           (unsigned long long)rl.rlim_cur);
}


void stk__pack_writes_begin(void) { xfsz_ignore(1); }
void stk__pack_writes_end(void) { xfsz_ignore(0); }
