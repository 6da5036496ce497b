"""RemoteFile: hurray.open of a URL (see _remote.py)."""

from __future__ import annotations

from typing import Optional

from ._files import File, tensor_names
from ._remote import (
    DEFAULT_RETRIES,
    DEFAULT_THREADS,
    DEFAULT_TIMEOUT,
    SUFFIX_BYTES,
    make_source,
    open_file,
    prefetched_get,
    shown_url,
)
from ._shown import counted
from ._tensor import specialise


class RemoteFile(File):
    """A hurray file read through range requests (HTTP(S)) or fsspec.
    Like File with mmap=False: every tensor is a copy of its own.
    verify=True checks every buffer at open (reads the whole file);
    verify_reads=True (default) checks each tensor fetched whole against
    its checksums."""

    def __init__(
        self,
        url: str,
        *,
        verify: bool = False,
        verify_reads: bool = True,
        threads: int = DEFAULT_THREADS,
        timeout=DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        suffix_bytes: int = SUFFIX_BYTES,
        headers: Optional[dict] = None,
        storage_options: Optional[dict] = None,
    ):
        if not isinstance(url, str):
            raise TypeError(f"RemoteFile takes a URL (str), not {type(url).__name__}")
        self.path = url
        self.readonly = False
        self._source = make_source(
            url,
            timeout=timeout,
            retries=retries,
            suffix_bytes=suffix_bytes,
            threads=threads,
            headers=headers,
            storage_options=storage_options,
        )
        self._verify_reads = bool(verify_reads)
        self._file = open_file(url, self._source, self._verify_reads)
        if verify:
            self._file.verify(None)

    @property
    def requests(self) -> int:
        """Requests answered so far (for measurements)."""
        return self._source.backend.requests

    def get_tensors(self, names) -> dict:
        """Every tensor of `names`: the ranges they need are merged where
        the tensors lie next to each other and fetched in pieces on
        `threads` threads (_remote.prefetched_get)."""
        if self._file.closed:
            raise ValueError("I/O operation on a closed hurray file")
        raw = prefetched_get(self._file, self._source, tensor_names(names))
        return {name: specialise(t) for name, t in raw.items()}

    def close(self) -> None:
        self._file.close()
        self._source.close()

    def __repr__(self):
        state = "closed" if self.closed else counted(len(self), "tensor")
        return f"<hurray.RemoteFile {shown_url(self.path)!r} ({state})>"
