/*
 * check.h: the few assertion macros the C tests share. A failed check prints
 * where and why, counts, and the test goes on; the process exits non-zero if
 * any check failed.
 */
#ifndef STK_TEST_CHECK_H
#define STK_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker.h"

static int check_failed_ = 0;
static int check_passed_ = 0;

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (cond) {                                                           \
      check_passed_++;                                                    \
    } else {                                                              \
      check_failed_++;                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                     \
  } while (0)

#define CHECK_MSG(cond, ...)                                              \
  do {                                                                    \
    if (cond) {                                                           \
      check_passed_++;                                                    \
    } else {                                                              \
      check_failed_++;                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
    }                                                                     \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                \
  do {                                                                    \
    long long va_ = (long long)(a), vb_ = (long long)(b);                 \
    CHECK_MSG(va_ == vb_, "%lld != %lld", va_, vb_);                      \
  } while (0)

/* Creates a loader from *o and checks that the result is `expect`, naming
 * the source and the library's message when it is not. Returns the loader
 * (NULL when creation failed). */
#define CHECK_CREATE(o, expect) check_create_((o), (expect), __FILE__, __LINE__)
static inline stk_loader *check_create_(const stk_options *o, int expect, const char *file,
                                        int line) {
  stk_loader *l = NULL;
  char err[1024] = "";
  int rc = STK_LOADER_CREATE(o, &l, err, sizeof err);
  if (rc == expect) {
    check_passed_++;
  } else {
    check_failed_++;
    fprintf(stderr, "%s:%d: CHECK failed: create %s: %s (%s), expected %s\n", file, line,
            o->root ? o->root : o->list_file ? o->list_file : "(no source)", err,
            stk_strerror(rc), stk_strerror(expect));
  }
  return l;
}

/* Ends main(): prints the summary line and returns the exit status. */
#define CHECK_DONE()                                                      \
  (printf("%s: %d checks passed, %d failed\n", __FILE__, check_passed_,   \
          check_failed_),                                                 \
   check_failed_ ? 1 : 0)

#endif
