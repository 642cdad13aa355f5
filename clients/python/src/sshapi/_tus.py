"""The tus 1.0 protocol as the SDK speaks it to the service's resumable upload endpoint
(``/v1/systems/{id}/uploads``): the requests, how to read their answers and which failures are
worth a HEAD and another PATCH. Client and AsyncClient run the loop; nothing here does network
I/O."""

from __future__ import annotations

import base64
from typing import IO, AsyncIterator, Callable, Iterator, List, Optional, Tuple

import httpx

from ._core import CHUNK, Call, Counter, system_url
from .errors import APIError, ConnectionFailed

TUS_VERSION = "1.0.0"

#: Default bytes per PATCH. The server commits every MiB it writes, so a cut loses at most a MiB
#: whatever the PATCH size; each PATCH costs a few round trips between the service and the system
#: (about 0.3 s on a 50 ms path), which is why this is large (measured: ``sshapi bench tus``).
DEFAULT_CHUNK_SIZE = 1 << 30

#: ``on_upload_url(url)``: told the upload's URL once the server created it, so that a caller can
#: keep it and give it back as ``upload_url=`` after its process died.
UploadURLHook = Callable[[str], None]

#: How long a resumable upload keeps waiting while the server answers 423 (the request that
#: failed, or another one, still holds the upload: it drains what it had received before it lets
#: go, which on a busy server takes seconds). These waits do not count as failed requests.
LOCK_WAIT = 120.0

_TUS = {"Tus-Resumable": TUS_VERSION}


def _offset(r: httpx.Response) -> int:
    v = r.headers.get("Upload-Offset")
    if v is None or not v.isdigit():
        raise APIError(r.status_code, {"title": "bad tus answer", "detail": f"Upload-Offset is {v!r}"})
    return int(v)


def _location(r: httpx.Response) -> str:
    loc: Optional[str] = r.headers.get("Location")
    if not loc:
        raise APIError(r.status_code, {"title": "bad tus answer", "detail": "the created upload has no Location"})
    return loc


def _offset_length(r: httpx.Response) -> Tuple[int, int]:
    length = r.headers.get("Upload-Length")
    if length is None or not length.isdigit():
        raise APIError(r.status_code, {"title": "bad tus answer", "detail": f"Upload-Length is {length!r}"})
    return _offset(r), int(length)


def metadata(remote_path: str, digest: Optional[str], overwrite: bool, parents: bool) -> str:
    """The Upload-Metadata header: the destination and the options, values in base64."""
    meta: List[Tuple[str, str]] = [("path", remote_path)]
    if digest:
        meta.append(("sha256", digest))
    if overwrite:
        meta.append(("overwrite", "true"))
    if parents:
        meta.append(("parents", "true"))
    return ",".join(k + " " + base64.b64encode(v.encode()).decode() for k, v in meta)


def create_call(system: str, size: int, remote_path: str, digest: Optional[str], overwrite: bool, parents: bool) -> Call[str]:
    """POST …/uploads: creates the upload and answers its URL (path)."""
    headers = {**_TUS, "Upload-Length": str(size), "Upload-Metadata": metadata(remote_path, digest, overwrite, parents)}
    return Call("POST", system_url(system, "/uploads"), _location, headers=headers)


def head_call(url: str) -> Call[Tuple[int, int]]:
    """HEAD on the upload: its committed offset and its length."""
    return Call("HEAD", url, _offset_length, headers=dict(_TUS), idempotent=True)


def patch_call(url: str, offset: int, n: int) -> Call[int]:
    """PATCH of n bytes at offset; answers the new committed offset."""
    headers = {**_TUS, "Content-Type": "application/offset+octet-stream", "Upload-Offset": str(offset), "Content-Length": str(n)}
    return Call("PATCH", url, _offset, headers=headers)


#: The smallest PATCH that a 413 (a proxy's body limit in front of the service) halves the
#: PATCHes down to; at this size a 413 is final.
MIN_CHUNK_SIZE = 1 << 20


def halved(e: Exception, chunk_size: int, left: int) -> Optional[int]:
    """The PATCH size to go on with after e when e is a 413 (something in front of the service
    refuses bodies this large) for a PATCH larger than MIN_CHUNK_SIZE: half of it, at least
    MIN_CHUNK_SIZE; otherwise None."""
    n = min(chunk_size, left)
    if isinstance(e, APIError) and e.status == 413 and n > MIN_CHUNK_SIZE:
        return max(MIN_CHUNK_SIZE, n // 2)
    return None


def worth_resuming(e: Exception) -> bool:
    """True for failures after which the committed offset is worth asking for: a lost
    connection, a server error, a 409 (the offset moved, e.g. a cut request still wrote) or a 423
    (a cut request still holds the upload). Refusals (4xx) and a checksum mismatch are final."""
    if isinstance(e, ConnectionFailed):
        return True
    return isinstance(e, APIError) and (e.status >= 500 or e.status in (409, 423))


def locked(e: Exception) -> bool:
    """True for a 423: another request holds the upload for now."""
    return isinstance(e, APIError) and e.status == 423


def range_chunks(f: IO[bytes], n: int, counter: Counter) -> Iterator[bytes]:
    """n bytes of f (positioned already) in pieces, counted; f is closed at the end."""
    with f:
        left = n
        while left > 0:
            b = f.read(min(CHUNK, left))
            if not b:
                raise ValueError(f"the source ended {left} bytes early (changed while uploading?)")
            left -= len(b)
            counter.add(b)
            yield b


async def async_range_chunks(f: IO[bytes], n: int, counter: Counter) -> AsyncIterator[bytes]:
    """The asyncio twin of :func:`range_chunks`."""
    for b in range_chunks(f, n, counter):
        yield b

