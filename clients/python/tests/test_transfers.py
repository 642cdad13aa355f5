"""System-to-system transfers: submit, events, wait with progress, idempotency, cancel."""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import List, Optional, Tuple

import pytest

import sshapi
from conftest import Demo


def test_transfer_wait_with_progress(client: sshapi.Client, demo: Demo, second_system: str, rdir: str) -> None:
    data = os.urandom(6 * 1024 * 1024)
    client.upload(demo.system, data, f"{rdir}/src.bin")
    key = uuid.uuid4().hex
    t = client.submit_transfer(
        source=(demo.system, f"{rdir}/src.bin"), destination=(second_system, f"{rdir}/dst.bin"), chunk_size=1 << 20, idempotency_key=key
    )
    assert isinstance(t, sshapi.Transfer) and t.id and not t.same_system
    again = client.submit_transfer(
        source=(demo.system, f"{rdir}/src.bin"), destination=(second_system, f"{rdir}/dst.bin"), chunk_size=1 << 20, idempotency_key=key
    )
    assert again.id == t.id, "the same idempotency key returns the same transfer"
    seen: List[Tuple[int, Optional[int]]] = []
    done = client.wait_transfer(t.id, timeout=120, progress=lambda d, n: seen.append((d, n)))
    assert done.status == "succeeded" and done.bytes_done == len(data) and done.files_done == 1
    assert seen[-1] == (len(data), len(data))
    assert client.checksum(second_system, f"{rdir}/dst.bin").checksum == hashlib.sha256(data).hexdigest()
    events = list(client.transfer_events(t.id))
    assert events[-1].event == "done" and events[-1].transfer is not None and events[-1].transfer.status == "succeeded"
    assert t.id in [x.id for x in client.transfers(limit=50)]
    items = list(client.transfer_items(t.id))
    assert len(items) == 1 and items[0].status == "done" and items[0].sha256 == hashlib.sha256(data).hexdigest()


def test_recursive_transfer_and_failure(client: sshapi.Client, demo: Demo, second_system: str, rdir: str) -> None:
    for i in range(5):
        client.upload(demo.system, f"file {i}\n".encode(), f"{rdir}/tree/d{i % 2}/f{i}", parents=True)
    t = client.submit_transfer(source=(demo.system, f"~/{rdir}/tree"), destination=(second_system, f"{rdir}/copy"), recursive=True)
    done = client.wait_transfer(t.id, timeout=120)
    assert done.files_done >= 5
    assert client.read_bytes(second_system, f"{rdir}/copy/d1/f3") == b"file 3\n"

    bad = client.submit_transfer(source=(demo.system, f"{rdir}/missing"), destination=(second_system, f"{rdir}/x"))
    with pytest.raises(sshapi.TransferFailedError) as e:
        client.wait_transfer(bad.id, timeout=120)
    assert e.value.transfer.status == "failed"
    assert client.wait_transfer(bad.id, check=False).status == "failed"


def test_unknown_transfer_is_not_found(client: sshapi.Client) -> None:
    with pytest.raises(sshapi.NotFoundError):
        client.transfer("no-such-transfer")
    with pytest.raises(sshapi.NotFoundError):
        client.cancel_transfer("no-such-transfer")
