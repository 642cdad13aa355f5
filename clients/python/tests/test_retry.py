"""Retries, through a fault-injecting proxy in front of the real service."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest

import sshapi
from conftest import Demo
from faultproxy import Fault, FaultProxy, gaps

FAST = sshapi.RetryPolicy(attempts=4, backoff=0.05, max_backoff=0.2)


@pytest.fixture
def proxy(demo: Demo) -> Iterator[FaultProxy]:
    p = FaultProxy(demo.url).start()
    yield p
    p.stop()


def test_idempotent_requests_honour_retry_after(demo: Demo, proxy: FaultProxy, rdir: str) -> None:
    proxy.faults = [Fault("GET", "/stat/", "status", 503, retry_after="1"), Fault("GET", "/stat/", "status", 429, retry_after="0")]
    with sshapi.Client(proxy.url, token=demo.token, retry=FAST) as c:
        assert c.stat(demo.system, rdir).is_dir
    seen = proxy.requests("GET", "/stat/")
    assert [s.fault for s in seen] == ["status 503", "status 429", ""]
    assert gaps(seen)[0] >= 0.9, "the client waited the Retry-After the server asked for"


def test_non_idempotent_requests_are_not_retried(demo: Demo, proxy: FaultProxy) -> None:
    proxy.faults = [Fault("POST", "/commands", "status", 503, retry_after="0"), Fault("POST", "/commands", "status", 429, retry_after="7")]
    with sshapi.Client(proxy.url, token=demo.token, retry=FAST) as c:
        with pytest.raises(sshapi.ServiceUnavailableError) as e:
            c.run(demo.system, "echo once >> sdk-must-not-repeat")
        assert e.value.status == 503
        with pytest.raises(sshapi.RateLimitedError) as r:
            c.run(demo.system, "true")
        assert r.value.retry_after == 7
    assert len(proxy.requests("POST", "/commands")) == 2


def test_retries_give_up_after_the_policy(demo: Demo, proxy: FaultProxy) -> None:
    proxy.faults = [Fault("GET", "/v1/systems", "status", 503, retry_after="0", times=10)]
    with sshapi.Client(proxy.url, token=demo.token, retry=FAST) as c:
        with pytest.raises(sshapi.ServiceUnavailableError):
            c.systems()
    assert len(proxy.requests("GET", "/v1/systems")) == FAST.attempts


def test_retried_upload_rereads_the_source_from_the_start(demo: Demo, proxy: FaultProxy, rdir: str, tmp_path: Path) -> None:
    data = os.urandom(2 * 1024 * 1024 + 5)
    src = tmp_path / "up.bin"
    src.write_bytes(data)
    proxy.faults = [Fault("PUT", "/content/", "cut")]
    progress: List[Tuple[int, Optional[int]]] = []
    with sshapi.Client(proxy.url, token=demo.token, retry=FAST) as c:
        res = c.upload(demo.system, src, f"{rdir}/retried.bin", progress=lambda d, t: progress.append((d, t)))
        assert res.size == len(data) and res.sha256 == hashlib.sha256(data).hexdigest()
        assert c.checksum(demo.system, f"{rdir}/retried.bin").checksum == res.sha256
    puts = proxy.requests("PUT", "/content/")
    assert [p.fault for p in puts] == ["cut", ""] and puts[1].body_bytes == len(data)
    assert progress.count((0, len(data))) == 2, "progress starts again from 0 on the retry"


def test_retried_upload_of_a_file_object(demo: Demo, proxy: FaultProxy, rdir: str) -> None:
    import io

    data = os.urandom(1024 * 1024)
    f = io.BytesIO(b"header" + data)
    f.seek(6)
    proxy.faults = [Fault("PUT", "/content/", "cut")]
    with sshapi.Client(proxy.url, token=demo.token, retry=FAST) as c:
        res = c.upload(demo.system, f, f"{rdir}/fobj.bin")
    assert res.sha256 == hashlib.sha256(data).hexdigest()


def test_connection_refused_is_retried_then_reported(demo: Demo) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with sshapi.Client(f"http://127.0.0.1:{port}", token=demo.token, retry=FAST) as c:
        with pytest.raises(sshapi.ConnectionFailed):
            c.systems()
