/*
 * _stoker.c: the CPython binding of libstoker (stable ABI, Python >= 3.10).
 *
 * One type, _stoker.Loader, wraps a stk_loader. next() hands out each batch
 * as two DLPack capsules (images, labels) that torch turns into tensors
 * without copying: the tensors point straight into the loader's batch slot.
 *
 * Lifetimes
 * ---------
 * A slot may only go back to the loader once torch has freed every tensor
 * made from it, and the loader may only be destroyed once every slot is back.
 * So there are two C-level reference counts, neither of which involves a
 * Python object:
 *   - loader_ref: 1 for the Python Loader object + 1 per batch still alive
 *     (+ 1 while a next() call runs). At 0 the loader is destroyed.
 *   - batch_ref:  1 per DLManagedTensor of the batch (images, labels). At 0
 *     the slot is released and the batch's loader reference dropped.
 * DLPack deleters run on whatever thread frees the tensor, with or without
 * the GIL; they touch only these C structures, so they never need it.
 *
 * Loader()'s keywords, and options(), come from the options table of
 * core/options.h: a new field of stk_options needs no code here.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000 /* the stable ABI of CPython 3.10 and later */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/common.h"
#include "core/errors.h"
#include "core/options.h"
#include "stoker.h"

/* errors into exceptions, keyword options into stk_options (shared with
 * _stoker_ops.c) */
#include "_binding.h"

/* ---- DLPack (the public ABI of dlpack.h, v0.x "dltensor" capsules) -------- */

enum { kDLCPU = 1, kDLCUDA = 2 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 };

typedef struct {
  int32_t device_type; /* DLDeviceType: an int-sized enum in dlpack.h */
  int32_t device_id;
} DLDevice;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* ---- C-level reference counts --------------------------------------------- */

typedef struct {
  atomic_long refs;
  stk_loader *l;
  pid_t pid; /* the process that created the loader */
} loader_ref;

typedef struct {
  DLManagedTensor mt[2]; /* [0] images, [1] labels */
  int64_t shape[2][4], strides[2][4];
  atomic_int refs;
  stk_batch b;
  loader_ref *owner;
  void *stream; /* device batches: the consumer's CUDA stream (CUstream) */
} batch_ref;

/* After fork() a child holds a copy of the loader without its threads, and
 * possibly with its mutex copied while locked: the child must never touch
 * it, not even to free it (the copy is simply left behind). */
static int foreign(const loader_ref *r) { return getpid() != r->pid; }

static void loader_ref_decref(loader_ref *r) {
  if (foreign(r)) return;
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
    /* Last user: joins the worker threads. They never take the GIL, so this
     * is safe whether or not the calling thread holds it. */
    stk_loader_destroy(r->l);
    free(r);
  }
}

/* Drops a reference from a thread that holds the GIL: destroying a loader
 * joins its threads, which may take a while, so let other Python threads run. */
static void loader_ref_decref_gil(loader_ref *r) {
  Py_BEGIN_ALLOW_THREADS
  loader_ref_decref(r);
  Py_END_ALLOW_THREADS
}

/* The DLPack deleter: any thread, GIL or not. */
static void dl_deleter(DLManagedTensor *self) {
  batch_ref *b = self->manager_ctx;
  if (foreign(b->owner)) return;
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  /* A device slot is rewritten only after the work torch queued on the
   * consumer's stream so far has completed. */
  stk_batch_release_on(b->owner->l, &b->b, b->stream);
  loader_ref_decref(b->owner);
  free(b);
}

/* A capsule that was never consumed (torch renames a consumed one to
 * "used_dltensor" and takes over the deleter). */
static void capsule_destructor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
  if (m && m->deleter) m->deleter(m);
}

/* The options table as Python data: one dict per field. */
/* The value of row d in o: a stk_options or a stk_pack_options, the struct of
 * the row's table. */
static PyObject *option_value(const void *o, const stk__option *d) {
  switch (d->type) {
    case STK__OPT_INT: return PyLong_FromLongLong(stk__option_get_int(o, d));
    case STK__OPT_BOOL: return PyBool_FromLong((long)stk__option_get_int(o, d));
    case STK__OPT_ENUM: {
      char name[64];
      stk__option_choice_name(d, (int)stk__option_get_int(o, d), name, sizeof name);
      return PyUnicode_FromString(name);
    }
    case STK__OPT_U64: return PyLong_FromUnsignedLongLong(stk__option_get_u64(o, d));
    case STK__OPT_FLOAT: {
      if (d->count == 1) return PyFloat_FromDouble(stk__option_get_float(o, d, 0));
      PyObject *t = PyTuple_New(d->count);
      for (int k = 0; t && k < d->count; k++) {
        PyObject *x = PyFloat_FromDouble(stk__option_get_float(o, d, k));
        if (!x) {
          Py_DECREF(t);
          return NULL;
        }
        PyTuple_SetItem(t, k, x);
      }
      return t;
    }
    case STK__OPT_STR: Py_RETURN_NONE;
  }
  Py_RETURN_NONE;
}

/* A bound as Python data: None when there is none. */
static PyObject *option_bound(const stk__option *d, double b) {
  switch (d->type) {
    case STK__OPT_STR: Py_RETURN_NONE;
    case STK__OPT_FLOAT:
      if (b == STK__INF || b == -STK__INF) Py_RETURN_NONE;
      return PyFloat_FromDouble(b);
    case STK__OPT_U64:
      if (b >= STK__U64_MAX) return PyLong_FromUnsignedLongLong(UINT64_MAX);
      return PyLong_FromUnsignedLongLong((unsigned long long)b);
    default: return PyLong_FromLongLong((long long)b);
  }
}

/* The rows of a table as Python data, each default read from `def` (the
 * table's struct after its init): the one source of the Python layer's
 * defaults and ranges. with_only: add each row's "only" (the pack table). */
static PyObject *table_rows(const stk__option *rows, int n, const void *def, int with_only) {
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (int i = 0; i < n; i++) {
    const stk__option *d = &rows[i];
    PyObject *choices = Py_None;
    Py_INCREF(Py_None);
    if (d->type == STK__OPT_ENUM) {
      Py_DECREF(Py_None);
      PyObject *text = PyUnicode_FromString(d->choices), *bar = PyUnicode_FromString("|");
      choices = text && bar ? PyUnicode_Split(text, bar, -1) : NULL;
      Py_XDECREF(text);
      Py_XDECREF(bar);
    }
    PyObject *row = choices ? Py_BuildValue(
                                  "{s:s,s:s,s:N,s:N,s:N,s:N,s:z,s:z,s:s}", "name", d->name, "type",
                                  stk__option_type_name(d->type), "default", option_value(def, d),
                                  "min", option_bound(d, d->min), "max", option_bound(d, d->max),
                                  "choices", choices, "cli", d->cli, "keyword", d->py, "doc", d->doc)
                            : NULL;
    PyObject *only = row && with_only ? Py_BuildValue("z", d->only) : NULL;
    /* the loader's table: the value a 0 stands for (STK__ZERO_MEANS), or None */
    double z = 0;
    PyObject *zero = NULL;
    if (row && !with_only) {
      if (!stk__option_zero(d, &z)) zero = Py_NewRef(Py_None);
      else if (d->type == STK__OPT_FLOAT) zero = PyFloat_FromDouble(z);
      else zero = PyLong_FromUnsignedLongLong((unsigned long long)z);
    }
    if (!row || (with_only && (!only || PyDict_SetItemString(row, "only", only) < 0)) ||
        (!with_only && (!zero || PyDict_SetItemString(row, "zero", zero) < 0)) ||
        PyList_Append(list, row) < 0) {
      Py_XDECREF(only);
      Py_XDECREF(zero);
      Py_XDECREF(row);
      Py_DECREF(list);
      return NULL;
    }
    Py_XDECREF(only);
    Py_XDECREF(zero);
    Py_DECREF(row);
  }
  return list;
}

static PyObject *options_table(PyObject *m, PyObject *unused) {
  stk_options def;
  stk_options_init(&def);
  return table_rows(stk__options, stk__num_options, &def, 0);
}

static PyObject *pack_options_table(PyObject *m, PyObject *unused) {
  stk_pack_options def;
  stk_pack_options_init(&def);
  return table_rows(stk__pack_options, stk__num_pack_options, &def, 1);
}

/* ---- the Loader type --------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  loader_ref *ref; /* NULL once closed */
  int busy;        /* a call runs with the GIL released (one consumer at a time) */
  int nslots;
} LoaderObject;

/* The open loader, or NULL with an exception. */
static loader_ref *get_ref(LoaderObject *self, int exclusive) {
  if (!self->ref) {
    PyErr_SetString(PyExc_ValueError, "the loader is closed");
    return NULL;
  }
  if (foreign(self->ref)) {
    PyErr_SetString(PyExc_RuntimeError,
                    "this loader was created by the parent process before a fork; a forked "
                    "process must create its own loader");
    return NULL;
  }
  if (exclusive && self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the loader is in use by another thread (one consumer at a time)");
    return NULL;
  }
  return self->ref;
}

static PyObject *Loader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  if (args && PyTuple_Size(args) > 0) {
    PyErr_SetString(PyExc_TypeError, "Loader() takes keyword arguments only");
    return NULL;
  }
  stk_options o;
  stk_options_init(&o);
  PyObject *keep = PyList_New(0); /* the bytes of every path, until create returns */
  if (!keep) return NULL;
  if (parse_options(kwds, &o, keep, "Loader")) goto fail;

  loader_ref *ref = malloc(sizeof *ref);
  if (!ref) {
    PyErr_NoMemory();
    goto fail;
  }
  atomic_init(&ref->refs, 1);
  ref->pid = getpid();
  char err[1024] = "";
  int rc;
  /* Scanning a large folder takes seconds: let other threads run. */
  Py_BEGIN_ALLOW_THREADS
  rc = STK_LOADER_CREATE(&o, &ref->l, err, sizeof err);
  Py_END_ALLOW_THREADS
  if (rc != STK_OK) {
    free(ref);
    if (rc == STK_EIO) {
      /* A folder, list or cache that cannot be opened is an OSError of the
       * kind open() raises, not a DecodeError: the message holds the
       * system's reason. */
      PyObject *exc = strstr(err, strerror(EACCES))   ? PyExc_PermissionError
                       : strstr(err, strerror(ENOENT)) ? PyExc_FileNotFoundError
                       : strstr(err, strerror(ENOTDIR)) ? PyExc_NotADirectoryError
                                                        : PyExc_OSError;
      PyObject *m = decode_message(err);
      if (m) PyErr_SetObject(exc, m);
      Py_XDECREF(m);
    } else {
      raise_code(rc, err, 0);
    }
    goto fail;
  }
  Py_CLEAR(keep);
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  LoaderObject *self = (LoaderObject *)alloc(type, 0);
  if (!self) {
    loader_ref_decref_gil(ref);
    return NULL;
  }
  self->ref = ref;
  self->busy = 0;
  self->nslots = stk_loader_num_slots(ref->l);
  return (PyObject *)self;
fail:
  Py_XDECREF(keep);
  return NULL;
}

/* close(): joins the worker threads at once, even while the user still
 * holds batches (their memory lives on until the last tensor is freed). An
 * extra reference is held across the shutdown so that a tensor freed on
 * another thread meanwhile cannot destroy the loader under it. */
static void loader_close(LoaderObject *self) {
  loader_ref *r = self->ref;
  self->ref = NULL;
  if (!r) return;
  if (!foreign(r)) {
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    Py_BEGIN_ALLOW_THREADS
    stk_loader_shutdown(r->l);
    loader_ref_decref(r);
    Py_END_ALLOW_THREADS
  }
  loader_ref_decref_gil(r);
}

static void Loader_dealloc(PyObject *o) {
  PyTypeObject *tp = Py_TYPE(o);
  loader_close((LoaderObject *)o);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(o);
  Py_DECREF(tp);
}

static PyObject *Loader_close(PyObject *o, PyObject *unused) {
  loader_close((LoaderObject *)o);
  Py_RETURN_NONE;
}

static int dl_dtype(stk_dtype t, DLDataType *d) {
  d->lanes = 1;
  switch (t) {
    case STK_DTYPE_FLOAT32: d->code = kDLFloat, d->bits = 32; return 0;
    case STK_DTYPE_FLOAT16: d->code = kDLFloat, d->bits = 16; return 0;
    case STK_DTYPE_BFLOAT16: d->code = kDLBfloat, d->bits = 16; return 0;
    case STK_DTYPE_UINT8: d->code = kDLUInt, d->bits = 8; return 0;
  }
  return -1;
}

/* Fills the two DLManagedTensors of a batch that was just handed out. */
static int fill_dlpack(batch_ref *b) {
  const stk_batch *sb = &b->b;
  DLTensor *im = &b->mt[0].dl_tensor, *lb = &b->mt[1].dl_tensor;
  if (dl_dtype(sb->dtype, &im->dtype)) return -1;
  im->data = sb->data;
  DLDevice dev = sb->device >= 0 ? (DLDevice){kDLCUDA, sb->device} : (DLDevice){kDLCPU, 0};
  im->device = dev;
  im->ndim = 4;
  if (sb->layout == STK_LAYOUT_NHWC) {
    /* The slot holds NHWC; describe it as the NCHW-shaped view with
     * permuted strides, which torch reports as channels_last. */
    int64_t sh[4] = {sb->shape[0], sb->shape[3], sb->shape[1], sb->shape[2]};
    int64_t st[4] = {sb->strides[0], sb->strides[3], sb->strides[1], sb->strides[2]};
    memcpy(b->shape[0], sh, sizeof sh);
    memcpy(b->strides[0], st, sizeof st);
  } else {
    memcpy(b->shape[0], sb->shape, sizeof b->shape[0]);
    memcpy(b->strides[0], sb->strides, sizeof b->strides[0]);
  }
  im->shape = b->shape[0];
  im->strides = b->strides[0];
  im->byte_offset = 0;

  /* labels on the same device as the images: no copy in the training loop */
  lb->data = sb->device >= 0 ? (void *)sb->labels_device : (void *)sb->labels;
  lb->device = dev;
  lb->ndim = 1;
  lb->dtype = (DLDataType){kDLInt, 64, 1};
  b->shape[1][0] = sb->n;
  b->strides[1][0] = 1;
  if (sb->mix_labels) {
    /* MixUp/CutMix: the loader's soft labels, float32 [n, classes] */
    lb->data = sb->device >= 0 ? (void *)sb->mix_labels_device : (void *)sb->mix_labels;
    lb->ndim = 2;
    lb->dtype = (DLDataType){kDLFloat, 32, 1};
    b->shape[1][1] = sb->mix_classes;
    b->strides[1][0] = sb->mix_classes;
    b->strides[1][1] = 1;
  }
  lb->shape = b->shape[1];
  lb->strides = b->strides[1];
  lb->byte_offset = 0;
  for (int i = 0; i < 2; i++) {
    b->mt[i].manager_ctx = b;
    b->mt[i].deleter = dl_deleter;
  }
  return 0;
}

/* next([stream]) -> (images capsule, labels capsule, epoch, batch_index,
 * indices) or None at the end of the epoch. For a device loader, `stream`
 * is the consumer's CUDA stream (torch's current stream): it is made to
 * wait for the batch on the device, and the batch's slot is rewritten only
 * after what was queued on it before the tensors were freed. */
static PyObject *Loader_next(PyObject *o, PyObject *args) {
  LoaderObject *self = (LoaderObject *)o;
  unsigned long long stream = 0;
  if (!PyArg_ParseTuple(args, "|K", &stream)) return NULL;
  loader_ref *r = get_ref(self, 1);
  if (!r) return NULL;
  batch_ref *b = calloc(1, sizeof *b);
  if (!b) return PyErr_NoMemory();
  /* This call's own reference: it keeps the loader alive should another
   * thread close the Python object meanwhile, and becomes the batch's. */
  atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
  self->busy = 1;
  int rc;
  char msg[1100] = "";
  /* Wait in slices with the GIL released, looking at signals in between,
   * so that Ctrl-C interrupts a waiting next() (as with DataLoader) within
   * a slice; the loader's position is unchanged by an interrupted wait. */
  for (;;) {
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_next_timed(r->l, &b->b, 0.1);
    Py_END_ALLOW_THREADS
    if (rc != STK_ETIMEDOUT) break;
    if (PyErr_CheckSignals() < 0) {
      self->busy = 0;
      free(b);
      loader_ref_decref_gil(r);
      return NULL;
    }
  }
  Py_BEGIN_ALLOW_THREADS
  if (rc != STK_OK) snprintf(msg, sizeof msg, "%s", stk_loader_error(r->l));
  if (rc == STK_OK && b->b.device >= 0) {
    b->stream = (void *)(uintptr_t)stream;
    rc = stk_batch_wait_on(r->l, &b->b, b->stream);
    if (rc != STK_OK) {
      snprintf(msg, sizeof msg, "cannot order the batch before the consumer's stream: %s",
               stk_loader_error(r->l));
      stk_batch_release(r->l, &b->b);
    }
  }
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (rc != STK_OK) {
    free(b);
    loader_ref_decref_gil(r);
    if (rc == STK_EEND) Py_RETURN_NONE;
    return raise_code(rc, msg, self->nslots);
  }
  b->owner = r;
  atomic_init(&b->refs, 2);
  if (fill_dlpack(b)) {
    /* an unknown dtype: never hand out memory torch would misread */
    dl_deleter(&b->mt[0]);
    dl_deleter(&b->mt[1]);
    PyErr_SetString(PyExc_RuntimeError,
                    "the loader returned a batch this binding cannot describe (device memory or "
                    "an unknown dtype)");
    return NULL;
  }
  PyObject *ci = PyCapsule_New(&b->mt[0], "dltensor", capsule_destructor);
  if (!ci) {
    dl_deleter(&b->mt[0]);
    dl_deleter(&b->mt[1]);
    return NULL;
  }
  PyObject *cl = PyCapsule_New(&b->mt[1], "dltensor", capsule_destructor);
  if (!cl) {
    dl_deleter(&b->mt[1]);
    Py_DECREF(ci);
    return NULL;
  }
  /* From here on the capsules own the batch: dropping them releases it. */
  PyObject *out = PyTuple_New(5);
  PyObject *idx = PyList_New((Py_ssize_t)b->b.n);
  if (!out || !idx) goto fail;
  for (int64_t i = 0; i < b->b.n; i++) {
    PyObject *v = PyLong_FromLongLong(b->b.indices[i]);
    if (!v || PyList_SetItem(idx, (Py_ssize_t)i, v) < 0) goto fail;
  }
  PyObject *ep = PyLong_FromUnsignedLongLong(b->b.epoch);
  PyObject *bi = PyLong_FromLongLong(b->b.batch_index);
  /* PyTuple_SetItem steals its argument even when it fails. */
  PyTuple_SetItem(out, 0, ci);
  PyTuple_SetItem(out, 1, cl);
  PyTuple_SetItem(out, 4, idx);
  ci = cl = idx = NULL;
  if (!ep || !bi) {
    Py_XDECREF(ep);
    Py_XDECREF(bi);
    Py_DECREF(out);
    return NULL;
  }
  PyTuple_SetItem(out, 2, ep);
  PyTuple_SetItem(out, 3, bi);
  return out;
fail:
  Py_XDECREF(out);
  Py_XDECREF(idx);
  Py_XDECREF(ci);
  Py_XDECREF(cl);
  return NULL;
}

static PyObject *Loader_seek(PyObject *o, PyObject *args) {
  LoaderObject *self = (LoaderObject *)o;
  unsigned long long epoch;
  long long batch = 0;
  if (!PyArg_ParseTuple(args, "K|L", &epoch, &batch)) return NULL;
  loader_ref *r = get_ref(self, 1);
  if (!r) return NULL;
  if (batch < 0) {
    PyErr_SetString(PyExc_ValueError, "batch must be >= 0");
    return NULL;
  }
  int rc;
  char msg[1100] = "";
  /* As in next(): a reference of this call's own, so that close() on another
   * thread meanwhile cannot destroy the loader under the seek. */
  atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
  self->busy = 1;
  /* A reset waits for the workers to leave the sample they are in. */
  Py_BEGIN_ALLOW_THREADS
  rc = stk_loader_seek(r->l, (uint64_t)epoch, (int64_t)batch);
  if (rc != STK_OK) snprintf(msg, sizeof msg, "%s", stk_loader_error(r->l));
  Py_END_ALLOW_THREADS
  self->busy = 0;
  loader_ref_decref_gil(r);
  if (rc != STK_OK) return raise_code(rc, msg, self->nslots);
  Py_RETURN_NONE;
}

static PyObject *Loader_set_epoch(PyObject *o, PyObject *arg) {
  unsigned long long e = PyLong_AsUnsignedLongLong(arg);
  if (e == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  PyObject *args = Py_BuildValue("(KL)", e, 0LL);
  if (!args) return NULL;
  PyObject *res = Loader_seek(o, args);
  Py_DECREF(args);
  return res;
}

static PyObject *Loader_position(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  uint64_t e;
  int64_t b;
  stk_loader_position(r->l, &e, &b);
  return Py_BuildValue("(KL)", (unsigned long long)e, (long long)b);
}

static Py_ssize_t Loader_len(PyObject *o) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return -1;
  return (Py_ssize_t)stk_loader_len(r->l);
}

static PyObject *Loader_counts(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  return Py_BuildValue("{s:L,s:L,s:L,s:i,s:i}", "num_samples",
                       (long long)stk_loader_num_samples(r->l), "shard_size",
                       (long long)stk_loader_shard_size(r->l), "len",
                       (long long)stk_loader_len(r->l), "num_slots", stk_loader_num_slots(r->l),
                       "num_classes", stk_loader_num_classes(r->l));
}

static int dict_set(PyObject *d, const char *k, PyObject *v) {
  if (!v) return -1;
  int rc = PyDict_SetItemString(d, k, v);
  Py_DECREF(v);
  return rc;
}

static PyObject *Loader_stats(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  stk_stats s;
  int rc = stk_loader_stats(r->l, &s);
  if (rc) return raise_code(rc, stk_loader_error(r->l), 0);
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  if (dict_set(d, "images", PyLong_FromUnsignedLongLong(s.images)) ||
      dict_set(d, "batches", PyLong_FromUnsignedLongLong(s.batches)) ||
      dict_set(d, "skipped", PyLong_FromUnsignedLongLong(s.skipped)) ||
      dict_set(d, "failed", PyLong_FromUnsignedLongLong(s.failed)) ||
      dict_set(d, "bytes_read", PyLong_FromUnsignedLongLong(s.bytes_read)) ||
      dict_set(d, "seconds", PyFloat_FromDouble(s.seconds)) ||
      dict_set(d, "images_per_s", PyFloat_FromDouble(s.images_per_s)) ||
      dict_set(d, "wait_seconds", PyFloat_FromDouble(s.wait_seconds)) ||
      dict_set(d, "read_seconds", PyFloat_FromDouble(s.read_seconds)) ||
      dict_set(d, "decode_seconds", PyFloat_FromDouble(s.decode_seconds)) ||
      dict_set(d, "augment_seconds", PyFloat_FromDouble(s.augment_seconds)) ||
      dict_set(d, "host_bytes", PyLong_FromUnsignedLongLong(s.host_bytes)) ||
      dict_set(d, "device_bytes", PyLong_FromUnsignedLongLong(s.device_bytes)) ||
      dict_set(d, "decoded_hw", PyLong_FromUnsignedLongLong(s.decoded_hw)) ||
      dict_set(d, "decoded_cuda", PyLong_FromUnsignedLongLong(s.decoded_cuda)) ||
      dict_set(d, "decoded_cpu", PyLong_FromUnsignedLongLong(s.decoded_cpu)) ||
      dict_set(d, "cpu_share", PyFloat_FromDouble(s.cpu_share)) ||
      dict_set(d, "submit_seconds", PyFloat_FromDouble(s.submit_seconds)) ||
      dict_set(d, "late_allocs", PyLong_FromUnsignedLongLong(s.late_allocs)) ||
      dict_set(d, "remote_bytes", PyLong_FromUnsignedLongLong(s.remote_bytes)) ||
      dict_set(d, "remote_requests", PyLong_FromUnsignedLongLong(s.remote_requests)) ||
      dict_set(d, "remote_retries", PyLong_FromUnsignedLongLong(s.remote_retries)) ||
      dict_set(d, "remote_failures", PyLong_FromUnsignedLongLong(s.remote_failures)) ||
      dict_set(d, "remote_seconds", PyFloat_FromDouble(s.remote_seconds)) ||
      dict_set(d, "remote_part_bytes", PyLong_FromUnsignedLongLong(s.remote_part_bytes)) ||
      dict_set(d, "remote_part_peak", PyLong_FromUnsignedLongLong(s.remote_part_peak)) ||
      dict_set(d, "remote_cache_bytes", PyLong_FromUnsignedLongLong(s.remote_cache_bytes)) ||
      dict_set(d, "remote_streaming", PyBool_FromLong(s.remote_streaming)) ||
      dict_set(d, "threads", PyLong_FromLong(s.threads)) ||
      dict_set(d, "slots", PyLong_FromLong(s.slots))) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

/* [(path, reason), ...] of the files skipped so far. */
static PyObject *Loader_skipped(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  const char *path, *reason;
  for (uint64_t i = 0; stk_loader_skipped(r->l, i, &path, &reason) == STK_OK; i++) {
    PyObject *p = decode_message(path), *q = decode_message(reason);
    PyObject *t = p && q ? PyTuple_Pack(2, p, q) : NULL;
    Py_XDECREF(p);
    Py_XDECREF(q);
    if (!t || PyList_Append(list, t) < 0) {
      Py_XDECREF(t);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(t);
  }
  return list;
}

static PyObject *Loader_classes(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  int n = stk_loader_num_classes(r->l);
  PyObject *list = PyList_New(n);
  if (!list) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *s = decode_message(stk_loader_class_name(r->l, i));
    if (!s || PyList_SetItem(list, i, s) < 0) {
      Py_DECREF(list);
      return NULL;
    }
  }
  return list;
}

/* [(path, label), ...] for every sample, in index order (ImageFolder.samples). */
static PyObject *Loader_samples(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  int64_t n = stk_loader_num_samples(r->l);
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (int64_t i = 0; i < n; i++) {
    PyObject *p = decode_message(stk_loader_sample_path(r->l, i));
    PyObject *t = p ? Py_BuildValue("(NL)", p, (long long)stk_loader_sample_label(r->l, i)) : NULL;
    if (!t || PyList_SetItem(list, (Py_ssize_t)i, t) < 0) {
      Py_DECREF(list);
      return NULL;
    }
  }
  return list;
}

/* sample(i) -> (path, label) of one sample, as samples()[i] without the list. */
static PyObject *Loader_sample(PyObject *o, PyObject *arg) {
  long long i = PyLong_AsLongLong(arg);
  if (i == -1 && PyErr_Occurred()) return NULL;
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  if (i < 0 || i >= stk_loader_num_samples(r->l)) {
    PyErr_SetString(PyExc_IndexError, "sample index out of range");
    return NULL;
  }
  PyObject *p = decode_message(stk_loader_sample_path(r->l, i));
  return p ? Py_BuildValue("(NL)", p, (long long)stk_loader_sample_label(r->l, i)) : NULL;
}

static PyObject *Loader_source_kind(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  return PyUnicode_FromString(stk_loader_source_kind(r->l));
}

static PyObject *Loader_note(PyObject *o, PyObject *unused) {
  loader_ref *r = get_ref((LoaderObject *)o, 0);
  if (!r) return NULL;
  return decode_message(stk_loader_note(r->l));
}

static PyObject *Loader_get_closed(PyObject *o, void *unused) {
  return PyBool_FromLong(((LoaderObject *)o)->ref == NULL);
}

static PyMethodDef Loader_methods[] = {
    {"next", Loader_next, METH_VARARGS,
     "next([stream]) -> (images, labels, epoch, batch_index, indices) or None at the end of\n"
     "the epoch. stream: the consumer's CUDA stream handle, for device loaders.\n"
     "images and labels are DLPack capsules; the batch slot is released once both tensors\n"
     "(or unconsumed capsules) are freed."},
    {"seek", Loader_seek, METH_VARARGS, "seek(epoch, batch=0): position the loader."},
    {"set_epoch", Loader_set_epoch, METH_O, "set_epoch(epoch): seek(epoch, 0)."},
    {"position", Loader_position, METH_NOARGS, "position() -> (epoch, next batch index)."},
    {"counts", Loader_counts, METH_NOARGS,
     "counts() -> dict of num_samples, shard_size, len, num_slots, num_classes."},
    {"stats", Loader_stats, METH_NOARGS, "stats() -> dict of the loader's statistics."},
    {"skipped", Loader_skipped, METH_NOARGS, "skipped() -> [(path, reason), ...]."},
    {"classes", Loader_classes, METH_NOARGS, "classes() -> class names, by label."},
    {"samples", Loader_samples, METH_NOARGS, "samples() -> [(path, label), ...] by index."},
    {"sample", Loader_sample, METH_O, "sample(i) -> (path, label) of sample i."},
    {"source_kind", Loader_source_kind, METH_NOARGS,
     "source_kind() -> 'folder', 'list', 'cache' or 'tar'."},
    {"note", Loader_note, METH_NOARGS,
     "note() -> a warning about the source made at construction ('' if none)."},
    {"close", Loader_close, METH_NOARGS,
     "close(): drop this object's hold on the loader. Its threads stop at once when no batch\n"
     "is alive, else when the last batch is freed."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Loader_getset[] = {
    {"closed", Loader_get_closed, NULL, "True once close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Loader_slots[] = {
    {Py_tp_new, Loader_new},
    {Py_tp_dealloc, Loader_dealloc},
    {Py_tp_methods, Loader_methods},
    {Py_tp_getset, Loader_getset},
    {Py_sq_length, Loader_len},
    {Py_tp_doc, "Loader(**options): a libstoker loader; see stoker.ImageLoader."},
    {0, NULL},
};

static PyType_Spec Loader_spec = {
    .name = "stoker._stoker.Loader",
    .basicsize = sizeof(LoaderObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Loader_slots,
};

/* ---- module functions -------------------------------------------------------- */

/* check_file(path, **keywords): the keywords are the loader's (its options
 * table), so that the file is refused exactly where a loader of the same
 * options would refuse it (pipeline="eval" decodes more of a large JPEG
 * than train does). */
static PyObject *check_file(PyObject *m, PyObject *args, PyObject *kwds) {
  PyObject *arg, *path, *keep = NULL;
  if (!PyArg_ParseTuple(args, "O:check_file", &arg)) return NULL;
  stk_options o;
  stk_options_init(&o);
  if (kwds && PyDict_Size(kwds) > 0) {
    if (!(keep = PyList_New(0))) return NULL;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwds, &pos, &key, &value)) {
      const char *k = PyUnicode_AsUTF8AndSize(key, NULL);
      const stk__option *d = k ? stk__option_by_py(k) : NULL;
      if (k && !d)
        PyErr_Format(PyExc_TypeError, "check_file() got an unexpected keyword argument '%s'", k);
      if (!d || set_option(&o, d, value, keep)) {
        Py_DECREF(keep);
        return NULL;
      }
    }
  }
  if (!PyUnicode_FSConverter(arg, &path)) {
    Py_XDECREF(keep);
    return NULL;
  }
  int w = 0, h = 0, rc;
  char msg[1024] = "";
  const char *p = PyBytes_AsString(path);
  Py_BEGIN_ALLOW_THREADS
  rc = stk_check_file(p, &o, &w, &h, msg, sizeof msg);
  Py_END_ALLOW_THREADS
  Py_XDECREF(keep);
  if (rc != STK_OK) {
    char full[2048];
    snprintf(full, sizeof full, "%s: %s", p, msg);
    Py_DECREF(path);
    return raise_code(rc, full, 0);
  }
  Py_DECREF(path);
  return Py_BuildValue("(ii)", w, h);
}

/* ---- pack ------------------------------------------------------------------- */

/* What stk_pack's callbacks collect. bad_file may come from any thread, so
 * it only appends to C arrays under a mutex; the progress callable runs
 * with the GIL taken back for the call. */
typedef struct {
  pthread_mutex_t mu;
  char **paths, **reasons;
  Py_ssize_t n, cap;
  int oom;
  PyObject *progress;             /* callable or NULL */
  PyObject *exc_t, *exc_v, *exc_tb; /* the first exception the callable raised */
} pack_ctx;

static void pack_bad_file(void *user, const char *path, const char *reason) {
  pack_ctx *c = user;
  pthread_mutex_lock(&c->mu);
  if (c->n == c->cap) {
    Py_ssize_t cap = c->cap ? c->cap * 2 : 16;
    char **p = realloc(c->paths, (size_t)cap * sizeof *p);
    if (p) c->paths = p;
    char **r = realloc(c->reasons, (size_t)cap * sizeof *r);
    if (r) c->reasons = r;
    if (p && r) c->cap = cap;
  }
  char *dp = c->n < c->cap ? strdup(path ? path : "") : NULL;
  char *dr = dp ? strdup(reason ? reason : "") : NULL;
  if (dp && dr) {
    c->paths[c->n] = dp;
    c->reasons[c->n] = dr;
    c->n++;
  } else {
    free(dp);
    c->oom = 1;
  }
  pthread_mutex_unlock(&c->mu);
}

static void pack_progress(void *user, int64_t done, int64_t total) {
  pack_ctx *c = user;
  if (!c->progress || c->exc_t) return; /* after an exception, stay quiet */
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction(c->progress, "LL", (long long)done, (long long)total);
  if (r)
    Py_DECREF(r);
  else
    PyErr_Fetch(&c->exc_t, &c->exc_v, &c->exc_tb);
  PyGILState_Release(g);
}

/* Between files: a pending signal (Ctrl-C's KeyboardInterrupt, or what a
 * handler raises) stops the pack, which then leaves nothing behind; the
 * exception is the one pack() raises. Signals are run by the main thread
 * only, so a pack on another thread is not stopped this way. */
static int pack_cancel(void *user) {
  pack_ctx *c = user;
  if (c->exc_t) return 1; /* the progress callable raised: stop too */
  PyGILState_STATE g = PyGILState_Ensure();
  int stop = PyErr_CheckSignals() < 0;
  if (stop) PyErr_Fetch(&c->exc_t, &c->exc_v, &c->exc_tb);
  PyGILState_Release(g);
  return stop;
}

/* pack(source, output, **keywords): the keywords, and their checks, come
 * from the pack options table of core/options.h; progress is the one that
 * is Python's own. */
static PyObject *pack(PyObject *m, PyObject *args, PyObject *kwds) {
  stk_pack_options po;
  stk_pack_options_init(&po);
  PyObject *keep = PyList_New(0), *progress = Py_None, *result = NULL;
  if (!keep) return NULL;
  static const char *const positional[] = {"source", "output"};
  Py_ssize_t na = PyTuple_Size(args);
  if (na < 0) goto done;
  if (na > 2) {
    PyErr_Format(PyExc_TypeError, "pack() takes at most 2 positional arguments (%zd given)", na);
    goto done;
  }
  for (Py_ssize_t i = 0; i < na; i++) {
    if (kwds && PyDict_GetItemString(kwds, positional[i])) {
      PyErr_Format(PyExc_TypeError, "pack() got multiple values for argument '%s'",
                   positional[i]);
      goto done;
    }
    if (set_option(&po, stk__pack_option_by_py(positional[i]), PyTuple_GetItem(args, i), keep))
      goto done;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (kwds && PyDict_Next(kwds, &pos, &key, &value)) {
    const char *k = PyUnicode_AsUTF8AndSize(key, NULL);
    if (!k) goto done;
    if (!strcmp(k, "progress")) {
      progress = value;
      continue;
    }
    const stk__option *d = stk__pack_option_by_py(k);
    if (!d) {
      PyErr_Format(PyExc_TypeError, "pack() got an unexpected keyword argument '%s'", k);
      goto done;
    }
    if (set_option(&po, d, value, keep)) goto done;
  }
  if (progress != Py_None && !PyCallable_Check(progress)) {
    PyErr_Format(PyExc_TypeError, "progress must be None or a callable(done, total)");
    goto done;
  }
  pack_ctx c;
  memset(&c, 0, sizeof c);
  pthread_mutex_init(&c.mu, NULL);
  c.progress = progress == Py_None ? NULL : progress;
  po.progress = pack_progress;
  po.cancel = pack_cancel;
  po.bad_file = pack_bad_file;
  po.user = &c;
  stk_pack_result res;
  memset(&res, 0, sizeof res);
  char err[1024] = "";
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = STK_PACK(&po, &res, err, sizeof err);
  Py_END_ALLOW_THREADS
  if (c.exc_t) {
    PyErr_Restore(c.exc_t, c.exc_v, c.exc_tb); /* the callable's own exception wins */
  } else if (rc != STK_OK) {
    raise_code(rc, err[0] ? err : "packing failed", 0);
  } else if (c.oom) {
    PyErr_NoMemory();
  } else {
    PyObject *left = PyList_New(0);
    for (Py_ssize_t i = 0; left && i < c.n; i++) {
      PyObject *t = Py_BuildValue("(NN)", decode_message(c.paths[i]), decode_message(c.reasons[i]));
      if (!t || PyList_Append(left, t) < 0) Py_CLEAR(left);
      Py_XDECREF(t);
    }
    if (left)
      result = Py_BuildValue("{s:L,s:L,s:K,s:i,s:L,s:N,s:O}", "packed", (long long)res.packed,
                             "failed", (long long)res.failed, "bytes",
                             (unsigned long long)res.bytes, "shards", res.shards,
                             "device_packed", (long long)res.device_packed, "left_out", left,
                             "device_stopped", res.device_stopped ? Py_True : Py_False);
  }
  for (Py_ssize_t i = 0; i < c.n; i++) {
    free(c.paths[i]);
    free(c.reasons[i]);
  }
  free(c.paths);
  free(c.reasons);
  pthread_mutex_destroy(&c.mu);
done:
  Py_XDECREF(keep);
  return result;
}

/* _source_check(root, list_file): the library's source rule, which the
 * Python layer asks before it looks at the paths themselves. */
static PyObject *source_check(PyObject *m, PyObject *args) {
  PyObject *root, *list_file;
  if (!PyArg_ParseTuple(args, "OO", &root, &list_file)) return NULL;
  char err[256] = "";
  int rc = stk_source_check(root == Py_None ? NULL : "", list_file == Py_None ? NULL : "", err,
                            sizeof err);
  if (rc) return raise_code(rc, err, 0);
  Py_RETURN_NONE;
}

static PyObject *build_info(PyObject *m, PyObject *unused) {
  return PyUnicode_FromString(stk_build_info());
}

static PyObject *strerror_(PyObject *m, PyObject *arg) {
  long c = PyLong_AsLong(arg);
  if (c == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(stk_strerror((int)c));
}

static PyMethodDef module_methods[] = {
    {"check_file", (PyCFunction)(void (*)(void))check_file, METH_VARARGS | METH_KEYWORDS,
     "check_file(path, **options) -> (width, height); raises DecodeError when the file cannot "
     "be decoded, and where a loader of the same options (pipeline=, size=, max_decode_bytes=, "
     "...) would refuse it."},
    {"build_info", build_info, METH_NOARGS, "build_info() -> str: version, SIMD, formats."},
    {"options", options_table, METH_NOARGS,
     "options() -> [dict]: the loader's options table, one dict per field (name, type,\n"
     "default, min, max, choices, cli, keyword, doc, zero: the value 0 stands for where it\n"
     "is a value of the library's, else None); Loader() takes the keywords."},
    {"pack_options", pack_options_table, METH_NOARGS,
     "pack_options() -> [dict]: the pack options table, as options() with \"only\" for \"zero\" (the\n"
     "format a row applies to, or None); pack() takes the keywords."},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_VARARGS | METH_KEYWORDS,
     "pack(source, output, *, progress=None, **keywords) -> dict of packed, failed, bytes,\n"
     "shards, device_packed and left_out [(path, reason)]. The keywords, their defaults\n"
     "and ranges are pack_options()'s. See stoker.pack."},
    {"strerror", strerror_, METH_O, "strerror(code) -> str: the name of an error code."},
    {"_source_check", source_check, METH_VARARGS,
     "_source_check(root, list_file): ValueError unless exactly one of them is given."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_stoker", "C extension of stoker (libstoker binding).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stoker(void) {
  if (stk_version() / 100 != STK_VERSION / 100) {
    PyErr_SetString(PyExc_ImportError, "libstoker version mismatch");
    return NULL;
  }
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  PyObject *type = NULL;
  DecodeError = PyErr_NewExceptionWithDoc(
      "stoker.DecodeError",
      "A file could not be read or decoded (the message names the file and the reason).\n"
      "`code` holds the libstoker error code.",
      PyExc_OSError, NULL);
  if (!DecodeError || PyModule_AddObjectRef(m, "DecodeError", DecodeError) < 0) goto fail;
  StaleCacheError = PyErr_NewExceptionWithDoc(
      "stoker.StaleCacheError",
      "A cache no longer matches the folder (or list) it was packed from: pack it again, or\n"
      "pass allow_stale_cache=True to use it as it is. `code` holds the libstoker error code.",
      PyExc_OSError, NULL);
  if (!StaleCacheError || PyModule_AddObjectRef(m, "StaleCacheError", StaleCacheError) < 0)
    goto fail;
  type = PyType_FromSpec(&Loader_spec);
  if (!type || PyModule_AddObjectRef(m, "Loader", type) < 0) goto fail;
  Py_CLEAR(type);
  if (PyModule_AddStringConstant(m, "__version__", stk_version_string()) < 0) goto fail;
  /* the longest side a GPU decodes into (the bound of size, and of a device
   * pack's max_side): the Python layer's checks read it from here */
  if (PyModule_AddIntConstant(m, "GPU_MAX_SIDE", STK__GPU_MAX_SIDE) < 0) goto fail;
  /* the module's constants (_stoker.EINVAL, ...), one per row of errors.h */
  for (int i = 0; i < stk__num_errors; i++)
    if (PyModule_AddIntConstant(m, stk__errors[i].name, stk__errors[i].code) < 0) goto fail;
  return m;
fail:
  Py_XDECREF(type);
  Py_DECREF(m);
  return NULL;
}
