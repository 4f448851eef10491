/*
 * util.h: helpers the C tests share to make their own data: a temporary
 * folder, small generated JPEG/PNG files, and recursive removal.
 */
#ifndef STK_TEST_UTIL_H
#define STK_TEST_UTIL_H

/* Include this header first: nftw and mkdtemp need the feature macro. */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif

#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codecs/encode.h"
#include "core/common.h"
#include "stoker.h"
#include "synth/synth.h"

static inline char *tu_tempdir(void) {
  char tmpl[] = "/tmp/stoker-test-XXXXXX";
  char *d = mkdtemp(tmpl);
  return d ? strdup(d) : NULL;
}

static inline int tu_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static inline void tu_rmtree(const char *dir) { nftw(dir, tu_rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static inline void tu_mkdir(const char *dir) { mkdir(dir, 0755); }

/* The entries of a folder other than . and .. (hidden ones too), or -1. */
static inline int tu_count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* The threads of this process now; and a wait of up to `secs` for their
 * count to fall to `want`, as threads left behind end on their own. */
static inline int tu_nthreads(void) { return tu_count_dir("/proc/self/task"); }

static inline int tu_wait_threads(int want, double secs) {
  double t0 = stk__now();
  struct timespec ts = {0, 2000000};
  while (tu_nthreads() > want && stk__now() - t0 < secs) nanosleep(&ts, NULL);
  return tu_nthreads();
}

/* PNG's CRC-32 (ISO 3309), for tests that rewrite chunks. */
static inline uint32_t tu_crc32(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return c ^ 0xFFFFFFFFu;
}

static inline void tu_put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* Offset of the first JPEG marker FF <code> after SOI, or 0. */
static inline size_t tu_find_marker(const uint8_t *p, size_t n, uint8_t code) {
  for (size_t i = 2; i + 1 < n; i++)
    if (p[i] == 0xFF && p[i + 1] == code) return i;
  return 0;
}

/* Writes a photo-like w x h JPEG (seeded) to path. Returns STK_OK. */
static inline int tu_write_jpeg(const char *path, int w, int h, uint64_t seed, int quality) {
  uint8_t *rgb = malloc((size_t)w * h * 3);
  if (!rgb) return STK_ENOMEM;
  stk__synth_render(rgb, w, h, seed);
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  o.quality = quality;
  uint8_t *buf = NULL;
  size_t n = 0;
  int rc = stk__jpeg_encode(rgb, w, h, &o, &buf, &n);
  if (!rc) rc = stk__write_file(path, buf, n);
  free(buf);
  free(rgb);
  return rc;
}

static inline int tu_write_bytes(const char *path, const void *p, size_t n) {
  return stk__write_file(path, p, n);
}

/* Makes root/<class>/<i>.jpg for `classes` classes of `per_class` images. */
static inline int tu_make_folder(const char *root, int classes, int per_class, int w, int h) {
  char p[4096];
  for (int c = 0; c < classes; c++) {
    snprintf(p, sizeof p, "%s/class%03d", root, c);
    tu_mkdir(p);
    for (int i = 0; i < per_class; i++) {
      snprintf(p, sizeof p, "%s/class%03d/img%04d.jpg", root, c, i);
      int rc = tu_write_jpeg(p, w + (i * 7) % 13, h + (i * 5) % 11, (uint64_t)(c * 1000 + i), 85);
      if (rc) return rc;
    }
  }
  return STK_OK;
}

#endif
