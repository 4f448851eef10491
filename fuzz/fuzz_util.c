/* fuzz_util.c: see fuzz.h. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#ifndef FUZZ_ASAN
#define FUZZ_ASAN 0
#endif
#if FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#endif

static char g_dir[256];

static void rm_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[1024];
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
        rm_tree(p);
      else
        unlink(p);
    }
    closedir(d);
  }
  rmdir(path);
}

static void cleanup(void) {
  if (g_dir[0]) rm_tree(g_dir);
}

const char *fuzz_tmpdir(void) {
  if (g_dir[0]) return g_dir;
  struct stat st;
  const char *root = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : NULL;
  if (!root) root = getenv("TMPDIR");
  if (!root || !*root) root = "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/stoker-fuzz-XXXXXX", root);
  if (!mkdtemp(g_dir)) {
    perror("fuzz: mkdtemp");
    abort();
  }
  atexit(cleanup);
  return g_dir;
}

void fuzz_write(const char *path, const void *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    perror(path);
    abort();
  }
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) {
      perror(path);
      abort();
    }
    p += w;
    n -= (size_t)w;
  }
  close(fd);
}

unsigned fuzz_touch(const uint8_t *p, size_t n) {
#if FUZZ_ASAN
  /* One look at the shadow memory instead of a checked load per byte; a
   * bad byte is then read, so that ASan reports it in its usual way. */
  const volatile uint8_t *bad = __asan_region_is_poisoned((void *)(uintptr_t)p, n);
  return bad ? *bad : 0;
#else
  unsigned s = 0;
  for (size_t i = 0; i < n; i++) s += p[i];
  return s;
#endif
}

void fuzz_check(int cond, const char *what, const char *file, int line) {
  if (cond) return;
  fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
  abort();
}

void fuzz_note(const char *fmt, ...) {
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
  if (!verbose) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}
