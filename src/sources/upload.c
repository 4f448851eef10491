/* upload.c: the store writer of stk_pack: tar shards uploaded to an s3://
 * prefix while the pack goes on. See upload.h.
 *
 * Who does what. The pack's writer thread runs the tar writer, which tells
 * sw_grown() as a shard grows; that thread starts a shard's multipart
 * upload (one small POST) and queues its parts, and waits when too many
 * complete shards are staged. The uploader threads take the queue in
 * order: a part (read back from the staging file, which the page cache
 * still holds), a single PUT, or the completion of an upload whose parts
 * are all done (queued by whoever finished the last of them). finish()
 * waits for the queue, uploads classes.txt, and on a failure undoes what
 * the pack uploaded. */
#define _POSIX_C_SOURCE 200809L
#include "sources/upload.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "core/workers.h"
#include "sources/net.h"
#include "sources/s3.h"
#include "sources/tar.h"

/* Parts of a multipart upload: S3 takes 5 MiB to 5 GiB per part (but the
 * last) and 10,000 parts: 16 MiB parts carry 160 GB per shard. */
#define PART (16u << 20)
#define MAX_PARTS 10000
/* Uploader threads, each with one request and one PART buffer: 4 keep a
 * store's connection busy while one part is being hashed or read. */
#define UPLOADERS 4
/* Complete shards that may wait for their upload on local disk. */
#define STAGED 2

enum { JOB_PUT = 0, JOB_COMPLETE = -1 }; /* else a part number (1-based) */

/* One object of the prefix. */
typedef struct {
  char url[4400];
  char path[4400]; /* its staging file */
  int fd;          /* open from the start: the staging folder is renamed at the end */
  char id[1024], eid[3200]; /* the multipart upload's id ("": none), URL-encoded */
  uint64_t sent;   /* bytes handed to parts */
  int nparts, pending, last, shard, done;
  int indexed; /* a shard's index is written: its file may go once uploaded */
  char (*etag)[96];
  int etag_cap;
} up_obj;

typedef struct {
  up_obj *o;
  int part; /* JOB_PUT, JOB_COMPLETE or a part number */
  uint64_t off, len;
} up_job;

typedef struct {
  stk_pack_options local; /* o with the staging folder as its output */
  char base[4096];        /* the prefix without its trailing '/' */
  char dir[4096], out[4200];
  void *tar;
  stk__net *net;
  stk__workers *pool;
  stk__work work[UPLOADERS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  up_job *q;
  int qhead, qlen, qcap;
  up_obj **objs;
  int nobjs, objs_cap, open_objs, staged, stop;
  int rc; /* the first failure, its message in msg */
  char msg[1200];
} store_w;

/* The text between <tag> and </tag> in body (not NUL-terminated). */
static int xml_value(const stk__net_body *b, const char *tag, char *out, size_t cap) {
  char open[64], close[64];
  snprintf(open, sizeof open, "<%s>", tag);
  snprintf(close, sizeof close, "</%s>", tag);
  const char *s = (const char *)b->data, *end = s + b->len;
  for (const char *p = s; p + strlen(open) <= end; p++) {
    if (memcmp(p, open, strlen(open))) continue;
    const char *v = p + strlen(open);
    for (const char *q = v; q + strlen(close) <= end; q++)
      if (!memcmp(q, close, strlen(close))) {
        size_t l = (size_t)(q - v);
        if (l >= cap) return 0;
        memcpy(out, v, l);
        out[l] = '\0';
        return 1;
      }
    return 0;
  }
  return 0;
}

static int read_at(int fd, uint8_t *p, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* One request, waited for; body filled when not NULL (free q after). */
static int request(stk__net *net, const char *method, const char *url, const void *body,
                   size_t len, stk__net_req **qp, stk__net_body *out, char *msg, size_t msglen) {
  stk__net_req *q = stk__net_send(net, method, url, body, len);
  if (!q) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  stk__net_body b;
  int rc = stk__net_wait(q, out ? out : &b, msg, msglen);
  if (qp)
    *qp = q;
  else
    stk__net_free(q);
  return rc;
}

/* ---- the uploader threads -------------------------------------------------- */

/* Completes o's multipart upload from its parts' ETags. */
static int complete(store_w *w, up_obj *o, char *msg, size_t msglen) {
  size_t cap = (size_t)o->nparts * 160 + 128, len = 0;
  char *x = malloc(cap), u[8800];
  if (!x) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  len += (size_t)snprintf(x, cap, "<CompleteMultipartUpload>");
  for (int p = 0; p < o->nparts; p++)
    len += (size_t)snprintf(x + len, cap - len,
                            "<Part><PartNumber>%d</PartNumber><ETag>\"%s\"</ETag></Part>", p + 1,
                            o->etag[p]);
  len += (size_t)snprintf(x + len, cap - len, "</CompleteMultipartUpload>");
  snprintf(u, sizeof u, "%s?uploadId=%s", o->url, o->eid);
  stk__net_req *q = NULL;
  stk__net_body body;
  int rc = request(w->net, "POST", u, x, len, &q, &body, msg, msglen);
  /* S3 may answer 200 with an error document */
  char code[128];
  if (rc == STK_OK && xml_value(&body, "Code", code, sizeof code))
    rc = stk__fail(msg, msglen, STK_EIO, "%s: completing the upload failed: %s", o->url, code);
  stk__net_free(q);
  free(x);
  return rc;
}

/* Runs job j with buf (PART bytes); a part's ETag into etag. */
static int run_job(store_w *w, const up_job *j, uint8_t *buf, char etag[96], char *msg,
                   size_t msglen) {
  up_obj *o = j->o;
  if (j->part == JOB_COMPLETE) return complete(w, o, msg, msglen);
  if (!buf) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (read_at(o->fd, buf, (size_t)j->len, j->off))
    return stk__fail(msg, msglen, STK_EIO, "cannot read %s: %s", o->path,
                     errno ? strerror(errno) : "cut short");
  char u[8800];
  if (j->part == JOB_PUT)
    snprintf(u, sizeof u, "%s", o->url);
  else
    snprintf(u, sizeof u, "%s?partNumber=%d&uploadId=%s", o->url, j->part, o->eid);
  stk__net_req *q = NULL;
  stk__net_body body;
  int rc = request(w->net, "PUT", u, buf, (size_t)j->len, &q, &body, msg, msglen);
  if (rc == STK_OK && j->part != JOB_PUT && !body.etag[0])
    rc = stk__fail(msg, msglen, STK_EIO, "%s: a part without ETag", o->url);
  if (rc == STK_OK) memcpy(etag, body.etag, 96);
  stk__net_free(q);
  return rc;
}

static int enqueue(store_w *w, up_obj *o, int part, uint64_t off, uint64_t len);

/* An object is uploaded: its staging file goes (the bound on local disk). */
static void obj_done(store_w *w, up_obj *o) {
  o->done = 1;
  w->open_objs--;
  if (o->shard) w->staged--;
  if (o->fd >= 0) close(o->fd);
  o->fd = -1;
  /* (a shard's index reads it by name: until it is written, the file stays;
   * a file is gone with its folder when the pack renamed it) */
  if (!o->shard || o->indexed) unlink(o->path);
}

/* Job j ended with rc (under w->mu). */
static void job_ended(store_w *w, const up_job *j, int rc, const char etag[96], const char *msg) {
  up_obj *o = j->o;
  if (rc) {
    if (!w->rc) {
      w->rc = rc;
      snprintf(w->msg, sizeof w->msg, "%s", msg);
    }
    return;
  }
  if (j->part == JOB_COMPLETE || j->part == JOB_PUT) {
    obj_done(w, o);
    return;
  }
  memcpy(o->etag[j->part - 1], etag, 96);
  if (--o->pending == 0 && o->last && enqueue(w, o, JOB_COMPLETE, 0, 0) && !w->rc) {
    w->rc = STK_ENOMEM;
    snprintf(w->msg, sizeof w->msg, "out of memory");
  }
}

/* An uploader thread: jobs in order until stopped; after a failure the
 * queue is drained without sending. */
static void uploader(void *arg) {
  store_w *w = arg;
  uint8_t *buf = malloc(PART);
  char msg[1200], etag[96];
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->qlen && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->qlen) break;
    up_job j = w->q[w->qhead];
    w->qhead = (w->qhead + 1) % w->qcap;
    w->qlen--;
    int skip = w->rc != 0;
    pthread_mutex_unlock(&w->mu);
    int rc = skip ? STK_ECANCELED : run_job(w, &j, buf, etag, msg, sizeof msg);
    pthread_mutex_lock(&w->mu);
    if (!skip) job_ended(w, &j, rc, etag, msg);
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  free(buf);
}

/* ---- the writer's side --------------------------------------------------------- */

/* Queues a job (under w->mu); 0, or -1 when out of memory. */
static int enqueue(store_w *w, up_obj *o, int part, uint64_t off, uint64_t len) {
  if (w->qlen == w->qcap) {
    int cap = w->qcap ? w->qcap * 2 : 64;
    up_job *q = malloc((size_t)cap * sizeof *q);
    if (!q) return -1;
    for (int k = 0; k < w->qlen; k++) q[k] = w->q[(w->qhead + k) % w->qcap];
    free(w->q);
    w->q = q;
    w->qcap = cap;
    w->qhead = 0;
  }
  w->q[(w->qhead + w->qlen) % w->qcap] = (up_job){o, part, off, len};
  w->qlen++;
  if (part > 0) o->pending++;
  pthread_cond_broadcast(&w->cv);
  return 0;
}

/* A new object `name` of the prefix into *op, uploaded from the file at
 * path (opened now). */
static int obj_new(store_w *w, up_obj **op, const char *name, const char *path, int shard,
                   char *err, size_t errlen) {
  up_obj *o = calloc(1, sizeof *o);
  *op = NULL;
  up_obj **v = w->nobjs == w->objs_cap
                   ? realloc(w->objs, (size_t)(w->objs_cap ? w->objs_cap * 2 : 16) * sizeof *v)
                   : w->objs;
  if (!o || !v) {
    free(o);
    return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  }
  if (v != w->objs) w->objs_cap = w->objs_cap ? w->objs_cap * 2 : 16;
  w->objs = v;
  snprintf(o->url, sizeof o->url, "%s/%s", w->base, name);
  snprintf(o->path, sizeof o->path, "%s", path);
  o->shard = shard;
  o->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (o->fd < 0) {
    int rc = stk__fail(err, errlen, STK_EIO, "cannot read %s: %s", path, strerror(errno));
    free(o);
    return rc;
  }
  pthread_mutex_lock(&w->mu);
  w->objs[w->nobjs++] = o;
  w->open_objs++;
  pthread_mutex_unlock(&w->mu);
  *op = o;
  return STK_OK;
}

/* Starts o's multipart upload (on the writer's thread: one small POST). */
static int start_multipart(store_w *w, up_obj *o, char *err, size_t errlen) {
  char u[4500];
  snprintf(u, sizeof u, "%s?uploads=", o->url);
  stk__net_req *q = NULL;
  stk__net_body body;
  int rc = request(w->net, "POST", u, NULL, 0, &q, &body, err, errlen);
  if (rc == STK_OK && !xml_value(&body, "UploadId", o->id, sizeof o->id))
    rc = stk__fail(err, errlen, STK_EIO, "%s: the store gave no UploadId", o->url);
  stk__net_free(q);
  if (rc == STK_OK && stk__uri_encode(o->id, 0, o->eid, sizeof o->eid))
    rc = stk__fail(err, errlen, STK_EINVAL, "%s: UploadId too long", o->url);
  if (rc) o->id[0] = '\0';
  return rc;
}

/* o's file has `bytes` bytes (complete when last): queues the parts that
 * are whole (all when last), or one PUT for a complete file of <= PART. */
static int feed(store_w *w, up_obj *o, uint64_t bytes, int last, char *err, size_t errlen) {
  int rc = STK_OK;
  if (!o->id[0] && (bytes > PART || (!last && bytes >= PART)))
    rc = start_multipart(w, o, err, errlen);
  pthread_mutex_lock(&w->mu);
  while (rc == STK_OK && o->id[0] && (o->sent + PART <= bytes || (last && o->sent < bytes))) {
    uint64_t len = bytes - o->sent < PART ? bytes - o->sent : PART;
    if (o->nparts == MAX_PARTS) {
      rc = stk__fail(err, errlen, STK_ELIMIT, "%s: over %d parts of %u bytes: make shards smaller",
                     o->url, MAX_PARTS, PART);
      break;
    }
    if (o->nparts == o->etag_cap) {
      int cap = o->etag_cap ? o->etag_cap * 2 : 16;
      char(*e)[96] = realloc(o->etag, (size_t)cap * sizeof *e);
      if (!e) {
        rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
        break;
      }
      o->etag = e;
      o->etag_cap = cap;
    }
    if (enqueue(w, o, o->nparts + 1, o->sent, len)) {
      rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
      break;
    }
    o->nparts++;
    o->sent += len;
  }
  if (rc == STK_OK && last) {
    o->last = 1;
    if (o->shard) w->staged++;
    int e = 0;
    if (!o->id[0])
      e = enqueue(w, o, JOB_PUT, 0, bytes);
    else if (!o->pending) /* its parts are all done already */
      e = enqueue(w, o, JOB_COMPLETE, 0, 0);
    if (e) rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  }
  pthread_mutex_unlock(&w->mu);
  return rc;
}

/* Waits until every object is uploaded (all), or at most STAGED complete
 * shards wait for their upload; the first failure, or STK_ECANCELED when
 * the pack's cancel says so (asked every 100 ms). */
static int wait_uploads(store_w *w, int all, char *err, size_t errlen) {
  const stk_pack_options *o = &w->local;
  int rc = STK_OK;
  pthread_mutex_lock(&w->mu);
  while (!w->rc && (all ? w->open_objs > 0 : w->staged > STAGED)) {
    if (o->cancel && o->cancel(o->user)) {
      rc = stk__fail(err, errlen, STK_ECANCELED, "cancelled while uploading to %s/", w->base);
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  if (w->rc) rc = stk__fail(err, errlen, w->rc, "%s", w->msg);
  pthread_mutex_unlock(&w->mu);
  return rc;
}

/* The index beside the complete shard o: uploaded, the shard's file
 * removed if uploaded already, then the staging bound. */
static int index_done(store_w *w, up_obj *o, const char *name, char *err, size_t errlen) {
  const char *path = o->path;
  pthread_mutex_lock(&w->mu);
  o->indexed = 1;
  if (o->done) unlink(path);
  pthread_mutex_unlock(&w->mu);
  char idx[4500], iname[4500];
  struct stat st;
  snprintf(idx, sizeof idx, "%s" STK__TAR_INDEX_EXT, path);
  snprintf(iname, sizeof iname, "%s" STK__TAR_INDEX_EXT, name);
  if (stat(idx, &st) != 0)
    return stk__fail(err, errlen, STK_EIO, "cannot read %s: %s", idx, strerror(errno));
  up_obj *io = NULL;
  int rc = obj_new(w, &io, iname, idx, 0, err, errlen);
  if (rc == STK_OK) rc = feed(w, io, (uint64_t)st.st_size, 1, err, errlen);
  return rc ? rc : wait_uploads(w, 0, err, errlen);
}

/* The tar writer's watcher: the shard's parts as it grows, its last ones
 * once complete; once indexed, its index, and the wait that bounds the
 * staging. */
static int sw_grown(void *ctx, int shard, const char *path, uint64_t bytes, int state, char *err,
                    size_t errlen) {
  store_w *w = ctx;
  const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  up_obj *o = w->nobjs ? w->objs[w->nobjs - 1] : NULL;
  int rc = STK_OK;
  if (!o || !o->shard || o->shard - 1 != shard)
    rc = obj_new(w, &o, name, path, shard + 1, err, errlen);
  if (rc) return rc;
  pthread_mutex_lock(&w->mu);
  if (w->rc) rc = stk__fail(err, errlen, w->rc, "%s", w->msg);
  pthread_mutex_unlock(&w->mu);
  if (rc) return rc;
  if (state == STK__SHARD_INDEXED) return index_done(w, o, name, err, errlen);
  return feed(w, o, bytes, state == STK__SHARD_COMPLETE, err, errlen);
}

/* ---- the row -------------------------------------------------------------------- */

/* After a failure: the multipart uploads under way aborted, the objects
 * this pack completed deleted (the prefix was empty), all at once so that
 * an unreachable store costs one read_timeout, not one per object. */
static void undo(store_w *w) {
  stk__net_req **q = calloc((size_t)w->nobjs * 2 + 1, sizeof *q);
  int n = 0;
  for (int i = 0; q && i < w->nobjs; i++) {
    up_obj *o = w->objs[i];
    char u[8800];
    if (o->id[0] && !o->done) {
      snprintf(u, sizeof u, "%s?uploadId=%s", o->url, o->eid);
      q[n++] = stk__net_send(w->net, "DELETE", u, NULL, 0);
    }
    /* a completion whose answer was lost may have made the object */
    if (o->done || o->id[0]) q[n++] = stk__net_send(w->net, "DELETE", o->url, NULL, 0);
  }
  for (int i = 0; i < n; i++)
    if (q[i]) {
      stk__net_wait(q[i], NULL, NULL, 0);
      stk__net_free(q[i]);
    }
  free(q);
}

static void remove_folder(const char *out, const char *dir) {
  DIR *d = opendir(out);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[4600];
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", out, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(out);
  rmdir(dir);
}

/* Stops the uploaders (after the queue, or at once after a failure), frees
 * w and what it holds. */
static void store_free(store_w *w) {
  if (w->pool) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    stk__workers_destroy(w->pool);
  }
  for (int i = 0; i < w->nobjs; i++) {
    if (w->objs[i]->fd >= 0) close(w->objs[i]->fd);
    free(w->objs[i]->etag);
    free(w->objs[i]);
  }
  free(w->objs);
  free(w->q);
  if (w->net) stk__net_close(w->net);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
}

/* The client, and the prefix checked empty, as a local pack refuses a
 * folder that is not. */
static int open_prefix(store_w *w, const char *prefix, char *err, size_t errlen) {
  if (strncmp(prefix, "s3://", 5))
    return stk__fail(err, errlen, STK_EINVAL,
                     "%s: packing to a URL writes to s3:// only (HTTP has no standard upload)",
                     prefix);
  size_t pl = strlen(prefix);
  if (pl >= sizeof w->base) return stk__fail(err, errlen, STK_EINVAL, "%s: too long", prefix);
  snprintf(w->base, sizeof w->base, "%.*s", (int)(pl > 5 && prefix[pl - 1] == '/' ? pl - 1 : pl),
           prefix);
  int rc = stk__net_open(&w->net, w->local.read_timeout, err, errlen);
  if (rc) return rc;
  stk__net_object *v = NULL;
  int nv = 0;
  char lp[4200];
  snprintf(lp, sizeof lp, "%s/", w->base);
  rc = stk__net_list(w->net, lp, &v, &nv, err, errlen);
  stk__net_objects_free(v, nv);
  if (rc == STK_OK && nv)
    rc = stk__fail(err, errlen, STK_EINVAL, "%s already holds %d object%s: pack into an empty prefix",
                   lp, nv, nv == 1 ? "" : "s");
  return rc;
}

/* The staging folder, the tar writer into it, watched, and the uploaders. */
static int open_staging(store_w *w, const stk__dataset *ds, const stk__pack_source *src,
                        char *err, size_t errlen) {
  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !*tmpdir) tmpdir = "/tmp";
  snprintf(w->dir, sizeof w->dir, "%s/stoker-pack-XXXXXX", tmpdir);
  if (!mkdtemp(w->dir)) {
    w->dir[0] = '\0';
    return stk__fail(err, errlen, STK_EIO, "cannot make a temporary folder in %s: %s", tmpdir,
                     strerror(errno));
  }
  snprintf(w->out, sizeof w->out, "%s/shards", w->dir);
  w->local.output = w->out;
  int rc = stk__tar_writer.open(&w->tar, &w->local, ds, src, err, errlen);
  if (rc) return rc;
  stk__tar_watch watch = {PART, sw_grown, w};
  stk__tar_writer_watch(w->tar, &watch);
  if (!(w->pool = stk__workers_create(0, "stk-upload", NULL, 0)))
    return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  for (int k = 0; k < UPLOADERS; k++)
    if (stk__workers_spawn(w->pool, &w->work[k], uploader, NULL, w) && k == 0)
      return stk__fail(err, errlen, STK_ENOMEM, "cannot start an upload thread");
  return STK_OK;
}

static int sw_open(void **wp, const stk_pack_options *o, const stk__dataset *ds,
                   const stk__pack_source *src, char *err, size_t errlen) {
  *wp = NULL;
  store_w *w = calloc(1, sizeof *w);
  if (!w) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->local = *o;
  int rc = open_prefix(w, o->output, err, errlen);
  if (rc == STK_OK) rc = open_staging(w, ds, src, err, errlen);
  if (rc) {
    stk_pack_result none;
    memset(&none, 0, sizeof none);
    if (w->tar) stk__tar_writer.finish(w->tar, rc, ds, &none, NULL, 0);
    if (w->dir[0]) rmdir(w->dir);
    store_free(w);
    return rc;
  }
  *wp = w;
  return STK_OK;
}

static int sw_add(void *wp, const stk__pack_item *it, uint64_t *off, stk_pack_result *res,
                  char *err, size_t errlen) {
  return stk__tar_writer.add(((store_w *)wp)->tar, it, off, res, err, errlen);
}

static const char *sw_temp_name(void *wp) { return ((store_w *)wp)->out; }

/* The last shard (the tar writer's finish), every upload waited for, then
 * classes.txt; on a failure, undo. */
static int sw_finish(void *wp, int rc, const stk__dataset *ds, stk_pack_result *res, char *err,
                     size_t errlen) {
  store_w *w = wp;
  rc = stk__tar_writer.finish(w->tar, rc, ds, res, err, errlen);
  if (rc == STK_OK) rc = wait_uploads(w, 1, err, errlen);
  if (rc == STK_OK) {
    /* last: a prefix with classes.txt names a complete dataset */
    char path[4300];
    struct stat st;
    snprintf(path, sizeof path, "%s/classes.txt", w->out);
    up_obj *o = NULL;
    if (stat(path, &st) != 0)
      rc = stk__fail(err, errlen, STK_EIO, "cannot read %s: %s", path, strerror(errno));
    else
      rc = obj_new(w, &o, "classes.txt", path, 0, err, errlen);
    if (rc == STK_OK) rc = feed(w, o, (uint64_t)st.st_size, 1, err, errlen);
    if (rc == STK_OK) rc = wait_uploads(w, 1, err, errlen);
  }
  if (rc) {
    /* the uploaders first: nothing is sent after the undo */
    pthread_mutex_lock(&w->mu);
    if (!w->rc) w->rc = rc;
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    stk__workers_destroy(w->pool);
    w->pool = NULL;
    undo(w);
    res->packed = 0;
    res->bytes = 0;
    res->shards = 0;
  }
  remove_folder(w->out, w->dir);
  store_free(w);
  return rc;
}

const stk__pack_writer_ops stk__store_writer = {
    .name = "store",
    .pixels = 0,
    .open = sw_open,
    .add = sw_add,
    .write_at = NULL,
    .temp_name = sw_temp_name,
    .finish = sw_finish,
};
