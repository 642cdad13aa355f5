"""Resumable uploads (tus) through a fault-injecting proxy in front of the real service."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Iterator, List, Tuple
from urllib.parse import urlsplit

import pytest

import sshapi
from sshapi import _tus
from sshapi._core import Call, parse_none
from conftest import Demo
from cutproxy import CutProxy
from faultproxy import Fault, FaultProxy

FAST = sshapi.RetryPolicy(attempts=4, backoff=0.05, max_backoff=0.2)


MiB = 1 << 20


@pytest.fixture
def cut(demo: Demo) -> Iterator[CutProxy]:
    u = urlsplit(demo.url)
    p = CutProxy((u.hostname or "127.0.0.1", u.port or 80)).start()
    yield p
    p.stop()


def _source(tmp_path: Path, size: int) -> Tuple[Path, bytes]:
    data = os.urandom(size)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    return src, data


def _on_server(c: sshapi.Client, demo: Demo, rdir: str, name: str, data: bytes) -> None:
    """The server's own SHA-256 of the file, and no part file left beside it."""
    assert c.checksum(demo.system, f"{rdir}/{name}").checksum == hashlib.sha256(data).hexdigest()
    assert [e.name for e in c.list_files(demo.system, rdir, show_hidden=True)] == [name], "no part file left"


def _restarts(seen: List[int]) -> List[int]:
    """The offsets progress went back to (a new PATCH after a failure)."""
    return [b for a, b in zip(seen, seen[1:]) if b < a]


@pytest.mark.parametrize("chunk", [4 * MiB, 64 * MiB], ids=["4MiB-chunks", "one-patch"])
def test_resumable_upload_continues_after_a_tcp_cut(demo: Demo, cut: CutProxy, client: sshapi.Client, rdir: str, tmp_path: Path, chunk: int) -> None:
    src, data = _source(tmp_path, 10 * MiB)
    seen: List[int] = []
    cut.cut_after(6 * MiB)  # in the middle of the second 4 MiB PATCH, or of the one PATCH
    with sshapi.Client(cut.url, token=demo.token, retry=FAST) as c:
        res = c.upload(demo.system, src, f"{rdir}/cut.bin", progress=lambda d, t: seen.append(d), resumable=True, chunk_size=chunk)
    assert (res.size, res.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert cut.cuts == 1
    # A HEAD right after the cut may answer an offset the server is still moving (it drains what
    # it had received, holding the upload: 423 or 409 then): the PATCH that went through started
    # from what the cut request committed, not from 0.
    back = _restarts(seen)
    assert back and 4 * MiB <= back[-1] < 6 * MiB, f"the last PATCH did not go on from the committed offset: {back}"
    assert cut.forwarded < len(data) + 3 * MiB, f"{cut.forwarded} bytes sent for a {len(data)}-byte file"
    assert seen[-1] == len(data)
    _on_server(client, demo, rdir, "cut.bin", data)


def test_async_resumable_upload_continues_after_a_tcp_cut(demo: Demo, cut: CutProxy, client: sshapi.Client, rdir: str, tmp_path: Path) -> None:
    src, data = _source(tmp_path, 9 * MiB)
    seen: List[int] = []
    cut.cut_after(5 * MiB)

    async def go() -> sshapi.UploadResult:
        async with sshapi.AsyncClient(cut.url, token=demo.token, retry=FAST) as c:
            return await c.upload(demo.system, src, f"{rdir}/async.bin", progress=lambda d, t: seen.append(d), resumable=True, chunk_size=2 * MiB)

    res = asyncio.run(go())
    assert res.sha256 == hashlib.sha256(data).hexdigest() and cut.cuts == 1
    back = _restarts(seen)
    assert back and 4 * MiB <= back[-1] < 5 * MiB, back
    _on_server(client, demo, rdir, "async.bin", data)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_resumable_upload_resumes_a_failed_run_from_its_url(demo: Demo, cut: CutProxy, client: sshapi.Client, rdir: str, tmp_path: Path, use_async: bool) -> None:
    """The first run loses the service for good midway and raises UploadInterrupted; a second
    run given its upload URL sends only the rest."""
    src, data = _source(tmp_path, 8 * MiB)
    urls: List[str] = []
    cut.cut_after(3 * MiB, then_down=True)  # the service is unreachable from the cut on
    path = f"{rdir}/resumed.bin"
    if use_async:

        async def first() -> None:
            async with sshapi.AsyncClient(cut.url, token=demo.token, retry=FAST) as c:
                await c.upload(demo.system, src, path, resumable=True, chunk_size=MiB, on_upload_url=urls.append)

        with pytest.raises(sshapi.UploadInterrupted) as ei:
            asyncio.run(first())
    else:
        with sshapi.Client(cut.url, token=demo.token, retry=FAST) as c, pytest.raises(sshapi.UploadInterrupted) as ei:
            c.upload(demo.system, src, path, resumable=True, chunk_size=MiB, on_upload_url=urls.append)
    e = ei.value
    assert urls == [e.upload_url] and e.upload_url.startswith(f"/v1/systems/{demo.system}/uploads/")
    assert 2 * MiB <= e.offset <= 3 * MiB, e.offset
    assert not client.exists(demo.system, path), "nothing in place before the last byte"

    cut.down, before, seen = False, cut.forwarded, []
    if use_async:

        async def second() -> sshapi.UploadResult:
            async with sshapi.AsyncClient(cut.url, token=demo.token, retry=FAST) as c:
                return await c.upload(demo.system, src, path, progress=lambda d, t: seen.append(d), upload_url=e.upload_url)

        res = asyncio.run(second())
    else:
        with sshapi.Client(cut.url, token=demo.token, retry=FAST) as c:
            res = c.upload(demo.system, src, path, progress=lambda d, t: seen.append(d), upload_url=e.upload_url)
    assert res.sha256 == hashlib.sha256(data).hexdigest()
    assert seen[0] >= e.offset and seen[-1] == len(data), (seen[0], e.offset)
    sent = cut.forwarded - before
    assert sent < len(data) - seen[0] + 64 * 1024, f"the second run sent {sent} bytes for the {len(data) - seen[0]} left"
    _on_server(client, demo, rdir, "resumed.bin", data)


def test_resume_url_of_a_finished_upload_or_another_file(client: sshapi.Client, demo: Demo, rdir: str, tmp_path: Path) -> None:
    src, data = _source(tmp_path, MiB + 5)
    urls: List[str] = []
    client.upload(demo.system, src, f"{rdir}/f.bin", resumable=True, on_upload_url=urls.append)
    # the upload finished (its answer lost, say): the URL is gone and the file is in place
    res = client.upload(demo.system, src, f"{rdir}/f.bin", upload_url=urls[0])
    assert res.size == len(data)
    client.upload(demo.system, b"abc", f"{rdir}/g.bin", resumable=True, chunk_size=1, on_upload_url=urls.append)
    with pytest.raises(sshapi.NotFoundError):  # gone, and the file there is not this source
        client.upload(demo.system, data, f"{rdir}/g.bin", upload_url=urls[1])
    u = client._do(_tus.create_call(demo.system, 10, f"{rdir}/h.bin", None, True, False))
    with pytest.raises(ValueError, match="not the same file"):
        client.upload(demo.system, b"x" * 11, f"{rdir}/h.bin", upload_url=u)
    client._do(Call("DELETE", u, parse_none, headers={"Tus-Resumable": "1.0.0"}))  # terminated: its part file goes


@pytest.fixture
def proxy(demo: Demo) -> Iterator[FaultProxy]:
    p = FaultProxy(demo.url).start()
    yield p
    p.stop()


def test_resumable_upload_survives_a_cut_and_a_503(demo: Demo, proxy: FaultProxy, rdir: str, tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    proxy.faults = [Fault("PATCH", "/uploads/", "cut"), Fault("PATCH", "/uploads/", "status", 503, retry_after="0")]
    seen: List[Tuple[int, int]] = []
    with sshapi.Client(proxy.url, token=demo.token, retry=FAST) as c:
        res = c.upload(demo.system, src, f"{rdir}/big.bin", progress=lambda d, t: seen.append((d, t or 0)), resumable=True)
        assert res.size == len(data) and res.sha256 == hashlib.sha256(data).hexdigest()
        assert c.checksum(demo.system, f"{rdir}/big.bin").checksum == hashlib.sha256(data).hexdigest()
        assert [e.name for e in c.list_files(demo.system, rdir, show_hidden=True)] == ["big.bin"], "no part file left"
    patches = proxy.requests("PATCH", "/uploads/")
    faults = [s.fault for s in patches]
    # after a failure an empty PATCH at the committed offset comes before the bytes (the proxy
    # answered the first of them 503)
    assert faults == ["cut", "status 503", "", ""], faults
    assert [s.body_bytes for s in patches][1:3] == [0, 0]
    assert proxy.requests("HEAD", "/uploads/"), "the client asked the committed offset after the failures"
    assert seen[-1] == (len(data), len(data))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_resumable_upload_halves_its_patches_on_a_body_limit(demo: Demo, proxy: FaultProxy, rdir: str, tmp_path: Path, use_async: bool) -> None:
    data = os.urandom((5 << 20) + 99)
    src = tmp_path / "limited.bin"
    src.write_bytes(data)
    limit = 2 << 20  # the proxy refuses larger bodies with 413, as nginx's client_max_body_size does
    proxy.faults = [Fault("PATCH", "/uploads/", "status", 413, times=1000, min_body=limit)]
    if use_async:

        async def run() -> None:
            async with sshapi.AsyncClient(proxy.url, token=demo.token, retry=FAST) as c:
                await c.upload(demo.system, src, f"{rdir}/limited.bin", resumable=True)

        asyncio.run(run())
    else:
        with sshapi.Client(proxy.url, token=demo.token, retry=FAST) as c:
            c.upload(demo.system, src, f"{rdir}/limited.bin", resumable=True)
    with sshapi.Client(demo.url, token=demo.token) as c:
        assert c.checksum(demo.system, f"{rdir}/limited.bin").checksum == hashlib.sha256(data).hexdigest()
    sizes = [(s.body_bytes, s.fault) for s in proxy.requests("PATCH", "/uploads/") if s.body_bytes]
    # the default PATCH (the whole file) and its half refused, then quarters of it passed
    assert sizes == [(len(data), "status 413"), (len(data) // 2, "status 413")] + [(len(data) // 4, "")] * 4 + [(len(data) - 4 * (len(data) // 4), "")], sizes


def test_resumable_upload_checksum_mismatch_leaves_nothing(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    data = b"x" * 1000
    with pytest.raises(sshapi.ChecksumMismatchError):
        # bytes whose digest is given wrongly: the server refuses on the last byte
        client._upload_resumable(demo.system, sshapi._core.UploadSource(data), len(data), f"{rdir}/m.bin", None, "0" * 64, False, False, None, None, 1 << 20)
    assert [e.name for e in client.list_files(demo.system, rdir, show_hidden=True)] == []


def test_resumable_needs_a_rereadable_source(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    r, w = os.pipe()
    os.close(w)
    with os.fdopen(r, "rb") as f, pytest.raises(TypeError):
        client.upload(demo.system, f, f"{rdir}/p.bin", resumable=True)
