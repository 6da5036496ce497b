"""A small HTTP server with range requests, for the remote-reading tests
and bench/bench_remote.py. It listens on 127.0.0.1 only, counts requests
and body bytes, can add latency per request, and can lie in the ways a real
server might (`fault`)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import re
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class RangeServer:
    """`files` maps URL paths ("/model.hurray") to bytes. fault is one of
    None, "short" (the body stops halfway), "wrong_range" (Content-Range
    one byte off), "ignore_range" (200 with the whole file), "change" (the
    file changes after the first request), "slow" (answers after
    `slow_seconds`), "flaky" (the first `flaky_count` requests get 503),
    "huge" (claims the file is 1 TiB larger, its tail at the claimed end),
    "drip" (sends the body `drip_bytes` (1) at a time, every `drip_seconds`),
    "gzip" (a range's bytes gzip-compressed, Content-Encoding: gzip, no
    Content-Length: the body ends when the connection closes).
    on_range(start, end), when set, sees every range request after the
    file is found: it may sleep, and a status it returns (404, 503) is
    sent instead of the bytes."""

    def __init__(self, files: Dict[str, bytes], latency: float = 0.0):
        self.files = dict(files)
        self.latency = latency
        self.fault: Optional[str] = None
        self.slow_seconds = 2.0
        self.drip_seconds = 0.05
        self.drip_bytes = 1
        self.flaky_count = 2
        self.on_range: Optional[Callable[[int, int], Optional[int]]] = None
        # path -> Location: a 302 with an empty body, the connection kept
        self.redirects: Dict[str, str] = {}
        self.log: List[Tuple[str, Optional[str], int]] = []  # (path, Range, body bytes)
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: without this, Nagle and the
            # client's delayed ACK add 40 ms to every answer.
            disable_nagle_algorithm = True

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                server._handle(self)

            def do_HEAD(self):
                server._handle(self, head=True)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None  # a client hung up: expected
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base + path

    def reset(self) -> None:
        with self.lock:
            self.log.clear()

    @property
    def requests(self) -> int:
        return len(self.log)

    @property
    def bytes_sent(self) -> int:
        return sum(n for _, _, n in self.log)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self, h, head: bool = False) -> None:
        if self.latency:
            time.sleep(self.latency)
        with self.lock:
            index = len(self.log)
            self.log.append((h.path, h.headers.get("Range"), 0))
        if h.path in self.redirects:
            return self._send(h, index, 302, {"Location": self.redirects[h.path]}, b"", head)
        data = self.files.get(h.path)
        fault = self.fault
        if fault == "change" and index >= 1 and data is not None:
            data = data[:-1] + bytes([data[-1] ^ 1])
        if fault == "slow":
            time.sleep(self.slow_seconds)
        if fault == "flaky" and index < self.flaky_count:
            return self._send(h, index, 503, {}, b"busy", head)
        if data is None:
            return self._send(h, index, 404, {}, b"not found", head)
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        headers = {
            "ETag": etag,
            "Accept-Ranges": "bytes",
            "Last-Modified": "Tue, 01 Dec 2026 00:00:00 GMT",
        }
        if_match = h.headers.get("If-Match")
        if if_match is not None and if_match != etag and if_match != "*":
            return self._send(h, index, 412, headers, b"", head)
        spec = h.headers.get("Range")
        m = _RANGE.match(spec or "")
        size = len(data)
        if spec is None or m is None or fault == "ignore_range":
            return self._send(h, index, 200, headers, data, head)
        first, last = m.group(1), m.group(2)
        if first == "":
            n = int(last)
            start, end = max(0, size - n), size
        else:
            start = int(first)
            end = min(size, int(last) + 1) if last else size
        if start >= size or end <= start:
            headers["Content-Range"] = f"bytes */{size}"
            return self._send(h, index, 416, headers, b"", head)
        status = self.on_range(start, end) if self.on_range is not None else None
        if status is not None:
            return self._send(h, index, status, {}, b"refused", head)
        body = data[start:end]
        if fault == "gzip":
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        shown = (start + 1, end) if fault == "wrong_range" else (start, end)
        claimed = size
        if fault == "huge":  # claims 1 TiB more, the real tail at the claimed end
            claimed = size + (1 << 40)
            if first == "":
                shown = (claimed - (end - start), claimed)
        headers["Content-Range"] = f"bytes {shown[0]}-{shown[1] - 1}/{claimed}"
        self._send(h, index, 206, headers, body, head, short=fault == "short")

    def _send(self, h, index, status, headers, body, head, short=False):
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        unsized = self.fault == "gzip" and status == 206
        if not unsized:
            h.send_header("Content-Length", str(len(body)))
        if short or unsized:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        if head:
            return
        sent = body[: len(body) // 2] if short and len(body) > 1 else body
        # Counted before it is written: the client may look at the count as
        # soon as it has the bytes.
        with self.lock:
            path, rng, _ = self.log[index]
            self.log[index] = (path, rng, len(sent))
        try:
            if self.fault == "drip" and status == 206:
                for i in range(0, len(sent), self.drip_bytes):
                    h.wfile.write(sent[i : i + self.drip_bytes])
                    h.wfile.flush()
                    time.sleep(self.drip_seconds)
            else:
                h.wfile.write(sent)
                h.wfile.flush()
        except OSError:
            pass
        if short:
            h.close_connection = True
