"""Resumable uploads (tus) through a fault-injecting proxy in front of the real service."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

import sshapi
from conftest import Demo
from faultproxy import Fault, FaultProxy

FAST = sshapi.RetryPolicy(attempts=4, backoff=0.05, max_backoff=0.2)


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
    faults = [s.fault for s in proxy.requests("PATCH", "/uploads/")]
    assert faults[:2] == ["cut", "status 503"] and faults[2:] == [""], faults
    assert proxy.requests("HEAD", "/uploads/"), "the client asked the committed offset after the failures"
    assert seen[-1] == (len(data), len(data))


def test_resumable_upload_checksum_mismatch_leaves_nothing(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    data = b"x" * 1000
    with pytest.raises(sshapi.ChecksumMismatchError):
        # bytes whose digest is given wrongly: the server refuses on the last byte
        client._upload_resumable(demo.system, sshapi._core.UploadSource(data), len(data), f"{rdir}/m.bin", None, "0" * 64, False, False)
    assert [e.name for e in client.list_files(demo.system, rdir, show_hidden=True)] == []


def test_resumable_needs_a_rereadable_source(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    r, w = os.pipe()
    os.close(w)
    with os.fdopen(r, "rb") as f, pytest.raises(TypeError):
        client.upload(demo.system, f, f"{rdir}/p.bin", resumable=True)
