"""ctypes access to the public C API of libhurray (HURRAY_LIB) and to the
PyCapsule functions, for tests that play a C producer or a C consumer of
the __hurray__ capsule without going through the Python bindings.

Not a test module itself (no test_ prefix); test_capsule.py and
test_leaks.py import it.
"""

from __future__ import annotations

import collections
import ctypes
import os
import struct
from typing import Optional, Sequence

import numpy as np

HURRAY_LIB = os.environ.get("HURRAY_LIB")

CAPSULE_NAME = b"hurray_buffer"
USED_CAPSULE_NAME = b"used_hurray_buffer"

# The capsule keeps the name pointer without copying it: keep these alive
# for the whole process.
_NAME = ctypes.create_string_buffer(CAPSULE_NAME)
_USED_NAME = ctypes.create_string_buffer(USED_CAPSULE_NAME)

RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

# Every release callback ever handed to C stays alive for the whole process,
# so that a release running late (e.g. a capsule kept alive by a traceback)
# never calls freed trampoline memory.
_CALLBACKS = []


class HurrayError(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 512)]


# --------------------------------------------------------------- PyCapsule

api = ctypes.pythonapi
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
api.PyCapsule_GetName.restype = ctypes.c_char_p
api.PyCapsule_GetName.argtypes = [ctypes.py_object]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_GetContext.restype = ctypes.c_void_p
api.PyCapsule_GetContext.argtypes = [ctypes.py_object]
api.PyCapsule_SetContext.restype = ctypes.c_int
api.PyCapsule_SetContext.argtypes = [ctypes.py_object, ctypes.c_void_p]
api.PyCapsule_GetDestructor.restype = ctypes.c_void_p
api.PyCapsule_GetDestructor.argtypes = [ctypes.py_object]
api.PyCapsule_IsValid.restype = ctypes.c_int
api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyMem_RawMalloc.restype = ctypes.c_void_p
api.PyMem_RawMalloc.argtypes = [ctypes.c_size_t]
api.PyMem_RawFree.restype = None
api.PyMem_RawFree.argtypes = [ctypes.c_void_p]


def failure(exc_type, fn, *args):
    """Calls fn(*args), which must raise exc_type; returns (status_name,
    message) and keeps no reference to the exception, its traceback or the
    frames (and so to any capsule those frames hold)."""
    try:
        fn(*args)
    except exc_type as exc:
        return getattr(exc, "status_name", None), str(exc)
    raise AssertionError(f"{fn!r} did not raise {exc_type.__name__}")


def capsule_name(capsule) -> bytes:
    return api.PyCapsule_GetName(capsule)


def capsule_context(capsule) -> int:
    return api.PyCapsule_GetContext(capsule)


_destructor = None


def hurray_capsule_destructor() -> int:
    """The capsule destructor of the hurray extension, taken from a capsule
    it made: frees the context with PyMem_RawFree and, while the capsule is
    unconsumed, destroys its list."""
    global _destructor
    if _destructor is None:
        import hurray

        capsule = hurray.from_numpy(np.zeros(1, np.uint8)).__hurray__()
        _destructor = api.PyCapsule_GetDestructor(capsule)
        assert _destructor
    return _destructor


# ---------------------------------------------------------------- libhurray

_lib = None


def lib():
    """libhurray.so from HURRAY_LIB, with argument types declared."""
    global _lib
    if _lib is not None:
        return _lib
    if not HURRAY_LIB:
        raise RuntimeError("HURRAY_LIB is not set")
    L = ctypes.CDLL(HURRAY_LIB)
    vp, u64, sz, st = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int
    err = ctypes.POINTER(HurrayError)
    sig = {
        "hurray_abi_version": (ctypes.c_uint32, []),
        "hurray_status_name": (ctypes.c_char_p, [st]),
        "hurray_buffer_create": (st, [vp, u64, RELEASE_FN, vp, ctypes.POINTER(vp), err]),
        "hurray_buffer_destroy": (None, [vp]),
        "hurray_buffer_set_alignment": (st, [vp, ctypes.c_uint32, err]),
        "hurray_buffer_set_sync": (st, [vp, st, vp, err]),
        "hurray_buffer_set_device": (st, [vp, ctypes.c_int32, ctypes.c_int32, st, err]),
        "hurray_buffer_data": (vp, [vp]),
        "hurray_buffer_size": (u64, [vp]),
        "hurray_buffer_alignment": (ctypes.c_uint32, [vp]),
        "hurray_buffer_list_create": (st, [ctypes.POINTER(vp), err]),
        "hurray_buffer_list_push": (st, [vp, vp, err]),
        "hurray_buffer_list_len": (sz, [vp]),
        "hurray_buffer_list_get": (vp, [vp, sz]),
        "hurray_buffer_list_destroy": (None, [vp]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(L, name)
        fn.restype = restype
        fn.argtypes = argtypes
    _lib = L
    return L


def check(status: int, error: HurrayError) -> None:
    if status != 0:
        name = lib().hurray_status_name(status).decode()
        raise AssertionError(f"{name}: {error.message.decode(errors='replace')}")


def aligned(nbytes: int, alignment: int = 64) -> np.ndarray:
    """A writable uint8 array of nbytes whose address is a multiple of alignment."""
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    out = np.ndarray((nbytes,), np.uint8, buffer=raw, offset=start)
    assert out.ctypes.data % alignment == 0
    return out


def aligned_copy(array, alignment: int = 64) -> np.ndarray:
    """The bytes of `array` (C order) in fresh aligned memory, as uint8."""
    src = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    out = aligned(src.size, alignment)
    out[:] = src
    return out


class Producer:
    """A producer of hurray capsules written against the C API only: one
    HurrayBuffer per array (pointing into the array, zero-copy), pushed in
    order into a HurrayBufferList, plus a context struct
    {uint32 abi_version; uint32 reserved; uint64 descriptor_len; descriptor}.

    Every release callback is counted per buffer in `released`
    (key: buffer index). The arrays stay alive as long as the producer.

    destructor: "hurray" uses the extension's own capsule destructor (the
    context is then allocated with PyMem_RawMalloc, which that destructor
    frees); None makes a capsule without destructor whose context lives in
    ctypes memory owned by the producer (an unconsumed list then leaks,
    unless the test destroys it itself).
    """

    def __init__(
        self,
        descriptor: bytes,
        arrays: Sequence[np.ndarray],
        *,
        abi_version: int = 3,
        destructor: Optional[str] = "hurray",
        alignment: int = 64,
        pointer: str = "list",
        sync: Optional[tuple] = None,
        device: Optional[tuple] = None,
    ):
        self.descriptor = bytes(descriptor)
        self.arrays = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
        self.abi_version = abi_version
        self.destructor = destructor
        self.alignment = alignment
        self.pointer = pointer
        self.sync = sync  # (mode, handle) for every buffer: 1 STREAM, 2 EVENT
        self.device = device  # (device type, id, memory class) for every buffer
        self.released = collections.Counter()
        self.release_data = collections.defaultdict(list)
        self._release = RELEASE_FN(self._on_release)
        _CALLBACKS.append(self._release)
        self._contexts = []  # ctypes-owned contexts (destructor=None)
        self.made = 0

    def _on_release(self, data, ctx):
        index = int(ctx) - 1
        self.released[index] += 1
        self.release_data[index].append(data)

    def _buffer(self, index: int) -> int:
        L = lib()
        e = HurrayError()
        array = self.arrays[index]
        handle = ctypes.c_void_p()
        data = array.ctypes.data if array.size else None
        check(
            L.hurray_buffer_create(
                data, array.size, self._release, index + 1, ctypes.byref(handle), ctypes.byref(e)
            ),
            e,
        )
        if self.alignment > 1:
            check(L.hurray_buffer_set_alignment(handle, self.alignment, ctypes.byref(e)), e)
        if self.sync is not None:
            check(L.hurray_buffer_set_sync(handle, *self.sync, ctypes.byref(e)), e)
        if self.device is not None:
            check(L.hurray_buffer_set_device(handle, *self.device, ctypes.byref(e)), e)
        return handle.value

    def make_list(self) -> int:
        L = lib()
        e = HurrayError()
        handle = ctypes.c_void_p()
        check(L.hurray_buffer_list_create(ctypes.byref(handle), ctypes.byref(e)), e)
        for i in range(len(self.arrays)):
            check(L.hurray_buffer_list_push(handle, self._buffer(i), ctypes.byref(e)), e)
        return handle.value

    def context_bytes(self) -> bytes:
        return struct.pack("<IIQ", self.abi_version, 0, len(self.descriptor)) + self.descriptor

    def capsule(self):
        """A fresh capsule; each call makes a new list of new handles."""
        if self.pointer == "list":
            pointer = self.make_list()
        else:  # "buffer": an ABI-2 style capsule whose pointer is one HurrayBuffer
            pointer = self._buffer(0)
        ctx = self.context_bytes()
        self.made += 1
        if self.destructor == "hurray":
            raw = api.PyMem_RawMalloc(len(ctx))
            assert raw
            ctypes.memmove(raw, ctx, len(ctx))
            capsule = api.PyCapsule_New(
                pointer, ctypes.addressof(_NAME), hurray_capsule_destructor()
            )
        else:
            holder = ctypes.create_string_buffer(ctx, len(ctx))
            self._contexts.append(holder)
            raw = ctypes.addressof(holder)
            capsule = api.PyCapsule_New(pointer, ctypes.addressof(_NAME), None)
        assert api.PyCapsule_SetContext(capsule, raw) == 0
        return capsule

    def __hurray__(self, stream=None):
        assert stream is None
        return self.capsule()


def read_capsule_buffers(capsule) -> list:
    """A C consumer on the capsule pointer, public C API only: the bytes of
    every buffer of the list (without consuming the capsule)."""
    L = lib()
    pointer = api.PyCapsule_GetPointer(capsule, CAPSULE_NAME)
    assert pointer
    out = []
    for i in range(L.hurray_buffer_list_len(pointer)):
        handle = L.hurray_buffer_list_get(pointer, i)  # borrowed: never destroyed
        assert handle
        size = L.hurray_buffer_size(handle)
        data = L.hurray_buffer_data(handle)
        out.append(ctypes.string_at(data, size) if size else b"")
    assert L.hurray_buffer_list_get(pointer, L.hurray_buffer_list_len(pointer)) is None
    return out


def consume_in_c(capsule, check_version: bool = True) -> int:
    """Takes the list out of the capsule the way a C consumer does (check the
    name and the ABI version, rename to used_hurray_buffer) and returns the
    list pointer, which the caller must destroy with
    lib().hurray_buffer_list_destroy."""
    assert capsule_name(capsule) == CAPSULE_NAME
    if check_version:
        ctx = capsule_context(capsule)
        assert ctypes.c_uint32.from_address(ctx).value == lib().hurray_abi_version()
    pointer = api.PyCapsule_GetPointer(capsule, CAPSULE_NAME)
    assert api.PyCapsule_SetName(capsule, ctypes.addressof(_USED_NAME)) == 0
    return pointer
