/* upload.c: a folder of files to an s3:// prefix (stoker pack ... s3://).
 * See upload.h. */
#define _POSIX_C_SOURCE 200809L
#include "sources/upload.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "sources/net.h"
#include "sources/pack_writer.h"
#include "sources/s3.h"

/* Parts of a multipart upload, and how many go at once. S3 takes 5 MiB to
 * 5 GiB per part and 10,000 parts: 16 MiB parts carry 160 GB. */
#define PART (16u << 20)
#define IN_FLIGHT 4

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

/* One file to url: a single PUT up to PART bytes, else a multipart upload
 * (aborted on a failure, so that the store keeps no half object). */
static int upload_file(stk__net *net, const char *path, const char *url, char *msg,
                       size_t msglen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return stk__fail(msg, msglen, STK_EIO, "cannot read %s: %s", path, strerror(e));
  }
  uint64_t size = (uint64_t)st.st_size;
  int rc = STK_OK;
  if (size <= PART) {
    uint8_t *b = malloc(size ? size : 1);
    if (!b) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    if (rc == STK_OK && read_at(fd, b, size, 0))
      rc = stk__fail(msg, msglen, STK_EIO, "cannot read %s: %s", path, strerror(errno));
    if (rc == STK_OK) {
      stk__net_req *q = stk__net_send(net, "PUT", url, b, size);
      rc = stk__net_wait(q, NULL, msg, msglen);
      stk__net_free(q);
    }
    free(b);
    close(fd);
    return rc;
  }
  char u[8800], id[1024] = "", eid[3200];
  snprintf(u, sizeof u, "%s?uploads=", url);
  stk__net_req *q = stk__net_send(net, "POST", u, NULL, 0);
  stk__net_body body;
  rc = stk__net_wait(q, &body, msg, msglen);
  if (rc == STK_OK && !xml_value(&body, "UploadId", id, sizeof id))
    rc = stk__fail(msg, msglen, STK_EIO, "%s: the store gave no UploadId", url);
  stk__net_free(q);
  if (rc == STK_OK && stk__uri_encode(id, 0, eid, sizeof eid))
    rc = stk__fail(msg, msglen, STK_EINVAL, "%s: UploadId too long", url);
  int nparts = (int)((size + PART - 1) / PART);
  char (*etag)[96] = rc == STK_OK ? calloc((size_t)nparts, sizeof *etag) : NULL;
  uint8_t *buf[IN_FLIGHT] = {0};
  stk__net_req *fly[IN_FLIGHT] = {0};
  int part_of[IN_FLIGHT];
  if (rc == STK_OK && !etag) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  for (int k = 0; rc == STK_OK && k < IN_FLIGHT; k++)
    if (!(buf[k] = malloc(PART))) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  /* parts k, k + IN_FLIGHT, ... go through slot k % IN_FLIGHT */
  for (int p = 0; rc == STK_OK && p < nparts + IN_FLIGHT; p++) {
    int slot = p % IN_FLIGHT;
    if (fly[slot]) {
      stk__net_body b;
      int r = stk__net_wait(fly[slot], &b, msg, msglen);
      if (r == STK_OK && !b.etag[0]) r = stk__fail(msg, msglen, STK_EIO, "%s: a part without ETag", url);
      if (r == STK_OK) memcpy(etag[part_of[slot]], b.etag, sizeof b.etag);
      stk__net_free(fly[slot]);
      fly[slot] = NULL;
      if (r) {
        rc = r;
        break;
      }
    }
    if (p >= nparts) continue;
    uint64_t off = (uint64_t)p * PART, len = size - off < PART ? size - off : PART;
    if (read_at(fd, buf[slot], (size_t)len, off)) {
      rc = stk__fail(msg, msglen, STK_EIO, "cannot read %s: %s", path, strerror(errno));
      break;
    }
    snprintf(u, sizeof u, "%s?partNumber=%d&uploadId=%s", url, p + 1, eid);
    fly[slot] = stk__net_send(net, "PUT", u, buf[slot], (size_t)len);
    part_of[slot] = p;
  }
  for (int k = 0; k < IN_FLIGHT; k++)
    if (fly[k]) { /* after a failure: wait, the buffers are theirs */
      stk__net_wait(fly[k], NULL, NULL, 0);
      stk__net_free(fly[k]);
    }
  if (rc == STK_OK) {
    size_t cap = (size_t)nparts * 160 + 128, len = 0;
    char *x = malloc(cap);
    if (!x) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    if (x) len += (size_t)snprintf(x, cap, "<CompleteMultipartUpload>");
    for (int p = 0; x && p < nparts; p++)
      len += (size_t)snprintf(x + len, cap - len,
                              "<Part><PartNumber>%d</PartNumber><ETag>\"%s\"</ETag></Part>", p + 1,
                              etag[p]);
    if (x) len += (size_t)snprintf(x + len, cap - len, "</CompleteMultipartUpload>");
    if (x) {
      snprintf(u, sizeof u, "%s?uploadId=%s", url, eid);
      q = stk__net_send(net, "POST", u, x, len);
      rc = stk__net_wait(q, &body, msg, msglen);
      /* S3 may answer 200 with an error document */
      char code[128];
      if (rc == STK_OK && xml_value(&body, "Code", code, sizeof code))
        rc = stk__fail(msg, msglen, STK_EIO, "%s: completing the upload failed: %s", url, code);
      stk__net_free(q);
    }
    free(x);
  }
  if (rc && id[0]) { /* no half object left behind */
    snprintf(u, sizeof u, "%s?uploadId=%s", url, eid);
    q = stk__net_send(net, "DELETE", u, NULL, 0);
    stk__net_wait(q, NULL, NULL, 0);
    stk__net_free(q);
  }
  for (int k = 0; k < IN_FLIGHT; k++) free(buf[k]);
  free(etag);
  close(fd);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int stk__upload_folder(const char *dir, const char *prefix, double timeout, char *msg,
                       size_t msglen) {
  if (strncmp(prefix, "s3://", 5))
    return stk__fail(msg, msglen, STK_EINVAL,
                     "%s: packing to a URL writes to s3:// only (HTTP has no standard upload)",
                     prefix);
  stk__net *net = NULL;
  int rc = stk__net_open(&net, timeout, msg, msglen);
  if (rc) return rc;
  char base[4096];
  size_t pl = strlen(prefix);
  snprintf(base, sizeof base, "%.*s", (int)(pl && prefix[pl - 1] == '/' ? pl - 1 : pl), prefix);
  /* as a local pack refuses a folder that is not empty */
  stk__net_object *v = NULL;
  int nv = 0;
  char lp[4200];
  snprintf(lp, sizeof lp, "%s/", base);
  rc = stk__net_list(net, lp, &v, &nv, msg, msglen);
  stk__net_objects_free(v, nv);
  if (rc == STK_OK && nv)
    rc = stk__fail(msg, msglen, STK_EINVAL, "%s already holds %d object%s: pack into an empty prefix",
                   lp, nv, nv == 1 ? "" : "s");
  char **names = NULL;
  int n = 0, cap = 0;
  DIR *d = rc == STK_OK ? opendir(dir) : NULL;
  if (rc == STK_OK && !d) rc = stk__fail(msg, msglen, STK_EIO, "cannot read %s: %s", dir, strerror(errno));
  struct dirent *e;
  while (d && rc == STK_OK && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, (size_t)cap * sizeof *nn);
      if (!nn) {
        rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
        break;
      }
      names = nn;
    }
    if (!(names[n] = strdup(e->d_name))) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    else n++;
  }
  if (d) closedir(d);
  if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str);
  /* the shards first, classes.txt last: a pack that fails midway leaves no
   * classes.txt naming the dataset as complete */
  for (int pass = 0; rc == STK_OK && pass < 2; pass++)
    for (int i = 0; rc == STK_OK && i < n; i++) {
      if ((strcmp(names[i], "classes.txt") == 0) != pass) continue;
      char path[4400], url[4400];
      snprintf(path, sizeof path, "%s/%s", dir, names[i]);
      snprintf(url, sizeof url, "%s/%s", base, names[i]);
      rc = upload_file(net, path, url, msg, msglen);
    }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  stk__net_close(net);
  return rc;
}

/* ---- the store writer of stk_pack (pack_writer.h) ---------------------------
 * Tar shards written by the tar writer into a local temporary folder, then
 * uploaded by stk__upload_folder, and the folder removed, whatever happened. */
typedef struct {
  stk_pack_options local; /* o with the temporary folder as its output */
  const char *prefix;
  char dir[4096], out[4200];
  void *tar;
} store_w;

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

static int sw_open(void **wp, const stk_pack_options *o, const stk__dataset *ds,
                   const stk__pack_source *src, char *err, size_t errlen) {
  *wp = NULL;
  store_w *w = calloc(1, sizeof *w);
  if (!w) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !*tmpdir) tmpdir = "/tmp";
  snprintf(w->dir, sizeof w->dir, "%s/stoker-pack-XXXXXX", tmpdir);
  if (!mkdtemp(w->dir)) {
    int rc = stk__fail(err, errlen, STK_EIO, "cannot make a temporary folder in %s: %s", tmpdir,
                       strerror(errno));
    free(w);
    return rc;
  }
  snprintf(w->out, sizeof w->out, "%s/shards", w->dir);
  w->local = *o;
  w->local.output = w->out;
  w->prefix = o->output;
  int rc = stk__tar_writer.open(&w->tar, &w->local, ds, src, err, errlen);
  if (rc) {
    rmdir(w->dir);
    free(w);
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

static int sw_finish(void *wp, int rc, const stk__dataset *ds, stk_pack_result *res, char *err,
                     size_t errlen) {
  store_w *w = wp;
  rc = stk__tar_writer.finish(w->tar, rc, ds, res, err, errlen);
  if (rc == STK_OK)
    rc = stk__upload_folder(w->out, w->prefix, w->local.read_timeout, err, errlen);
  remove_folder(w->out, w->dir);
  free(w);
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
