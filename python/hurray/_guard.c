/*
 * _guard: see _guard.h.
 */
#include "_guard.h"

#include <string.h>
#include <time.h>

#include "pythread.h"

PyObject *hy_sequence_copy(PyObject *obj, const char *message) {
  if (PyList_Check(obj)) return PyList_AsTuple(obj);
  return PySequence_Fast(obj, message); /* a tuple as it is, anything else a new list */
}

static int conv_max(PyObject *obj, uint64_t max, const char *what, uint64_t *out) {
  if (!PyLong_Check(obj) && !PyIndex_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be an integer, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return 0;
  }
  if (!PyLong_Check(obj)) {
    PyObject *index = PyNumber_Index(obj); /* numpy integers, IntEnum... */
    if (index == NULL) return 0;
    int ok = conv_max(index, max, what, out);
    Py_DECREF(index);
    return ok;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(obj); /* negative: OverflowError */
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return 0;
    PyErr_Clear();
    PyErr_Format(PyExc_OverflowError, "%s %R is out of range (0..%llu)", what, obj,
                 (unsigned long long)max);
    return 0;
  }
  if (v > max) {
    PyErr_Format(PyExc_OverflowError, "%s %R is out of range (0..%llu)", what, obj,
                 (unsigned long long)max);
    return 0;
  }
  *out = v;
  return 1;
}

int hy_field_u64(PyObject *obj, uint64_t max, const char *what, uint64_t *out) {
  /* A bool is an int to Python, but True as a dimension, an offset or a
   * count is a mistake the caller should hear of, as save_sharded's
   * parts and axis refuse it. */
  if (hy_refuse_bool(obj, what) < 0) return -1;
  if (!PyLong_Check(obj) && !PyIndex_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be an integer, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  return conv_max(obj, max, what, out) ? 0 : -1;
}

int hy_conv_u32(PyObject *obj, void *out) {
  uint64_t v;
  if (!conv_max(obj, UINT32_MAX, "value", &v)) return 0;
  *(uint32_t *)out = (uint32_t)v;
  return 1;
}

int hy_conv_u64(PyObject *obj, void *out) {
  uint64_t v;
  if (!conv_max(obj, UINT64_MAX, "value", &v)) return 0;
  *(uint64_t *)out = v;
  return 1;
}

int hy_refuse_bool(PyObject *obj, const char *what) {
  if (!PyBool_Check(obj)) return 0;
  PyErr_Format(PyExc_TypeError, "%s must be an integer, not bool", what);
  return -1;
}

int hy_conv_threads(PyObject *obj, void *out) {
  uint64_t v;
  if (hy_refuse_bool(obj, "threads")) return 0;
  if (!conv_max(obj, 65535, "threads", &v)) return 0;
  *(unsigned int *)out = (unsigned int)v;
  return 1;
}

int hy_check_max(uint64_t value, uint64_t max, const char *what) {
  if (value <= max) return 0;
  PyErr_Format(PyExc_OverflowError, "%s %llu is out of range (at most %llu)", what,
               (unsigned long long)value, (unsigned long long)max);
  return -1;
}

/* Replaces the pending UnicodeEncodeError of a str that holds a lone
 * surrogate (from os.fsdecode, or "\udc80" typed in) with a ValueError that
 * names the argument, as a NUL gets: the codec's message says neither what
 * was refused nor why hurray cannot keep it. The codec's error stays
 * attached as the cause. */
static void refuse_surrogate(PyObject *obj, const char *what) {
  PyObject *type, *cause, *tb;
  PyErr_Fetch(&type, &cause, &tb);
  PyErr_NormalizeException(&type, &cause, &tb);
  Py_ssize_t at = -1;
  if (cause == NULL || PyUnicodeEncodeError_GetStart(cause, &at) != 0) {
    PyErr_Clear();
    at = -1;
  }
  Py_XDECREF(type);
  Py_XDECREF(tb);
  PyErr_Format(PyExc_ValueError,
               "%s %R holds a lone surrogate (at index %zd), which UTF-8 cannot encode: "
               "hurray names and strings are UTF-8",
               what, obj, at);
  if (cause == NULL) return;
  PyObject *etype, *error, *etb;
  PyErr_Fetch(&etype, &error, &etb);
  PyErr_NormalizeException(&etype, &error, &etb);
  if (error != NULL) {
    Py_INCREF(cause);
    PyException_SetContext(error, cause); /* steals a reference */
    PyException_SetCause(error, cause);   /* steals the other */
  } else {
    Py_DECREF(cause);
  }
  PyErr_Restore(etype, error, etb);
}

const char *hy_utf8(PyObject *obj, const char *what) {
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(obj)->tp_name);
    return NULL;
  }
  Py_ssize_t len = 0;
  const char *s = PyUnicode_AsUTF8AndSize(obj, &len);
  if (s == NULL) {
    if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) refuse_surrogate(obj, what);
    return NULL;
  }
  if ((size_t)len != strlen(s)) {
    PyErr_Format(PyExc_ValueError,
                 "%s %R contains a NUL character, which hurray names and strings cannot hold",
                 what, obj);
    return NULL;
  }
  return s;
}

#define STREAM_CHUNK ((size_t)1 << 20)

/* 1 if `target` is an io.RawIOBase, 0 if not, -1 with an exception. */
static int stream_is_raw(PyObject *target) {
  PyObject *io = PyImport_ImportModule("io");
  if (io == NULL) return -1;
  PyObject *raw_class = PyObject_GetAttrString(io, "RawIOBase");
  Py_DECREF(io);
  if (raw_class == NULL) return -1;
  int raw = PyObject_IsInstance(target, raw_class);
  Py_DECREF(raw_class);
  return raw;
}

/* One write() call; how many bytes it took, or 0 with an exception. */
static size_t write_once(PyObject *target, const char *data, size_t len) {
  PyObject *chunk = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
  if (chunk == NULL) return 0;
  PyObject *result = PyObject_CallMethod(target, "write", "O", chunk);
  Py_DECREF(chunk);
  if (result == NULL) return 0;
  if (result == Py_None) {
    Py_DECREF(result);
    /* A raw stream (io.RawIOBase) returns None when it is non-blocking and
     * took nothing; other writers return None for "all of it". */
    int raw = stream_is_raw(target);
    if (raw < 0) return 0;
    if (raw) {
      PyErr_Format(PyExc_BlockingIOError,
                   "the stream's write() returned None: it is non-blocking and took none of "
                   "%zu bytes; save to a blocking stream",
                   len);
      return 0;
    }
    return len;
  }
  if (!PyLong_Check(result) && !PyBool_Check(result) && PyIndex_Check(result)) {
    PyObject *index = PyNumber_Index(result); /* numpy integers */
    Py_DECREF(result);
    if (index == NULL) return 0;
    result = index;
  }
  if (!PyLong_Check(result) || PyBool_Check(result)) {
    PyErr_Format(PyExc_TypeError, "the stream's write() returned %.100s, not an int or None",
                 Py_TYPE(result)->tp_name);
    Py_DECREF(result);
    return 0;
  }
  long long n = PyLong_AsLongLong(result);
  bool fits = !(n == -1 && PyErr_Occurred());
  if (!fits) PyErr_Clear(); /* past long long: reported below as it was */
  if (fits && n == 0) {
    PyErr_Format(PyExc_OSError, "the stream's write() accepted 0 of %zu bytes", len);
  } else if (!fits || n < 0 || (unsigned long long)n > len) {
    PyErr_Format(PyExc_OSError, "the stream's write() returned %R for a chunk of %zu bytes",
                 result, len);
  }
  Py_DECREF(result);
  return PyErr_Occurred() ? 0 : (size_t)n;
}

HurrayStatus hy_stream_write(void *ctx, const void *data, size_t len) {
  PyObject *target = ctx;
  const char *p = data;
  while (len > 0) {
    size_t n = write_once(target, p, len < STREAM_CHUNK ? len : STREAM_CHUNK);
    if (n == 0 || PyErr_CheckSignals() < 0) return HURRAY_ERR_IO;
    p += n;
    len -= n;
  }
  return HURRAY_OK;
}

void hy_cancel_init(HyCancel *c, bool may_rest) {
  c->main_thread = 0;
  c->may_rest = may_rest;
  c->quiet_until_ns = 0;
  PyObject *threading = PyImport_ImportModule("threading");
  PyObject *main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
  PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
  if (ident != NULL && PyLong_Check(ident)) c->main_thread = PyLong_AsUnsignedLong(ident);
  Py_XDECREF(ident);
  Py_XDECREF(main);
  Py_XDECREF(threading);
  /* The calls above run Python code, so a pending Ctrl-C may surface here as
   * KeyboardInterrupt: keep it (the caller sees PyErr_Occurred and aborts
   * the write) instead of clearing it with a failed lookup, which would lose
   * the signal. A plain Exception only means no threading module: then no
   * thread is the main one and nothing is checked. */
  if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception)) PyErr_Clear();
}

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool hy_cancel_requested(void *ctx) {
  HyCancel *c = ctx; /* only the main thread gets past the next line */
  if (c->main_thread == 0 || PyThread_get_thread_ident() != c->main_thread) return false;
  int64_t asked = monotonic_ns();
  if (asked < c->quiet_until_ns) return false;
  PyGILState_STATE gil = PyGILState_Ensure();
  bool waited = monotonic_ns() - asked > 1000000; /* another thread ran Python */
  bool cancel = PyErr_CheckSignals() < 0;         /* the exception stays set for the caller */
  PyGILState_Release(gil);
  c->quiet_until_ns = waited && c->may_rest ? asked + HY_CANCEL_QUIET_NS : 0;
  return cancel;
}

/* The class for errno `err`: io_class itself when Python maps the errno to
 * plain OSError, else a subclass of both io_class and the builtin Python
 * maps it to (FileNotFoundError, PermissionError, IsADirectoryError, ...),
 * made once and kept in io_class._os_subclasses. New reference. */
static PyObject *os_class(PyObject *io_class, int err) {
  PyObject *probe = PyObject_CallFunction(PyExc_OSError, "is", err, "");
  if (probe == NULL) return NULL;
  PyObject *builtin = Py_NewRef((PyObject *)Py_TYPE(probe));
  Py_DECREF(probe);
  if (builtin == PyExc_OSError) {
    Py_DECREF(builtin);
    return Py_NewRef(io_class);
  }
  PyObject *cache = PyObject_GetAttrString(io_class, "_os_subclasses");
  if (cache == NULL) {
    /* Only a missing cache is made anew: a MemoryError here replaced the
     * cache, and later errors were classes that earlier handlers miss. */
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
      Py_DECREF(builtin);
      return NULL;
    }
    PyErr_Clear();
    cache = PyDict_New();
    if (cache == NULL || PyObject_SetAttrString(io_class, "_os_subclasses", cache) < 0) {
      Py_XDECREF(cache);
      Py_DECREF(builtin);
      return NULL;
    }
  }
  PyObject *cls = PyDict_GetItemWithError(cache, builtin); /* borrowed */
  if (cls != NULL) {
    Py_INCREF(cls);
  } else if (!PyErr_Occurred()) {
    char name[128];
    snprintf(name, sizeof name, "hurray.Hurray%s", ((PyTypeObject *)builtin)->tp_name);
    PyObject *bases = PyTuple_Pack(2, io_class, builtin);
    cls = bases ? PyErr_NewExceptionWithDoc(name,
                                            "A HurrayIOError that is also the builtin "
                                            "OSError subclass its errno maps to.",
                                            bases, NULL)
                : NULL;
    Py_XDECREF(bases);
    if (cls != NULL && PyDict_SetItem(cache, builtin, cls) < 0) Py_CLEAR(cls);
  }
  Py_DECREF(cache);
  Py_DECREF(builtin);
  return cls;
}

PyObject *hy_os_class(PyObject *io_class, int err) { return os_class(io_class, err); }

PyObject *hy_raise_os(PyObject *io_class, HurrayStatus status, const HurrayError *error,
                      PyObject *filename) {
  PyObject *cls = os_class(io_class, error->os_errno);
  if (cls == NULL) return NULL;
  /* The message is an argument, not set afterwards: args is what pickle
   * hands the class to make the exception again. */
  PyObject *message = PyUnicode_FromFormat("%s: %s", hurray_status_name(status), error->message);
  PyObject *exc = message == NULL ? NULL
                  : filename != NULL
                      ? PyObject_CallFunction(cls, "iOO", error->os_errno, message, filename)
                      : PyObject_CallFunction(cls, "iO", error->os_errno, message);
  PyObject *code = PyLong_FromLong((long)status);
  PyObject *name = PyUnicode_FromString(hurray_status_name(status));
  if (exc != NULL && message != NULL && code != NULL && name != NULL &&
      PyObject_SetAttrString(exc, "status", code) == 0 &&
      PyObject_SetAttrString(exc, "status_name", name) == 0) {
    PyErr_SetObject(cls, exc);
  }
  Py_XDECREF(exc);
  Py_XDECREF(message);
  Py_XDECREF(code);
  Py_XDECREF(name);
  Py_DECREF(cls);
  return NULL;
}
