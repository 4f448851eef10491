/* Folder and list-file sources: ImageFolder ordering, extensions, errors. */
#include "util.h"

#include <stdio.h>

#include "check.h"
#include "sources/dataset.h"
#include "util.h"

static void touch(const char *dir, const char *name) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) fclose(f);
}

int main(void) {
  char *root = tu_tempdir();
  char p[4096];
  /* classes sort by name; files sort by name; sub-folders are walked */
  const char *classes[] = {"zebra", "Apple", "mango"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", root, classes[i]);
    tu_mkdir(p);
  }
  snprintf(p, sizeof p, "%s/zebra", root);
  touch(p, "b.JPEG");
  touch(p, "a.jpg");
  touch(p, "notes.txt");
  touch(p, "c.PnG");
  snprintf(p, sizeof p, "%s/zebra/sub", root);
  tu_mkdir(p);
  touch(p, "0.jpeg");
  snprintf(p, sizeof p, "%s/Apple", root);
  touch(p, "x.webp");
  snprintf(p, sizeof p, "%s/mango", root);
  touch(p, "m.tif");
  touch(p, "README");
  snprintf(p, sizeof p, "%s/stray.jpg", root); /* files at the top are no class */
  FILE *f = fopen(p, "w");
  fclose(f);

  stk__dataset ds;
  char msg[1024];
  CHECK_EQ_INT(stk__dataset_from_folder(&ds, root, msg, sizeof msg), STK_OK);
  CHECK_EQ_INT(ds.nclasses, 3);
  CHECK(!strcmp(ds.classes[0], "Apple") && !strcmp(ds.classes[1], "mango") &&
        !strcmp(ds.classes[2], "zebra"));
  CHECK_EQ_INT(ds.n, 6);
  const char *want[] = {"Apple/x.webp", "mango/m.tif", "zebra/a.jpg", "zebra/b.JPEG", "zebra/c.PnG",
                        "zebra/sub/0.jpeg"};
  int labels[] = {0, 1, 2, 2, 2, 2};
  for (int i = 0; i < 6 && i < ds.n; i++) {
    snprintf(p, sizeof p, "%s/%s", root, want[i]);
    CHECK_MSG(!strcmp(stk__dataset_path(&ds, i), p), "sample %d is %s, want %s", i,
              stk__dataset_path(&ds, i), p);
    CHECK_EQ_INT(ds.labels[i], labels[i]);
  }
  stk__dataset_free(&ds);

  /* an empty class is an error that names it */
  snprintf(p, sizeof p, "%s/empty_class", root);
  tu_mkdir(p);
  CHECK_EQ_INT(stk__dataset_from_folder(&ds, root, msg, sizeof msg), STK_EEMPTY);
  CHECK_MSG(strstr(msg, "empty_class") != NULL, "message: %s", msg);
  CHECK_EQ_INT(stk__dataset_from_folder(&ds, "/nonexistent/stoker", msg, sizeof msg), STK_EIO);
  CHECK(strstr(msg, "/nonexistent/stoker") != NULL);

  /* list files: relative to the list's folder, labels parsed, comments skipped */
  snprintf(p, sizeof p, "%s/list.txt", root);
  f = fopen(p, "w");
  fprintf(f, "# comment\nzebra/a.jpg 3\n\n/abs/path with space.jpg 0\n  mango/m.tif\t1  \n");
  fclose(f);
  CHECK_EQ_INT(stk__dataset_from_list(&ds, p, NULL, 0, msg, sizeof msg), STK_OK);
  CHECK_EQ_INT(ds.n, 3);
  CHECK_EQ_INT(ds.nclasses, 4);
  char q[4096];
  snprintf(q, sizeof q, "%s/zebra/a.jpg", root);
  CHECK(ds.n == 3 && !strcmp(stk__dataset_path(&ds, 0), q));
  CHECK(ds.n == 3 && !strcmp(stk__dataset_path(&ds, 1), "/abs/path with space.jpg"));
  CHECK(ds.n == 3 && ds.labels[0] == 3 && ds.labels[1] == 0 && ds.labels[2] == 1);
  CHECK(ds.classes == NULL); /* numbered, named when the source opens */
  stk__dataset_free(&ds);
  /* a list's classes are named by their numbers, across digit counts */
  static const char big[] = "a.jpg 100000\nb.jpg 7\n";
  CHECK_EQ_INT(stk__dataset_from_list_buffer(&ds, big, sizeof big - 1, p, NULL, msg, sizeof msg), STK_OK);
  CHECK_EQ_INT(ds.nclasses, 100001);
  CHECK_EQ_INT(stk__dataset_number_classes(&ds, ds.nclasses), STK_OK);
  if (ds.nclasses == 100001 && ds.classes) {
    int names_ok = 1;
    for (int k = 0; k < ds.nclasses; k++) {
      char num[16];
      snprintf(num, sizeof num, "%d", k);
      names_ok &= strcmp(ds.classes[k], num) == 0;
    }
    CHECK(names_ok);
  }
  stk__dataset_free(&ds);
  f = fopen(p, "w");
  fprintf(f, "a.jpg 1\nb.jpg minus\n");
  fclose(f);
  CHECK_EQ_INT(stk__dataset_from_list(&ds, p, NULL, 0, msg, sizeof msg), STK_EINVAL);
  CHECK_MSG(strstr(msg, ":2:") != NULL, "message names the line: %s", msg);

  CHECK(stk__has_image_extension("x.JPG") && stk__has_image_extension("y.tiff"));
  CHECK(!stk__has_image_extension("jpg") && !stk__has_image_extension("z.gif"));
  tu_rmtree(root);
  free(root);
  return CHECK_DONE();
}
