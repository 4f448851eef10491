/* test_errors.c: the table of core/errors.h has one row for every code of
 * stoker.h's enum, read from the header's text (a code added to the enum
 * without a row fails here), and stk_strerror() answers from it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/errors.h"
#include "stoker.h"

/* include/stoker.h beside this file's folder: CMake compiles tests by
 * their absolute path. */
static FILE *open_header(void) {
  char path[4096];
  const char *slash = strrchr(__FILE__, '/');
  int dir = slash ? (int)(slash - __FILE__) : 1;
  snprintf(path, sizeof path, "%.*s/../include/stoker.h", dir, slash ? __FILE__ : ".");
  return fopen(path, "r");
}

static void test_every_code_has_a_row(void) {
  FILE *f = open_header();
  CHECK_MSG(f != NULL, "cannot open stoker.h from %s", __FILE__);
  if (!f) return;
  char line[512];
  int in_enum = 0, codes = 0;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "---- error codes")) in_enum = 1;
    if (!in_enum) continue;
    if (strstr(line, "};")) break;
    char name[64];
    int value;
    if (sscanf(line, " STK_%63[A-Z0-9_] = %d", name, &value) != 2) continue;
    codes++;
    int found = 0;
    for (int i = 0; i < stk__num_errors; i++)
      if (!strcmp(stk__errors[i].name, name)) {
        found = 1;
        CHECK_MSG(stk__errors[i].code == value, "STK_%s is %d in stoker.h, %d in the table", name,
                  value, stk__errors[i].code);
      }
    CHECK_MSG(found, "STK_%s of stoker.h has no row in STK__ERRORS", name);
    CHECK_MSG(strcmp(stk_strerror(value), "unknown error") != 0, "stk_strerror(STK_%s)", name);
  }
  fclose(f);
  CHECK_MSG(codes >= 17, "read only %d codes from stoker.h", codes);
  CHECK_EQ_INT(codes, stk__num_errors);
}

static void test_rows(void) {
  for (int i = 0; i < stk__num_errors; i++) {
    const stk__error *e = &stk__errors[i];
    CHECK_MSG(e->message && e->message[0], "%s has no message", e->name);
    CHECK_MSG(!strcmp(stk_strerror(e->code), e->message), "stk_strerror(%d)", e->code);
    for (int j = 0; j < i; j++) CHECK_MSG(stk__errors[j].code != e->code, "%s twice", e->name);
  }
  CHECK(!strcmp(stk_strerror(STK_EINVAL), "invalid argument"));
  CHECK(!strcmp(stk_strerror(STK_ESTALE), "stale cache"));
  CHECK(!strcmp(stk_strerror(-1000), "unknown error"));
  CHECK(!strcmp(stk_strerror(1), "unknown error"));
}

int main(void) {
  test_every_code_has_a_row();
  test_rows();
  return CHECK_DONE();
}
