/*
 * _binding.h: what the two extension modules share, included by each (it
 * defines static functions: one copy per module, no symbol between them).
 *
 *   _stoker.c       the binding of libstoker (stoker._stoker)
 *   _stoker_ops.c   private hooks into the augmentation ops, for tests and
 *                   stoker.functional (stoker._stoker_ops)
 *
 * Both raise the library's errors as the same exceptions and read keyword
 * options through the same rows of core/options.h. DecodeError and
 * StaleCacheError are created by _stoker's init; _stoker_ops takes them from
 * the imported stoker._stoker, so each code raises one class whichever
 * module raised it.
 *
 * The includer includes <Python.h> (with its Py_LIMITED_API) first.
 */
#ifndef STK_PY_BINDING_H
#define STK_PY_BINDING_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "core/errors.h"
#include "core/options.h"
#include "stoker.h"

/* ---- errors ------------------------------------------------------------------ */

static PyObject *DecodeError;     /* stoker.DecodeError(OSError) */
static PyObject *StaleCacheError; /* stoker.StaleCacheError(OSError) */

static PyObject *decode_message(const char *msg) {
  /* Messages name files, whose bytes need not be UTF-8. */
  return PyUnicode_DecodeFSDefault(msg ? msg : "");
}

/* Raises the exception for code `rc` with the library's message. `nslots`
 * is only used to explain STK_EBUSY. Returns NULL. */
static PyObject *raise_code(int rc, const char *msg, int nslots) {
  /* keep the library's message when it has one (e.g. a memory cap) */
  if (rc == STK_ENOMEM && (!msg || !msg[0])) return PyErr_NoMemory();
  if (rc == STK_EBUSY) {
    char m[512];
    snprintf(m, sizeof m,
             "every batch slot of the loader is held (%d slots = prefetch + 2): the caller keeps "
             "that many batches alive, so no new batch can be produced. Drop references to "
             "earlier batches (keep a .clone() of what you need), or pass a larger prefetch=",
             nslots);
    PyErr_SetString(PyExc_RuntimeError, m);
    return NULL;
  }
  PyObject *type;
  switch (rc) { /* the exception of each code: the table of core/errors.h */
#define ROW(name, value, pyexc, message) \
  case STK_##name: type = pyexc; break;
    STK__ERRORS(ROW)
#undef ROW
    default: type = PyExc_RuntimeError; break;
  }
  PyObject *text = decode_message(msg && *msg ? msg : stk_strerror(rc));
  if (!text) return NULL;
  PyObject *exc = PyObject_CallFunctionObjArgs(type, text, NULL);
  Py_DECREF(text);
  if (!exc) return NULL;
  PyObject *code = PyLong_FromLong(rc);
  if (!code || PyObject_SetAttrString(exc, "code", code) < 0) {
    Py_XDECREF(code);
    Py_DECREF(exc);
    return NULL;
  }
  Py_DECREF(code);
  PyErr_SetObject(type, exc);
  Py_DECREF(exc);
  return NULL;
}

/* ---- option parsing ---------------------------------------------------------- */

static int get_floats(PyObject *o, float *out, Py_ssize_t n, const char *name) {
  if (!o || o == Py_None) return 0;
  Py_ssize_t len = PySequence_Size(o);
  if (len < 0 || len != n) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s must be a sequence of %zd numbers", name, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *it = PySequence_GetItem(o, i);
    if (!it) return -1;
    double v = PyFloat_AsDouble(it);
    Py_DECREF(it);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    out[i] = (float)v;
  }
  return 0;
}

/* str or os.PathLike -> bytes in the file system encoding; None -> NULL. */
static int get_path(PyObject *o, PyObject **bytes) {
  *bytes = NULL;
  if (!o || o == Py_None) return 0;
  return PyUnicode_FSConverter(o, bytes) ? 0 : -1;
}

/* Sets the field of row `d` from a Python value (None keeps the default).
 * The row is of stk__options (o a stk_options) or of stk__pack_options
 * (o a stk_pack_options). Paths are converted to bytes that `keep` holds
 * until the loader is built or the pack done. Values outside the row's range raise ValueError with the
 * library's own wording. */
static int set_option(void *o, const stk__option *d, PyObject *v, PyObject *keep) {
  if (v == Py_None) return 0;
  char err[256];
  switch (d->type) {
    case STK__OPT_INT: {
      int overflow = 0;
      long long x = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : -1;
      if (!PyLong_Check(v) || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an integer", d->name);
        return -1;
      }
      if (overflow) x = overflow > 0 ? LLONG_MAX : LLONG_MIN;
      if (stk__option_check_int(d, x, err, sizeof err)) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
      }
      stk__option_set_int(o, d, x);
      return 0;
    }
    case STK__OPT_BOOL: {
      int t = PyObject_IsTrue(v);
      if (t < 0) return -1;
      stk__option_set_int(o, d, t);
      return 0;
    }
    case STK__OPT_ENUM: {
      const char *name = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, NULL) : NULL;
      int x = name ? stk__option_choice(d, name) : -1;
      if (x < 0) {
        PyErr_Clear();
        PyObject *r = PyObject_Repr(v);
        PyErr_Format(PyExc_ValueError, "unknown %s %U (one of %s)", d->name, r ? r : v,
                     d->choices);
        Py_XDECREF(r);
        return -1;
      }
      stk__option_set_int(o, d, x);
      return 0;
    }
    case STK__OPT_U64: {
      unsigned long long x = PyLong_Check(v) ? PyLong_AsUnsignedLongLong(v) : (unsigned long long)-1;
      if (!PyLong_Check(v) || (x == (unsigned long long)-1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an integer in [0, 2**64)", d->name);
        return -1;
      }
      if (stk__option_check_u64(d, (uint64_t)x, err, sizeof err)) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
      }
      stk__option_set_u64(o, d, (uint64_t)x);
      return 0;
    }
    case STK__OPT_FLOAT: {
      double f[4];
      if (d->count == 1) {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) {
          PyErr_Clear();
          PyErr_Format(PyExc_ValueError, "%s must be a number", d->name);
          return -1;
        }
        /* a float field holds it as a float; a DOUBLE row (options.h) as
         * given, so that MixUp's alpha reaches the draws unrounded */
        f[0] = d->size == sizeof(double) ? x : (double)(float)x;
      } else {
        float g[4];
        if (get_floats(v, g, d->count, d->name)) return -1;
        for (int k = 0; k < d->count; k++) f[k] = g[k];
      }
      for (int k = 0; k < d->count; k++)
        if (stk__option_check_float(d, k, f[k], err, sizeof err)) {
          PyErr_SetString(PyExc_ValueError, err);
          return -1;
        }
      for (int k = 0; k < d->count; k++) stk__option_set_float(o, d, k, f[k]);
      return 0;
    }
    case STK__OPT_STR: {
      PyObject *bytes;
      if (get_path(v, &bytes)) return -1;
      int rc = PyList_Append(keep, bytes);
      Py_DECREF(bytes); /* the list holds it now */
      if (rc < 0) return -1;
      stk__option_set_str(o, d, PyBytes_AsString(bytes));
      return 0;
    }
  }
  return 0;
}

/* Keyword arguments into options, each through its row of the table. */
static int parse_options(PyObject *kwds, stk_options *o, PyObject *keep, const char *who) {
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (kwds && PyDict_Next(kwds, &pos, &key, &value)) {
    const char *k = PyUnicode_AsUTF8AndSize(key, NULL);
    if (!k) return -1;
    const stk__option *d = stk__option_by_py(k);
    if (!d) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", who, k);
      return -1;
    }
    if (set_option(o, d, value, keep)) return -1;
  }
  return 0;
}

#endif
