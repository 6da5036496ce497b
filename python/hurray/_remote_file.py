"""RemoteFile: hurray.open of a URL (see _remote.py)."""
from __future__ import annotations

import threading
from typing import Optional

from ._files import File
from ._remote import (DEFAULT_RETRIES, DEFAULT_THREADS, DEFAULT_TIMEOUT, SUFFIX_BYTES,
                      make_source, open_file, parallel_get)
from ._tensor import specialise


class RemoteFile(File):
    """A hurray file read through range requests (HTTP(S)) or fsspec.
    Like File with mmap=False: every tensor is a copy of its own.
    verify=True checks every buffer at open (reads the whole file);
    verify_reads=True (default) checks each tensor fetched whole against
    its checksums."""

    def __init__(self, url: str, *, verify: bool = False, verify_reads: bool = True,
                 threads: int = DEFAULT_THREADS, timeout=DEFAULT_TIMEOUT,
                 retries: int = DEFAULT_RETRIES, suffix_bytes: int = SUFFIX_BYTES,
                 headers: Optional[dict] = None, storage_options: Optional[dict] = None):
        self.path = url
        self.readonly = False
        self._idle: list = []
        self._all: list = []
        self._idle_lock = threading.Lock()
        self._source = make_source(url, timeout=timeout, retries=retries,
                                   suffix_bytes=suffix_bytes, threads=threads,
                                   headers=headers, storage_options=storage_options)
        self._verify_reads = bool(verify_reads)
        self._file = open_file(url, self._source, self._verify_reads)
        if verify:
            self._file.verify(None)

    @property
    def requests(self) -> int:
        """Requests answered so far (for measurements)."""
        return self._source.backend.requests

    def _take(self):
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        reader = open_file(self.path, self._source, self._verify_reads)  # cached: no request
        with self._idle_lock:
            self._all.append(reader)
        return reader

    def _give(self, reader) -> None:
        with self._idle_lock:
            self._idle.append(reader)

    def get_tensors(self, names) -> dict:
        if self._file.closed:
            raise ValueError("I/O operation on a closed hurray file")
        return parallel_get(self._take, self._give, names, self._source.threads,
                            lambda f, n: specialise(f._get(n)))

    def close(self) -> None:
        self._file.close()
        with self._idle_lock:
            for reader in self._all:
                reader.close()
            self._all, self._idle = [], []
        self._source.close()

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self)} tensors"
        return f"<hurray.RemoteFile {self.path!r} ({state})>"
