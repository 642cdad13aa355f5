"""The asyncio client: the same operations, awaited, concurrently."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

import sshapi
from conftest import Demo
from faultproxy import Fault, FaultProxy


async def _tour(demo: Demo, second: str, rdir: str, tmp: Path) -> None:
    s = demo.system
    async with sshapi.AsyncClient(demo.url, token=demo.token) as c:
        systems = await c.systems()
        assert "demo" in [x.id for x in systems]
        results = await asyncio.gather(*(c.run(s, f"echo {i}") for i in range(8)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
        events = [e async for e in c.run_stream(s, "echo a; echo b >&2; exit 2")]
        # stdout and stderr are separate SSH streams: their relative order is not defined
        assert b"".join(e.data for e in events if e.type == "stdout") == b"a\n"
        assert b"".join(e.data for e in events if e.type == "stderr") == b"b\n"
        assert events[-1].result is not None and events[-1].result.exit_status == 2

        data = os.urandom(1024 * 1024 + 3)
        prog: List[Tuple[int, Optional[int]]] = []
        up = await c.upload(s, data, f"{rdir}/a.bin", progress=lambda d, t: prog.append((d, t)))
        assert up.sha256 == hashlib.sha256(data).hexdigest() and prog[-1] == (len(data), len(data))
        await c.download(s, f"{rdir}/a.bin", tmp / "a.bin", verify=True)
        assert (tmp / "a.bin").read_bytes() == data
        async with c.open(s, f"{rdir}/a.bin") as f:
            assert await f.read(4) == data[:4]
            assert await f.read() == data[4:]
        await c.mkdir(s, f"{rdir}/d/e", parents=True)
        assert [e.name for e in await c.list_files(s, rdir)] == ["a.bin", "d"]
        with pytest.raises(sshapi.NotFoundError):
            await c.stat(s, f"{rdir}/nope")

        t = await c.submit_transfer(source=(s, f"{rdir}/a.bin"), destination=(second, f"{rdir}/b.bin"))
        seen: List[int] = []
        done = await c.wait_transfer(t.id, timeout=120, progress=lambda d, n: seen.append(d))
        assert done.status == "succeeded" and seen[-1] == len(data)
        assert (await c.checksum(second, f"{rdir}/b.bin")).checksum == up.sha256
        assert [e.event async for e in c.transfer_events(t.id)][-1] == "done"


def test_async_client(demo: Demo, second_system: str, rdir: str, tmp_path: Path) -> None:
    asyncio.run(_tour(demo, second_system, rdir, tmp_path))


def test_async_retried_upload(demo: Demo, rdir: str) -> None:
    data = os.urandom(1024 * 1024)
    p = FaultProxy(demo.url, faults=[Fault("PUT", "/content/", "cut")]).start()

    async def go() -> sshapi.UploadResult:
        async with sshapi.AsyncClient(p.url, token=demo.token, retry=sshapi.RetryPolicy(backoff=0.05)) as c:
            return await c.upload(demo.system, data, f"{rdir}/r.bin")

    try:
        res = asyncio.run(go())
    finally:
        p.stop()
    assert res.sha256 == hashlib.sha256(data).hexdigest()
    assert [x.fault for x in p.requests("PUT", "/content/")] == ["cut", ""]
