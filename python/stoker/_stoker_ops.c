/*
 * _stoker_ops.c: stoker._stoker_ops, a PRIVATE extension module: hooks into
 * the library's internals (the crop draw, the augmentation ops, the draws of
 * a sample's augmentations, a batch's MixUp/CutMix draw) for the tests, which compare them with
 * torchvision and timm, and for stoker.functional, which replays them.
 *
 * Not an API: names and signatures change with the library. It is built
 * from the same static archive as _stoker (its own copy, with the same
 * seeded draws) and shares _stoker's exceptions and option parsing
 * (_binding.h), so _stoker.c itself is the binding of the public API alone.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000 /* the stable ABI of CPython 3.10 and later */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

#include "core/common.h"
#include "core/options.h"
#include "ops/augment.h"
#include "ops/ops.h"
#include "stoker.h"

#include "_binding.h"

/* ---- the hooks ---------------------------------------------------------------- */

/* Internal, for tests: the RandomResizedCrop box the library draws for sample
 * `index` of `epoch`, as torchvision's get_params returns it: (top, left,
 * height, width). */
static PyObject *rrc_params(PyObject *m, PyObject *args) {
  int w, h;
  double s0, s1, r0, r1;
  unsigned long long seed, epoch, index;
  if (!PyArg_ParseTuple(args, "ii(dd)(dd)KKK", &w, &h, &s0, &s1, &r0, &r1, &seed, &epoch, &index))
    return NULL;
  if (w < 1 || h < 1) {
    PyErr_SetString(PyExc_ValueError, "width and height must be positive");
    return NULL;
  }
  float scale[2] = {(float)s0, (float)s1}, ratio[2] = {(float)r0, (float)r1};
  stk__rng rng;
  stk__rng_init(&rng, seed, epoch, index);
  stk__rect r;
  stk__rrc_params(w, h, scale, ratio, &rng, &r);
  return Py_BuildValue("(iiii)", r.y, r.x, r.h, r.w);
}

/* Internal, for tests: one op of the augmentation library at fixed
 * parameters on an RGB8 image (h rows of w * 3 bytes): the bytes after it.
 * _apply_op(name, data, w, h, magnitude, nearest=True, fill=None, ksize=0); `nearest`
 * is the warp filter: 1 (True) nearest, 0 (False) bilinear, 2 bicubic */
static PyObject *apply_op(PyObject *m, PyObject *args) {
  const char *name;
  PyObject *data; /* bytes: Py_buffer ("y*") is not in the 3.10 limited API */
  int w, h, filter = 1, ksize = 0; /* filter: 1 (True) nearest, 0 bilinear, 2 bicubic */
  double mag;
  PyObject *fill = Py_None;
  if (!PyArg_ParseTuple(args, "sSiid|iOi", &name, &data, &w, &h, &mag, &filter, &fill, &ksize))
    return NULL;
  struct {
    char *buf;
    Py_ssize_t len;
  } buf;
  if (PyBytes_AsStringAndSize(data, &buf.buf, &buf.len) < 0) return NULL;
  PyObject *out = NULL;
  int kind = stk__op_by_name(name);
  float f[3];
  stk__buf scratch = {0};
  if (kind < 0) {
    PyErr_Format(PyExc_ValueError, "unknown op '%s'", name);
  } else if (w < 1 || h < 1 || buf.len != (Py_ssize_t)w * h * 3) {
    PyErr_SetString(PyExc_ValueError, "data must hold w * h * 3 bytes");
  } else if (fill != Py_None && get_floats(fill, f, 3, "fill")) {
    /* error set */
  } else if (filter < 0 || filter > 2) {
    PyErr_SetString(PyExc_ValueError, "filter must be 0 (bilinear), 1 (nearest) or 2 (bicubic)");
  } else if (kind == STK__OP_BLUR && (ksize < 1 || ksize > 255 || ksize % 2 == 0)) {
    PyErr_SetString(PyExc_ValueError, "ksize must be odd, 1..255");
  } else {
    out = PyBytes_FromStringAndSize(buf.buf, buf.len);
    stk__op op = {(uint8_t)kind, (uint8_t)ksize, (float)mag, 0};
    int rc = out ? stk__op_apply(&op, (uint8_t *)PyBytes_AsString(out), w, h, filter,
                                 fill == Py_None ? NULL : f, &scratch)
                 : STK_OK;
    if (rc) {
      Py_CLEAR(out);
      raise_code(rc, "the op failed", 0);
    }
  }
  stk__buf_free(&scratch);
  return out;
}

/* Internal, for tests: what the augmentations draw for samples [first,
 * first + count) of `epoch`, under loader keyword options. Returns (kinds,
 * mags, erase): bytes of count * STK__AUG_MAX_OPS op kinds (255 = none),
 * float32 magnitudes in the same places, and int32 (x, y, w, h) boxes of
 * RandomErasing (w = 0: none). */
static PyObject *aug_draws(PyObject *m, PyObject *args, PyObject *kwds) {
  unsigned long long epoch;
  long long first, count;
  int with_mix = 0; /* 1: AugMix's chains too; 2: and each op's warp filter and every erase box */
  if (!PyArg_ParseTuple(args, "KLL|i", &epoch, &first, &count, &with_mix)) return NULL;
  if (count < 0 || count > (1LL << 26)) {
    PyErr_SetString(PyExc_ValueError, "count must be in [0, 2**26]");
    return NULL;
  }
  stk_options o;
  stk_options_init(&o);
  PyObject *keep = PyList_New(0);
  if (!keep) return NULL;
  if (parse_options(kwds, &o, keep, "_aug_draws")) {
    Py_DECREF(keep);
    return NULL;
  }
  if (!o.root && !o.list_file) o.root = ".";
  char err[512];
  int rc = stk__options_validate(&o, err, sizeof err);
  Py_DECREF(keep);
  if (rc) return raise_code(rc, err, 0);
  stk__aug_plan *ap = malloc(sizeof *ap);
  if (!ap) return PyErr_NoMemory();
  stk__aug_plan_init(ap, &o, o.size, o.size);
  size_t per = STK__AUG_MAX_OPS;
  PyObject *kinds = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * per));
  PyObject *mags = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * per * sizeof(float)));
  PyObject *boxes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * 4 * sizeof(int32_t)));
  /* with_mix: AugMix's chains (mix_at, width, 4 lengths) and weights (5) */
  enum { MI = 2 + STK__AUGMIX_MAX_WIDTH, MW = 1 + STK__AUGMIX_MAX_WIDTH };
  PyObject *mixi = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * MI * sizeof(int32_t)));
  PyObject *mixw = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * MW * sizeof(float)));
  enum { EB = 4 * STK__ERASE_MAX };
  PyObject *warps = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * per));
  PyObject *eboxes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * EB * sizeof(int32_t)));
  if (kinds && mags && boxes && mixi && mixw && warps && eboxes) {
    uint8_t *wf = (uint8_t *)PyBytes_AsString(warps);
    int32_t *eb = (int32_t *)PyBytes_AsString(eboxes);
    uint8_t *k = (uint8_t *)PyBytes_AsString(kinds);
    float *g = (float *)PyBytes_AsString(mags);
    int32_t *b = (int32_t *)PyBytes_AsString(boxes);
    int32_t *mi = (int32_t *)PyBytes_AsString(mixi);
    float *mw = (float *)PyBytes_AsString(mixw);
    Py_BEGIN_ALLOW_THREADS
    for (long long i = 0; i < count; i++) {
      stk__aug a;
      stk__aug_draw(ap, o.seed, epoch, first + i, &a);
      for (size_t j = 0; j < per; j++) {
        k[i * per + j] = j < (size_t)a.n ? a.op[j].kind : 255;
        g[i * per + j] = j < (size_t)a.n ? a.op[j].mag : 0.0f;
        wf[i * per + j] = j < (size_t)a.n ? a.op[j].warp : 0;
      }
      for (int j = 0; j < STK__ERASE_MAX; j++) {
        int on = j < a.erase;
        eb[i * EB + 4 * j] = on ? a.ex[j] : 0;
        eb[i * EB + 4 * j + 1] = on ? a.ey[j] : 0;
        eb[i * EB + 4 * j + 2] = on ? a.ew[j] : 0;
        eb[i * EB + 4 * j + 3] = on ? a.eh[j] : 0;
      }
      b[i * 4] = a.erase ? a.ex[0] : 0;
      b[i * 4 + 1] = a.erase ? a.ey[0] : 0;
      b[i * 4 + 2] = a.erase ? a.ew[0] : 0;
      b[i * 4 + 3] = a.erase ? a.eh[0] : 0;
      mi[i * MI] = a.mix_at;
      mi[i * MI + 1] = a.mix_width;
      for (int j = 0; j < STK__AUGMIX_MAX_WIDTH; j++)
        mi[i * MI + 2 + j] = j < a.mix_width ? a.mix_len[j] : 0;
      for (int j = 0; j < MW; j++) mw[i * MW + j] = j <= a.mix_width ? a.mix_w[j] : 0.0f;
    }
    Py_END_ALLOW_THREADS
  }
  free(ap);
  if (!kinds || !mags || !boxes || !mixi || !mixw || !warps || !eboxes) {
    Py_XDECREF(kinds);
    Py_XDECREF(mags);
    Py_XDECREF(boxes);
    Py_XDECREF(mixi);
    Py_XDECREF(mixw);
    Py_XDECREF(warps);
    Py_XDECREF(eboxes);
    return NULL;
  }
  if (with_mix >= 2)
    return Py_BuildValue("(NNNNNNN)", kinds, mags, boxes, mixi, mixw, warps, eboxes);
  Py_DECREF(warps);
  Py_DECREF(eboxes);
  if (with_mix) return Py_BuildValue("(NNNNN)", kinds, mags, boxes, mixi, mixw);
  Py_DECREF(mixi);
  Py_DECREF(mixw);
  return Py_BuildValue("(NNN)", kinds, mags, boxes);
}

/* Internal, for tests: the names of the ops by kind. */
static PyObject *op_names(PyObject *m, PyObject *unused) {
  PyObject *t = PyTuple_New(STK__OP_COUNT);
  for (int k = 0; t && k < STK__OP_COUNT; k++) {
    PyObject *v = PyUnicode_FromString(stk__op_name(k));
    if (!v) {
      Py_CLEAR(t);
      break;
    }
    PyTuple_SetItem(t, k, v);
  }
  return t;
}

/* The loader's MixUp/CutMix for one batch: _mix_params(seed, epoch, batch,
 * mixup_alpha, cutmix_alpha, w, h) -> (mode, lam, (x1, y1, x2, y2)); mode 0
 * none, 1 MixUp, 2 CutMix; lam the weight of each image's own label. */
static PyObject *mix_params(PyObject *m, PyObject *args) {
  unsigned long long seed, epoch;
  long long batch;
  double ma, ca;
  int w, h;
  if (!PyArg_ParseTuple(args, "KKLddii", &seed, &epoch, &batch, &ma, &ca, &w, &h)) return NULL;
  if (w < 1 || h < 1) {
    PyErr_SetString(PyExc_ValueError, "w and h must be positive");
    return NULL;
  }
  stk__mix x;
  stk__mix_draw(ma, ca, seed, epoch, batch, w, h, &x);
  return Py_BuildValue("(id(iiii))", x.mode, x.lam, x.x1, x.y1, x.x2, x.y2);
}

/* timm's Mixup for one batch: _mix_params_timm(seed, epoch, batch,
 * mixup_alpha, cutmix_alpha, prob, switch_prob, correct_lam, w, h) -> (mode,
 * lam, box), as _mix_params; its pairing is flip(0). */
static PyObject *mix_params_timm(PyObject *m, PyObject *args) {
  unsigned long long seed, epoch;
  long long batch;
  stk__mix_timm t;
  int w, h;
  if (!PyArg_ParseTuple(args, "KKLddddpii", &seed, &epoch, &batch, &t.mixup_alpha,
                        &t.cutmix_alpha, &t.prob, &t.switch_prob, &t.correct_lam, &w, &h))
    return NULL;
  if (w < 1 || h < 1) {
    PyErr_SetString(PyExc_ValueError, "w and h must be positive");
    return NULL;
  }
  stk__mix x;
  stk__mix_draw_timm(&t, seed, epoch, batch, w, h, &x);
  return Py_BuildValue("(id(iiii))", x.mode, x.lam, x.x1, x.y1, x.x2, x.y2);
}

static PyMethodDef module_methods[] = {
    {"_rrc_params", rrc_params, METH_VARARGS,
     "_rrc_params(width, height, scale, ratio, seed, epoch, index) -> (top, left, h, w).\n"
     "Internal: the crop the train pipeline draws for that sample."},
    {"_apply_op", apply_op, METH_VARARGS,
     "_apply_op(name, data, w, h, magnitude, nearest=True, fill=None, ksize=0) -> bytes (tests;\n"
     "nearest: 1 nearest, 0 bilinear, 2 bicubic)."},
    {"_aug_draws", (PyCFunction)(void (*)(void))aug_draws, METH_VARARGS | METH_KEYWORDS,
     "_aug_draws(epoch, first, count[, with_mix], **options) -> (kinds, mags, erase boxes[,\n"
     "(with_mix 2: ..., each op's warp filter (0 or STK__WARP_ + 1), every erase box [4][4])]\n"
     "AugMix chains (mix_at, width, 4 lengths), AugMix weights (5)]) (tests)."},
    {"_mix_params_timm", mix_params_timm, METH_VARARGS,
     "_mix_params_timm(seed, epoch, batch, mixup_alpha, cutmix_alpha, prob, switch_prob,\n"
     "correct_lam, w, h) -> (mode, lam, box): timm's Mixup (batch mode) (tests)."},
    {"_mix_params", mix_params, METH_VARARGS,
     "_mix_params(seed, epoch, batch, mixup_alpha, cutmix_alpha, w, h) -> (mode, lam, box) (tests)."},
    {"_op_names", op_names, METH_NOARGS, "_op_names() -> the ops' names by kind (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_stoker_ops",
    "Private hooks into libstoker's augmentation ops, for tests and stoker.functional.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stoker_ops(void) {
  /* The exceptions of raise_code are _stoker's own classes: a DecodeError
   * from here is caught by `except stoker.DecodeError`. */
  PyObject *binding = PyImport_ImportModule("stoker._stoker");
  if (!binding) return NULL;
  DecodeError = PyObject_GetAttrString(binding, "DecodeError");
  StaleCacheError = PyObject_GetAttrString(binding, "StaleCacheError");
  Py_DECREF(binding);
  if (!DecodeError || !StaleCacheError) {
    Py_CLEAR(DecodeError);
    Py_CLEAR(StaleCacheError);
    return NULL;
  }
  return PyModule_Create(&moduledef);
}
