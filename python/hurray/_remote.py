"""Reading hurray files where they live: HTTP(S) range requests (urllib3)
and any fsspec URL (s3://, gs://, memory://, file://, ...).

The C reader does all the parsing and checking; it takes its bytes from a
source object of this module through include/hurray/byte_source.h (the C
glue is _source.c). Round trips (docs/spec/file-format.md section 15):

- open: one suffix request ``bytes=-N`` (N = SUFFIX_BYTES, 256 KiB by
  default) for the trailer and the index, concurrently with one request for
  the 64-byte header; a file of at most N bytes needs only the first. Only
  an index longer than about N needs a third request.
- one tensor: one request for the span of its buffers (a writer lays them
  out together; the gaps are alignment padding).
- ``get_tensors``/``load``: the ranges of all tensors planned first, merged
  where tensors are neighbours, fetched in 16 MiB pieces several at a time
  (prefetched_get).

docs/adr/ADR-0023-reader-sources.md says why urllib3 and why no chunked
checksums; docs/security.md what a hostile server can and cannot do.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import os
import random
import re
import socket
import threading
import time
import weakref
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from . import _hurray

#: The suffix fetched at open: trailer (64 bytes) plus an index of up to
#: N - 64 bytes in one request. An index entry of a typical weight tensor
#: is 150-250 bytes, so 256 KiB covers about 1000-1700 tensors; a longer
#: index costs one more request (its rest), nothing else.
SUFFIX_BYTES = 256 << 10
#: Neighbouring ranges closer than this are fetched with one request (the
#: gap is read and dropped): the alignment padding between the buffers of
#: a tensor is under 4 KiB.
MERGE_GAP = 64 << 10
#: get_tensors and load fetch the tensors of at most this many bytes at a
#: time (then read them from memory), in pieces of PREFETCH_PIECE bytes.
PREFETCH_WINDOW = 256 << 20
PREFETCH_PIECE = 16 << 20
#: Requests in flight at once for get_tensors and load.
DEFAULT_THREADS = 8
#: Attempts for a request that failed in a way worth repeating (connection
#: reset, timeout, 5xx, 429, a body cut short); the wait doubles from
#: BACKOFF_SECONDS, with jitter.
DEFAULT_RETRIES = 3
BACKOFF_SECONDS = 0.05
#: Seconds to connect, and to wait for each read of the body.
DEFAULT_TIMEOUT = (10.0, 60.0)
#: Redirects followed for one request (a hub's or CDN's 302 to the bytes).
MAX_REDIRECTS = 10
#: A redirect's body up to this long is read and dropped, keeping its
#: connection for the next request; a longer one is not read.
REDIRECT_BODY_READ = 64 << 10
#: The status line and headers of an answer (1xx answers before it
#: included) must arrive within this many read timeouts: each read is
#: bounded by the timeout, but a server may send them a byte at a time, or
#: "100 Continue" forever, which http.client skips without end.
HEADER_DEADLINE_READS = 2
#: A body that arrives slower than this many bytes a second, over any
#: stretch as long as the read timeout, is a timeout: the read timeout alone
#: lets a server that sends a byte a second hold a request for days.
MIN_BODY_RATE = 1024


class RemoteError(_hurray.HurrayIOError):
    """Reading a remote file failed (an OSError, like file-system failures)."""

    # What C raises for an I/O failure carries these too (the number is C's).
    status = _hurray.STATUS["HURRAY_ERR_IO"]
    status_name = "HURRAY_ERR_IO"


class RemoteProtocolError(RemoteError):
    """The server answered a range request wrongly: a 200 with the whole
    file, a Content-Range other than the one asked for, a body longer or
    shorter than announced."""


class RemoteChangedError(RemoteError):
    """The file changed between two requests (ETag, Last-Modified or size
    differ, or the server answered 412 to If-Match)."""


class RemoteNotFoundError(RemoteError, FileNotFoundError):
    """No file at that URL (HTTP 404, or the file system says so): a
    FileNotFoundError, as for a missing local path."""


class RemoteTimeoutError(RemoteError, TimeoutError):
    """The server did not answer in time, after every retry."""


# Public as hurray.RemoteError and so on: a traceback names them so.
for _cls in (
    RemoteError,
    RemoteProtocolError,
    RemoteChangedError,
    RemoteNotFoundError,
    RemoteTimeoutError,
):
    _cls.__module__ = "hurray"
del _cls


class _PlanOnly(Exception):
    """Raised by a source in planning mode: the ranges a read needs were
    recorded, nothing was fetched."""


class _Transient(Exception):
    """A failure worth retrying; carries the error to raise at the end."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _broken_answer(reason) -> bool:
    """Whether urllib3 failed on an answer http.client refused as
    malformed (an HTTPException, not an OSError of the connection): from
    CPython 3.14 (and its security releases) more than 100 interim 1xx
    answers, which earlier versions skipped without end."""
    args = getattr(reason, "args", ())
    return any(
        isinstance(a, http.client.HTTPException) and not isinstance(a, OSError) for a in args
    )


def is_url(path) -> bool:
    return isinstance(path, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", path) is not None


def _user_part(url: str):
    """The match of the URL's scheme and user part (group 2), or None. The
    user part reaches to the authority's last "@". A URL that breaks RFC
    3986 with a raw "/", "?" or "#" in its password still has one, up to
    the URL's last "@", when what comes before that character is user:pass
    (a colon, and after it something that is not a port's digits): an "@"
    in a path or query (hf://repo@revision, host:8443/a@b, ?t=12:00&u=me@x)
    is no password."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#]*)@", url)
    if m is None:
        head = re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://([^/?#@]*)[/?#]", url)
        password = head.group(1).partition(":")[2] if head is not None else ""
        if ":" in (head.group(1) if head else "") and not password.isdigit():
            m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*://)(.*)@", url, re.DOTALL)
    return m


def shown_url(url: str) -> str:
    """The URL for messages: a password in it (https://user:secret@host/...),
    or a user part alone, which is sent as a token, is not repeated into
    logs and error reports: user:***@host, ***@host."""
    m = _user_part(url)
    if m is None:
        return url
    user, colon, _ = m.group(2).partition(":")
    return m.group(1) + (f"{user}:***" if colon else "***") + url[m.end() - 1 :]


def scrubbed(text: str, url: str) -> str:
    """A message from elsewhere (a back end, urllib3) with the URL's user
    part masked wherever it repeats it, as written or percent-decoded: the
    whole user:password, or a token of at least 6 characters (a shorter
    one would mask unrelated text)."""
    from urllib.parse import unquote

    m = _user_part(url)
    if m is None:
        return text
    user, colon, secret = m.group(2).partition(":")
    if colon:
        for form in {m.group(2), unquote(m.group(2))}:
            text = text.replace(form, f"{user}:***")
    for form in {secret if colon else user, unquote(secret if colon else user)}:
        if len(form) >= 6:
            text = text.replace(form, "***")
    return text


def _retrying(fn: Callable, retries: int, given_up: Callable[[], bool] = lambda: False):
    """fn(), tried again after a transient failure up to `retries` times,
    unless `given_up()` says its batch has ended (Ctrl-C, or another run's
    failure): each retry may wait a whole read timeout."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except _Transient as t:
            if attempt == retries or given_up():
                raise t.error from None
            time.sleep(BACKOFF_SECONDS * (2**attempt) * (1 + random.random() / 2))


class _RunGuard:
    """The runs of one _fetch_runs call on the shared pool: which a thread
    started and which finished, and no start once stopped."""

    def __init__(self, one, runs):
        self._one, self._runs = one, runs
        self._lock = threading.Lock()
        self._stopped = False
        self._started: List[int] = []
        self._finished = [threading.Event() for _ in runs]
        self._done: set = set()
        self._failure: Optional[BaseException] = None

    def run(self, i: int) -> None:
        with self._lock:
            if self._stopped:
                return
            self._started.append(i)
        try:
            self._one(self._runs[i])
            self._done.add(i)
        except BaseException as exc:
            with self._lock:
                if self._failure is None:
                    self._failure = exc
            raise
        finally:
            self._finished[i].set()

    def stop_and_wait(self, failure: Optional[BaseException]) -> Optional[BaseException]:
        """No run starts from now; returns once every started one has
        finished, whatever interrupts the wait (the first interruption, or
        a run's failure, kept as the failure unless there is one)."""
        with self._lock:
            self._stopped = True
            started = list(self._started)
        for i in started:
            while True:
                try:
                    self._finished[i].wait()
                    break
                except BaseException as exc:  # noqa: BLE001 - raised by the caller
                    if failure is None:
                        failure = exc
        return failure if failure is not None else self._failure

    def not_done(self) -> List[int]:
        return [i for i in range(len(self._runs)) if i not in self._done]


# ------------------------------------------------------------------ HTTP


def _bounded_pools(urllib3, read_timeout) -> dict:
    """urllib3 pool classes whose connections shut their socket down when
    an answer's status line and headers take longer than
    HEADER_DEADLINE_READS read timeouts (the reader then fails as on a
    broken connection, and the attempt is retried)."""
    deadline = None if read_timeout is None else HEADER_DEADLINE_READS * float(read_timeout)

    def bounded(base):
        class Bounded(base):
            def getresponse(self, *args, **kwargs):
                sock = self.sock
                if deadline is None or sock is None:
                    return super().getresponse(*args, **kwargs)
                lock, state = threading.Lock(), {"done": False, "fired": False}

                def fire():
                    with lock:  # never after getresponse returned
                        if state["done"]:
                            return
                        state["fired"] = True
                    _shut_down(sock)

                def late():
                    text = f"no status line and headers within {deadline:g} s"
                    error = urllib3.exceptions.ReadTimeoutError(None, None, text)
                    error.args = (text,)  # its own str() starts with the pool: "None: "
                    return error

                timer = threading.Timer(deadline, fire)
                timer.daemon = True
                timer.start()
                try:
                    response = super().getresponse(*args, **kwargs)
                except Exception:
                    if state["fired"]:
                        raise late() from None
                    raise
                finally:
                    with lock:
                        state["done"] = True
                    timer.cancel()
                if state["fired"]:
                    # Shut down inside the headers: http.client took the end
                    # of the stream for their end, and answered with those
                    # it had (a 206 without its Content-Range).
                    response.close()
                    raise late()
                return response

        # messages name the connection class ("HTTPConnection(host=...)")
        Bounded.__name__, Bounded.__qualname__ = base.__name__, base.__qualname__
        return Bounded

    class HTTPPool(urllib3.HTTPConnectionPool):
        ConnectionCls = bounded(urllib3.connection.HTTPConnection)

    class HTTPSPool(urllib3.HTTPSConnectionPool):
        ConnectionCls = bounded(urllib3.connection.HTTPSConnection)

    return {"http": HTTPPool, "https": HTTPSPool}


def _shut_down(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Metered:
    """A response body whose readinto fails with a retried timeout when,
    over `window` seconds, fewer than MIN_BODY_RATE bytes a second came, and
    with RemoteError (not retried) once `abort` is set."""

    def __init__(self, response, window: Optional[float], shown: str, abort: threading.Event):
        self._response = response
        self._window = window
        self._shown = shown
        self._abort = abort
        self._since = time.monotonic()
        self._got = 0

    def readinto(self, view) -> int:
        if self._abort.is_set():
            raise RemoteError(f"{self._shown}: the read was abandoned (interrupted)")
        if self._window is None:
            return self._response.readinto(view)
        # read1: readinto waits for the whole view, so a trickle would
        # never be seen between calls.
        data = self._response.read1(len(view))
        n = len(data)
        view[:n] = data
        self._got += n
        now = time.monotonic()
        elapsed = now - self._since
        if elapsed >= self._window:
            if self._got < MIN_BODY_RATE * elapsed:
                raise _Transient(
                    RemoteTimeoutError(
                        f"{self._shown}: the body came at {self._got / elapsed:.0f} bytes/s "
                        f"for {elapsed:.1f} s, under the {MIN_BODY_RATE} bytes/s floor"
                    )
                )
            self._since, self._got = now, 0
        return n


# The unit is case-insensitive (RFC 9110 14.1).
# At most 20 digits (2^64 has 20): int() refuses more than 4300 with a
# ValueError, which a server's header is not to raise.
_CONTENT_RANGE = re.compile(
    r"^\s*bytes\s+([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)\s*$", re.IGNORECASE
)
_LENGTH = re.compile(r"[0-9]{1,20}")


def _clipped(value) -> str:
    """A server's header value for a message: its repr, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _header(response, name: str) -> str:
    return _clipped(response.headers.get(name))


# The abort event of a read that belongs to no batch: never set.
_NEVER = threading.Event()


class _ReadingFor:
    """HttpBackend.reading_for's context: sets, then restores, the thread's
    batch event."""

    def __init__(self, batch: threading.local, abort: threading.Event):
        self._batch, self._abort = batch, abort

    def __enter__(self) -> None:
        self._before = getattr(self._batch, "abort", None)
        self._batch.abort = self._abort

    def __exit__(self, *exc) -> None:
        self._batch.abort = self._before


def _first_failure(futures) -> Optional[BaseException]:
    """The first exception among `futures` as soon as one fails, not once
    every earlier one is done (a 403 on the second piece waited hours for
    the first at the rate floor), or None when all succeed. Ctrl-C during
    the wait is returned as the failure."""
    pending = set(futures)
    try:
        while pending:
            done, pending = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_EXCEPTION
            )
            for future in futures:  # in submission order among those done
                if future in done and not future.cancelled() and future.exception() is not None:
                    return future.exception()
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt: raised after the wait
        return exc
    return None


class HttpBackend:
    """Range requests over one urllib3 pool. Every request after the first
    carries If-Match with the file's strong ETag (or If-Unmodified-Since
    with its Last-Modified), and every answer is checked against what was
    asked: status 206, the exact Content-Range, the same total size and
    validator, and exactly the bytes announced."""

    def __init__(
        self,
        url: str,
        *,
        timeout=DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        headers: Optional[dict] = None,
        threads: int = DEFAULT_THREADS,
    ):
        try:
            import urllib3
        except ImportError:  # pragma: no cover - urllib3 is a dependency
            raise RemoteError(
                f"{shown_url(url)}: reading it needs urllib3: pip install urllib3 (the package's 'remote' extra)"
            ) from None
        self.url = url
        self.shown = shown_url(url)
        if not hasattr(urllib3.response.HTTPResponse, "read1"):  # 2.2.0 on
            raise RemoteError(
                f"{self.shown}: reading it needs urllib3 2.2 or later (this is "
                f"{urllib3.__version__}): pip install -U 'urllib3>=2.2'"
            )
        self._urllib3 = urllib3
        self.retries = int(retries)
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, not {retries!r}")
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        for value in (connect, read):
            # inf passed urllib3's check and failed at the first request, in
            # socket.settimeout (OverflowError).
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < 1e9):
                raise ValueError(
                    f"timeout must be None, or seconds above 0 and below 1e9, not {value!r}"
                )
        self._timeout = urllib3.Timeout(connect=connect, read=read)
        self._rate_window = float(read) if read is not None else None
        self._threads, self._read_timeout = threads, read
        self._pool = self._new_pool()
        _AFTER_FORK.add(self)
        self._no_retries = urllib3.Retry(
            total=None,
            connect=0,
            read=0,
            status=0,
            other=0,
            redirect=0,
            raise_on_redirect=False,
            raise_on_status=False,
            respect_retry_after_header=False,
        )
        self._headers = dict(headers or {})
        try:
            auth, parsed = urllib3.util.parse_url(url).auth, True
        except ValueError:  # LocationParseError
            auth, parsed = None, False
        if not parsed:
            # Raised outside the handler: the LocationParseError repeats the
            # URL, password included, and would ride along as __context__.
            raise RemoteError(f"{self.shown}: not a URL that can be parsed")
        if auth and not any(k.lower() == "authorization" for k in self._headers):
            # https://user:password@host/...: Basic authentication, as curl
            # and requests do (urllib3 itself ignores the URL's user part).
            from urllib.parse import unquote

            self._headers.update(urllib3.util.make_headers(basic_auth=unquote(auth)))
        self.size: Optional[int] = None
        self._etag: Optional[str] = None
        self._last_modified: Optional[str] = None
        self._lock = threading.Lock()
        self._batch = threading.local()  # .abort: the Event of the batch this thread reads for
        self.requests = 0  # answered requests, for tests and benchmarks

    def _batch_abort(self) -> threading.Event:
        """The abort event of the batch this thread reads for (_NEVER
        outside reading_for)."""
        return getattr(self._batch, "abort", None) or _NEVER

    def _metered(self, response) -> _Metered:
        return _Metered(response, self._rate_window, self.shown, self._batch_abort())

    def reading_for(self, abort: threading.Event) -> "_ReadingFor":
        """A context in which this thread's body reads fail at their next
        read once `abort` is set: a batch whose run failed ends its other
        runs within a read timeout instead of waiting them out, and only
        its own (another thread's batch on the same file reads on)."""
        return _ReadingFor(self._batch, abort)

    def _follow(self, headers: dict):
        """The GET's answer, redirects followed here rather than by urllib3,
        which reads a redirect's whole body before it moves on (a body that
        never ends held the request forever): a redirect's body is dropped
        unread with its connection. Up to MAX_REDIRECTS, to http(s) URLs
        only; Authorization, Proxy-Authorization and Cookie are dropped on a
        move to another scheme, host or port."""
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            response = self._pool.request(
                "GET",
                url,
                headers=headers,
                preload_content=False,
                decode_content=False,
                timeout=self._timeout,
                # Nothing retried here (_retrying does that); errors come
                # wrapped in MaxRetryError, as request() expects.
                retries=self._no_retries,
                redirect=False,
            )
            location = response.get_redirect_location()
            if not location:
                return response
            self._drop_body(response)
            url, headers = self._redirected(url, location, headers)
        raise RemoteError(f"{self.shown}: more than {MAX_REDIRECTS} redirects")

    def _drop_body(self, response) -> None:
        """Reads a redirect's short body (under the rate floor), so that its
        connection serves the next request, or drops the connection with a
        long or unannounced one unread."""
        length = response.headers.get("Content-Length") or ""
        # A chunked body is read to its last chunk whatever Content-Length
        # says, and a server may send chunks forever: its connection goes.
        if (
            response.headers.get("Transfer-Encoding") is None
            and _LENGTH.fullmatch(length)
            and int(length) <= REDIRECT_BODY_READ
        ):
            try:
                self._read_exactly(self._metered(response), memoryview(bytearray(int(length))))
                # Reading nothing more ends the response (http.client closes
                # it only on a read that finds no bytes left): a connection
                # given back with it open fails its next request.
                response.read()
                response.release_conn()
                return
            except Exception:  # noqa: BLE001 - the connection is dropped instead
                pass
        response.close()
        response.release_conn()

    def _redirected(self, url: str, location: str, headers: dict) -> Tuple[str, dict]:
        from urllib.parse import urljoin

        parse_url = self._urllib3.util.parse_url
        try:
            target = urljoin(url, location)
            old, new = parse_url(url), parse_url(target)
        except ValueError:  # urllib3's LocationParseError is one
            # neither Location nor the parser's message is shown: either may
            # hold a password ("//user:secret@host")
            raise RemoteError(f"{self.shown}: redirected to a malformed URL") from None
        if (new.scheme or "").lower() not in ("http", "https"):
            raise RemoteError(
                f"{self.shown}: redirected to {shown_url(target)!r}; only http(s) is followed"
            )
        if (old.scheme, old.host, old.port) != (new.scheme, new.host, new.port):
            dropped = {"authorization", "proxy-authorization", "cookie"}
            headers = {k: v for k, v in headers.items() if k.lower() not in dropped}
        return target, headers

    def _conditions(self) -> dict:
        if self._etag is not None and not self._etag.startswith("W/"):
            return {"If-Match": self._etag}
        if self._last_modified is not None:
            return {"If-Unmodified-Since": self._last_modified}
        return {}

    def _check_validators(self, response) -> None:
        etag = response.headers.get("ETag")
        modified = response.headers.get("Last-Modified")
        with self._lock:
            if self._etag is None and self._last_modified is None:
                self._etag, self._last_modified = etag, modified
                return
            if (self._etag is not None and etag is not None and etag != self._etag) or (
                self._last_modified is not None
                and modified is not None
                and modified != self._last_modified
            ):
                raise RemoteChangedError(
                    f"{self.shown} changed while it was read (ETag {self._etag} -> {etag}, "
                    f"Last-Modified {self._last_modified} -> {modified})"
                )

    def _check_size(self, total: int) -> None:
        if total >= 1 << 64:
            raise RemoteProtocolError(f"{self.shown}: the server claims a size of {total} bytes")
        with self._lock:
            if self.size is None:
                self.size = total
            elif total != self.size:
                raise RemoteChangedError(
                    f"{self.shown} changed while it was read (size {self.size} -> {total})"
                )

    def request(self, range_header: str, want: Optional[Tuple[int, int]], sink: Callable) -> None:
        """One GET with `range_header`; `want` is the (start, end) the answer
        must have (None for a suffix, checked by the caller through `sink`).
        `sink(response, start, end, total)` reads the body."""
        urllib3 = self._urllib3

        def attempt():
            headers = dict(self._headers)
            headers["Range"] = range_header
            headers.update(self._conditions())
            # Bytes as they are on the server: a compressed body would make
            # the offsets meaningless.
            headers["Accept-Encoding"] = "identity"
            try:
                response = self._follow(headers)
            except urllib3.exceptions.MaxRetryError as e:
                reason = e.reason
                # urllib3 makes a refused connection and a failed name lookup
                # kinds of ConnectTimeoutError; neither is a timeout.
                refused = isinstance(reason, urllib3.exceptions.NewConnectionError)
                if isinstance(reason, urllib3.exceptions.TimeoutError) and not refused:
                    raise _Transient(
                        RemoteTimeoutError(f"{self.shown}: {scrubbed(str(reason), self.url)}")
                    ) from None
                cls = RemoteProtocolError if _broken_answer(reason) else RemoteError
                raise _Transient(cls(f"{self.shown}: {scrubbed(str(reason), self.url)}")) from None
            except urllib3.exceptions.TimeoutError as e:
                raise _Transient(
                    RemoteTimeoutError(f"{self.shown}: {scrubbed(str(e), self.url)}")
                ) from None
            except urllib3.exceptions.InvalidHeader as e:
                # Content-Length given twice with two values: the answer is
                # malformed, which asking again does not mend.
                raise RemoteProtocolError(f"{self.shown}: {scrubbed(str(e), self.url)}") from None
            except urllib3.exceptions.HTTPError as e:
                cls = RemoteProtocolError if _broken_answer(e) else RemoteError
                raise _Transient(cls(f"{self.shown}: {scrubbed(str(e), self.url)}")) from None
            done = False
            try:
                with self._lock:
                    self.requests += 1
                answered = self._answered_range(response, range_header, want)
                if answered is None:
                    # A suffix of an empty file (RFC 9110 15.5.17): no
                    # bytes, and the reader says what a local one does.
                    self._check_size(0)
                    sink(response, 0, 0, 0)
                    done = True
                    return
                start, end, total = answered
                self._check_size(total)
                self._check_validators(response)
                try:
                    sink(self._metered(response), start, end, total)
                except urllib3.exceptions.TimeoutError as e:
                    raise _Transient(
                        RemoteTimeoutError(f"{self.shown}: {scrubbed(str(e), self.url)}")
                    ) from None
                except (urllib3.exceptions.HTTPError, OSError) as e:
                    if isinstance(e, RemoteError):
                        raise
                    raise _Transient(
                        RemoteProtocolError(
                            f"{self.shown}: the body ended early or broke: "
                            + scrubbed(str(e), self.url)
                        )
                    ) from None
                done = True
            finally:
                # An unread or half-read body must not reach the next request
                # on this connection, nor the end of one read whole: a chunked
                # body's last, empty chunk may come after its bytes (http.client
                # ends the answer only once it has read that chunk), and the
                # next request read "0" as its status line.
                if not done or not response.closed:
                    response.close()
                response.release_conn()

        _retrying(attempt, self.retries, lambda: self._batch_abort().is_set())

    def _answered_range(self, response, range_header: str, want) -> Optional[Tuple[int, int, int]]:
        """(start, end, total) of a 206 answer to `range_header`, None for
        the 416 a suffix of an empty file gets; the error each other answer
        stands for (_Transient where a retry may help)."""
        status = response.status
        if 100 <= status < 200:
            # http.client skips only 100 Continue (CPython 3.11): any other
            # interim answer (103 Early Hints) comes back as the final one.
            # The 206 after it is left unread, and its connection is dropped
            # (done stays False in request's attempt).
            raise RemoteProtocolError(
                f"{self.shown}: an interim answer (HTTP {status}) came where the final one "
                "belongs, and this Python's http.client does not read past it"
            )
        if status == 412:
            raise RemoteChangedError(
                f"{self.shown} changed while it was read (412 Precondition Failed)"
            )
        if status == 429 or status >= 500:
            raise _Transient(RemoteError(f"{self.shown}: HTTP {status}"))
        if status in (404, 410):
            raise RemoteNotFoundError(f"{self.shown}: HTTP {status}")
        if status == 200:
            raise RemoteProtocolError(
                f"{self.shown}: the server ignored the Range header (200, not 206); "
                "hurray reads remote files only with range requests"
            )
        if status == 416:
            if want is None and re.match(
                r"^\s*bytes\s+\*/0\s*$", response.headers.get("Content-Range", ""), re.IGNORECASE
            ):
                return None
            raise RemoteProtocolError(f"{self.shown}: range not satisfiable ({range_header})")
        if status != 206:
            raise RemoteError(f"{self.shown}: HTTP {status}")
        encoding = response.headers.get("Content-Encoding", "identity")
        if any(e.strip().lower() not in ("", "identity") for e in encoding.split(",")):
            # Asked for identity: the Content-Range counts encoded bytes, and
            # read as the file's they would be other bytes (or a checksum
            # error blaming the file).
            raise RemoteProtocolError(
                f"{self.shown}: the server sent the range {encoding.strip()}-encoded, though "
                "asked for it as it is (Accept-Encoding: identity)"
            )
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if match is None or match.group(3) == "*":
            raise RemoteProtocolError(
                f"{self.shown}: bad Content-Range {_header(response, 'Content-Range')}"
                f" for {range_header}"
            )
        start, end, total = (
            int(match.group(1)),
            int(match.group(2)) + 1,
            int(match.group(3)),
        )
        if end <= start or end > total or (want is not None and (start, end) != want):
            raise RemoteProtocolError(
                f"{self.shown}: asked for {range_header}, got Content-Range "
                f"{_header(response, 'Content-Range')}"
            )
        length = response.headers.get("Content-Length")
        if length is not None and len(set(length.replace(" ", "").split(","))) == 1:
            # the same value repeated ("10, 10" once urllib3 joins them) is
            # one value (RFC 9110 8.6); different ones stay an error
            length = length.replace(" ", "").split(",")[0]
        if length is not None and (_LENGTH.fullmatch(length) is None or int(length) != end - start):
            raise RemoteProtocolError(
                f"{self.shown}: Content-Length {_clipped(length)} disagrees with Content-Range "
                f"{_header(response, 'Content-Range')}"
            )
        return start, end, total

    def _read_exactly(self, response, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = response.readinto(view[got:])
            if not n:
                raise _Transient(
                    RemoteProtocolError(
                        f"{self.shown}: the body ended after {got} of {len(view)} bytes"
                    )
                )
            got += n

    def _skip(self, response, n: int) -> None:
        scratch = memoryview(bytearray(min(n, 1 << 16)))
        while n > 0:
            self._read_exactly(response, scratch[: min(n, len(scratch))])
            n -= min(n, len(scratch))

    def fetch_suffix(self, n: int) -> Tuple[int, bytes]:
        out = {}

        def sink(response, start, end, total):
            if end != total or (end - start != min(n, total)):
                raise RemoteProtocolError(
                    f"{self.shown}: asked for the last {n} bytes, got [{start}, {end}) of {total}"
                )
            buf = bytearray(end - start)
            self._read_exactly(response, memoryview(buf))
            out["start"], out["data"] = start, bytes(buf)

        self.request(f"bytes=-{n}", None, sink)
        return out["start"], out["data"]

    def fetch(self, start: int, end: int, targets: Sequence[Tuple[int, memoryview]]) -> None:
        """Bytes [start, end) into `targets` (sorted (offset, view) inside
        the range), the gaps read and dropped: one request."""

        def sink(response, s, e, total):
            at = start
            for offset, view in targets:
                if offset > at:
                    self._skip(response, offset - at)
                self._read_exactly(response, view)
                at = offset + len(view)

        self.request(f"bytes={start}-{end - 1}", (start, end), sink)

    def _new_pool(self):
        pool = self._urllib3.PoolManager(maxsize=max(self._threads, 2), retries=False)
        pool.pool_classes_by_scheme = _bounded_pools(self._urllib3, self._read_timeout)
        return pool

    def _after_fork(self) -> None:
        # The parent's connections are its sockets: a child that took one
        # from the pool would read the parent's answers, or interleave its
        # requests with them; and a lock a thread of the parent held is
        # held for ever here.
        self._pool = self._new_pool()
        self._lock = threading.Lock()
        self._batch = threading.local()

    def close(self) -> None:
        """Closes the pool's connections (a later request opens new ones)."""
        self._pool.clear()


# ---------------------------------------------------------------- fsspec


class FsspecBackend:
    """Any fsspec file system: ranges with cat_file(path, start, end)."""

    def __init__(self, url: str, storage_options: Optional[dict] = None, **_):
        try:
            import fsspec
        except ImportError:
            raise RemoteError(
                f"{shown_url(url)}: reading it needs fsspec (and the back end of its scheme): "
                "pip install fsspec (the package's 'fsspec' extra)"
            ) from None
        self.url = url
        self.shown = shown_url(url)
        try:
            self.fs, self.path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except ImportError as e:
            # The scheme's back end (s3fs, gcsfs, ...) is missing: fsspec's
            # message names it ("Install s3fs to access S3").
            raise RemoteError(
                f"{self.shown}: reading it needs fsspec's back end for its scheme: "
                + scrubbed(str(e), url)
            ) from None
        except FileNotFoundError:
            raise RemoteNotFoundError(f"{self.shown}: no such file") from None
        except Exception as e:  # noqa: BLE001 - "Protocol not known: foo"; a back end that connects
            raise RemoteError(
                f"{self.shown}: {type(e).__name__}: {scrubbed(str(e), url)}"
            ) from None
        self.size: Optional[int] = None
        self.requests = 0
        self._lock = threading.Lock()
        _AFTER_FORK.add(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it

    def _cat(self, start: int, end: int) -> bytes:
        try:
            data = self.fs.cat_file(self.path, start=start, end=end)
        except FileNotFoundError:
            raise RemoteNotFoundError(f"{self.shown}: no such file") from None
        except Exception as e:  # noqa: BLE001 - back ends raise their own types
            raise RemoteError(
                f"{self.shown}: {type(e).__name__}: {scrubbed(str(e), self.url)}"
            ) from None
        with self._lock:
            self.requests += 1
        if len(data) != end - start:
            raise RemoteProtocolError(
                f"{self.shown}: asked for {end - start} bytes at {start}, got {len(data)}"
            )
        return data

    def fetch_suffix(self, n: int) -> Tuple[int, bytes]:
        try:
            info = self.fs.info(self.path)
            size = int(info["size"] or 0)
        except FileNotFoundError:
            raise RemoteNotFoundError(f"{self.shown}: no such file") from None
        except Exception as e:  # noqa: BLE001 - back ends raise their own types
            raise RemoteError(
                f"{self.shown}: {type(e).__name__}: {scrubbed(str(e), self.url)}"
            ) from None
        kind = info.get("type", "file")
        if kind != "file":
            # A FIFO (file://) would block its open forever, as the C
            # reader's check of a local path says.
            raise RemoteError(f"{self.shown}: is not a regular file (its type is {kind!r})")
        self.size = size
        start = max(0, size - n)
        return start, self._cat(start, size)

    def fetch(self, start: int, end: int, targets: Sequence[Tuple[int, memoryview]]) -> None:
        data = memoryview(self._cat(start, end))
        for offset, view in targets:
            view[:] = data[offset - start : offset - start + len(view)]


# ---------------------------------------------------------------- source


def _pieces(runs, piece: int) -> List[List[Tuple[int, memoryview]]]:
    """The runs (each a sorted list of (offset, view) targets, one request)
    cut where they cross `piece` bytes, views split at the cut: a long
    buffer is fetched in requests of at most `piece` bytes, on several
    threads, straight into its memory."""
    out: List[List[Tuple[int, memoryview]]] = []
    for run in runs:
        if run[-1][0] + len(run[-1][1]) - run[0][0] <= piece:
            out.append(run)
            continue
        current: List[Tuple[int, memoryview]] = []
        limit = run[0][0] + piece
        for offset, view in run:
            while len(view) > 0:
                if offset >= limit:
                    if current:
                        out.append(current)
                    current, limit = [], offset + piece
                take = min(len(view), limit - offset)
                current.append((offset, view[:take]))
                offset, view = offset + take, view[take:]
        if current:
            out.append(current)
    return out


#: Remote objects whose threads, locks and connections a forked child
#: must not take over from its parent (os.register_at_fork below).
_AFTER_FORK: "weakref.WeakSet" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for obj in list(_AFTER_FORK):
        obj._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class RangeSource:
    """The object the C reader reads through (_source.h): `size`,
    `readinto(offset, view)` and `read_batch([(offset, view), ...])`.
    Blocks fetched at open (the suffix, the header) are kept and served
    from memory, so no byte is fetched twice. An exception raised here is
    kept per thread, so the binding re-raises it rather than the C
    reader's generic I/O error."""

    def __init__(self, backend, suffix_bytes: int = SUFFIX_BYTES, threads: int = DEFAULT_THREADS):
        self.backend = backend
        self.threads = max(1, int(threads))
        self._local = threading.local()
        # Replaced, never changed in place, under _blocks_lock: readers
        # take the list once and need no lock; writers on several threads
        # (prefetch and forget of concurrent get_tensors) lose no update.
        self._blocks: List[Tuple[int, bytes]] = []
        self._blocks_lock = threading.Lock()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        _AFTER_FORK.add(self)
        self._open(max(128, int(suffix_bytes)))

    def _after_fork(self) -> None:
        # The executor's threads are the parent's: it believes it has idle
        # workers, starts none, and every fetch waited for ever (python-
        # bindings.md: a child can use the File). A lock held by a thread
        # of the parent at the fork stays held here.
        self._pool = None
        self._blocks_lock = threading.Lock()
        self._local = threading.local()

    # The first request learns the size; the header request needs no size,
    # so both go out at once.
    def _open(self, n: int) -> None:
        header: dict = {}
        abort = threading.Event()

        def get_header():
            try:
                view = memoryview(bytearray(64))
                self._fetch_for(abort, 0, 64, [(0, view)])
                header["data"] = bytes(view)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                header["error"] = e

        thread = None
        if isinstance(self.backend, HttpBackend):
            thread = threading.Thread(target=get_header, daemon=True)
            thread.start()
        try:
            start, data = self.backend.fetch_suffix(n)
            if thread is not None:
                thread.join()
        except BaseException:
            # The header read fills a buffer of its own: it is told to stop
            # and left to end by itself. Waiting for it, Ctrl-C on a server
            # that never answered took its every retry (4 minutes).
            abort.set()
            raise
        self.size = self.backend.size
        self._keep([(start, data)])
        if start > 0:
            if thread is None:
                get_header()
            if "error" in header:
                # A file smaller than 64 bytes: the suffix holds it all.
                if self.size < 64:
                    return
                raise header["error"]
            self._keep([(0, header["data"])])

    def _keep(self, blocks) -> None:
        with self._blocks_lock:
            self._blocks = self._blocks + list(blocks)

    def take_error(self) -> Optional[BaseException]:
        error = getattr(self._local, "error", None)
        self._local.error = None
        return error

    def _uncached(self, offset: int, view: memoryview) -> List[Tuple[int, memoryview]]:
        """Copies what the kept blocks hold of [offset, offset + len(view))
        and returns the pieces still to fetch, so no byte is fetched twice
        (a tensor that reaches into the suffix read at open, say)."""
        todo = [(offset, view)]
        for start, data in self._blocks:
            end = start + len(data)
            rest = []
            for o, v in todo:
                lo, hi = max(o, start), min(o + len(v), end)
                if lo >= hi:
                    rest.append((o, v))
                    continue
                v[lo - o : hi - o] = memoryview(data)[lo - start : hi - start]  # one copy
                if lo > o:
                    rest.append((o, v[: lo - o]))
                if hi < o + len(v):
                    rest.append((hi, v[hi - o :]))
            todo = rest
        return todo

    def readinto(self, offset: int, view: memoryview) -> None:
        try:
            todo = self._uncached(offset, view)
            self._fetch_runs([[piece] for piece in todo])
            if todo and offset + len(view) == self.size - 64:
                # The index (it ends at the trailer; bounded by the
                # reader's 256 MiB limit): readers opened for other
                # threads find it here.
                self._keep([(offset, bytes(view))])
        except BaseException as e:
            self._local.error = e
            raise

    def read_batch(self, ranges: Sequence[Tuple[int, memoryview]]) -> None:
        plan = getattr(self._local, "plan", None)
        if plan is not None:
            plan.extend((o, len(v)) for r in ranges for o, v in self._uncached(*r))
            self._local.error = _PlanOnly()
            raise self._local.error
        try:
            todo = sorted((p for o, v in ranges for p in self._uncached(o, v)), key=lambda p: p[0])
            runs: List[List[Tuple[int, memoryview]]] = []
            for offset, view in todo:
                if runs and offset - (runs[-1][-1][0] + len(runs[-1][-1][1])) <= MERGE_GAP:
                    runs[-1].append((offset, view))
                else:
                    runs.append([(offset, view)])
            self._fetch_runs(runs)
        except BaseException as e:
            self._local.error = e
            raise

    def _fetch_for(self, abort: threading.Event, start: int, end: int, views) -> None:
        """backend.fetch as one read of a batch whose `abort` ends it: only
        an HttpBackend's body reads can be cut short (reading_for)."""
        reading_for = getattr(self.backend, "reading_for", None)
        with reading_for(abort) if reading_for is not None else contextlib.nullcontext():
            self.backend.fetch(start, end, views)

    def _fetch_runs(self, runs) -> None:
        abort = threading.Event()  # this batch's: set when one of its runs fails

        def one(run):
            self._fetch_for(abort, run[0][0], run[-1][0] + len(run[-1][1]), run)

        runs = _pieces(runs, PREFETCH_PIECE)
        if len(runs) <= 1:
            for run in runs:
                one(run)
            return
        # Every run writes into memory the C reader frees once this returns
        # or raises: a run still fetching after another failed wrote a
        # server's late bytes into freed memory. Runs not started are
        # dropped; every started one is waited for (each read is under the
        # timeout and the rate floor), through Ctrl-C too, which used to
        # end the wait for the run it interrupted; the first failure is
        # raised after. The guard knows every run a thread started, even
        # one whose submit raised (queued, with no future to wait on).
        guard = _RunGuard(one, runs)
        futures: List[concurrent.futures.Future] = []
        failure: Optional[BaseException] = None
        refused = False
        try:
            for i in range(len(runs)):
                futures.append(self.pool().submit(guard.run, i))
        except RuntimeError:  # "can't start new thread" (RLIMIT_NPROC, pids.max)
            refused = True
        except BaseException as exc:  # noqa: BLE001 - raised below, after the wait
            failure = exc
        if refused:  # what no thread ran runs here, once the started ones are done
            for future in futures:
                future.cancel()
            failure = guard.stop_and_wait(None)
            if failure is not None:
                raise failure
            for i in guard.not_done():
                one(runs[i])
            return
        if failure is None:
            failure = _first_failure(futures)
        if failure is None:
            return
        for future in futures:
            future.cancel()
        # The runs still going end at their next read, not after the rest
        # of their bytes (Ctrl-C used to wait out a slow server).
        abort.set()
        raise guard.stop_and_wait(failure)

    def plan(self, read: Callable[[], object]) -> List[Tuple[int, int]]:
        """The (offset, length) ranges `read()` (one tensor read) would
        fetch, found by running it with fetching switched off."""
        self._local.plan = []
        try:
            read()
        except _PlanOnly:
            pass
        finally:
            ranges, self._local.plan = self._local.plan, None
        return ranges

    def prefetch(self, spans: Sequence[Tuple[int, int]]) -> List[Tuple[int, bytes]]:
        """Fetches the (start, end) spans, split into pieces of at most
        PREFETCH_PIECE bytes, several at a time, and keeps them as blocks
        until forget() is given what this returns."""
        pieces = []
        for start, end in spans:
            for at in range(start, end, PREFETCH_PIECE):
                pieces.append((at, min(end, at + PREFETCH_PIECE)))

        abort = threading.Event()  # set when a piece fails: the others stop

        def one(piece):
            buf = bytearray(piece[1] - piece[0])
            self._fetch_for(abort, piece[0], piece[1], [(piece[0], memoryview(buf))])
            return piece[0], buf

        futures = None
        if len(pieces) > 1:
            try:
                futures = [self.pool().submit(one, piece) for piece in pieces]
            except RuntimeError:  # a refused thread: here instead (each
                # piece fills a block of its own, so one still queued or
                # running elsewhere writes nothing this call hands out)
                futures = None
        if futures is None:
            blocks = [one(piece) for piece in pieces]
        else:
            failure = _first_failure(futures)
            if failure is not None:
                for future in futures:
                    future.cancel()
                abort.set()
                raise failure
            blocks = [future.result() for future in futures]
        self._keep(blocks)
        return blocks

    def forget(self, blocks) -> None:
        ids = {id(b) for b in blocks}
        with self._blocks_lock:
            self._blocks = [b for b in self._blocks if id(b) not in ids]

    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.threads, thread_name_prefix="hurray-remote"
            )
        return self._pool

    def close(self) -> None:
        with self._blocks_lock:
            self._blocks = []
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        close_backend = getattr(self.backend, "close", None)
        if close_backend is not None:
            close_backend()  # its sockets, now rather than when collected


def make_source(
    url: str,
    *,
    timeout=DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    suffix_bytes: int = SUFFIX_BYTES,
    threads: int = DEFAULT_THREADS,
    headers: Optional[dict] = None,
    storage_options: Optional[dict] = None,
) -> RangeSource:
    # The local API's check (an int, not a bool, up to 65535): unchecked, a
    # huge count sized a connection pool slot by slot and never returned.
    threads = max(1, _hurray._threads(threads))
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("http", "https"):
        backend = HttpBackend(
            url, timeout=timeout, retries=retries, headers=headers, threads=threads
        )
    else:
        backend = FsspecBackend(url, storage_options)
    return RangeSource(backend, suffix_bytes, threads)


def _raise_pending(source: RangeSource) -> None:
    """Raises the source's own failure, if it has one. The exception is not
    kept in a local of this frame, which its traceback holds: that cycle
    (frame, exception, source, its connections) lived until the cyclic
    collector ran."""
    pending = source.take_error()
    if pending is not None:
        try:
            raise pending from None
        finally:
            del pending


class TranslatingFile:
    """Wraps the C _File of a source reader: a HurrayError raised because
    the source failed becomes the source's own exception (RemoteError...)."""

    def __init__(self, file, source: RangeSource):
        self._f = file
        self._source = source

    def __getattr__(self, name):
        attr = getattr(self._f, name)
        if not callable(attr):
            return attr
        source = self._source

        def call(*args, **kwargs):
            source.take_error()
            try:
                return attr(*args, **kwargs)
            except _hurray.HurrayError:
                _raise_pending(source)
                raise

        return call


def open_file(url: str, source: RangeSource, verify: bool):
    """A C _File on `source`, errors translated."""
    source.take_error()
    try:
        raw = _hurray._File(url, False, verify, False, source=source)
    except _hurray.HurrayError:
        _raise_pending(source)
        raise
    return TranslatingFile(raw, source)


def prefetched_get(
    file, source: RangeSource, names: Iterable[str], window: int | None = None
) -> dict:
    """Every tensor of `names` with as few requests as the layout allows:
    the ranges each tensor needs are found first (no request), merged where
    tensors lie next to each other, fetched in pieces on the source's
    threads, a window of at most `window` bytes at a time, and the tensors
    then read from those bytes. A tensor larger than the window is read on
    its own, straight into its memory (in pieces, on the threads too), so
    that it is never held twice."""
    window = PREFETCH_WINDOW if window is None else window
    plans = []
    out = {}
    for name in names:
        ranges = source.plan(lambda: file._get(name))
        if sum(n for _, n in ranges) > window:
            out[name] = None  # read below, in the caller's order
        else:
            plans.append((min((o for o, _ in ranges), default=-1), name, ranges))
    for name in out:
        out[name] = file._get(name)
    plans.sort(key=lambda p: p[0])
    i = 0
    while i < len(plans):
        group, spans, size = [], [], 0
        while i < len(plans) and (not group or size < window):
            _, name, ranges = plans[i]
            group.append(name)
            for o, n in sorted(ranges):
                if spans and o - spans[-1][1] <= MERGE_GAP:
                    spans[-1] = (spans[-1][0], max(spans[-1][1], o + n))
                else:
                    spans.append((o, o + n))
                size += n
            i += 1
        blocks = source.prefetch(spans) if spans else []
        try:
            for name in group:
                out[name] = file._get(name)
        finally:
            source.forget(blocks)
    return {name: out[name] for name in names}  # the caller's order
