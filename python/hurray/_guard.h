/*
 * _guard: the checks every value crossing from Python into libhurray goes
 * through (range-checked integers, exact UTF-8 strings), the stream sink of
 * save(), and the cancel hook that lets Ctrl-C stop a save running with the
 * GIL released. Compiled into both extensions (_hurray and _formats).
 */
#ifndef HURRAY_PY_GUARD_H
#define HURRAY_PY_GUARD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>

#include "hurray/hurray.h"

/* PyArg "O&" converters: a Python int in range, else OverflowError (a
 * negative value or one past the type's maximum) or TypeError. Unlike the
 * 'I', 'k' and 'K' format units they never wrap. */
int hy_conv_u32(PyObject *obj, void *out);     /* uint32_t */
int hy_conv_u64(PyObject *obj, void *out);     /* uint64_t */
int hy_conv_threads(PyObject *obj, void *out); /* unsigned int, 0..65535 */
/* -1 with TypeError when obj is a bool: a count, size or axis of True is a
 * slip, not 1. */
int hy_refuse_bool(PyObject *obj, const char *what);

/* The same check for a named field (a descriptor field, "shape[1]"): 0, or
 * -1 with OverflowError or TypeError naming `what`. */
int hy_field_u64(PyObject *obj, uint64_t max, const char *what, uint64_t *out);

/* PySequence_Fast, except that a list (whose items Python code run while
 * they are converted, an __index__ or a __buffer__, could remove under the
 * caller's loop) comes back as a tuple copy. New reference; the
 * PySequence_Fast_GET_SIZE/GET_ITEM macros read it. */
PyObject *hy_sequence_copy(PyObject *obj, const char *message);

/* A uint64_t that must fit `max`: -1 with OverflowError naming `what`. */
int hy_check_max(uint64_t value, uint64_t max, const char *what);

/* The UTF-8 of str `obj`, borrowed from it; NULL with ValueError if it holds
 * a NUL (C strings would silently end there), TypeError if not a str. */
const char *hy_utf8(PyObject *obj, const char *what);

/* HurrayWriteFn for a Python object with write(), called with the GIL held.
 * Hands out bytes objects of at most 1 MiB (the sink may keep them), honours
 * write()'s return value (None: all written; an int: that many bytes, the
 * rest is written again), fails on 0 or a bad return, and checks for
 * signals after each call. On failure a Python exception is set. */
HurrayStatus hy_stream_write(void *ctx, const void *data, size_t len);

/* The cancel hook of a save or a read running with the GIL released: on
 * the main thread it takes the GIL briefly and runs PyErr_CheckSignals (a
 * raised KeyboardInterrupt stays set for the caller); elsewhere it is a
 * no-op, as Python delivers signals on the main thread only. With
 * `may_rest` (reads), when taking the GIL had to wait for another thread,
 * it stays quiet for HY_CANCEL_QUIET_NS: each wait can last a whole switch
 * interval, and a read of 1 GiB asks 64 times. */
typedef struct HyCancel {
  unsigned long main_thread;
  /* Whether the quiet period applies: a read's hook, not a save's, whose
   * last check before the rename must never be skipped. */
  bool may_rest;
  int64_t quiet_until_ns; /* CLOCK_MONOTONIC; 0: ask now */
} HyCancel;
#define HY_CANCEL_QUIET_NS ((int64_t)250 * 1000 * 1000)
/* Call with the GIL held, before the GIL is released. */
void hy_cancel_init(HyCancel *c, bool may_rest);
bool hy_cancel_requested(void *ctx);

/* Raises the error of a failure with error->os_errno set: an instance of
 * io_class (HurrayIOError), and of the builtin OSError subclass errno maps
 * to when there is one, with errno, strerror ("STATUS_NAME: message"),
 * filename (may be NULL), status and status_name. Returns NULL. */
PyObject *hy_raise_os(PyObject *io_class, HurrayStatus status, const HurrayError *error,
                      PyObject *filename);

/* The class hy_raise_os raises for errno `err` (made once, cached on
 * io_class). New reference, or NULL with an exception. */
PyObject *hy_os_class(PyObject *io_class, int err);

#endif
