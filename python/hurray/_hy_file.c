/*
 * _hy_file.c: the File type, a reader with the GIL released around I/O.
 */
#include "_hurray.h"

#include "../../src/io/reader_origin.h"

/* -------------------------------------------------------------------- File */

/* Counts the forks this process descends from: bumped in a child by
 * hy_after_fork_in_child, which _files.py registers with
 * os.register_at_fork. Process-wide, as a fork is; written only in a
 * just-forked child, before any other thread exists there. */
static unsigned long fork_generation;

/* The thread that made fork g, at [g % FORK_HISTORY]: the only thread of
 * the parent that lives on in that child. */
#define FORK_HISTORY 64
static unsigned long fork_threads[FORK_HISTORY];

PyObject *hy_after_fork_in_child(PyObject *module, PyObject *unused) {
  (void)module, (void)unused;
  fork_generation++;
  fork_threads[fork_generation % FORK_HISTORY] = PyThread_get_thread_ident();
  Py_RETURN_NONE;
}

/* Whether `owner`, which took a File's lock in `generation`, is still
 * inside that call in this process: only if it made every fork since. Any
 * other owner did not cross into the child, and a new thread there may be
 * given its ident (glibc reuses the vanished thread's stack). */
static bool still_inside(unsigned long owner, unsigned long generation, bool past_history) {
  /* Past the history the answer is `past_history`: what is safe for the
   * caller (refusing a call; not waiting for a lock no one may release). */
  if (fork_generation - generation >= FORK_HISTORY) return past_history;
  for (unsigned long g = generation + 1; g <= fork_generation; g++) {
    if (fork_threads[g % FORK_HISTORY] != owner) return false;
  }
  return true;
}

typedef struct FileObject {
  PyObject_HEAD HurrayReader *reader;
  PyThread_type_lock lock; /* serialises use of the reader against close */
  /* The thread holding `lock`, or 0; read and written under the GIL. Python
   * code that runs while the lock is held (a byte source's read, an
   * argument's __index__) may call back into this File on the same thread,
   * which must raise instead of waiting for itself. */
  unsigned long owner;
  unsigned long generation; /* fork_generation when this process last took `lock` */
  PyObject *path;
  bool pread;
  bool readonly;   /* buffers handed out are flagged read-only */
  size_t next;     /* the index after the last name found (under the GIL): see file_find */
  HyCancel cancel; /* the reader's cancel hook: Ctrl-C stops a long verify or read */
  /* fork_generation when `cancel` learnt the main thread: a child forked
   * from another thread has that thread as its main one. */
  unsigned long cancel_generation;
} FileObject;

/* Finds `name` (under the GIL). Callers mostly walk keys() in order, so
 * the entry after the last one found is compared first: one memcmp instead
 * of a binary search per name. A miss falls back to the search. */
static HurrayStatus file_find(FileObject *self, const char *name, size_t *index, HurrayError *e) {
  size_t len = 0, want = strlen(name);
  const char *at = hurray_reader_tensor_name_view(self->reader, self->next, &len);
  HurrayStatus s = HURRAY_OK;
  if (at != NULL && len == want && memcmp(at, name, len) == 0) {
    *index = self->next;
  } else {
    s = hurray_reader_find(self->reader, name, index, e);
  }
  if (s == HURRAY_OK) self->next = *index + 1;
  return s;
}

/* Points the reader's cancel hook at this process's main thread (once at
 * open, and again in a child forked since). -1 when a pending
 * KeyboardInterrupt surfaced meanwhile. */
static int file_learn_main_thread(FileObject *self) {
  hy_cancel_init(&self->cancel, true);
  if (PyErr_Occurred()) return -1;
  self->cancel_generation = fork_generation;
  return 0;
}

static int file_init(PyObject *op, PyObject *args, PyObject *kwargs) {
  FileObject *self = (FileObject *)op;
  static char *kwlist[] = {"path", "mmap", "verify", "readonly", "source", NULL};
  PyObject *path, *source = Py_None; /* source: _source.h; path then only names it */
  int use_mmap = 1, verify = 0, readonly = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|pppO:File", kwlist, PyUnicode_FSConverter,
                                   &path, &use_mmap, &verify, &readonly, &source)) {
    return -1;
  }
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  /* Re-initialising would close the reader under a thread using it. */
  if (self->lock != NULL) {
    Py_DECREF(path);
    PyErr_SetString(PyExc_RuntimeError, "_File is already initialised");
    return -1;
  }
  self->lock = PyThread_allocate_lock();
  self->generation = fork_generation;
  if (self->lock == NULL) {
    Py_DECREF(path);
    PyErr_NoMemory();
    return -1;
  }
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  /* Writable by default: a private (copy-on-write) mapping, so that a write
   * into a loaded tensor copies a page instead of killing the process. */
  options.mode = !use_mmap  ? HURRAY_READ_PREAD
                 : readonly ? HURRAY_READ_MMAP
                            : HURRAY_READ_MMAP_PRIVATE;
  options.verify_on_open = verify != 0;
  if (file_learn_main_thread(self) < 0) { /* nothing is opened */
    Py_DECREF(path);
    return -1;
  }
  options.cancel = hy_cancel_requested;
  options.cancel_ctx = &self->cancel;
  HurrayError e = {0};
  HurrayReader *reader = NULL;
  HurrayStatus s;
  if (source != Py_None) {
    use_mmap = readonly = 0; /* a source reader copies */
    s = hy_open_source_reader(source, verify != 0, &reader, &e);
  } else {
    Py_BEGIN_ALLOW_THREADS s = hurray_reader_open(PyBytes_AS_STRING(path), &options, &reader, &e);
    Py_END_ALLOW_THREADS
  }
  if (s != HURRAY_OK) {
    PyObject *name = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path));
    Py_DECREF(path);
    if (name == NULL) return -1; /* MemoryError: no name for the message */
    hy_raise_status_file(st, s, &e, name);
    Py_DECREF(name);
    return -1;
  }
  self->reader = reader;
  self->pread = !use_mmap;
  self->readonly = readonly != 0;
  Py_XSETREF(self->path, path);
  return 0;
}

static void file_dealloc(PyObject *op) {
  FileObject *self = (FileObject *)op;
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  hurray_reader_close(self->reader);
  if (self->lock != NULL) PyThread_free_lock(self->lock);
  Py_XDECREF(self->path);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static int file_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  return 0;
}

/* Raises if this thread already holds the lock: the caller is Python code
 * run from inside one of this File's own calls. */
static int file_refuse_reentry(FileObject *self) {
  unsigned long me = PyThread_get_thread_ident();
  if (self->owner != 0 && self->owner == me && still_inside(me, self->generation, true)) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the hurray File is in use by this thread: Python code run from inside "
                    "one of its calls (a byte source's read, an argument's conversion, a "
                    "signal handler run during a long read) cannot use it again");
    return -1;
  }
  return 0;
}

/* Takes the lock, waiting with the GIL released. A process forked while
 * another thread held it inherits it held, by a thread that does not exist
 * in the child: the child, finding it taken by an earlier generation,
 * starts a lock of its own (the inherited one is left alone; releasing or
 * freeing it is undefined). But when the thread that forked held it, that
 * thread is still inside its call here and will release it: others wait
 * for it, as in the parent. A lock free at the fork becomes this
 * generation's when it is first taken. */
static int file_lock(FileObject *self) {
  if (PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
    self->generation = fork_generation;
    return 0;
  }
  if (self->generation != fork_generation &&
      !(self->owner != 0 && still_inside(self->owner, self->generation, false))) {
    PyThread_type_lock fresh = PyThread_allocate_lock();
    if (fresh == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    self->lock = fresh;
    self->generation = fork_generation;
    self->owner = 0;
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    return 0;
  }
  /* Interruptible, as threading.Lock is: another thread's call on the
   * file (a slow URL) could hold the lock for minutes, and Ctrl-C on the
   * one waiting here did nothing until it ended. */
  for (;;) {
    PyLockStatus got;
    Py_BEGIN_ALLOW_THREADS got = PyThread_acquire_lock_timed(self->lock, -1, 1);
    Py_END_ALLOW_THREADS if (got == PY_LOCK_ACQUIRED) return 0;
    if (PyErr_CheckSignals() < 0) return -1; /* a handler raised */
  }
}

/* Takes the lock; fails if the file is closed. */
static int file_acquire(FileObject *self) {
  if (self->lock == NULL) {
    PyErr_SetString(PyExc_ValueError, "File is not open");
    return -1;
  }
  if (file_refuse_reentry(self) < 0 || file_lock(self) < 0) return -1;
  if (self->reader == NULL) {
    PyThread_release_lock(self->lock);
    PyErr_SetString(PyExc_ValueError, "I/O operation on a closed hurray file");
    return -1;
  }
  self->owner = PyThread_get_thread_ident();
  if (self->cancel_generation != fork_generation && file_learn_main_thread(self) < 0) {
    self->owner = 0; /* nothing is read */
    PyThread_release_lock(self->lock);
    return -1;
  }
  return 0;
}

/* Under the GIL, as file_acquire. */
static void file_release(FileObject *self) {
  self->owner = 0;
  PyThread_release_lock(self->lock);
}

/* hy_raise_status for a failure of this file's reader: an operating
 * system's refusal (a truncated file's EFAULT, a pread's EIO) names the
 * file, as the failure to open it does. */
static PyObject *file_raise(PyObject *op, HurrayStatus s, const HurrayError *e) {
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  PyObject *path = ((FileObject *)op)->path;
  if (e->os_errno == 0 || path == NULL || !PyBytes_Check(path)) return hy_raise_status(st, s, e);
  PyObject *name = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path));
  if (name == NULL) return NULL;
  hy_raise_status_file(st, s, e, name);
  Py_DECREF(name);
  return NULL;
}

static PyObject *file_close(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (self->lock == NULL) Py_RETURN_NONE;
  if (file_refuse_reentry(self) < 0 || file_lock(self) < 0) return NULL;
  HurrayReader *reader = self->reader;
  self->reader = NULL;
  PyThread_release_lock(self->lock);
  /* Closed outside the lock: letting go of a byte source runs Python code
   * (its __del__), which may use this File again; it then finds it closed.
   * Tensors already taken stay valid. */
  hurray_reader_close(reader);
  Py_RETURN_NONE;
}

static PyObject *file_closed(PyObject *op, void *closure) {
  (void)closure;
  return PyBool_FromLong(((FileObject *)op)->reader == NULL);
}

static PyObject *file_keys(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (file_acquire(self) < 0) return NULL;
  size_t n = hurray_reader_tensor_count(self->reader);
  PyObject *out = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; out != NULL && i < n; i++) {
    /* In place from the index, whose names open checked as UTF-8. */
    size_t len = 0;
    const char *s = hurray_reader_tensor_name_view(self->reader, i, &len);
    PyObject *name = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "strict");
    if (name == NULL) Py_CLEAR(out);
    else PyList_SET_ITEM(out, (Py_ssize_t)i, name);
  }
  file_release(self);
  return out;
}

static PyObject *file_metadata(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (file_acquire(self) < 0) return NULL;
  HurrayReader *r = self->reader;
  PyObject *out = PyDict_New();
  for (size_t i = 0; out != NULL && i < hurray_reader_metadata_count(r); i++) {
    const char *key = hurray_reader_metadata_key(r, i);
    PyObject *value = NULL;
    const char *s;
    int64_t iv;
    double fv;
    bool bv;
    const uint8_t *bytes;
    size_t len;
    switch (hurray_reader_metadata_type(r, i)) {
      case HURRAY_METADATA_STRING:
        hurray_reader_metadata_string(r, key, &s, NULL);
        value = PyUnicode_FromString(s);
        break;
      case HURRAY_METADATA_INT:
        hurray_reader_metadata_int(r, key, &iv, NULL);
        value = PyLong_FromLongLong(iv);
        break;
      case HURRAY_METADATA_FLOAT:
        hurray_reader_metadata_float(r, key, &fv, NULL);
        value = PyFloat_FromDouble(fv);
        break;
      case HURRAY_METADATA_BOOL:
        hurray_reader_metadata_bool(r, key, &bv, NULL);
        value = PyBool_FromLong(bv);
        break;
      default: /* bytes, and types of newer minor versions */
        hurray_reader_metadata_bytes(r, key, &bytes, &len, NULL);
        value = PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)len);
        break;
    }
    if (value == NULL || PyDict_SetItemString(out, key, value) < 0) Py_CLEAR(out);
    Py_XDECREF(value);
  }
  file_release(self);
  return out;
}

/* _metadata_unknown(): the keys whose type this library does not know (a
 * newer minor version's), which _metadata hands out as bytes. */
static PyObject *file_metadata_unknown(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (file_acquire(self) < 0) return NULL;
  HurrayReader *r = self->reader;
  PyObject *out = PyList_New(0);
  for (size_t i = 0; out != NULL && i < hurray_reader_metadata_count(r); i++) {
    HurrayMetadataType type = hurray_reader_metadata_type(r, i);
    if (type >= HURRAY_METADATA_STRING && type <= HURRAY_METADATA_BYTES) continue;
    PyObject *key = PyUnicode_FromString(hurray_reader_metadata_key(r, i));
    if (key == NULL || PyList_Append(out, key) < 0) Py_CLEAR(out);
    Py_XDECREF(key);
  }
  file_release(self);
  return out;
}

/* get(name) / get_rows(name, start, count): tensors that outlive the file. */
static PyObject *file_read(PyObject *op, PyObject *args, bool rows) {
  FileObject *self = (FileObject *)op;
  const char *name;
  uint64_t start = 0, count = 0;
  if (rows ? !PyArg_ParseTuple(args, "sO&O&:get_rows", &name, hy_conv_u64, &start, hy_conv_u64,
                               &count)
           : !PyArg_ParseTuple(args, "s:get", &name)) {
    return NULL;
  }
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = rows ? hurray_reader_get_rows(self->reader, name, start, count, &d,
                                                           &list, &e)
                                  : hurray_reader_get_tensor(self->reader, name, &d, &list, &e);
  Py_END_ALLOW_THREADS file_release(self);
  if (s != HURRAY_OK) return file_raise(op, s, &e);
  TensorObject *t = hy_tensor_alloc(st, NULL);
  if (t == NULL) {
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    return NULL;
  }
  /* pread copies and private mappings are writable; shared mappings not. */
  if (hy_tensor_adopt(t, d, list, !self->readonly) < 0) {
    Py_DECREF(t);
    return NULL;
  }
  t->protected_memory = self->readonly && !self->pread;
  return (PyObject *)t;
}

/* Wraps tensor k's parts (taken: destroyed on failure) into a Tensor and
 * files it under its name in `out`; a non-dense one's name also goes to
 * `special`. -1 with an exception. */
static int file_hand_out(FileObject *self, ModuleState *st, size_t k, HurrayDescriptor *d,
                         HurrayBufferList *list, PyObject *out, PyObject *special) {
  TensorObject *t = hy_tensor_alloc(st, NULL);
  if (t == NULL) {
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    return -1;
  }
  if (hy_tensor_adopt(t, d, list, !self->readonly) < 0) {
    Py_DECREF(t);
    return -1;
  }
  t->protected_memory = self->readonly && !self->pread;
  size_t len = 0;
  const char *name = hurray_reader_tensor_name_view(self->reader, k, &len);
  PyObject *key = PyUnicode_DecodeUTF8(name, (Py_ssize_t)len, "strict");
  int rc = key != NULL ? PyDict_SetItem(out, key, (PyObject *)t) : -1;
  if (rc == 0 && hurray_descriptor_layout_kind(t->descriptor) != HURRAY_LAYOUT_DENSE) {
    rc = PyList_Append(special, key);
  }
  Py_XDECREF(key);
  Py_DECREF(t);
  return rc;
}

/* _get_all() -> ({name: Tensor}, [names of non-dense tensors]): every
 * tensor, in index order, read in chunks with the GIL released and the
 * lock held once; what load() of a whole file costs per tensor is one
 * get_tensor in C and one Tensor. */
static PyObject *file_get_all(PyObject *op, PyObject *unused) {
  (void)unused;
  enum { CHUNK = 512 };
  FileObject *self = (FileObject *)op;
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  PyObject *out = PyDict_New(), *special = PyList_New(0);
  if (out == NULL || special == NULL || file_acquire(self) < 0) {
    Py_XDECREF(out);
    Py_XDECREF(special);
    return NULL;
  }
  HurrayReader *r = self->reader;
  size_t n = hurray_reader_tensor_count(r);
  HurrayError e = {0};
  HurrayDescriptor *ds[CHUNK];
  HurrayBufferList *ls[CHUNK];
  HurrayStatus s = HURRAY_OK;
  int rc = 0;
  /* Every tensor will be touched: the disk reads the data region through
   * a deep queue while the tensors are built and touched, where faults
   * alone read one read-ahead window at a time (cold load-all of 20,000
   * tensors: median 0.091 s with it, 0.420 s without; ADR-0028). Its
   * requests are made on a thread of their own while the tensors are
   * built, and go on after this returns, while the caller touches them:
   * waiting for the last request held load() until the disk had read all
   * but a queue's worth of the file. */
  HurrayReadAhead *ahead;
  Py_BEGIN_ALLOW_THREADS ahead = hurray__reader_read_ahead_start(r);
  Py_END_ALLOW_THREADS for (size_t start = 0; rc == 0 && s == HURRAY_OK && start < n;
                            start += CHUNK) {
    size_t m = n - start < CHUNK ? n - start : CHUNK, got = 0;
    Py_BEGIN_ALLOW_THREADS for (; got < m; got++) {
      s = hurray__reader_get_tensor_at(r, start + got, &ds[got], &ls[got], &e);
      if (s != HURRAY_OK) break;
    }
    Py_END_ALLOW_THREADS for (size_t k = 0; k < got; k++) {
      if (rc == 0) {
        rc = file_hand_out(self, st, start + k, ds[k], ls[k], out, special);
      } else {
        hurray_buffer_list_destroy(ls[k]);
        hurray_descriptor_destroy(ds[k]);
      }
    }
  }
  hurray__reader_read_ahead_detach(ahead);
  file_release(self);
  if (rc != 0 || s != HURRAY_OK) {
    Py_DECREF(out);
    Py_DECREF(special);
    if (rc != 0) return NULL;
    if (s == HURRAY_ERR_NO_MEMORY && e.message[0] == '\0') return PyErr_NoMemory();
    return file_raise(op, s, &e);
  }
  return Py_BuildValue("(NN)", out, special);
}

static PyObject *file_get(PyObject *op, PyObject *args) { return file_read(op, args, false); }
static PyObject *file_get_rows(PyObject *op, PyObject *args) { return file_read(op, args, true); }

/* The validated descriptor of tensor `name` (caller-owned), or NULL with an
 * exception. `format` is the PyArg format naming the calling method. */
static HurrayDescriptor *file_lookup(PyObject *op, PyObject *args, const char *format) {
  FileObject *self = (FileObject *)op;
  const char *name;
  if (!PyArg_ParseTuple(args, format, &name)) return NULL;
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_reader_get_descriptor(self->reader, name, &d, &e);
  file_release(self);
  if (s != HURRAY_OK) {
    file_raise(op, s, &e);
    return NULL;
  }
  return d;
}

static PyObject *file_descriptor(PyObject *op, PyObject *args) {
  HurrayDescriptor *d = file_lookup(op, args, "s:descriptor");
  if (d == NULL) return NULL;
  PyObject *out = hy_encode_descriptor(hy_state_of_type(Py_TYPE(op)), d);
  hurray_descriptor_destroy(d);
  return out;
}

/* The dtype and shape of tensor `name`, read in place from the index
 * (hurray_reader_tensor_shape: no descriptor is decoded or allocated).
 * -1 with an exception. */
static int file_peek_shape(PyObject *op, PyObject *name_obj, HurrayDType *dtype, uint32_t *rank,
                           uint64_t *shape) {
  FileObject *self = (FileObject *)op;
  const char *name = hy_utf8(name_obj, "tensor name");
  if (name == NULL) return -1;
  /* No lock: this holds the GIL throughout, and close frees the reader
   * with the GIL held too, so the reader cannot go away under it; what it
   * reads (the index) no thread writes. Without the lock round trip, and
   * with untracked tuples, 20,000 shapes took 3.0 ms instead of 3.9 (best
   * of 15, CPU time; issue 19). */
  if (self->reader == NULL) {
    PyErr_SetString(PyExc_ValueError, self->lock == NULL
                                          ? "File is not open"
                                          : "I/O operation on a closed hurray file");
    return -1;
  }
  HurrayError e = {0};
  size_t index = 0;
  HurrayStatus s = file_find(self, name, &index, &e);
  if (s == HURRAY_OK) s = hurray_reader_tensor_shape(self->reader, index, dtype, rank, shape, &e);
  if (s != HURRAY_OK) {
    file_raise(op, s, &e);
    return -1;
  }
  return 0;
}

/* A tuple of ints can be in no reference cycle: it leaves the garbage
 * collector's lists, so that listing 20,000 shapes does not make every
 * collection walk them (CPython untracks such tuples itself, but only when
 * a collection first meets them). */
static PyObject *shape_tuple(uint32_t rank, const uint64_t *shape) {
  PyObject *dims = PyTuple_New(rank);
  for (uint32_t i = 0; dims != NULL && i < rank; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(shape[i]);
    if (v == NULL) {
      Py_CLEAR(dims);
      break;
    }
    PyTuple_SET_ITEM(dims, i, v);
  }
  if (dims != NULL && PyObject_GC_IsTracked(dims)) PyObject_GC_UnTrack(dims);
  return dims;
}

/* _shape(name) -> (dtype name, shape tuple): what listing a file needs. */
static PyObject *file_shape(PyObject *op, PyObject *name) {
  HurrayDType dtype;
  uint32_t rank;
  uint64_t shape[HURRAY_MAX_RANK];
  if (file_peek_shape(op, name, &dtype, &rank, shape) < 0) return NULL;
  PyObject *dims = shape_tuple(rank, shape);
  return dims ? Py_BuildValue("(sN)", hurray_dtype_name(dtype), dims) : NULL;
}

/* shape(name) -> shape tuple; File.shape is this method. */
static PyObject *file_shape_only(PyObject *op, PyObject *name) {
  HurrayDType dtype;
  uint32_t rank;
  uint64_t shape[HURRAY_MAX_RANK];
  if (file_peek_shape(op, name, &dtype, &rank, shape) < 0) return NULL;
  return shape_tuple(rank, shape);
}

/* dtype(name) -> dtype name; File.dtype is this method. */
static PyObject *file_dtype_only(PyObject *op, PyObject *name) {
  HurrayDType dtype;
  uint32_t rank;
  uint64_t shape[HURRAY_MAX_RANK];
  if (file_peek_shape(op, name, &dtype, &rank, shape) < 0) return NULL;
  return PyUnicode_FromString(hurray_dtype_name(dtype));
}

/* read_buffer(name, index, out): pread into a caller's writable buffer. */
static PyObject *file_read_buffer(PyObject *op, PyObject *args) {
  FileObject *self = (FileObject *)op;
  const char *name;
  PyObject *index_obj;
  uint64_t index;
  Py_buffer out;
  if (!PyArg_ParseTuple(args, "sOw*:read_buffer", &name, &index_obj, &out)) return NULL;
  if (hy_field_u64(index_obj, UINT32_MAX, "buffer index", &index) < 0) {
    PyBuffer_Release(&out);
    return NULL;
  }
  if (file_acquire(self) < 0) {
    PyBuffer_Release(&out);
    return NULL;
  }
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray_reader_read_buffer(self->reader, name, (uint32_t)index,
                                                       out.buf, (uint64_t)out.len, &e);
  Py_END_ALLOW_THREADS file_release(self);
  PyBuffer_Release(&out);
  if (s != HURRAY_OK) return file_raise(op, s, &e);
  Py_RETURN_NONE;
}

/* _read_spans(out, spans, threads): each span (name, buffer, offset, length,
 * out_offset) copies bytes [offset, offset + length) of that stored buffer
 * to out[out_offset:out_offset + length], on `threads` threads with the GIL
 * released (hurray_reader_read_spans). The GPU loader fills its pinned
 * staging buffers with it. */
/* Span k of `seq` (name, buffer, offset, length, out_offset) into spans[k]
 * and names[k] (borrowed from `seq`), every offset checked against `out`;
 * -1 with an exception. Runs Python code (__index__), so before the lock. */
static int parse_spans(PyObject *seq, const Py_buffer *out, HurrayReadSpan *spans,
                       const char **names) {
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  for (Py_ssize_t k = 0; k < n; k++) {
    uint32_t buffer;
    uint64_t offset, length, at;
    PyObject *item = PyTuple_GET_ITEM(seq, k); /* `names[k]` lives as long as `seq` */
    if (!PyTuple_Check(item) ||
        !PyArg_ParseTuple(item, "sO&O&O&O&:span", &names[k], hy_conv_u32, &buffer, hy_conv_u64,
                          &offset, hy_conv_u64, &length, hy_conv_u64, &at)) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError,
                        "a span is a tuple (name, buffer, offset, length, out_offset)");
      }
      return -1;
    }
    if (at > (uint64_t)out->len || length > (uint64_t)out->len - at) {
      PyErr_Format(PyExc_ValueError, "span %zd: out[%llu:+%llu] is beyond its %zd bytes", k,
                   (unsigned long long)at, (unsigned long long)length, out->len);
      return -1;
    }
    spans[k].buffer = buffer;
    spans[k].offset = offset;
    spans[k].length = length;
    spans[k].dst = (uint8_t *)out->buf + at;
  }
  return 0;
}

static PyObject *file_read_spans(PyObject *op, PyObject *args) {
  FileObject *self = (FileObject *)op;
  Py_buffer out;
  PyObject *list;
  unsigned int threads;
  if (!PyArg_ParseTuple(args, "w*OO&:_read_spans", &out, &list, hy_conv_threads, &threads)) {
    return NULL;
  }
  /* A tuple of its own, so that Python code run by the conversions below
   * (an item's __index__) cannot shrink it under the loop; every span is
   * parsed before the lock is taken, so none runs while it is held. */
  PyObject *seq = PySequence_Check(list) ? PySequence_Tuple(list) : NULL;
  HurrayReadSpan *spans = NULL;
  const char **names = NULL;
  if (seq == NULL) {
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_SetString(PyExc_TypeError, "spans must be a sequence of tuples");
    }
    goto fail;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  spans = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof *spans);
  names = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof *names);
  if (spans == NULL || names == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  if (parse_spans(seq, &out, spans, names) < 0) goto fail;
  if (file_acquire(self) < 0) goto fail;
  for (Py_ssize_t k = 0; k < n; k++) {
    HurrayError e = {0};
    HurrayStatus s = hurray_reader_find(self->reader, names[k], &spans[k].tensor, &e);
    if (s != HURRAY_OK) {
      file_raise(op, s, &e);
      goto fail_locked;
    }
  }
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray_reader_read_spans(self->reader, spans, (size_t)n,
                                                      threads == 0   ? 1u
                                                      : threads > 64 ? 64u
                                                                     : threads,
                                                      &e);
  Py_END_ALLOW_THREADS file_release(self);
  PyMem_Free(spans);
  PyMem_Free(names);
  Py_DECREF(seq);
  PyBuffer_Release(&out);
  if (s != HURRAY_OK) return file_raise(op, s, &e);
  Py_RETURN_NONE;
fail_locked:
  file_release(self);
fail:
  PyMem_Free(spans);
  PyMem_Free(names);
  Py_XDECREF(seq);
  PyBuffer_Release(&out);
  return NULL;
}

static PyObject *file_verify(PyObject *op, PyObject *args) {
  FileObject *self = (FileObject *)op;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "|z:verify", &name)) return NULL;
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray_reader_verify(self->reader, name, &e);
  Py_END_ALLOW_THREADS file_release(self);
  if (s != HURRAY_OK) return file_raise(op, s, &e);
  Py_RETURN_NONE;
}

/* _populate(threads): pre-fault the whole mapping (hurray_reader_populate). */
static PyObject *file_populate(PyObject *op, PyObject *arg) {
  FileObject *self = (FileObject *)op;
  unsigned threads = 0; /* an int (operator.index), never a float or str */
  if (!hy_conv_threads(arg, &threads)) return NULL;
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray_reader_populate(self->reader, threads, &e);
  Py_END_ALLOW_THREADS file_release(self);
  if (s != HURRAY_OK) return file_raise(op, s, &e);
  Py_RETURN_NONE;
}

/* _cached_fraction(): share of the tensor data in the page cache. */
static PyObject *file_cached_fraction(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  double fraction = 0;
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray_reader_cached_fraction(self->reader, &fraction, &e);
  Py_END_ALLOW_THREADS file_release(self);
  if (s != HURRAY_OK) return file_raise(op, s, &e);
  return PyFloat_FromDouble(fraction);
}
static PyGetSetDef file_getset[] = {
    {"closed", file_closed, NULL, "True once close() ran", NULL},
    {NULL},
};

/* object.__reduce_ex__ calls an overridden __reduce__ at every protocol
 * (so a subclass may override this one); copyreg's protocols 0 and 1
 * would otherwise
 * make a _File with no reader. */
static PyObject *file_reduce(PyObject *op, PyObject *unused) {
  (void)op, (void)unused;
  PyErr_SetString(PyExc_TypeError,
                  "a hurray file's reader cannot be copied or pickled; open the path again");
  return NULL;
}

static PyMethodDef file_methods[] = {
    {"__reduce__", file_reduce, METH_NOARGS, "refused: see python-bindings.md"},
    {"keys", file_keys, METH_NOARGS, "tensor names, sorted"},
    {"_metadata", file_metadata, METH_NOARGS, "file metadata as a dict"},
    {"_metadata_unknown", file_metadata_unknown, METH_NOARGS,
     "keys of metadata types this library does not know"},
    {"_get", file_get, METH_VARARGS, "read one tensor"},
    {"_get_all", file_get_all, METH_NOARGS,
     "read every tensor: ({name: Tensor}, non-dense names)"},
    {"_get_rows", file_get_rows, METH_VARARGS, "read rows along dimension 0"},
    {"_descriptor", file_descriptor, METH_VARARGS, "encoded descriptor of one tensor"},
    {"_shape", file_shape, METH_O, "(dtype name, shape) of one tensor"},
    {"shape", file_shape_only, METH_O, "shape of one tensor, from the index"},
    {"dtype", file_dtype_only, METH_O, "dtype name of one tensor, from the index"},
    {"verify", file_verify, METH_VARARGS, "check checksums of one tensor or all"},
    {"_read_buffer", file_read_buffer, METH_VARARGS, "pread one buffer into caller memory"},
    {"_read_spans", file_read_spans, METH_VARARGS, "pread pieces of buffers, several threads"},
    {"_populate", file_populate, METH_O, "pre-fault the mapping with n threads"},
    {"_cached_fraction", file_cached_fraction, METH_NOARGS, "share of data in the page cache"},
    {"close", file_close, METH_NOARGS, "close; tensors already read stay valid"},
    {NULL},
};

static PyType_Slot file_slots[] = {
    {Py_tp_init, file_init},     {Py_tp_dealloc, file_dealloc}, {Py_tp_traverse, file_traverse},
    {Py_tp_getset, file_getset}, {Py_tp_methods, file_methods}, {0, NULL},
};

PyType_Spec hy_file_spec = {"hurray._hurray._File", sizeof(FileObject), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                            file_slots};
