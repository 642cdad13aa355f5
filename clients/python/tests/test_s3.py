"""The SDK's file calls on an S3 system (a real versitygw bucket), unchanged from SSH systems."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import sshapi
from conftest import Versitygw


@pytest.fixture
def s3_system(client: sshapi.Client, versitygw: Versitygw) -> str:
    try:
        client.create_s3_system("sdk-s3", endpoint=versitygw.endpoint, bucket=versitygw.bucket, path_style=True)
    except sshapi.ConflictError:
        pass
    cred = client.set_s3_credential("sdk-s3", versitygw.access_key_id, versitygw.secret_access_key)
    assert cred.kind == "s3" and cred.access_key_id == versitygw.access_key_id
    return "sdk-s3"


def test_files_on_s3(client: sshapi.Client, s3_system: str, versitygw: Versitygw, tmp_path: Path) -> None:
    sys = client.system(s3_system)
    assert sys.kind == "s3" and sys.bucket == versitygw.bucket and "server_copy" in sys.capabilities
    data = os.urandom(6 * 1024 * 1024 + 5)  # two parts
    res = client.upload(s3_system, data, "/d/data.bin")
    assert res.size == len(data) and res.sha256 == hashlib.sha256(data).hexdigest()
    client.mkdir(s3_system, "/d/sub")
    for i in range(12):
        client.upload(s3_system, b"x", f"/d/f{i:02d}")
    names = [e.name for e in client.list_files(s3_system, "/d", page_size=5)]  # pages by cursor
    assert names == ["data.bin"] + [f"f{i:02d}" for i in range(12)] + ["sub"]
    out = tmp_path / "out.bin"
    assert client.download(s3_system, "/d/data.bin", out, verify=True) == len(data)
    assert out.read_bytes() == data
    client.rm(s3_system, "/d", recursive=True)
    assert not client.exists(s3_system, "/d/data.bin")
    with pytest.raises(sshapi.APIError) as e:
        client.run(s3_system, "true")
    assert e.value.status == 409
