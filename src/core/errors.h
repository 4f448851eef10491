/*
 * errors.h: every error code of libstoker in one table.
 *
 * STK__ERRORS(X) lists the codes of stoker.h's enum, from STK_OK down, one
 *
 *   X(name, value, py_exception, message)
 *
 * each. stoker.h keeps the enum with its explicit values (a user reads the
 * numbers there); common.c checks at compile time that each row's value is
 * the enum's, and tests/test_errors.c that every code of the enum has a
 * row. From the table come stk_strerror() and the extension's module
 * constants (_stoker.EINVAL, ...) and its code -> exception mapping.
 *
 *   name          the code without its STK_ prefix: EINVAL
 *   value         the enum's value
 *   py_exception  the C name of the exception the extension raises:
 *                 PyExc_* or one of its own (DecodeError, StaleCacheError)
 *   message       stk_strerror()'s text
 */
#ifndef STK_ERRORS_H
#define STK_ERRORS_H

#include "stoker.h"

/* clang-format off */
#define STK__ERRORS(X) \
  X(OK,        0,  PyExc_RuntimeError,      "success") \
  X(EINVAL,    -1, PyExc_ValueError,        "invalid argument") \
  X(ENOMEM,    -2, PyExc_MemoryError,       "out of memory") \
  X(EIO,       -3, DecodeError,             "input/output error") \
  X(EDECODE,   -4, DecodeError,             "corrupt or truncated image") \
  X(ELIMIT,    -5, DecodeError,             "limit exceeded") \
  X(EFORMAT,   -6, DecodeError,             "unsupported format") \
  X(EEND,      -7, PyExc_RuntimeError,      "end of epoch") \
  X(ESTATE,    -8, PyExc_RuntimeError,      "loader is in a failed state") \
  X(EVERSION,  -9, PyExc_RuntimeError,      "header and library versions differ") \
  X(EBUSY,     -10, PyExc_RuntimeError,     "every batch slot is held by the caller") \
  X(EEMPTY,    -11, PyExc_FileNotFoundError, "dataset is empty") /* as ImageFolder */ \
  X(ETOOMANY,  -12, DecodeError,            "too many consecutive failures") \
  X(ENODEV,    -13, PyExc_RuntimeError,     "no usable GPU") \
  X(ECUDA,     -14, PyExc_RuntimeError,     "CUDA error") \
  X(ESTALE,    -15, StaleCacheError,        "stale cache") \
  X(ETIMEDOUT, -16, PyExc_RuntimeError,     "timed out waiting for a batch") \
  X(ECANCELED, -17, PyExc_RuntimeError,     "cancelled by the caller")
/* clang-format on */

/* The rows, for tests and bindings. */
typedef struct {
  const char *name; /* "EINVAL" */
  int code;
  const char *message;
} stk__error;

extern const stk__error stk__errors[];
extern const int stk__num_errors;

#endif
