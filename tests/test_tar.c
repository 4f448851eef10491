/* WebDataset tar shards: the writer and the reader round trip, the
 * shard-by-shard epoch order (coverage per rank, determinism, the shuffle
 * buffer's bound), and hostile or damaged shards built here byte by byte. */
#include "util.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "check.h"
#include "epoch.h"
#include "core/common.h"
#include "loader/pipeline.h"
#include "sources/source.h"
#include "sources/tar.h"

#define CLASSES 4
#define PER_CLASS 12
#define N (CLASSES * PER_CLASS + 1) /* and one PNG */

static char *g_tmp, *g_folder, *g_shards;

static void base_opts(stk_options *o, const char *root) {
  stk_options_init(o);
  o->root = root;
  o->size = 16;
  o->batch_size = 5;
  o->threads = 2;
  o->seed = 5;
}

static int64_t run_epoch(stk_loader *l, stk__buf *pix, size_t *npix, int64_t *idx) {
  return tu_run_epoch(l, pix, npix, idx, NULL);
}

static void pack_opts(stk_pack_options *p, const char *root, const char *out, uint64_t shard_bytes) {
  stk_pack_options_init(p);
  p->root = root;
  p->output = out;
  p->format = STK_PACK_TAR;
  if (shard_bytes) p->shard_bytes = shard_bytes; /* 0: the default */
  p->threads = 2;
}

typedef struct {
  int bad, progress;
  int64_t last_done;
  char first_bad[4096];
} pack_cb;

static void on_bad(void *u, const char *path, const char *why) {
  pack_cb *c = u;
  if (!c->bad++) snprintf(c->first_bad, sizeof c->first_bad, "%s", path);
  (void)why;
}
static void on_progress(void *u, int64_t done, int64_t total) {
  pack_cb *c = u;
  c->progress++;
  c->last_done = done;
  (void)total;
}

/* Packs folder `root` into `out` (stk_pack, as `stoker pack --tar`). */
static int pack(const char *root, const char *out, uint64_t shard_bytes, stk_pack_result *res,
                pack_cb *cb) {
  stk_pack_options p;
  pack_opts(&p, root, out, shard_bytes);
  p.bad_file = on_bad;
  p.progress = on_progress;
  p.user = cb;
  char err[1024] = "";
  int rc = stk_pack(&p, STK_VERSION, res, err, sizeof err);
  if (rc) fprintf(stderr, "pack: %s\n", err);
  return rc;
}

static int open_src(stk__source *s, const char *root, int shuffle_buffer, char *err, size_t n) {
  stk_options o;
  stk_options_init(&o);
  o.root = root;
  o.shuffle_buffer = shuffle_buffer;
  int rc = stk__source_open(s, &o, err, n);
  if (rc) stk__source_close(s); /* what a failed open made (closing again is harmless) */
  return rc;
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc((size_t)sz + 1);
  *n = fread(p, 1, (size_t)sz, f);
  fclose(f);
  return p;
}

/* ---- round trip ----------------------------------------------------------- */

static void test_round_trip(void) {
  stk_pack_result res;
  pack_cb cb = {0};
  CHECK_EQ_INT(pack(g_folder, g_shards, 6000, &res, &cb), STK_OK);
  CHECK_EQ_INT(res.packed, N);
  CHECK_EQ_INT(res.failed, 0);
  CHECK_EQ_INT(cb.bad, 0);
  CHECK(res.shards >= 4);
  CHECK(cb.progress > 0 && cb.last_done == N);
  char p[4200];
  struct stat st;
  snprintf(p, sizeof p, "%s/shard-000000.tar", g_shards);
  CHECK(stat(p, &st) == 0 && st.st_size % 512 == 0);
  snprintf(p, sizeof p, "%s/classes.txt", g_shards);
  CHECK(stat(p, &st) == 0);
  snprintf(p, sizeof p, "%s.tmp-%ld", g_shards, (long)getpid());
  CHECK(stat(p, &st) != 0); /* renamed away */
  CHECK_EQ_INT(res.bytes > 0, 1);

  /* the same samples, labels, class names and bytes as the folder */
  stk__source f, t;
  char err[1024];
  CHECK_EQ_INT(open_src(&f, g_folder, 0, err, sizeof err), STK_OK);
  CHECK_EQ_INT(open_src(&t, g_shards, 0, err, sizeof err), STK_OK);
  CHECK(!strcmp(t.ops->kind, "tar"));
  CHECK_EQ_INT(t.ds.n, f.ds.n);
  CHECK_EQ_INT(t.ds.nclasses, f.ds.nclasses);
  CHECK_MSG(t.note[0] == '\0', "note: %s", t.note);
  for (int c = 0; c < f.ds.nclasses && c < t.ds.nclasses; c++)
    CHECK(!strcmp(f.ds.classes[c], t.ds.classes[c]));
  stk__buf bf = {0}, bt = {0};
  int64_t pngs = 0;
  for (int64_t i = 0; i < f.ds.n && i < t.ds.n; i++) {
    CHECK_EQ_INT(t.ds.labels[i], f.ds.labels[i]);
    stk__bytes a, b;
    CHECK_EQ_INT(f.ops->read(&f, i, &bf, 0, &a, err, sizeof err), STK_OK);
    CHECK_EQ_INT(t.ops->read(&t, i, &bt, 0, &b, err, sizeof err), STK_OK);
    CHECK(a.len == b.len && !memcmp(a.data, b.data, a.len));
    CHECK_EQ_INT(b.bytes_read, b.len + 512); /* the member's header is read with it */
    const char *name = stk__dataset_path(&t.ds, i);
    CHECK_MSG(strstr(name, g_shards) == name && strstr(name, ".tar:"), "%s", name);
    pngs += strstr(name, ".png") != NULL;
    if (i == 0) CHECK_MSG(strstr(name, ":00000000_class000_img0000.jpg") != NULL, "%s", name);
    /* the limit on a file's size holds for members too */
    CHECK_EQ_INT(t.ops->read(&t, i, &bt, 10, &b, err, sizeof err), STK_ELIMIT);
  }
  CHECK_EQ_INT(pngs, 1);
  stk__buf_free(&bf);
  stk__buf_free(&bt);
  stk__source_close(&f);
  stk__source_close(&t);

  /* the loader: kind, counts, and the very same batches as the folder
   * (eval, no shuffle: both visit the samples in the same order) */
  stk__buf pix[2] = {{0}, {0}};
  size_t npix[2] = {0, 0};
  const char *roots[2] = {g_folder, g_shards};
  for (int k = 0; k < 2; k++) {
    stk_options o;
    base_opts(&o, roots[k]);
    o.pipeline = STK_PIPELINE_EVAL;
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) continue;
    CHECK(!strcmp(stk_loader_source_kind(l), k ? "tar" : "folder"));
    CHECK_EQ_INT(stk_loader_num_samples(l), N);
    CHECK_EQ_INT(run_epoch(l, &pix[k], &npix[k], NULL), N);
    stk_loader_destroy(l);
  }
  CHECK(npix[0] == npix[1] && npix[0] > 0 && !memcmp(pix[0].p, pix[1].p, npix[0]));
  stk__buf_free(&pix[0]);
  stk__buf_free(&pix[1]);

  /* a non-empty output is refused, and nothing is touched */
  CHECK_EQ_INT(pack(g_folder, g_shards, 6000, &res, &cb), STK_EINVAL);
  snprintf(p, sizeof p, "%s/shard-000000.tar", g_shards);
  CHECK(stat(p, &st) == 0);

  /* one shard file alone is a source too */
  stk_options o;
  base_opts(&o, p);
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    CHECK(!strcmp(stk_loader_source_kind(l), "tar"));
    CHECK(stk_loader_num_samples(l) > 0 && stk_loader_num_samples(l) < N);
    CHECK(!strcmp(stk_loader_class_name(l, 0), "class000")); /* classes.txt beside it */
    stk_loader_destroy(l);
  }
}

/* Files that are not JPEG or PNG are left out of a pack and reported. */
static void test_pack_bad_files(void) {
  char dir[4096], out[4200], p[4300];
  snprintf(dir, sizeof dir, "%s/badpack", g_tmp);
  tu_mkdir(dir);
  snprintf(p, sizeof p, "%s/c0", dir);
  tu_mkdir(p);
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/c0/ok%d.jpg", dir, i);
    tu_write_jpeg(p, 20, 16, (uint64_t)i, 80);
  }
  snprintf(p, sizeof p, "%s/c0/text.jpg", dir);
  tu_write_bytes(p, "not an image", 12);
  snprintf(p, sizeof p, "%s/c0/anim.webp", dir);
  tu_write_bytes(p, "GIF89a\1\0\1\0\0\0\0;", 14);
  snprintf(out, sizeof out, "%s/badpack-out", g_tmp);
  tu_mkdir(out); /* an empty folder may be the output */
  stk_pack_result res;
  pack_cb cb = {0};
  CHECK_EQ_INT(pack(dir, out, 0, &res, &cb), STK_OK);
  CHECK_EQ_INT(res.packed, 3);
  CHECK_EQ_INT(res.failed, 2);
  CHECK_EQ_INT(cb.bad, 2);
  CHECK_EQ_INT(res.shards, 1);

  /* nothing packable: an error, and no output left behind */
  snprintf(p, sizeof p, "%s/c0", dir);
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/c0/ok%d.jpg", dir, i);
    unlink(p);
  }
  snprintf(out, sizeof out, "%s/badpack-none", g_tmp);
  memset(&cb, 0, sizeof cb);
  CHECK_EQ_INT(pack(dir, out, 0, &res, &cb), STK_EEMPTY);
  struct stat st;
  CHECK(stat(out, &st) != 0);
  snprintf(p, sizeof p, "%s.tmp-%ld", out, (long)getpid());
  CHECK(stat(p, &st) != 0);
}

/* ---- order ---------------------------------------------------------------- */

/* The order op of a source for (world, rank), into out; returns L. */
static int64_t order_of(const stk__source *s, int world, int rank, int shuffle, int drop_last,
                        uint64_t seed, uint64_t epoch, int64_t *out) {
  stk__sampler sp;
  if (stk__sampler_init(&sp, s->ds.n, rank, world, shuffle, drop_last, seed)) return -1;
  stk__source_order(s, &sp, epoch, out);
  int64_t L = sp.num_samples;
  stk__sampler_free(&sp);
  return L;
}

static void test_order_coverage(void) {
  stk__source s;
  char err[1024];
  CHECK_EQ_INT(open_src(&s, g_shards, 1, err, sizeof err), STK_OK); /* shard order only */
  int64_t n = s.ds.n;
  int64_t *seq = malloc((size_t)n * sizeof *seq), *all = malloc((size_t)(2 * n + 16) * sizeof *all);
  int64_t *cnt = calloc((size_t)n, sizeof *cnt);
  /* no shuffle: the samples in shard order, tar order */
  CHECK_EQ_INT(order_of(&s, 1, 0, 0, 0, 1, 0, seq), n);
  int inorder = 1;
  for (int64_t i = 0; i < n; i++) inorder &= seq[i] == i;
  CHECK(inorder);
  int worlds[] = {1, 2, 3, 8};
  for (int shuffle = 0; shuffle < 2; shuffle++)
    for (int wi = 0; wi < 4; wi++)
      for (int dl = 0; dl < 2; dl++) {
        int W = worlds[wi];
        order_of(&s, 1, 0, shuffle, 0, 9, 2, seq); /* the whole sequence */
        int64_t total = 0, L = -1;
        for (int r = 0; r < W; r++) {
          int64_t l = order_of(&s, W, r, shuffle, dl, 9, 2, all + total);
          if (L < 0) L = l;
          CHECK_EQ_INT(l, L); /* every rank the same count */
          total += l;
        }
        /* the ranks' runs, end to end, are the sequence, wrapped round for
         * the padding: each rank reads a contiguous run of shards */
        memset(cnt, 0, (size_t)n * sizeof *cnt);
        int same = 1;
        for (int64_t p = 0; p < total; p++) {
          same &= all[p] == seq[p % n];
          cnt[all[p]]++;
        }
        CHECK_MSG(same, "world %d drop_last %d shuffle %d", W, dl, shuffle);
        int64_t once = 0, twice = 0;
        for (int64_t i = 0; i < n; i++) once += cnt[i] == 1, twice += cnt[i] == 2;
        if (dl) {
          CHECK_EQ_INT(total, n / W * W);
          CHECK_EQ_INT(once, total);
        } else {
          CHECK_EQ_INT(total, (n + W - 1) / W * W);
          CHECK_EQ_INT(once + twice, n);
          CHECK_EQ_INT(twice, total - n);
        }
      }
  /* shuffled: the shard order changes with the epoch, the runs stay whole */
  int64_t *e1 = malloc((size_t)n * sizeof *e1);
  order_of(&s, 1, 0, 1, 0, 9, 0, seq);
  order_of(&s, 1, 0, 1, 0, 9, 1, e1);
  CHECK(memcmp(seq, e1, (size_t)n * sizeof *seq) != 0);
  int64_t breaks = 0, shards = 1;
  for (int64_t i = 1; i < n; i++) {
    breaks += seq[i] != seq[i - 1] + 1;
    const char *a = stk__dataset_path(&s.ds, i - 1), *b = stk__dataset_path(&s.ds, i);
    shards += strncmp(a, b, (size_t)(strstr(a, ".tar:") - a)) != 0;
  }
  CHECK(shards >= 4);
  CHECK_MSG(breaks > 0 && breaks < shards, "%lld breaks, %lld shards", (long long)breaks,
            (long long)shards); /* the shards' runs stay whole */
  free(e1);
  stk__source_close(&s);

  /* through the loader: all ranks together, equal batch counts */
  int W = 3;
  memset(cnt, 0, (size_t)n * sizeof *cnt);
  int64_t len = -1, got = 0;
  for (int r = 0; r < W; r++) {
    stk_options o;
    base_opts(&o, g_shards);
    o.world_size = W;
    o.rank = r;
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) continue;
    if (len < 0) len = stk_loader_len(l);
    CHECK_EQ_INT(stk_loader_len(l), len);
    stk_loader_set_epoch(l, 3);
    int64_t k = run_epoch(l, NULL, NULL, all);
    CHECK_EQ_INT(k, (n + W - 1) / W);
    for (int64_t i = 0; i < k; i++) cnt[all[i]]++;
    got += k;
    stk_loader_destroy(l);
  }
  int64_t missing = 0;
  for (int64_t i = 0; i < n; i++) missing += cnt[i] == 0;
  CHECK_EQ_INT(missing, 0);
  CHECK_EQ_INT(got, (n + W - 1) / W * W);
  free(seq);
  free(all);
  free(cnt);
}

static void test_shuffle_buffer(void) {
  stk__source s1, sk, sbig;
  char err[1024];
  int K = 4;
  CHECK_EQ_INT(open_src(&s1, g_shards, 1, err, sizeof err), STK_OK);
  CHECK_EQ_INT(open_src(&sk, g_shards, K, err, sizeof err), STK_OK);
  CHECK_EQ_INT(open_src(&sbig, g_shards, 0, err, sizeof err), STK_OK); /* 1000: all of it */
  int64_t n = s1.ds.n;
  int64_t *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  int64_t *c = malloc((size_t)n * sizeof *c), *pos = malloc((size_t)n * sizeof *pos);
  for (int epoch = 0; epoch < 3; epoch++) {
    order_of(&s1, 1, 0, 1, 0, 4, (uint64_t)epoch, a);
    order_of(&sk, 1, 0, 1, 0, 4, (uint64_t)epoch, b);
    order_of(&sk, 1, 0, 1, 0, 4, (uint64_t)epoch, c);
    CHECK(!memcmp(b, c, (size_t)n * sizeof *b)); /* deterministic */
    CHECK(memcmp(a, b, (size_t)n * sizeof *a) != 0); /* it does shuffle */
    /* a permutation of the shard order, in which no sample comes more than
     * K places earlier than in the shard order (the buffer holds K) */
    for (int64_t i = 0; i < n; i++) pos[a[i]] = i;
    int64_t seen = 0, bound = 1, moved = 0;
    for (int64_t i = 0; i < n; i++) {
      seen += b[i] >= 0 && b[i] < n;
      bound &= i >= pos[b[i]] - K;
      moved += i != pos[b[i]];
    }
    CHECK_EQ_INT(seen, n);
    CHECK(bound);
    CHECK(moved > n / 2);
    int64_t *cntb = calloc((size_t)n, sizeof *cntb);
    int64_t dup = 0;
    for (int64_t i = 0; i < n; i++) dup += cntb[b[i]]++ > 0;
    CHECK_EQ_INT(dup, 0);
    free(cntb);
    /* a buffer as large as the run is a full shuffle: far moves happen */
    order_of(&sbig, 1, 0, 1, 0, 4, (uint64_t)epoch, c);
    int64_t far = 0;
    for (int64_t i = 0; i < n; i++) far += i < pos[c[i]] - K;
    CHECK(far > 0);
  }
  /* with shuffle off, the buffer is not used */
  order_of(&sk, 1, 0, 0, 0, 4, 0, b);
  int inorder = 1;
  for (int64_t i = 0; i < n; i++) inorder &= b[i] == i;
  CHECK(inorder);
  free(a), free(b), free(c), free(pos);
  stk__source_close(&s1);
  stk__source_close(&sk);
  stk__source_close(&sbig);
}

static void test_determinism(void) {
  stk__buf out[3] = {{0}, {0}, {0}};
  size_t n[3] = {0, 0, 0};
  int threads[3] = {1, 3, 3};
  uint64_t seeds[3] = {8, 8, 9};
  int64_t idx[3][2 * N];
  for (int k = 0; k < 3; k++) {
    stk_options o;
    base_opts(&o, g_shards);
    o.threads = threads[k];
    o.seed = seeds[k];
    o.shuffle_buffer = 8;
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) return;
    for (int e = 0; e < 2; e++) {
      stk_loader_set_epoch(l, (uint64_t)e);
      CHECK_EQ_INT(run_epoch(l, &out[k], &n[k], idx[k] + e * N), N);
    }
    stk_loader_destroy(l);
  }
  CHECK(n[0] == n[1] && n[0] > 0 && !memcmp(out[0].p, out[1].p, n[0]));
  CHECK(!memcmp(idx[0], idx[1], sizeof idx[0]));
  CHECK(memcmp(idx[0], idx[2], sizeof idx[0]) != 0); /* another seed, another order */
  CHECK(memcmp(idx[0], idx[0] + N, N * sizeof(int64_t)) != 0); /* another epoch too */
  for (int k = 0; k < 3; k++) stk__buf_free(&out[k]);
}

/* Many shards under a low open-file limit: reads do not keep one fd each. */
static void test_many_shards(void) {
  char out[4200];
  snprintf(out, sizeof out, "%s/many", g_tmp);
  stk_pack_result res;
  pack_cb cb = {0};
  CHECK_EQ_INT(pack(g_folder, out, 1, &res, &cb), STK_OK); /* one sample a shard */
  CHECK_EQ_INT(res.shards, N);
  struct rlimit old, low;
  getrlimit(RLIMIT_NOFILE, &old);
  low = old;
  low.rlim_cur = 32; /* fewer than the shards */
  setrlimit(RLIMIT_NOFILE, &low);
  stk_options o;
  base_opts(&o, out);
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    for (int e = 0; e < 2; e++) CHECK_EQ_INT(run_epoch(l, NULL, NULL, NULL), N);
    stk_loader_destroy(l);
  }
  setrlimit(RLIMIT_NOFILE, &old);
}

/* ---- hostile shards ------------------------------------------------------- */

typedef struct {
  uint8_t *p;
  size_t n, cap;
} tb;

static void tb_put(tb *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 4096;
    b->p = realloc(b->p, b->cap);
  }
  if (n) memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void octal(uint8_t *f, size_t n, uint64_t v) {
  f[n - 1] = 0;
  for (size_t i = n - 1; i-- > 0; v >>= 3) f[i] = (uint8_t)('0' + (v & 7));
}

/* A ustar header of `type` for `name` (up to 100 bytes) claiming `size`. */
static void tb_header(tb *b, const char *name, char type, uint64_t size) {
  uint8_t h[512] = {0};
  memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
  octal(h + 100, 8, 0644);
  octal(h + 108, 8, 0);
  octal(h + 116, 8, 0);
  octal(h + 124, 12, size);
  octal(h + 136, 12, 0);
  h[156] = (uint8_t)type;
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  octal(h + 148, 7, sum);
  tb_put(b, h, 512);
}

static void tb_pad(tb *b) {
  static const uint8_t z[512];
  tb_put(b, z, (512 - b->n % 512) % 512);
}

static void tb_member(tb *b, const char *name, char type, const void *data, size_t n) {
  tb_header(b, name, type, n);
  tb_put(b, data, n);
  tb_pad(b);
}

static void tb_end(tb *b) {
  static const uint8_t z[1024];
  tb_put(b, z, 1024);
}

/* One pax record "LEN key=value\n", LEN counting its own digits. */
static const char *pax_record(char *out, size_t cap, const char *key, const char *value) {
  size_t body = strlen(key) + strlen(value) + 3, len = body + 1;
  while (snprintf(NULL, 0, "%zu", len) + body != len) len++;
  snprintf(out, cap, "%zu %s=%s\n", len, key, value);
  return out;
}

static uint8_t *g_jpg; /* a small valid JPEG */
static size_t g_jpg_n;

/* key.jpg + key.cls */
static void tb_sample(tb *b, const char *key, int label) {
  char nm[256], lab[16];
  snprintf(nm, sizeof nm, "%s.jpg", key);
  tb_member(b, nm, '0', g_jpg, g_jpg_n);
  snprintf(nm, sizeof nm, "%s.cls", key);
  snprintf(lab, sizeof lab, "%d", label);
  tb_member(b, nm, '0', lab, strlen(lab));
}

static int g_case = 0;

/* Writes the shard into a new folder and opens it as a source. */
static int open_tar(tb *b, stk__source *s, char *err, size_t n, char *dir) {
  sprintf(dir, "%s/hostile%03d", g_tmp, g_case++);
  tu_mkdir(dir);
  char p[4200];
  snprintf(p, 4200, "%s/shard-000000.tar", dir);
  tu_write_bytes(p, b->p, b->n);
  b->n = 0;
  return open_src(s, dir, 0, err, n);
}

/* Opens the shard and expects `want` samples and a note holding `note`;
 * image members left out follow them as samples whose read fails ("left
 * out when the shard was opened: ..."); with `member`, the shard is
 * damaged: one more sample, the last, stands for the damage, is named
 * SHARD:MEMBER... and fails to read with a reason holding `why`. */
static void expect_damage(tb *b, int64_t want, const char *note, const char *what,
                          const char *member, const char *why) {
  stk__source s;
  char err[1024] = "", dir[4096];
  int rc = open_tar(b, &s, err, sizeof err, dir);
  CHECK_MSG(rc == STK_OK, "%s: %s", what, err);
  if (rc) return;
  int64_t lost = s.ds.n - want - (member != NULL);
  CHECK_MSG(lost >= 0, "%s: %lld samples, expected %lld and the members left out (%s)", what,
            (long long)s.ds.n, (long long)want + (member != NULL), s.note);
  for (int64_t i = want; lost > 0 && i < want + lost; i++) {
    stk__buf buf = {0};
    stk__bytes by;
    CHECK_EQ_INT(s.ops->read(&s, i, &buf, 0, &by, err, sizeof err), STK_EDECODE);
    CHECK_MSG(strstr(err, "left out when the shard was opened") != NULL, "%s: \"%s\"", what, err);
    stk__buf_free(&buf);
  }
  if (member && lost >= 0) {
    stk__buf buf = {0};
    stk__bytes by;
    const char *name = stk__dataset_path(&s.ds, want + lost);
    CHECK_MSG(strstr(name, dir) == name && strstr(name, "shard-000000.tar:") &&
                  strstr(name, member),
              "%s: the damage is named %s", what, name);
    CHECK_EQ_INT(s.ops->read(&s, want + lost, &buf, 0, &by, err, sizeof err), STK_EDECODE);
    CHECK_MSG(strstr(err, why) != NULL, "%s: \"%s\" lacks \"%s\"", what, err, why);
    stk__buf_free(&buf);
  }
  if (lost >= 0) s.ds.n = want; /* the rest of the checks look at the members */
  if (getenv("STK_TEST_VERBOSE")) printf("%s: %s\n", what, s.note);
  if (note) CHECK_MSG(strstr(s.note, note) != NULL, "%s: note \"%s\" lacks \"%s\"", what, s.note, note);
  else CHECK_MSG(s.note[0] == '\0', "%s: unexpected note \"%s\"", what, s.note);
  /* every sample that remains reads back as the JPEG */
  stk__buf buf = {0};
  for (int64_t i = 0; i < s.ds.n; i++) {
    stk__bytes by;
    CHECK_EQ_INT(s.ops->read(&s, i, &buf, 0, &by, err, sizeof err), STK_OK);
    CHECK_MSG(by.len == g_jpg_n && !memcmp(by.data, g_jpg, g_jpg_n), "%s: sample %lld", what,
              (long long)i);
  }
  stk__buf_free(&buf);
  stk__source_close(&s);
}

static void expect(tb *b, int64_t want, const char *note, const char *what) {
  expect_damage(b, want, note, what, NULL, NULL);
}

static void test_hostile(void) {
  tb b = {0};
  char longkey[300];

  /* what webdataset writers produce reads as it is: folders, other fields,
   * GNU long names, pax paths, global pax headers, a "./" prefix */
  tb_member(&b, "sub/", '5', NULL, 0);
  tb_sample(&b, "sub/a", 0);
  tb_member(&b, "sub/a.json", '0', "{}", 2);
  tb_member(&b, "sub/a.seg.png", '0', "x", 1); /* another field, not the image */
  memset(longkey, 'k', 150);
  strcpy(longkey + 150, ".jpg");
  tb_member(&b, "././@LongLink", 'L', longkey, strlen(longkey) + 1);
  tb_member(&b, "kkkkkkkk.jpg", '0', g_jpg, g_jpg_n);
  strcpy(longkey + 150, ".cls");
  tb_member(&b, "././@LongLink", 'L', longkey, strlen(longkey) + 1);
  tb_member(&b, "kkkkkkkk.cls", '0', "1", 1);
  char pax[256];
  pax_record(pax, sizeof pax, "path", "pax/b.with.JPEG");
  tb_member(&b, "PaxHeaders/x", 'x', pax, strlen(pax));
  tb_member(&b, "trunc.jpg", '0', g_jpg, g_jpg_n);
  tb_member(&b, "pax/b.cls", '0', " 2\n", 3);
  pax_record(pax, sizeof pax, "comment", "x");
  tb_member(&b, "pax_global_header", 'g', pax, strlen(pax)); /* ignored */
  tb_sample(&b, "./c", 1);
  tb_end(&b);
  {
    stk__source s;
    char err[1024], dir[4096];
    int rc = open_tar(&b, &s, err, sizeof err, dir);
    CHECK_MSG(rc == STK_OK, "webdataset layout: %s", err);
    if (rc == STK_OK) {
      /* pax/b.with.JPEG has the key "pax/b" and the field "with.JPEG": no image */
      CHECK_EQ_INT(s.ds.n, 3);
      CHECK_MSG(strstr(s.note, "1 .cls without an image") != NULL, "%s", s.note);
      if (s.ds.n == 3) {
        CHECK(strstr(stk__dataset_path(&s.ds, 0), ":sub/a.jpg") != NULL);
        CHECK(strstr(stk__dataset_path(&s.ds, 1), ":kkkkkkkkkkkkkkkkkkkk") != NULL);
        CHECK(strstr(stk__dataset_path(&s.ds, 2), ":./c.jpg") != NULL);
        CHECK_EQ_INT(s.ds.labels[1], 1);
        CHECK_EQ_INT(s.ds.nclasses, 2);
      }
      stk__source_close(&s);
    }
  }
  pax_record(pax, sizeof pax, "path", "pax/b.JPEG");
  tb_member(&b, "PaxHeaders/x", 'x', pax, strlen(pax));
  tb_member(&b, "trunc.jpg", '0', g_jpg, g_jpg_n);
  tb_member(&b, "pax/b.cls", '0', "3", 1);
  tb_end(&b);
  expect(&b, 1, NULL, "pax path");

  tb_sample(&b, "ok", 0);
  tb_sample(&b, "../evil", 0);
  tb_sample(&b, "/abs", 0);
  tb_sample(&b, "a/../../b", 0);
  tb_end(&b);
  expect(&b, 1, "6 unsafe names", "unsafe names");

  tb_sample(&b, "ok", 0);
  tb_header(&b, "sym.jpg", '2', 0);
  tb_member(&b, "sym.cls", '0', "0", 1);
  tb_header(&b, "hard.jpg", '1', 0);
  tb_end(&b);
  expect(&b, 1, "2 links", "links");

  tb_sample(&b, "ok", 0);
  tb_header(&b, "dev.jpg", '3', 0);
  tb_header(&b, "blk.jpg", '4', 0);
  tb_header(&b, "fifo.jpg", '6', 0);
  tb_member(&b, "sparse.jpg", 'S', g_jpg, g_jpg_n);
  tb_end(&b);
  expect(&b, 1, "3 devices or FIFOs, 1 unsupported member type", "devices");

  tb_sample(&b, "a", 0);
  tb_sample(&b, "b", 1);
  tb_member(&b, "a.jpg", '0', "other bytes", 11); /* duplicates: the first is kept */
  tb_member(&b, "a.cls", '0', "1", 1);
  tb_end(&b);
  expect(&b, 2, "2 duplicate keys", "duplicates");

  tb_sample(&b, "a", 0);
  tb_header(&b, "huge.jpg", '0', 1ULL << 32); /* claims 4 GiB: more than the file */
  tb_put(&b, g_jpg, g_jpg_n);
  tb_end(&b);
  expect_damage(&b, 1, "1 shard truncated", "size over the file", ":huge.jpg",
                "the member claims 4294967296 bytes");

  tb_sample(&b, "a", 0);
  tb_sample(&b, "b", 0);
  {
    uint8_t g[512];
    stk__rng r;
    stk__rng_init(&r, 1, 2, 3);
    for (int i = 0; i < 512; i++) g[i] = (uint8_t)stk__rng_next(&r);
    tb_put(&b, g, 512);
  }
  tb_sample(&b, "c", 0);
  tb_end(&b);
  expect_damage(&b, 2, "bad header", "garbage header", ":offset ",
                "not a valid tar header (checksum mismatch) after member b.cls");

  /* a pax record claiming 1 GiB inside a small pax header: the record is
   * refused and the member it names is left out, the rest is read */
  const char *big = "1073741824 path=x.jpg\n";
  tb_sample(&b, "a", 0);
  tb_member(&b, "PaxHeaders/x", 'x', big, strlen(big));
  tb_member(&b, "x.jpg", '0', g_jpg, g_jpg_n);
  tb_member(&b, "x.cls", '0', "0", 1);
  tb_sample(&b, "b", 0);
  tb_end(&b);
  expect(&b, 2, "1 bad extended header", "pax record of 1 GiB");
  /* a pax header whose size claims 1 GiB: more than the file holds */
  tb_sample(&b, "a", 0);
  tb_header(&b, "PaxHeaders/x", 'x', 1ULL << 30);
  tb_put(&b, big, strlen(big));
  tb_end(&b);
  expect_damage(&b, 1, "truncated", "pax header of 1 GiB", ":PaxHeaders/x",
                "claims 1073741824 bytes");
  /* a real pax header over the 64 KiB bound: skipped with its member */
  {
    size_t n = 100 * 1024;
    char *p = malloc(n);
    memset(p, 'a', n);
    tb_sample(&b, "a", 0);
    tb_member(&b, "PaxHeaders/x", 'x', p, n);
    tb_sample(&b, "x", 0); /* x.jpg is dropped; x.cls then has no image */
    tb_sample(&b, "b", 0);
    tb_end(&b);
    expect(&b, 2, "1 .cls without an image, 1 bad extended header", "pax header over 64 KiB");
    /* the same for a GNU long name */
    tb_sample(&b, "a", 0);
    tb_member(&b, "././@LongLink", 'L', p, n);
    tb_member(&b, "x.jpg", '0', g_jpg, g_jpg_n);
    tb_end(&b);
    expect(&b, 1, "1 bad extended header", "long name over 64 KiB");
    free(p);
  }

  /* truncated: no end blocks (all members kept), or inside a member */
  tb_sample(&b, "a", 0);
  tb_sample(&b, "b", 0);
  expect_damage(&b, 2, "1 shard truncated", "no end blocks", ":offset ",
                "ends without its end-of-archive blocks after member b.cls");
  tb_sample(&b, "a", 0);
  tb_sample(&b, "b", 0);
  b.n -= 1024 + 300; /* b.cls gone, and the end of b.jpg's data */
  expect_damage(&b, 1, "truncated", "truncated member", ":b.jpg", "the shard is truncated");

  /* zero-filled regions: from b's header to the end of c (d after them),
   * and one block of b's header alone (its data after it) */
  for (int k = 0; k < 2; k++) {
    tb_sample(&b, "a", 0);
    size_t from = b.n;
    tb_sample(&b, "b", 0);
    tb_sample(&b, "c", 0);
    size_t to = k ? from + 512 : b.n;
    tb_sample(&b, "d", 0);
    tb_end(&b);
    memset(b.p + from, 0, to - from);
    expect_damage(&b, 1, "1 shard with a zero-filled region", k ? "zeroed header" : "zeroed region",
                  ":offset ", "zero bytes after member a.cls, then data at offset");
  }
  /* what writers put after the end blocks (a record padded with zeros) is
   * no damage */
  tb_sample(&b, "a", 0);
  tb_end(&b);
  {
    static const uint8_t z[10240];
    tb_put(&b, z, sizeof z - b.n % sizeof z);
  }
  expect(&b, 1, NULL, "padded record");

  tb_sample(&b, "a", 0);
  tb_member(&b, "nocls.jpg", '0', g_jpg, g_jpg_n);
  tb_member(&b, "neg.jpg", '0', g_jpg, g_jpg_n);
  tb_member(&b, "neg.cls", '0', "-1", 2);
  tb_member(&b, "txt.jpg", '0', g_jpg, g_jpg_n);
  tb_member(&b, "txt.cls", '0', "cat", 3);
  tb_member(&b, "huge.jpg", '0', g_jpg, g_jpg_n);
  tb_member(&b, "huge.cls", '0', "99999999999", 11);
  tb_end(&b);
  expect(&b, 1, "4 tar members left out: 1 without a .cls, 3 with a bad .cls", "bad .cls");
  {
    /* the note names the first member left out */
    tb_member(&b, "nocls.jpg", '0', g_jpg, g_jpg_n);
    tb_sample(&b, "a", 0);
    tb_end(&b);
    stk__source s;
    char err[1024], dir[4096];
    CHECK_EQ_INT(open_tar(&b, &s, err, sizeof err, dir), STK_OK);
    CHECK_MSG(strstr(s.note, "first: ") && strstr(s.note, "shard-000000.tar:nocls.jpg"), "%s",
              s.note);
    stk__source_close(&s);
  }

  /* nothing usable: STK_EEMPTY naming the folder */
  {
    uint8_t g[1024];
    memset(g, 'A', sizeof g);
    tb_put(&b, g, sizeof g);
    stk__source s;
    char err[1024] = "", dir[4096];
    int rc = open_tar(&b, &s, err, sizeof err, dir);
    CHECK_EQ_INT(rc, STK_EEMPTY);
    CHECK_MSG(strstr(err, dir) != NULL && strstr(err, "bad header"), "%s", err);
    stk__source_close(&s);
    stk_options o;
    base_opts(&o, dir);
    stk_loader *l = NULL;
    CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EEMPTY);
  }

  /* classes.txt: names for labels; a label past its end is left out */
  {
    tb_sample(&b, "a", 0);
    tb_sample(&b, "b", 1);
    tb_sample(&b, "c", 2);
    tb_end(&b);
    char dir[4096], p[4200], err[1024];
    sprintf(dir, "%s/hostile%03d", g_tmp, g_case);
    tu_mkdir(dir);
    snprintf(p, sizeof p, "%s/classes.txt", dir);
    tu_write_bytes(p, "cat\ndog\n", 8);
    stk__source s;
    CHECK_EQ_INT(open_tar(&b, &s, err, sizeof err, dir), STK_OK);
    /* c's label is past classes.txt: a sample whose read fails, named */
    CHECK_EQ_INT(s.ds.n, 3);
    if (s.ds.n == 3) CHECK(strstr(stk__dataset_path(&s.ds, 2), ":c.jpg") != NULL);
    CHECK_EQ_INT(s.ds.nclasses, 2);
    if (s.ds.nclasses == 2) CHECK(!strcmp(s.ds.classes[1], "dog"));
    CHECK_MSG(strstr(s.note, "1 with a bad .cls") != NULL, "%s", s.note);
    stk__source_close(&s);
  }
  free(b.p);
}

/* Shards cut or corrupted at random places: each opens cleanly or fails
 * with a clean error, and an epoch under skip either runs or ends cleanly. */
static void test_random_damage(void) {
  char p[4200];
  snprintf(p, sizeof p, "%s/shard-000000.tar", g_shards);
  size_t n;
  uint8_t *orig = slurp(p, &n);
  CHECK(orig && n > 2048);
  if (!orig) return;
  uint8_t *cp = malloc(n);
  int opened = 0, refused = 0;
  for (int seed = 0; seed < 120; seed++) {
    stk__rng r;
    stk__rng_init(&r, 77, 0, (uint64_t)seed);
    memcpy(cp, orig, n);
    size_t len = n;
    int mode = seed % 3;
    if (mode == 0) {
      len = (size_t)stk__rng_range(&r, 0, (int64_t)n);
    } else {
      int hits = mode == 1 ? 1 + (int)stk__rng_range(&r, 0, 8) : 1;
      for (int h = 0; h < hits; h++) {
        size_t at = (size_t)stk__rng_range(&r, 0, (int64_t)n);
        if (mode == 1) {
          cp[at] = (uint8_t)stk__rng_next(&r);
        } else { /* a block of garbage */
          at -= at % 512;
          for (size_t i = at; i < at + 512 && i < n; i++) cp[i] = (uint8_t)stk__rng_next(&r);
        }
      }
    }
    tb b = {cp, len, n};
    stk__source s;
    char err[1024] = "", dir[4096];
    int rc = open_tar(&b, &s, err, sizeof err, dir);
    CHECK_MSG(rc == STK_OK || rc == STK_EEMPTY, "seed %d: %s", seed, err);
    if (rc == STK_OK) {
      opened++;
      stk__source_close(&s);
      stk_options o;
      base_opts(&o, dir);
      o.on_error = STK_ON_ERROR_SKIP;
      o.max_skipped_fraction = 1; /* bad on purpose: more than a tenth */
      o.max_consecutive_failures = 0;
      stk_loader *l = NULL;
      rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
      CHECK_MSG(rc == STK_OK, "seed %d: %s", seed, err);
      if (l) {
        for (;;) {
          stk_batch bt;
          rc = stk_loader_next(l, &bt);
          if (rc != STK_OK) break;
          stk_batch_release(l, &bt);
        }
        CHECK_MSG(rc == STK_EEND || rc == STK_ETOOMANY, "seed %d: %s", seed, stk_loader_error(l));
        stk_loader_destroy(l);
      }
    } else {
      refused++;
    }
    tu_rmtree(dir);
  }
  CHECK(opened > 0);
  (void)refused;
  free(cp);
  free(orig);
}

/* Under on_error=skip a corrupt image member is listed and the others come
 * once each. */
static void test_skip_corrupt_member(void) {
  tb b = {0};
  for (int i = 0; i < 9; i++) {
    char key[16];
    snprintf(key, sizeof key, "s%d", i);
    if (i == 4) { /* a JPEG marker, then garbage */
      tb_member(&b, "s4.jpg", '0', "\xff\xd8\xff\xe0 garbage", 12);
      tb_member(&b, "s4.cls", '0', "0", 1);
      continue;
    }
    tb_sample(&b, key, i % 2);
  }
  tb_end(&b);
  stk__source s;
  char err[1024], dir[4096];
  CHECK_EQ_INT(open_tar(&b, &s, err, sizeof err, dir), STK_OK);
  CHECK_EQ_INT(s.ds.n, 9);
  stk__source_close(&s);
  stk_options o;
  base_opts(&o, dir);
  o.on_error = STK_ON_ERROR_SKIP;
  o.max_skipped_fraction = 1; /* bad on purpose: more than a tenth */
  o.batch_size = 2;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    int64_t idx[16];
    CHECK_EQ_INT(run_epoch(l, NULL, NULL, idx), 8);
    int seen[9] = {0};
    for (int i = 0; i < 8; i++) seen[idx[i]]++;
    int ok = seen[4] == 0;
    for (int i = 0; i < 9; i++) ok &= i == 4 || seen[i] == 1;
    CHECK(ok);
    stk_stats st;
    stk_loader_stats(l, &st);
    CHECK_EQ_INT(st.skipped, 1);
    const char *path = "", *reason = "";
    CHECK_EQ_INT(stk_loader_skipped(l, 0, &path, &reason), STK_OK);
    CHECK_MSG(strstr(path, dir) == path && strstr(path, ".tar:s4.jpg"), "%s", path);
    CHECK(strlen(reason) > 0);
    stk_loader_destroy(l);
  }
  free(b.p);
}

/* A damaged shard through the loader and `stoker check`: under raise its
 * batch fails naming the shard and the member, under skip it is counted and
 * listed, check exits 1; and a shard that changes after it was opened fails
 * the reads of what changed. */
static void test_damaged_shard(void) {
  tb b = {0};
  size_t at[6];
  for (int i = 0; i < 6; i++) {
    char key[8];
    snprintf(key, sizeof key, "s%d", i);
    at[i] = b.n;
    tb_sample(&b, key, i % 2);
  }
  tb_end(&b);
  uint8_t *whole = malloc(b.n);
  size_t whole_n = b.n;
  memcpy(whole, b.p, b.n);
  b.n = at[3] + 512 + 100; /* cut inside s3.jpg */
  stk__source s;
  char err[1024], dir[4096];
  CHECK_EQ_INT(open_tar(&b, &s, err, sizeof err, dir), STK_OK);
  CHECK_EQ_INT(s.ds.n, 4); /* s0..s2 and the damage */
  int bad = 0;
  stk_options co;
  stk_options_init(&co);
  for (int64_t i = 0; i < s.ds.n; i++)
    bad += stk__check_sample(&s, i, &co, NULL, NULL, err, sizeof err) != STK_OK;
  CHECK_EQ_INT(bad, 1);
  stk__source_close(&s);

  stk_options o;
  base_opts(&o, dir);
  o.pipeline = STK_PIPELINE_EVAL;
  o.shuffle = 0;
  o.batch_size = 1;
  o.threads = 1;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    int ok = 0, failed = 0;
    stk_batch bt;
    for (int rc; (rc = stk_loader_next(l, &bt)) != STK_EEND;) {
      if (rc == STK_OK) {
        ok++;
        stk_batch_release(l, &bt);
        continue;
      }
      failed++;
      const char *m = stk_loader_error(l);
      CHECK_MSG(rc == STK_EDECODE && strstr(m, dir) && strstr(m, "shard-000000.tar:s3.jpg: ") &&
                    strstr(m, "the shard is truncated"),
                "%s: %s", stk_strerror(rc), m);
      if (failed > 3) break;
    }
    CHECK_EQ_INT(ok, 3);
    CHECK_EQ_INT(failed, 1);
    stk_loader_destroy(l);
  }
  base_opts(&o, dir);
  o.on_error = STK_ON_ERROR_SKIP;
  o.max_skipped_fraction = 1; /* bad on purpose: more than a tenth */
  o.batch_size = 1;
  l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    CHECK_EQ_INT(run_epoch(l, NULL, NULL, NULL), 3);
    stk_stats st;
    stk_loader_stats(l, &st);
    CHECK_EQ_INT(st.skipped, 1);
    const char *path = "", *reason = "";
    CHECK_EQ_INT(stk_loader_skipped(l, 0, &path, &reason), STK_OK);
    CHECK_MSG(strstr(path, ".tar:s3.jpg") && strstr(reason, "truncated"), "%s: %s", path, reason);
    stk_loader_destroy(l);
  }
  const char *cli = getenv("STK_CLI");
  if (cli) {
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' check '%s' > /dev/null 2>&1", cli, dir);
    int st = system(cmd);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "stoker check on a truncated shard: %d", st);
  }

  /* changed after the open: a header zero-filled, then the shard cut short */
  b.n = 0;
  tb_put(&b, whole, whole_n);
  CHECK_EQ_INT(open_tar(&b, &s, err, sizeof err, dir), STK_OK);
  CHECK_EQ_INT(s.ds.n, 6);
  char p[4200];
  snprintf(p, sizeof p, "%s/shard-000000.tar", dir);
  int fd = open(p, O_WRONLY);
  static const uint8_t z[512];
  CHECK(pwrite(fd, z, 512, (off_t)at[2]) == 512);
  CHECK(ftruncate(fd, (off_t)(at[4] + 512 + 10)) == 0);
  close(fd);
  stk__buf buf = {0};
  stk__bytes by;
  CHECK_EQ_INT(s.ops->read(&s, 0, &buf, 0, &by, err, sizeof err), STK_OK);
  CHECK_EQ_INT(s.ops->read(&s, 2, &buf, 0, &by, err, sizeof err), STK_EDECODE);
  CHECK_MSG(strstr(err, "zero-filled or overwritten"), "%s", err);
  CHECK_EQ_INT(s.ops->read(&s, 4, &buf, 0, &by, err, sizeof err), STK_EDECODE);
  CHECK_MSG(strstr(err, "the shard is truncated") && strstr(err, "changed since it was opened"),
            "%s", err);
  CHECK_EQ_INT(s.ops->read(&s, 5, &buf, 0, &by, err, sizeof err), STK_EDECODE);
  stk__buf_free(&buf);
  stk__source_close(&s);
  free(whole);
  free(b.p);
}

/* A classes.txt that is a FIFO (nothing will ever write it) is refused at
 * open, naming it, instead of blocking the loader's creation forever. The
 * alarm turns a regression into a failure rather than a hung test. */
static void test_fifo_classes(void) {
  char p[4200], keep[4300];
  snprintf(p, sizeof p, "%s/classes.txt", g_shards);
  snprintf(keep, sizeof keep, "%s.kept", p);
  CHECK(rename(p, keep) == 0);
  CHECK(mkfifo(p, 0644) == 0);
  alarm(20);
  stk__source t;
  char err[1024] = "";
  double t0 = stk__now();
  CHECK_EQ_INT(open_src(&t, g_shards, 0, err, sizeof err), STK_EIO);
  alarm(0);
  CHECK(stk__now() - t0 < 5);
  CHECK_MSG(strstr(err, "classes.txt") && strstr(err, "not a regular file (a FIFO)"), "%s", err);
  unlink(p);
  CHECK(rename(keep, p) == 0);
  CHECK_EQ_INT(open_src(&t, g_shards, 0, err, sizeof err), STK_OK); /* and back */
  stk__source_close(&t);
}

int main(void) {
  g_tmp = tu_tempdir();
  char p[4200];
  g_folder = malloc(4200);
  g_shards = malloc(4200);
  snprintf(g_folder, 4200, "%s/folder", g_tmp);
  snprintf(g_shards, 4200, "%s/shards", g_tmp);
  tu_mkdir(g_folder);
  CHECK_EQ_INT(tu_make_folder(g_folder, CLASSES, PER_CLASS, 30, 22), STK_OK);
  {
    /* one PNG in the last class */
    uint8_t rgb[20 * 14 * 3], *png = NULL;
    size_t pn = 0;
    stk__synth_render(rgb, 20, 14, 99);
    CHECK_EQ_INT(stk__png_encode(rgb, 20, 14, STK__PNG_RGB, 8, NULL, 0, &png, &pn), STK_OK);
    snprintf(p, sizeof p, "%s/class003/zz.png", g_folder);
    tu_write_bytes(p, png, pn);
    free(png);
  }
  snprintf(p, sizeof p, "%s/class000/img0000.jpg", g_folder);
  g_jpg = slurp(p, &g_jpg_n);
  CHECK(g_jpg && g_jpg_n > 800);

  test_round_trip();
  test_fifo_classes();
  test_pack_bad_files();
  test_order_coverage();
  test_shuffle_buffer();
  test_determinism();
  test_many_shards();
  test_hostile();
  test_random_damage();
  test_skip_corrupt_member();
  test_damaged_shard();

  free(g_jpg);
  tu_rmtree(g_tmp);
  free(g_tmp);
  free(g_folder);
  free(g_shards);
  return CHECK_DONE();
}
