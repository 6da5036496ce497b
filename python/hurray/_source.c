/*
 * Python objects as byte sources: see _source.h. Each callback runs on the
 * thread of the reader call that needs the bytes (with the GIL released by
 * the binding), takes the GIL, calls the object and lets the GIL go again.
 * The memoryview handed to Python is released before the callback returns;
 * a source that kept an export of it (a numpy array over it) fails the read.
 * A slice of it is no export and outlives the release, pointing into memory
 * the reader frees: the sources are this package's own (_remote.py), which
 * copy into the view and keep nothing, and this private interface takes no
 * others. Handing out a copy instead would cost a second buffer the size of
 * every read.
 */
#include "_source.h"

#include <stdio.h>

#include "_shared.h"

/* The source's exception, as the reader's error message; then cleared (the
 * Python source records its own exceptions for the binding to re-raise). */
static HurrayStatus fail_from_python(HurrayError *error) {
  PyObject *type = NULL, *exc = NULL, *tb = NULL;
  PyErr_Fetch(&type, &exc, &tb);
  PyErr_NormalizeException(&type, &exc, &tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  PyObject *text = exc != NULL ? PyObject_Str(exc) : NULL;
  const char *message = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
  if (message == NULL) PyErr_Clear();
  error->code = HURRAY_ERR_IO;
  snprintf(error->message, sizeof error->message, "source: %s: %s",
           exc != NULL ? Py_TYPE(exc)->tp_name : "error",
           message != NULL ? message : "(no message)");
  error->os_errno = 0;
  Py_XDECREF(text);
  Py_XDECREF(exc);
  return HURRAY_ERR_IO;
}

/* A writable memoryview over [dst, dst + length); NULL with an exception. */
static PyObject *view_of(void *dst, uint64_t length) {
  if (length > (uint64_t)PY_SSIZE_T_MAX) {
    PyErr_SetString(PyExc_OverflowError, "read too large");
    return NULL;
  }
  return PyMemoryView_FromMemory(dst, (Py_ssize_t)length, PyBUF_WRITE);
}

/* Releases every view; false (with an exception) if Python kept an export
 * of one, which would outlive the memory it points to. */
static bool release_views(PyObject **views, size_t n) {
  bool ok = true;
  for (size_t i = 0; i < n; i++) {
    if (views[i] == NULL) continue;
    PyObject *r = PyObject_CallMethod(views[i], "release", NULL);
    if (r == NULL) ok = false;
    Py_XDECREF(r);
    Py_DECREF(views[i]);
  }
  return ok;
}

/* After the source's call (`ok` if it succeeded): releases the views, and
 * keeps the source's own exception over any the release raises. */
static bool release_after_call(bool ok, PyObject **views, size_t n) {
  PyObject *ht = NULL, *hv = NULL, *htb = NULL;
  if (!ok) PyErr_Fetch(&ht, &hv, &htb);
  if (!release_views(views, n)) ok = false;
  if (ht != NULL) {
    PyErr_Clear();
    PyErr_Restore(ht, hv, htb); /* the source's own exception wins */
  }
  return ok;
}

static HurrayStatus source_read(void *ctx, uint64_t offset, uint64_t length, void *dst,
                                HurrayError *error) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *view = view_of(dst, length);
  PyObject *result = view != NULL ? PyObject_CallMethod((PyObject *)ctx, "readinto", "KO",
                                                        (unsigned long long)offset, view)
                                  : NULL;
  bool ok = result != NULL;
  Py_XDECREF(result);
  ok = release_after_call(ok, &view, 1);
  HurrayStatus status = ok ? HURRAY_OK : fail_from_python(error);
  PyGILState_Release(gil);
  return status;
}

static HurrayStatus source_read_batch(void *ctx, const HurrayByteRange *ranges, size_t count,
                                      HurrayError *error) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject **views = PyMem_Calloc(count ? count : 1, sizeof *views);
  PyObject *list = views != NULL ? PyList_New((Py_ssize_t)count) : PyErr_NoMemory();
  bool ok = list != NULL;
  for (size_t i = 0; ok && i < count; i++) {
    views[i] = view_of(ranges[i].dst, ranges[i].length);
    PyObject *item = views[i] != NULL
                         ? Py_BuildValue("(KO)", (unsigned long long)ranges[i].offset, views[i])
                         : NULL;
    if (item == NULL) ok = false;
    else PyList_SET_ITEM(list, (Py_ssize_t)i, item);
  }
  PyObject *result = ok ? PyObject_CallMethod((PyObject *)ctx, "read_batch", "O", list) : NULL;
  ok = result != NULL;
  Py_XDECREF(result);
  Py_XDECREF(list); /* drops the tuples' references; `views` keeps its own */
  ok = views != NULL ? release_after_call(ok, views, count) : ok;
  PyMem_Free(views);
  HurrayStatus status = ok ? HURRAY_OK : fail_from_python(error);
  PyGILState_Release(gil);
  return status;
}

static void source_release(void *ctx) {
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF((PyObject *)ctx);
  PyGILState_Release(gil);
}

HurrayStatus hy_open_source_reader(PyObject *source, bool verify, HurrayReader **out,
                                   HurrayError *error) {
  PyObject *size_obj = PyObject_GetAttrString(source, "size");
  unsigned long long size = size_obj != NULL ? PyLong_AsUnsignedLongLong(size_obj) : 0;
  Py_XDECREF(size_obj);
  if (PyErr_Occurred()) return fail_from_python(error);
  int batch = hy_has_attr(source, "read_batch");
  if (batch < 0) return fail_from_python(error);
  HurrayByteSource s = HURRAY_BYTE_SOURCE_INIT;
  s.flags = verify ? HURRAY_BYTE_SOURCE_VERIFY_READS : 0;
  s.size = size;
  s.ctx = Py_NewRef(source); /* released by the reader (source_release) */
  s.read = source_read;
  s.read_batch = batch ? source_read_batch : NULL;
  s.release = source_release;
  HurrayStatus status;
  Py_BEGIN_ALLOW_THREADS status = hurray_reader_open_byte_source(&s, NULL, out, error);
  Py_END_ALLOW_THREADS return status;
}
