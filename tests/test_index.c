/* Image folders: the parallel scan against a plain serial reference, and the
 * index: written, reused, rebuilt when the tree changes or the file is
 * corrupt, and never in the way of loading. Every index goes to folders of
 * the test's own (index_dir, or XDG_CACHE_HOME / HOME set to one). */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <time.h>

#include "check.h"
#include "sources/dataset.h"
#include "sources/index.h"
#include "sources/source.h"

static char g_tmp[256];

static void path_of(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/%s", g_tmp, rel); }

static void touch(const char *rel) {
  char p[4096];
  path_of(p, sizeof p, rel);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(rel, f);
    fclose(f);
  }
}

static void mkd(const char *rel) {
  char p[4096];
  path_of(p, sizeof p, rel);
  tu_mkdir(p);
}

static void link_to(const char *target, const char *rel) {
  char p[4096];
  path_of(p, sizeof p, rel);
  CHECK_MSG(symlink(target, p) == 0, "symlink %s: %s", p, strerror(errno));
}

/* ---- the reference: the scan as it was, a stat per entry, serial -------- */

typedef struct {
  char **v;
  size_t n, cap;
} list;

static void push(list *l, const char *s) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 16;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
  }
  l->v[l->n++] = strdup(s);
}

static void list_free(list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int cmps(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void ls(const char *dir, list *dirs, list *files) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    int isdir = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    if (isdir && dirs) push(dirs, e->d_name);
    if (!isdir && files) push(files, e->d_name);
  }
  closedir(d);
}

static void walk(const char *top, list *out) {
  push(out, top);
  list subs = {0};
  ls(top, &subs, NULL);
  for (size_t i = 0; i < subs.n; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", top, subs.v[i]);
    walk(p, out);
  }
  list_free(&subs);
}

/* Python: for each sorted class, sorted(os.walk(...)), then sorted files. */
static void reference(const char *root, stk__dataset *ds, list *classes) {
  memset(ds, 0, sizeof *ds);
  ls(root, classes, NULL);
  qsort(classes->v, classes->n, sizeof(char *), cmps);
  for (size_t c = 0; c < classes->n; c++) {
    char cdir[4096];
    snprintf(cdir, sizeof cdir, "%s/%s", root, classes->v[c]);
    list dirs = {0};
    walk(cdir, &dirs);
    qsort(dirs.v, dirs.n, sizeof(char *), cmps);
    for (size_t d = 0; d < dirs.n; d++) {
      list files = {0};
      ls(dirs.v[d], NULL, &files);
      if (files.n) qsort(files.v, files.n, sizeof(char *), cmps);
      for (size_t f = 0; f < files.n; f++) {
        if (!stk__has_image_extension(files.v[f])) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dirs.v[d], files.v[f]);
        stk__dataset_add(ds, p, (int32_t)c);
      }
      list_free(&files);
    }
    list_free(&dirs);
  }
}

/* Same samples, labels and classes; prints the first difference. */
static int same_table(const stk__dataset *a, const stk__dataset *b, const list *classes) {
  if (a->n != b->n) {
    fprintf(stderr, "  %lld samples, want %lld\n", (long long)a->n, (long long)b->n);
    for (int64_t i = 0; i < a->n || i < b->n; i++)
      fprintf(stderr, "    %s | %s\n", i < a->n ? stk__dataset_path(a, i) : "-",
              i < b->n ? stk__dataset_path(b, i) : "-");
    return 0;
  }
  for (int64_t i = 0; i < a->n; i++)
    if (strcmp(stk__dataset_path(a, i), stk__dataset_path(b, i)) || a->labels[i] != b->labels[i]) {
      fprintf(stderr, "  sample %lld: %s (%d), want %s (%d)\n", (long long)i,
              stk__dataset_path(a, i), a->labels[i], stk__dataset_path(b, i), b->labels[i]);
      return 0;
    }
  const char *const *want = classes ? (const char *const *)classes->v : (const char *const *)b->classes;
  int nwant = classes ? (int)classes->n : b->nclasses;
  if (a->nclasses != nwant) return 0;
  for (int c = 0; c < nwant; c++)
    if (strcmp(a->classes[c], want[c])) return 0;
  return 1;
}

/* ---- helpers around stk__folder_open ------------------------------------ */

static char g_root[512], g_idx[512];

/* Opens g_root with the policy and index folder given; compares the table
 * with a fresh reference scan. Returns what the open did. */
static stk__folder_stats open_and_compare(int policy, const char *index_dir, int line) {
  stk_options o;
  stk_options_init(&o);
  o.root = g_root;
  o.index = policy;
  o.index_dir = index_dir;
  stk__source s;
  memset(&s, 0, sizeof s);
  char msg[1024] = "";
  int rc = stk__folder_open(&s, &o, msg, sizeof msg);
  stk__folder_stats st = *stk__folder_last();
  CHECK_MSG(rc == STK_OK, "line %d: open: %s", line, msg);
  stk__dataset ref;
  list cl = {0};
  reference(g_root, &ref, &cl);
  CHECK_MSG(rc != STK_OK || same_table(&s.ds, &ref, &cl), "line %d: table differs (from_index %d)",
            line, st.from_index);
  stk__dataset_free(&ref);
  list_free(&cl);
  stk__source_close(&s);
  return st;
}
#define OPEN(policy, dir) open_and_compare((policy), (dir), __LINE__)

/* Sets the mtime of every folder below (and of) `dir` to `sec`, so that the
 * tree looks long settled (an index is not trusted over folders changed in
 * the seconds before its scan). */
static int64_t g_set_sec;
static int set_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)ftw;
  if (flag == FTW_D || flag == FTW_DP) {
    struct timespec ts[2] = {{(time_t)g_set_sec, 0}, {(time_t)g_set_sec, 12345}};
    utimensat(AT_FDCWD, p, ts, 0);
  }
  return 0;
}
static void settle(const char *dir, int64_t sec) {
  g_set_sec = sec;
  nftw(dir, set_cb, 16, FTW_PHYS);
}
static void set_mtime(const char *path, int64_t sec, long nsec) {
  struct timespec ts[2] = {{(time_t)sec, 0}, {(time_t)sec, nsec}};
  CHECK_MSG(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat %s: %s", path, strerror(errno));
}
static void get_mtime(const char *path, struct timespec *out) {
  struct stat st;
  memset(out, 0, sizeof *out);
  if (stat(path, &st) == 0) *out = st.st_mtim;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}


static void index_file(char *out, size_t n, const char *dir) {
  char *real = realpath(g_root, NULL);
  CHECK(real && stk__index_path(out, n, dir, real) == STK_OK);
  free(real);
}

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* Rewrites byte `at` of file p (xor), or truncates it to `at` bytes. */
static void damage(const char *p, long at, int truncate_it) {
  if (truncate_it) {
    CHECK(truncate(p, at) == 0);
    return;
  }
  FILE *f = fopen(p, "r+b");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

typedef struct {
  int rc;
  int64_t n;
} thread_open;

static void *open_thread(void *arg) {
  thread_open *t = arg;
  stk_options o;
  stk_options_init(&o);
  o.root = g_root;
  o.index = 1;
  o.index_dir = g_idx;
  stk__source s;
  memset(&s, 0, sizeof s);
  char msg[512];
  t->rc = stk__folder_open(&s, &o, msg, sizeof msg);
  t->n = s.ds.n;
  stk__source_close(&s);
  return NULL;
}

int main(void) {
  char *tmp = tu_tempdir();
  snprintf(g_tmp, sizeof g_tmp, "%s", tmp);
  free(tmp);
  /* never the user's cache, whatever a call below defaults to */
  char env[600];
  snprintf(env, sizeof env, "%s/xdg", g_tmp);
  setenv("XDG_CACHE_HOME", env, 1);
  snprintf(g_root, sizeof g_root, "%s/data", g_tmp);
  snprintf(g_idx, sizeof g_idx, "%s/idx", g_tmp);
  char p[4096], q[4096];

  /* ---- a tree with every rule in it ---- */
  mkd("data");
  mkd("data/zebra");
  touch("data/zebra/b.JPEG");
  touch("data/zebra/a.jpg");
  touch("data/zebra/notes.txt");
  touch("data/zebra/c.PnG");
  mkd("data/zebra/sub");
  touch("data/zebra/sub/0.jpeg");
  mkd("data/zebra/sub/deeper");
  touch("data/zebra/sub/deeper/z.TIFF");
  mkd("data/zebra/sub-x"); /* sorts between "sub" and "sub/deeper" */
  touch("data/zebra/sub-x/1.jpg");
  mkd("data/zebra/Sub");
  touch("data/zebra/Sub/2.bmp");
  mkd("data/A class");
  touch("data/A class/with space.webp");
  touch("data/A class/.hidden.jpg");
  touch("data/A class/x.gif"); /* not a torchvision extension */
  mkd("data/\xc3\xbcnic\xc3\xb6" "de");
  touch("data/\xc3\xbcnic\xc3\xb6" "de/\xe6\x97\xa5\xe6\x9c\xac.JPG");
  touch("data/\xc3\xbcnic\xc3\xb6" "de/e.ppm");
  mkd("outside");
  touch("outside/o1.jpg");
  mkd("outside/inner");
  touch("outside/inner/o2.pgm");
  path_of(p, sizeof p, "outside");
  link_to(p, "data/linked_class");          /* a class that is a link */
  link_to(p, "data/zebra/via_link");        /* a sub-folder that is a link */
  link_to("a.jpg", "data/zebra/alias.jpg"); /* a link to a file */
  link_to("nowhere", "data/zebra/dangling.jpg"); /* dangling: a file to Python too */
  touch("data/stray.jpg");                  /* files at the top are no class */

  /* ---- (1) the scan: any thread count gives the serial reference ---- */
  stk__dataset ref, ds;
  list cl = {0};
  reference(g_root, &ref, &cl);
  CHECK_EQ_INT(ref.n, 17);
  CHECK_EQ_INT(cl.n, 4);
  char msg[1024];
  int threads[] = {1, 2, 3, 16};
  for (int t = 0; t < 4; t++) {
    CHECK_EQ_INT(stk__folder_scan(&ds, g_root, threads[t], NULL, NULL, msg, sizeof msg), STK_OK);
    CHECK_MSG(same_table(&ds, &ref, &cl), "%d threads", threads[t]);
    stk__dataset_free(&ds);
  }
  CHECK_EQ_INT(stk__dataset_from_folder(&ds, g_root, msg, sizeof msg), STK_OK);
  CHECK(same_table(&ds, &ref, &cl));
  /* the order the rules give, spelled out */
  const char *want[] = {"A class/.hidden.jpg", "A class/with space.webp", "linked_class/o1.jpg",
                        "linked_class/inner/o2.pgm", "zebra/a.jpg", "zebra/alias.jpg",
                        "zebra/b.JPEG", "zebra/c.PnG", "zebra/dangling.jpg", "zebra/Sub/2.bmp",
                        "zebra/sub/0.jpeg", "zebra/sub-x/1.jpg", "zebra/sub/deeper/z.TIFF",
                        "zebra/via_link/o1.jpg", "zebra/via_link/inner/o2.pgm"};
  for (int i = 0; i < 15 && i < ds.n; i++) {
    snprintf(p, sizeof p, "%s/%s", g_root, want[i]);
    CHECK_MSG(!strcmp(stk__dataset_path(&ds, i), p), "sample %d is %s, want %s", i,
              stk__dataset_path(&ds, i), p);
  }
  stk__dataset_free(&ds);
  stk__dataset_free(&ref);
  list_free(&cl);

  /* many classes, nested: every thread count agrees */
  snprintf(p, sizeof p, "%s/many", g_tmp);
  tu_mkdir(p);
  for (int c = 0; c < 40; c++) {
    snprintf(q, sizeof q, "%s/many/c%02d", g_tmp, (c * 17) % 40);
    tu_mkdir(q);
    for (int k = 0; k < 3 + c % 4; k++) {
      char f[4200];
      snprintf(f, sizeof f, "%s/f%d.jpg", q, (k * 7) % 5 + k);
      FILE *fp = fopen(f, "w");
      if (fp) fclose(fp);
      if (k % 2) {
        snprintf(f, sizeof f, "%s/d%d", q, k);
        tu_mkdir(f);
        snprintf(f, sizeof f, "%s/d%d/n%d.PNG", q, k, c);
        fp = fopen(f, "w");
        if (fp) fclose(fp);
      }
    }
  }
  reference(p, &ref, &cl);
  for (int t = 0; t < 4; t++) {
    CHECK_EQ_INT(stk__folder_scan(&ds, p, threads[t], NULL, NULL, msg, sizeof msg), STK_OK);
    CHECK_MSG(same_table(&ds, &ref, &cl), "many: %d threads", threads[t]);
    stk__dataset_free(&ds);
  }
  stk__dataset_free(&ref);
  list_free(&cl);
  /* errors are the serial scan's whatever the threads: the first bad class */
  snprintf(q, sizeof q, "%s/many/c05/loop", g_tmp);
  snprintf(env, sizeof env, "%s/many/c05", g_tmp);
  CHECK(symlink(env, q) == 0); /* a link cycle */
  snprintf(q, sizeof q, "%s/many/c30/loop", g_tmp);
  snprintf(env, sizeof env, "%s/many/c30", g_tmp);
  CHECK(symlink(env, q) == 0);
  for (int t = 0; t < 4; t++) {
    CHECK_EQ_INT(stk__folder_scan(&ds, p, threads[t], NULL, NULL, msg, sizeof msg), STK_EIO);
    /* the depth bound, or the kernel's limit on links in one path first */
    CHECK_MSG(strstr(msg, "c05/loop/loop") && !strstr(msg, "c30"),
              "%d threads: %s", threads[t], msg);
  }
  snprintf(q, sizeof q, "%s/many/c05/loop", g_tmp);
  unlink(q);
  snprintf(q, sizeof q, "%s/many/c30/loop", g_tmp);
  unlink(q);
  snprintf(q, sizeof q, "%s/many/c07_empty", g_tmp);
  tu_mkdir(q);
  snprintf(q, sizeof q, "%s/many/c33_empty", g_tmp);
  tu_mkdir(q);
  CHECK_EQ_INT(stk__folder_scan(&ds, p, 8, NULL, NULL, msg, sizeof msg), STK_EEMPTY);
  CHECK_MSG(strstr(msg, "c07_empty, c33_empty"), "message: %s", msg);

  /* ---- (2) the index: written with index=1, then reused ---- */
  const int64_t T = 1000000000; /* 2001: long settled */
  settle(g_root, T);
  path_of(p, sizeof p, "outside");
  settle(p, T);
  char idxfile[4096];
  index_file(idxfile, sizeof idxfile, g_idx);
  stk__folder_stats st = OPEN(1, g_idx);
  CHECK(!st.from_index && st.written && st.index_state == STK__INDEX_ABSENT);
  CHECK_MSG(file_exists(idxfile), "no index at %s", idxfile);
  CHECK_EQ_INT(tu_count_dir(g_idx), 1); /* no temporary file left */
  CHECK_EQ_INT(st.dirs, 12); /* the root, 4 classes, 7 folders below them */
  st = OPEN(1, g_idx);
  CHECK_MSG(st.from_index && st.index_state == STK__INDEX_USED, "why: %s", st.why);
  CHECK(!st.written);
  st = OPEN(-1, g_idx); /* auto uses an existing index */
  CHECK_MSG(st.from_index, "why: %s", st.why);

  /* proof that it is the index that answers, not a scan: a file added with
   * its folder's mtime put back as recorded (what a change within one tick
   * of a coarse clock would look like, had the scan not been long after)
   * is not seen */
  path_of(p, sizeof p, "data/zebra");
  struct timespec before;
  get_mtime(p, &before);
  touch("data/zebra/unseen.jpg");
  set_mtime(p, before.tv_sec, before.tv_nsec);
  {
    stk_options o;
    stk_options_init(&o);
    o.root = g_root;
    o.index = 1;
    o.index_dir = g_idx;
    stk__source s;
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(stk__folder_open(&s, &o, msg, sizeof msg), STK_OK);
    CHECK(stk__folder_last()->from_index);
    int seen = 0;
    for (int64_t i = 0; i < s.ds.n; i++) seen |= strstr(stk__dataset_path(&s.ds, i), "unseen") != 0;
    CHECK(!seen && s.ds.n == 17);
    stk__source_close(&s);
    /* a loader built from the index has the same table */
    o.batch_size = 2;
    o.threads = 1;
    stk_loader *l = NULL;
    CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, msg, sizeof msg), STK_OK);
    CHECK(stk__folder_last()->from_index);
    CHECK(l && stk_loader_num_samples(l) == 17);
    snprintf(q, sizeof q, "%s/zebra/sub-x/1.jpg", g_root);
    CHECK(l && !strcmp(stk_loader_sample_path(l, 11), q) && stk_loader_sample_label(l, 11) == 2);
    CHECK(l && stk_loader_num_classes(l) == 4 && !strcmp(stk_loader_class_name(l, 0), "A class"));
    stk_loader_destroy(l);
  }
  path_of(p, sizeof p, "data/zebra/unseen.jpg");
  unlink(p);
  path_of(p, sizeof p, "data/zebra");
  set_mtime(p, before.tv_sec, before.tv_nsec);

  /* ---- (3) changes: each is seen, the table rebuilt and the index too ---- */
  struct {
    const char *what, *dir; /* the folder whose mtime the change moves */
  } changes[] = {{"add", "data/zebra/sub"},     {"remove", "data/zebra"},
                 {"rename", "data/A class"},     {"add class", "data"},
                 {"add sub-folder", "data/zebra/sub-x"}, {"remove class", "data"},
                 {"via a link", "outside/inner"}};
  for (int k = 0; k < (int)(sizeof changes / sizeof changes[0]); k++) {
    switch (k) {
      case 0: touch("data/zebra/sub/new.jpg"); break;
      case 1:
        path_of(p, sizeof p, "data/zebra/b.JPEG");
        unlink(p);
        break;
      case 2:
        path_of(p, sizeof p, "data/A class/with space.webp");
        path_of(q, sizeof q, "data/A class/a renamed.webp");
        CHECK(rename(p, q) == 0);
        break;
      case 3:
        mkd("data/B_new");
        touch("data/B_new/first.jpg");
        path_of(p, sizeof p, "data/B_new");
        set_mtime(p, T, 0);
        break;
      case 4:
        mkd("data/zebra/sub-x/nested");
        touch("data/zebra/sub-x/nested/n.jpg");
        path_of(p, sizeof p, "data/zebra/sub-x/nested");
        set_mtime(p, T, 0);
        break;
      case 5:
        path_of(p, sizeof p, "data/B_new/first.jpg");
        unlink(p);
        path_of(p, sizeof p, "data/B_new");
        rmdir(p);
        break;
      case 6: touch("outside/inner/o3.jpg"); break;
    }
    /* as it is (mtime = now): stale, rescanned, not written (too recent) */
    st = OPEN(1, g_idx);
    CHECK_MSG(!st.from_index && st.index_state == STK__INDEX_STALE, "%s: state %d, %s",
              changes[k].what, st.index_state, st.why);
    CHECK_MSG(!st.written, "%s: an index over a folder changed just now", changes[k].what);
    /* with that folder's mtime moved to another old value, so that only the
     * mtime comparison can tell: stale, and the message names the folder */
    path_of(p, sizeof p, changes[k].dir);
    set_mtime(p, T + 100 + k, 0);
    st = OPEN(1, g_idx);
    CHECK_MSG(!st.from_index && st.index_state == STK__INDEX_STALE && st.written, "%s: %d %d %s",
              changes[k].what, st.from_index, st.written, st.why);
    /* the rebuilt index is used next time */
    st = OPEN(1, g_idx);
    CHECK_MSG(st.from_index, "%s: after the rebuild: %s", changes[k].what, st.why);
  }
  /* a folder that vanished */
  mkd("data/zebra/gone");
  touch("data/zebra/gone/g.jpg");
  path_of(p, sizeof p, "data/zebra/gone");
  set_mtime(p, T, 0);
  path_of(p, sizeof p, "data/zebra");
  set_mtime(p, T + 200, 0);
  st = OPEN(1, g_idx);
  CHECK(st.written);
  path_of(p, sizeof p, "data/zebra/gone/g.jpg");
  unlink(p);
  path_of(p, sizeof p, "data/zebra/gone");
  rmdir(p);
  path_of(p, sizeof p, "data/zebra");
  set_mtime(p, T + 200, 0); /* its parent's mtime as recorded: only the stat can tell */
  st = OPEN(1, g_idx);
  CHECK_MSG(!st.from_index && st.index_state == STK__INDEX_STALE && strstr(st.why, "gone"),
            "why: %s", st.why);
  CHECK(st.written);

  /* ---- (4) a corrupt index is ignored and rebuilt ---- */
  long size = file_size(idxfile);
  CHECK(size > 96);
  struct {
    const char *what;
    long at;
    int trunc;
  } harm[] = {{"truncated", size / 2, 1}, {"header only", 96, 1}, {"empty", 0, 1},
              {"magic", 0, 0}, {"version", 8, 0}, {"count", 24, 0}, {"checksum", 88, 0},
              {"a path byte", size - 3, 0}, {"a middle byte", size / 2, 0}, {"one byte short", size - 1, 1}};
  for (int k = 0; k < (int)(sizeof harm / sizeof harm[0]); k++) {
    damage(idxfile, harm[k].at, harm[k].trunc);
    st = OPEN(1, g_idx);
    CHECK_MSG(!st.from_index && st.index_state == STK__INDEX_CORRUPT && st.written,
              "%s: %d %d %s", harm[k].what, st.from_index, st.index_state, st.why);
    st = OPEN(-1, g_idx);
    CHECK_MSG(st.from_index, "%s: rebuilt: %s", harm[k].what, st.why);
  }
  /* an index of another tree under this tree's name is not taken */
  {
    char other[400];
    snprintf(other, sizeof other, "%s/other", g_tmp);
    tu_mkdir(other);
    snprintf(q, sizeof q, "%s/other/k", g_tmp);
    tu_mkdir(q);
    snprintf(q, sizeof q, "%s/other/k/x.jpg", g_tmp);
    FILE *f = fopen(q, "w");
    fclose(f);
    settle(other, T);
    char saved[sizeof g_root];
    memcpy(saved, g_root, sizeof g_root);
    snprintf(g_root, sizeof g_root, "%s", other);
    char otherfile[4096];
    index_file(otherfile, sizeof otherfile, g_idx);
    st = OPEN(1, g_idx);
    CHECK(st.written);
    memcpy(g_root, saved, sizeof g_root);
    CHECK(rename(otherfile, idxfile) == 0);
    st = OPEN(1, g_idx);
    CHECK_MSG(!st.from_index && st.index_state == STK__INDEX_STALE && strstr(st.why, "is for"),
              "why: %s", st.why);
  }

  /* ---- (4b) a forged index (checksum recomputed) never leads outside ---- */
  {
    /* Each forgery replaces one sample's path with one that leaves the root
     * or its class, in an index otherwise sound and fresh: refused, and the
     * table rebuilt from the tree. */
    const char *forged[] = {"../outside/o1.jpg", "zebra/../../x.jpg", "A class/with space.webp",
                            "zebra//a.jpg", "zebra/./a.jpg"};
    char *real = realpath(g_root, NULL);
    CHECK(real != NULL);
    for (int k = 0; k < (int)(sizeof forged / sizeof forged[0]); k++) {
      stk__dataset fds;
      stk__dirsig sig = {0};
      CHECK_EQ_INT(stk__folder_scan(&fds, g_root, 1, &sig, NULL, msg, sizeof msg), STK_OK);
      int64_t victim = -1;
      for (int64_t i = 0; i < fds.n; i++)
        if (strstr(stk__dataset_path(&fds, i), "zebra/sub/deeper/z.TIFF")) victim = i;
      CHECK(victim >= 0);
      char *at = strstr((char *)stk__dataset_path(&fds, victim), "zebra/sub/deeper/z.TIFF");
      memcpy(at, forged[k], strlen(forged[k]) + 1); /* never longer than what it replaces */
      char why[512];
      CHECK_EQ_INT(stk__index_write(idxfile, g_root, real, &fds, &sig, NULL, why, sizeof why),
                   STK_OK);
      stk__dataset_free(&fds);
      stk__dirsig_free(&sig);
      st = OPEN(1, g_idx); /* compares the table with the tree's */
      CHECK_MSG(!st.from_index && st.index_state == STK__INDEX_CORRUPT &&
                    strstr(st.why, "below the root") && strstr(st.why, idxfile),
                "%s: %d %d %s", forged[k], st.from_index, st.index_state, st.why);
    }
    free(real);
  }

  /* ---- (5) where, and when not ---- */
  char dir0[600];
  snprintf(dir0, sizeof dir0, "%s/never", g_tmp);
  st = OPEN(0, dir0); /* index=0 reads and writes nothing */
  CHECK(!st.from_index && !st.written && !file_exists(dir0));
  st = OPEN(0, g_idx); /* not even an existing one */
  CHECK(!st.from_index && st.index_state == -1);
  st = OPEN(-1, dir0); /* auto, a small tree: nothing written */
  CHECK(!st.from_index && !st.written && tu_count_dir(dir0) <= 0);
  /* the default places: $XDG_CACHE_HOME/stoker, then $HOME/.cache/stoker */
  char xdgfile[4096];
  snprintf(env, sizeof env, "%s/xdg", g_tmp);
  setenv("XDG_CACHE_HOME", env, 1);
  index_file(xdgfile, sizeof xdgfile, NULL);
  CHECK(strncmp(xdgfile, env, strlen(env)) == 0 && strstr(xdgfile, "/xdg/stoker/folder-"));
  st = OPEN(1, NULL);
  CHECK(st.written && file_exists(xdgfile));
  st = OPEN(-1, NULL);
  CHECK(st.from_index);
  snprintf(env, sizeof env, "%s/home", g_tmp);
  char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  setenv("HOME", env, 1);
  setenv("XDG_CACHE_HOME", "relative/is/ignored", 1);
  char homefile[4096];
  index_file(homefile, sizeof homefile, NULL);
  CHECK(strstr(homefile, "/home/.cache/stoker/folder-") != NULL);
  st = OPEN(1, NULL);
  CHECK(st.written && file_exists(homefile));
  /* no place at all: loading goes on */
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  st = OPEN(1, NULL);
  CHECK(!st.from_index && !st.written);
  if (old_home) setenv("HOME", old_home, 1);
  free(old_home);
  snprintf(env, sizeof env, "%s/xdg", g_tmp);
  setenv("XDG_CACHE_HOME", env, 1);
  /* an index folder that cannot be made or written is no error */
  snprintf(q, sizeof q, "%s/a_file", g_tmp);
  FILE *f = fopen(q, "w");
  fclose(f);
  snprintf(q, sizeof q, "%s/a_file/idx", g_tmp);
  st = OPEN(1, q);
  CHECK_MSG(!st.written && strstr(st.why, "cannot"), "why: %s", st.why);
  if (geteuid() != 0) { /* root writes anywhere */
    snprintf(q, sizeof q, "%s/ro", g_tmp);
    tu_mkdir(q);
    chmod(q, 0500);
    st = OPEN(1, q);
    CHECK(!st.written);
    chmod(q, 0700);
  }
  /* never inside the tree it describes */
  struct timespec rootm;
  get_mtime(g_root, &rootm);
  snprintf(q, sizeof q, "%s/zebra/.idx", g_root);
  st = OPEN(1, q);
  CHECK(!st.written && !file_exists(q) && strstr(st.why, "inside"));
  snprintf(q, sizeof q, "%s/../data/.idx", g_root);
  st = OPEN(1, q);
  CHECK(!st.written && !file_exists(q));
  struct timespec rootm2;
  get_mtime(g_root, &rootm2);
  CHECK(rootm.tv_sec == rootm2.tv_sec && rootm.tv_nsec == rootm2.tv_nsec);

  /* ---- (6) many openers at once (ranks starting together) ---- */
  unlink(idxfile);
  pthread_t th[6];
  thread_open to[6];
  for (int i = 0; i < 6; i++) pthread_create(&th[i], NULL, open_thread, &to[i]);
  for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 6; i++) CHECK(to[i].rc == STK_OK && to[i].n == to[0].n);
  CHECK_EQ_INT(tu_count_dir(g_idx), 1); /* the index, no temporary left */
  st = OPEN(1, g_idx);
  CHECK_MSG(st.from_index, "after concurrent writers: %s", st.why);

  /* ---- (7) errors still name the folder ---- */
  mkd("data/empty_class");
  path_of(p, sizeof p, "data");
  set_mtime(p, T + 300, 0);
  {
    stk_options o;
    stk_options_init(&o);
    o.root = g_root;
    o.index = 1;
    o.index_dir = g_idx;
    stk__source s;
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(stk__folder_open(&s, &o, msg, sizeof msg), STK_EEMPTY);
    CHECK_MSG(strstr(msg, "empty_class") != NULL, "message: %s", msg);
    stk__source_close(&s);
    o.root = "/nonexistent/stoker";
    CHECK_EQ_INT(stk__folder_open(&s, &o, msg, sizeof msg), STK_EIO);
    CHECK(strstr(msg, "/nonexistent/stoker") != NULL);
    stk__source_close(&s);
  }

  tu_rmtree(g_tmp);
  return CHECK_DONE();
}
