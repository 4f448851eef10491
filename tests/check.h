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

/* Ends main(): prints the summary line and returns the exit status. */
#define CHECK_DONE()                                                      \
  (printf("%s: %d checks passed, %d failed\n", __FILE__, check_passed_,   \
          check_failed_),                                                 \
   check_failed_ ? 1 : 0)

#endif
