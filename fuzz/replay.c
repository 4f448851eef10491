/*
 * replay.c: a main for the fuzz targets without libFuzzer. Every argument is
 * a file or a folder; every file (folders: every file in them, in name
 * order, dot files skipped) goes through LLVMFuzzerTestOneInput once. A
 * folder that does not exist counts as empty, so a target without crashers
 * yet needs no placeholder. Exits 0 when every input ran; a bug aborts (the
 * sanitizers, or a broken invariant).
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return 1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    return 1;
  }
  /* An exact-size copy, as libFuzzer passes it, so that a read one byte
   * past the input is caught. */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    return 1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, int *count) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nv = realloc(names, cap * sizeof *nv);
      if (!nv) break;
      names = nv;
    }
    if (!(names[n] = strdup(e->d_name))) break;
    n++;
  }
  closedir(d);
  if (n > 1) qsort(names, n, sizeof *names, cmp_name);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      bad |= run_file(path);
      (*count)++;
    }
    free(names[i]);
  }
  free(names);
  return bad;
}

int main(int argc, char **argv) {
  int bad = 0, count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) continue; /* a folder not made yet */
    if (S_ISDIR(st.st_mode)) {
      bad |= run_dir(argv[i], &count);
    } else {
      bad |= run_file(argv[i]);
      count++;
    }
  }
  printf("replayed %d inputs\n", count);
  return bad;
}
