/*
 * tar_write.c: the tar writer of stk_pack (pack_writer.h), the counterpart
 * of tar.c, which reads what it writes.
 *
 * Samples become POSIX ustar members KEY.<ext> (the file's own bytes, the
 * extension from its content) and KEY.cls, in shards shard-000000.tar, ...
 * of about o->shard_bytes, each with its index beside it
 * (SHARD.tar.stkidx, read by remote opens instead of the shard), and
 * classes.txt, all in OUTPUT.tmp-PID, renamed to the output at the end: an
 * interrupted pack leaves no half-written folder under the name. The same
 * input packs to the same bytes (members have mtime 0, keys follow the
 * sample order).
 */
#define _XOPEN_SOURCE 700
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "sources/pack_writer.h"
#include "sources/tar.h"
#include "sources/ustar.h"

typedef struct {
  FILE *f;
  char *path;
  uint64_t bytes;
  int err;
} shard_out;

static void put_bytes(shard_out *o, const void *p, size_t n) {
  if (n && fwrite(p, 1, n, o->f) != n) o->err = errno ? errno : EIO;
  o->bytes += n;
}

static void put_member(shard_out *o, const char *name, const void *data, uint64_t size) {
  static const unsigned char zeros[STK__TAR_BLOCK];
  unsigned char h[STK__TAR_BLOCK];
  stk__ustar_header(h, name, size);
  put_bytes(o, h, STK__TAR_BLOCK);
  put_bytes(o, data, (size_t)size);
  put_bytes(o, zeros, (size_t)((STK__TAR_BLOCK - size % STK__TAR_BLOCK) % STK__TAR_BLOCK));
}

/* Ends a shard with its two zero blocks, syncs (unless a staging copy)
 * and closes it. */
static int close_shard(shard_out *o, int sync) {
  static const unsigned char zeros[2 * STK__TAR_BLOCK];
  put_bytes(o, zeros, sizeof zeros);
  if (fflush(o->f) != 0 && !o->err) o->err = errno;
  if (!o->err && sync && fsync(fileno(o->f)) != 0) o->err = errno;
  if (fclose(o->f) != 0 && !o->err) o->err = errno;
  o->f = NULL;
  return o->err;
}

/* The key of sample i: its index (unique, and it keeps the source's order
 * when keys are sorted) and its path relative to the root without the
 * extension, every character other than [A-Za-z0-9_-] made '_' (a '.'
 * would split the key, a '/' make a folder). */
static void make_key(char *key, size_t cap, int64_t i, const char *path, const char *root) {
  const char *rel = NULL;
  size_t rl = root ? strlen(root) : 0;
  while (rl > 1 && root[rl - 1] == '/') rl--;
  if (root && rl && !strncmp(path, root, rl) && path[rl] == '/') rel = path + rl + 1;
  if (!rel) { /* the parent folder and the file name */
    const char *last = strrchr(path, '/');
    rel = path;
    if (last) {
      const char *p = last;
      while (p > path && p[-1] != '/') p--;
      rel = p == last ? last + 1 : p;
    }
  }
  const char *ext = strrchr(rel, '.');
  const char *slash = strrchr(rel, '/');
  size_t n = ext && (!slash || ext > slash) ? (size_t)(ext - rel) : strlen(rel);
  if (n > 64) n = 64; /* keeps every member name within the 100 bytes of ustar */
  int w = snprintf(key, cap, "%08lld_", (long long)i);
  size_t k = w > 0 ? (size_t)w : 0;
  for (size_t j = 0; j < n && k + 1 < cap; j++) {
    char c = rel[j];
    key[k++] = (isalnum((unsigned char)c) && !(c & 0x80)) || c == '-' || c == '_' ? c : '_';
  }
  key[k] = '\0';
}

/* Removes what a failed pack wrote into its temporary folder. */
static void remove_tmp(const char *tmp, int shards) {
  char p[4300]; /* tmp (at most 4200) and a file name */
  for (int k = 0; k < shards; k++) {
    snprintf(p, sizeof p, "%s/shard-%06d.tar", tmp, k);
    unlink(p);
    snprintf(p, sizeof p, "%s/shard-%06d.tar" STK__TAR_INDEX_EXT, tmp, k);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/classes.txt", tmp);
  unlink(p);
  rmdir(tmp);
}

static int dir_is_empty(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  int empty = 1;
  while (empty && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
  closedir(d);
  return empty;
}

typedef struct {
  const stk_pack_options *o;
  char out[4096], tmp[4200], path[4300];
  uint64_t shard_bytes;
  shard_out so;
  int shards;
  stk__tar_watch watch; /* grown NULL: none */
  uint64_t told;        /* the bytes of the open shard the watcher knows of */
} tar_w;

void stk__tar_writer_watch(void *w, const stk__tar_watch *watch) { ((tar_w *)w)->watch = *watch; }

/* Completes the open shard: the end blocks, the index beside it (written
 * as each shard ends, so that a watcher can upload it with its shard), and
 * the watcher told of both. */
static int end_shard(tar_w *tw, stk_pack_result *res, char *err, size_t errlen) {
  uint64_t before = tw->so.bytes;
  if (close_shard(&tw->so, !tw->watch.grown))
    return stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tw->path, strerror(tw->so.err));
  res->bytes += before + 2 * STK__TAR_BLOCK;
  int rc = STK_OK, k = tw->shards - 1;
  if (tw->watch.grown)
    rc = tw->watch.grown(tw->watch.ctx, k, tw->path, tw->so.bytes, STK__SHARD_COMPLETE, err, errlen);
  if (rc == STK_OK) rc = stk__tar_write_index(tw->path, err, errlen);
  if (rc == STK_OK && tw->watch.grown)
    rc = tw->watch.grown(tw->watch.ctx, k, tw->path, tw->so.bytes, STK__SHARD_INDEXED, err, errlen);
  return rc;
}

/* Tells the watcher of the open shard's bytes, once `step` more are
 * written (flushed first: it reads them from the file). */
static int tell_watcher(tar_w *tw, char *err, size_t errlen) {
  if (!tw->watch.grown || tw->so.bytes < tw->told + tw->watch.step) return STK_OK;
  if (fflush(tw->so.f) != 0)
    return stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tw->path, strerror(errno));
  tw->told = tw->so.bytes;
  return tw->watch.grown(tw->watch.ctx, tw->shards - 1, tw->path, tw->so.bytes,
                         STK__SHARD_GROWING, err, errlen);
}

static int tar_open(tar_w **twp, const stk_pack_options *o, char *err,
                         size_t errlen) {
  *twp = NULL;
  if (!o->output || !*o->output) return stk__fail(err, errlen, STK_EINVAL, "no output folder");
  tar_w *tw = calloc(1, sizeof *tw);
  if (!tw) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  tw->o = o;
  size_t ol = strlen(o->output);
  while (ol > 1 && o->output[ol - 1] == '/') ol--;
  if (ol >= sizeof tw->out) {
    free(tw);
    return stk__fail(err, errlen, STK_EINVAL, "output path too long");
  }
  memcpy(tw->out, o->output, ol);
  tw->out[ol] = '\0';
  struct stat st;
  if (stat(tw->out, &st) == 0 && (!S_ISDIR(st.st_mode) || !dir_is_empty(tw->out))) {
    int rc = stk__fail(err, errlen, STK_EINVAL, "%s exists and is not an empty folder", tw->out);
    free(tw);
    return rc;
  }
  /* Everything goes into OUTPUT.tmp-PID, renamed to OUTPUT at the end: an
   * interrupted pack leaves no half-written shard folder under the name. */
  snprintf(tw->tmp, sizeof tw->tmp, "%s.tmp-%ld", tw->out, (long)getpid());
  if (mkdir(tw->tmp, 0755) != 0) {
    int rc = stk__fail(err, errlen, STK_EIO, "cannot create %s: %s", tw->tmp, strerror(errno));
    free(tw);
    return rc;
  }
  tw->shard_bytes = o->shard_bytes ? o->shard_bytes : 1ULL << 30;
  *twp = tw;
  return STK_OK;
}

static int tar_add(tar_w *tw, int64_t i, const char *file, const char *ext,
                        const uint8_t *data, size_t len, int32_t label, stk_pack_result *res,
                        char *err, size_t errlen) {
  char key[128], member[160];
  if (!tw->so.f) {
    snprintf(tw->path, sizeof tw->path, "%s/shard-%06d.tar", tw->tmp, tw->shards);
    tw->so.f = fopen(tw->path, "wbx");
    if (!tw->so.f)
      return stk__fail(err, errlen, STK_EIO, "cannot create %s: %s", tw->path, strerror(errno));
    tw->shards++;
    tw->so.bytes = 0;
    tw->told = 0;
  }
  make_key(key, sizeof key, i, file, tw->o->root);
  snprintf(member, sizeof member, "%s.%s", key, ext);
  put_member(&tw->so, member, data, len);
  char lab[16];
  int ll = snprintf(lab, sizeof lab, "%d", (int)label);
  snprintf(member, sizeof member, "%s.cls", key);
  put_member(&tw->so, member, lab, (uint64_t)ll);
  res->packed++;
  if (tw->so.err)
    return stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tw->path, strerror(tw->so.err));
  if (tw->so.bytes >= tw->shard_bytes) return end_shard(tw, res, err, errlen);
  return tell_watcher(tw, err, errlen);
}

static int tar_finish(tar_w *tw, int rc, const stk__dataset *ds,
                           stk_pack_result *res, char *err, size_t errlen) {
  if (tw->so.f) {
    if (rc == STK_OK) {
      rc = end_shard(tw, res, err, errlen);
    } else {
      fclose(tw->so.f);
    }
  }
  if (rc == STK_OK && res->packed == 0)
    rc = stk__fail(err, errlen, STK_EEMPTY, "none of the %lld files could be packed",
                   (long long)ds->n);
  if (rc == STK_OK) {
    /* class i on line i; a line break inside a name would shift the rest */
    snprintf(tw->path, sizeof tw->path, "%s/classes.txt", tw->tmp);
    FILE *f = fopen(tw->path, "wx");
    int bad = !f;
    for (int c = 0; f && c < ds->nclasses; c++) {
      for (const char *p = ds->classes[c]; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, f);
      fputc('\n', f);
    }
    if (f && (fflush(f) != 0 || fsync(fileno(f)) != 0)) bad = 1;
    if (f && fclose(f) != 0) bad = 1;
    if (bad) rc = stk__fail(err, errlen, STK_EIO, "cannot write %s: %s", tw->path, strerror(errno));
  }
  /* rename() replaces an empty folder of that name */
  if (rc == STK_OK && rename(tw->tmp, tw->out) != 0)
    rc = stk__fail(err, errlen, STK_EIO, "cannot rename %s to %s: %s", tw->tmp, tw->out,
                   strerror(errno));
  if (rc != STK_OK) {
    remove_tmp(tw->tmp, tw->shards);
    res->packed = 0;
    res->bytes = 0;
    tw->shards = 0;
  }
  res->shards = tw->shards;
  free(tw);
  return rc;
}

static int tw_open(void **w, const stk_pack_options *o, const stk__dataset *ds,
                   const stk__pack_source *src, char *err, size_t errlen) {
  (void)ds;
  (void)src;
  return tar_open((tar_w **)w, o, err, errlen);
}

static int tw_add(void *w, const stk__pack_item *it, uint64_t *off, stk_pack_result *res,
                  char *err, size_t errlen) {
  *off = 0;
  return tar_add(w, it->index, it->path, it->ext, it->data, it->len, it->label, res, err, errlen);
}

static const char *tw_temp_name(void *w) { return ((tar_w *)w)->tmp; }

static int tw_finish(void *w, int rc, const stk__dataset *ds, stk_pack_result *res, char *err,
                     size_t errlen) {
  return tar_finish(w, rc, ds, res, err, errlen);
}

const stk__pack_writer_ops stk__tar_writer = {
    .name = "tar",
    .pixels = 0,
    .open = tw_open,
    .add = tw_add,
    .write_at = NULL, /* shards are written in order, never placed */
    .temp_name = tw_temp_name,
    .finish = tw_finish,
};
