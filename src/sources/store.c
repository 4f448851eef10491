/* store.c: the store's calls (store.h), dispatched to its row, and what
 * both rows share: the table of objects and the index folder's names. */
#define _POSIX_C_SOURCE 200809L
#include "sources/store.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sources/index.h"
#include "sources/object.h"

int stk__objstore_open(stk__objstore **out, const char *root, const stk__objstore_config *cfg, char *msg,
                    size_t msglen) {
  stk__objstore *st = calloc(1, sizeof *st);
  if (!st) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  *out = st;
  st->ops = stk__is_url(root) ? &stk__objstore_remote : &stk__objstore_local;
  if (cfg->index_dir && !(st->index_dir = strdup(cfg->index_dir)))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  /* (the remote row's transport, parts and copies; the caller closes the
   * store on any failure) */
  if (st->ops == &stk__objstore_remote) return stk__objstore_remote_open(st, cfg, msg, msglen);
  return STK_OK;
}

void stk__objstore_close(stk__objstore *st) {
  if (!st) return;
  if (st->ops->close) st->ops->close(st);
  for (int i = 0; i < st->n; i++) free(st->name[i]);
  free(st->name);
  free(st->size);
  free(st->etag);
  free(st->dir);
  free(st->index_dir);
  free(st);
}

int stk__objstore_is_remote(const stk__objstore *st) { return st->ops == &stk__objstore_remote; }

int stk__objstore_list(stk__objstore *st, const char *root, stk__objstore_keep keep, const char *sibling,
                    char *msg, size_t msglen) {
  if (stk__objstore_is_remote(st)) stk__objstore_remote_early(st, root, keep, sibling);
  int rc = st->ops->list(st, root, keep, msg, msglen);
  /* (local files: sizes come from the readers) */
  if (rc == STK_OK && !st->size && !(st->size = calloc((size_t)st->n + 1, sizeof *st->size)))
    rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  return rc;
}

int stk__objstore_sibling(stk__objstore *st, const char *name, uint8_t **data, size_t *len, char *msg,
                       size_t msglen) {
  return st->ops->sibling(st, name, data, len, msg, msglen);
}

int stk__objstore_reader(stk__objstore *st, int k, int parts, unsigned depth, stk__object **out,
                      char *msg, size_t msglen) {
  return st->ops->reader(st, k, parts, depth, out, msg, msglen);
}

ssize_t stk__objstore_reader_pread(stk__object *o, void *dst, size_t n, uint64_t off) {
  return stk__object_pread(o, dst, n, off);
}

const char *stk__objstore_reader_why(const stk__object *o) { return o->why; }

uint64_t stk__objstore_reader_size(const stk__object *o) { return o->size; }

void stk__objstore_reader_close(stk__object *o) {
  if (!o) return;
  stk__object_close(o);
  free(o);
}

int stk__objstore_read(stk__objstore *st, int k, uint64_t off, uint64_t len, void *dst, uint64_t *got,
                    char *msg, size_t msglen) {
  *got = 0;
  return st->ops->read(st, k, off, len, dst, got, msg, msglen);
}

void stk__objstore_plan(stk__objstore *st, int k, uint64_t off, uint64_t len, uint64_t epoch) {
  if (st->ops->plan) st->ops->plan(st, k, off, len, epoch);
}

void stk__objstore_expect(stk__objstore *st, uint64_t epoch, int64_t n, const int32_t *obj,
                       const uint64_t *off) {
  if (st->ops->expect) st->ops->expect(st, epoch, n, obj, off);
}

void stk__objstore_plan_reset(stk__objstore *st) {
  if (st->ops->plan_reset) st->ops->plan_reset(st);
}

void stk__objstore_want(stk__objstore *st, int k, uint64_t off) {
  if (st->ops->want) st->ops->want(st, k, off);
}

uint64_t stk__objstore_reach(stk__objstore *st) { return st->ops->reach ? st->ops->reach(st) : 0; }

uint64_t stk__objstore_budget(stk__objstore *st) { return st->ops->budget ? st->ops->budget(st) : 0; }

int stk__objstore_probe_beside(stk__objstore *st, const char *suffix) {
  return st->ops->probe_beside ? st->ops->probe_beside(st, suffix) : 0;
}

void stk__objstore_open_ahead(stk__objstore *st, int k, int count, const char *suffix) {
  if (st->ops->open_ahead) st->ops->open_ahead(st, k, count, suffix);
}

int stk__objstore_beside(stk__objstore *st, int k, uint8_t **data, size_t *len) {
  *data = NULL;
  *len = 0;
  return st->ops->beside ? st->ops->beside(st, k, data, len) : STK_EIO;
}

/* The key of object k's saved index: its name, size and ETag, so that an
 * object rewritten since (another ETag) has another file. */
void stk__objstore_index_key(const stk__objstore *st, int k, char *key, size_t cap) {
  snprintf(key, cap, "%s\n%llu\n%s", st->name[k], (unsigned long long)st->size[k],
           st->etag ? st->etag[k] : "");
}

int stk__objstore_index_path(const stk__objstore *st, int k, char *out, size_t cap) {
  if (!st->etag || !st->etag[k][0]) return STK_EINVAL; /* no ETag: no way to tell a change */
  char key[4400];
  int w = snprintf(key, sizeof key, "%s\n%llu\n%s", st->name[k],
                   (unsigned long long)st->size[k], st->etag[k]);
  if (w < 0 || (size_t)w >= sizeof key) return STK_EINVAL;
  return stk__index_path_kind(out, cap, st->index_dir, "shard", key);
}

int stk__objstore_has_index(const stk__objstore *st, int k) {
  char p[4200];
  return stk__objstore_index_path(st, k, p, sizeof p) == STK_OK && access(p, R_OK) == 0;
}

/* The key of an index beside its shard (stoker pack --tar), as written:
 * the shard's size and the ETags S3 gives it (stk__md5_s3_etags), so that a shard
 * rewritten since at the same size, whose member headers may all be the
 * same (other labels, other pixels), is told by its listed ETag. Its name
 * is the file's own. As looked for at open: the listed size and ETag
 * (beside_matches compares them). */
void stk__objstore_beside_key(uint64_t size, const char *etags, char *key, size_t cap) {
  snprintf(key, cap, "beside\n%llu%s%s", (unsigned long long)size, etags[0] ? "\n" : "", etags);
}

/* Whether an ETag has the form of S3's: 32 hex digits (the MD5 of a PUT's
 * bytes), maybe "-N" (a multipart upload of N parts). Other servers' ETags
 * (a file's mtime and size) say nothing of the bytes. */
static int s3_etag_form(const char *e) {
  size_t i = 0;
  while (i < 32 && isxdigit((unsigned char)e[i])) i++;
  if (i != 32) return 0;
  if (!e[32]) return 1;
  if (e[32] != '-' || !e[33]) return 0;
  for (i = 33; e[i]; i++)
    if (!isdigit((unsigned char)e[i])) return 0;
  return 1;
}

/* Whether an index beside its shard, of key `stored`, is the shard's whose
 * listing gave `want` ("beside\nSIZE\nETAG"): the same size, and the ETag one
 * of those the index records. An index without ETags (written before they
 * were recorded), a server without ETags, or one whose ETags are not S3's
 * leave the size alone to tell. */
static int beside_matches(const char *stored, const char *want) {
  if (strncmp(stored, "beside\n", 7)) return 0;
  const char *ws = want + 7, *ss = stored + 7;
  size_t wl = strcspn(ws, "\n"), sl = strcspn(ss, "\n");
  if (wl != sl || memcmp(ws, ss, wl)) return 0; /* another size */
  const char *etag = ws[wl] ? ws + wl + 1 : "";
  if (!ss[sl] || !s3_etag_form(etag)) return 1;
  size_t el = strlen(etag);
  for (const char *p = ss + sl + 1; *p;) {
    size_t l = strcspn(p, "\n");
    if (l == el && !strncasecmp(p, etag, l)) return 1;
    p += l + (p[l] != '\0');
  }
  return 0;
}

/* Whether a saved index's key `stored` is the one looked for, `want`: the
 * same, or for an index beside its object, as beside_matches says. */
int stk__objstore_key_matches(const char *stored, const char *want) {
  return strncmp(want, "beside\n", 7) ? !strcmp(stored, want) : beside_matches(stored, want);
}

stk__objstore_req *stk__objstore_fetch(stk__objstore *st, const char *name, uint64_t max) {
  return st->ops->fetch && stk__is_url(name) ? st->ops->fetch(st, name, max) : NULL;
}

int stk__objstore_get(stk__objstore *st, stk__objstore_req *q, const char *name, stk__buf *buf,
                   uint64_t max, stk__bytes *out, char *msg, size_t msglen) {
  out->data = NULL;
  out->len = 0;
  out->bytes_read = 0;
  /* (a list may mix paths with URLs: a path is a local file's) */
  if (!stk__is_url(name)) return stk__objstore_local.get(st, q, name, buf, max, out, msg, msglen);
  return st->ops->get(st, q, name, buf, max, out, msg, msglen);
}

void stk__objstore_req_free(stk__objstore *st, stk__objstore_req *q) {
  if (q && st->ops->req_free) st->ops->req_free(q);
}

void stk__objstore_cancel(stk__objstore *st) {
  if (st && st->ops->cancel) st->ops->cancel(st);
}

void stk__objstore_stats(const stk__objstore *st, stk_stats *out) {
  if (st->ops->stats) st->ops->stats(st, out);
}
