"""Batch jobs through a real Slurm cluster (``sshapi demo --slurm``): submit, wait, output,
list, cancel, errors; the async client's twins."""

from __future__ import annotations

import asyncio

import pytest

import sshapi
from conftest import Demo


def test_job_submit_wait_output(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    j = client.submit_job(
        demo.system, "#!/bin/sh\necho \"hello $WHO\"\nexit 3\n", name="sdk job", working_dir=rdir, output="sdk-%j.out", env={"WHO": "sdk"}, time_limit="5"
    )
    assert isinstance(j, sshapi.Job) and j.job_id
    done = client.wait_job(demo.system, j.job_id, timeout=60)
    assert done.finished and done.state == "failed" and done.exit_code == 3
    assert done.stdout.endswith(f"{rdir}/sdk-{j.job_id}.out")
    assert client.job_output(demo.system, j.job_id) == b"hello sdk\n"
    listed = client.jobs(demo.system, state="failed", name="sdk job")
    assert [x.job_id for x in listed] == [j.job_id]
    assert "exit 3" in (client.job(demo.system, j.job_id, script=True).script or "")


def test_job_cancel_and_errors(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    j = client.submit_job(demo.system, "#!/bin/sh\nsleep 60\n", working_dir=rdir, output="/dev/null")
    assert client.wait_job(demo.system, j.job_id, until="running", timeout=60).state == "running"
    client.cancel_job(demo.system, j.job_id)
    assert client.wait_job(demo.system, j.job_id, timeout=60).state == "cancelled"
    with pytest.raises(sshapi.NotFoundError):
        client.cancel_job(demo.system, "999999")
    with pytest.raises(sshapi.BadRequestError) as e:
        client.submit_job(demo.system, "#!/bin/sh\n", partition="nope")
    assert "partition" in str(e.value)
    with pytest.raises(sshapi.BadRequestError):
        client.submit_job(demo.system, "#!/bin/sh\n", time_limit="soon")
    with pytest.raises(TypeError):
        client.submit_job(demo.system, "#!/bin/sh\n", bogus=1)


def test_job_async(demo: Demo, rdir: str) -> None:
    async def main() -> None:
        async with sshapi.AsyncClient(demo.url, token=demo.token) as c:
            j = await c.submit_job(demo.system, "#!/bin/sh\necho async\n", working_dir=rdir, output="a-%j.out")
            done = await c.wait_job(demo.system, j.job_id, timeout=60)
            assert done.state == "completed" and done.exit_code == 0
            assert await c.job_output(demo.system, j.job_id) == b"async\n"
            assert any(x.job_id == j.job_id for x in await c.jobs(demo.system))

    asyncio.run(main())
