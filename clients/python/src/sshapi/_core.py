"""The part of the SDK shared by Client and AsyncClient: request descriptions, response parsing,
the retry policy, upload sources, download resume rules and the event stream parsers. Nothing
here does I/O on the network."""

from __future__ import annotations

import email.utils
import hashlib
import io
import json
import os
import random
from dataclasses import dataclass, field
from typing import (
    IO,
    Any,
    AsyncIterator,
    Callable,
    Dict,
    Generic,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    TypeVar,
    Union,
)
from urllib.parse import quote

import httpx

from .errors import APIError, error_for
from .models import CommandEvent, Transfer, TransferEvent

T = TypeVar("T")

#: ``progress(bytes_done, bytes_total)``; total is None when unknown.
Progress = Callable[[int, Optional[int]], None]

#: An upload source: a local path, bytes, or a binary file object (seekable to be retried).
Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]

CHUNK = 1 << 20


def file_url(system: str, op: str, path: str) -> str:
    """The URL path of a file route. ``path`` follows the shell's rules: absolute, ``~``,
    ``~/x``, or relative to the remote home directory."""
    if path in ("", "~", "."):
        p = "~"
    elif path.startswith("~/"):
        p = path
    elif path.startswith("/"):
        p = path.lstrip("/")
        if not p:
            raise ValueError("the root directory cannot be addressed in a URL path")
    else:
        p = "~/" + path
    return f"/v1/systems/{quote(system, safe='')}/{op}/{quote(p, safe='/~')}"


def system_url(system: str, rest: str = "") -> str:
    return f"/v1/systems/{quote(system, safe='')}{rest}"


def drop_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def flag(b: bool) -> Optional[str]:
    return "true" if b else None


@dataclass
class Call(Generic[T]):
    """One API request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    idempotent: bool = False


def parse_json(r: httpx.Response) -> Any:
    return r.json()


def parse_none(_: httpx.Response) -> None:
    return None


def retry_after(headers: httpx.Headers) -> Optional[float]:
    """Retry-After as seconds (delta-seconds or an HTTP date), None if absent or bad."""
    v = headers.get("retry-after")
    if not v:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        t = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    import time

    return max(0.0, t.timestamp() - time.time())


def raise_for_status(r: httpx.Response, body: bytes) -> None:
    if r.status_code >= 400:
        raise error_for(r.status_code, body, retry_after(r.headers))


@dataclass
class RetryPolicy:
    """When and how long to wait before sending a request again.

    Requests are retried on connection errors, 429 and 503 (``statuses``) only when they are
    idempotent (GET, PUT, DELETE, and POSTs that are, like a transfer with an idempotency key);
    a connection that could not be opened is retried for every request, since nothing was sent.
    The wait doubles from ``backoff`` up to ``max_backoff`` with jitter, or is the server's
    ``Retry-After`` (capped at ``max_retry_after``).
    """

    attempts: int = 5
    backoff: float = 0.5
    max_backoff: float = 20.0
    max_retry_after: float = 120.0
    statuses: Tuple[int, ...] = (429, 503)

    def delay(self, attempt: int, after: Optional[float] = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 0)."""
        if after is not None:
            return min(after, self.max_retry_after)
        d = min(self.max_backoff, self.backoff * (2**attempt))
        return float(d * (0.5 + random.random() / 2))

    def on_error(self, attempt: int, exc: BaseException, idempotent: bool) -> Optional[float]:
        """Wait before retrying after ``exc``, or None to give up."""
        if attempt + 1 >= self.attempts:
            return None
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return self.delay(attempt)
        if idempotent and isinstance(exc, httpx.TransportError):
            return self.delay(attempt)
        return None

    def on_status(self, attempt: int, r: httpx.Response, idempotent: bool) -> Optional[float]:
        """Wait before retrying after answer ``r``, or None to return it."""
        if not idempotent or r.status_code not in self.statuses or attempt + 1 >= self.attempts:
            return None
        return self.delay(attempt, retry_after(r.headers))


NO_RETRY = RetryPolicy(attempts=1)


def result_of(r: httpx.Response, parse: Callable[[httpx.Response], T]) -> T:
    raise_for_status(r, r.content)
    return parse(r)


# --- uploads ---------------------------------------------------------------------------------


class UploadSource:
    """An upload's bytes, readable again from the start for each attempt."""

    def __init__(self, src: Source):
        self._path: Optional[str] = None
        self._data: Optional[bytes] = None
        self._file: Optional[IO[bytes]] = None
        self._start = 0
        if isinstance(src, (bytes, bytearray, memoryview)):
            self._data = bytes(src)
        elif isinstance(src, (str, os.PathLike)):
            self._path = os.fspath(src)
        elif hasattr(src, "read"):
            self._file = src
            try:
                self._start = src.tell() if src.seekable() else -1
            except (OSError, AttributeError, io.UnsupportedOperation):
                self._start = -1
        else:
            raise TypeError("upload source must be a path, bytes or a binary file object")

    @property
    def rewindable(self) -> bool:
        """True when every attempt can read the source from its start again."""
        return self._file is None or self._start >= 0

    def size(self) -> Optional[int]:
        if self._data is not None:
            return len(self._data)
        if self._path is not None:
            return os.stat(self._path).st_size
        assert self._file is not None
        if self._start < 0:
            return None
        try:
            return os.fstat(self._file.fileno()).st_size - self._start
        except (OSError, AttributeError, io.UnsupportedOperation):
            end = self._file.seek(0, io.SEEK_END)
            self._file.seek(self._start)
            return end - self._start

    def open(self) -> IO[bytes]:
        """A reader positioned at the start of the source (rewound for a retry)."""
        if self._data is not None:
            return io.BytesIO(self._data)
        if self._path is not None:
            return open(self._path, "rb")
        assert self._file is not None
        if self._start >= 0:
            self._file.seek(self._start)
        return io.BufferedReader(_NoClose(self._file))

    def open_at(self, offset: int) -> IO[bytes]:
        """A reader positioned ``offset`` bytes into the source (resumable uploads); the source
        must be rewindable."""
        f = self.open()
        if self._file is not None:
            self._file.seek(self._start + offset)
            return f
        f.seek(offset)
        return f

    def sha256(self) -> str:
        h = hashlib.sha256()
        with self.open() as f:
            while True:
                b = f.read(CHUNK)
                if not b:
                    break
                h.update(b)
        return h.hexdigest()


class _NoClose(io.RawIOBase):
    """Reads a caller's file without closing it."""

    def __init__(self, f: IO[bytes]):
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._f.read(len(b))
        b[: len(data)] = data
        return len(data)


class Counter:
    """Counts bytes for a progress callback and an optional running SHA-256."""

    def __init__(self, total: Optional[int], progress: Optional[Progress], hash_it: bool = False, done: int = 0):
        self.total = total
        self.progress = progress
        self.done = done
        self.hash = hashlib.sha256() if hash_it else None
        if progress is not None:
            progress(done, total)

    def add(self, b: bytes) -> None:
        self.done += len(b)
        if self.hash is not None:
            self.hash.update(b)
        if self.progress is not None:
            self.progress(self.done, self.total)


def sync_chunks(f: IO[bytes], counter: Counter) -> Iterator[bytes]:
    with f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return
            counter.add(b)
            yield b


async def async_chunks(f: IO[bytes], counter: Counter) -> AsyncIterator[bytes]:
    with f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return
            counter.add(b)
            yield b


def upload_call(
    system: str, remote_path: str, overwrite: bool, parents: bool, mode: Optional[str], sha256: Optional[str], size: Optional[int], server_digest: bool = True
) -> Tuple[str, Dict[str, Any], Dict[str, str]]:
    """The PUT of an upload. Without ``server_digest`` the server is asked not to hash the body
    (``digest=none``: about a third of an upload's CPU there) and answers without a sha256."""
    params = drop_none({"overwrite": flag(overwrite), "parents": flag(parents), "mode": mode, "digest": None if server_digest else "none"})
    headers = {"Content-Type": "application/octet-stream"}
    if sha256:
        headers["X-Checksum-Sha256"] = sha256
    if size is not None:
        headers["Content-Length"] = str(size)
    return file_url(system, "content", remote_path), params, headers


# --- downloads -------------------------------------------------------------------------------


def part_name(local_path: str) -> str:
    """The partial file a download writes before renaming it into place."""
    d, b = os.path.split(local_path)
    return os.path.join(d, f".{b}.sshapi-part")


def resume_headers(part: str, resume: bool) -> Tuple[int, Dict[str, str]]:
    """Offset to resume at and the headers asking for the rest. A partial file's mtime is set to
    the remote file's Last-Modified, so ``If-Range`` makes the server send the whole file again
    when the remote file changed since."""
    if not resume:
        return 0, {}
    try:
        st = os.stat(part)
    except FileNotFoundError:
        return 0, {}
    if st.st_size == 0:
        return 0, {}
    return st.st_size, {
        "Range": f"bytes={st.st_size}-",
        "If-Range": email.utils.formatdate(st.st_mtime, usegmt=True),
    }


def response_total(r: httpx.Response, offset: int) -> Tuple[int, Optional[int]]:
    """(offset the body starts at, total size) for a 200 or 206 download answer."""
    if r.status_code == 206:
        cr = r.headers.get("content-range", "")  # bytes a-b/total
        try:
            span, total = cr.split(" ", 1)[1].split("/")
            return int(span.split("-")[0]), (int(total) if total != "*" else None)
        except (IndexError, ValueError):
            return offset, None
    n = r.headers.get("content-length")
    return 0, int(n) if n and n.isdigit() else None


def already_complete(r: httpx.Response, offset: int) -> bool:
    """A 416 answer to ``Range: bytes=offset-`` whose If-Range matched means the partial file
    already holds the whole (unchanged) remote file."""
    cr = r.headers.get("content-range", "")  # bytes */total
    try:
        return int(cr.rsplit("/", 1)[1]) == offset
    except (IndexError, ValueError):
        return False


def set_mtime(path: str, r: httpx.Response) -> None:
    lm = r.headers.get("last-modified")
    if not lm:
        return
    try:
        t = email.utils.parsedate_to_datetime(lm).timestamp()
    except (TypeError, ValueError):
        return
    os.utime(path, (t, t))


# --- event streams ---------------------------------------------------------------------------


class SSEParser:
    """Server-Sent Events from lines (the text/event-stream format); comments are skipped."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[TransferEvent]:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            ev, data = self._event or "message", "\n".join(self._data)
            self._event, self._data = "", []
            tr: Optional[Transfer] = None
            if data.startswith("{"):
                try:
                    d = json.loads(data)
                    if isinstance(d, dict) and "id" in d:
                        tr = Transfer.from_json(d)
                except ValueError:
                    pass
            return TransferEvent(event=ev, transfer=tr, raw=data)
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def command_event(line: str) -> Optional[CommandEvent]:
    line = line.strip()
    if not line:
        return None
    d = json.loads(line)
    return CommandEvent.from_json(d) if isinstance(d, dict) else None


def event_error(ev: CommandEvent) -> APIError:
    p = ev.error or {"title": "command failed", "status": 502}
    st = p.get("status")
    return error_for(st if isinstance(st, int) else 502, json.dumps(p).encode())
