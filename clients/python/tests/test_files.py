"""File operations through the SDK against the real service and sshd."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import List, Optional, Tuple

import httpx
import pytest

import sshapi
from conftest import Demo


def test_list_files_pages_transparently(demo: Demo, rdir: str) -> None:
    names = [f"f{i:02d}" for i in range(25)]
    with sshapi.Client(demo.url, token=demo.token) as c:
        c.run(demo.system, f"cd {rdir} && touch {' '.join(names)} .hidden")
    pages: List[str] = []
    hooks = {"request": [lambda r: pages.append(str(r.url)) if "/ls/" in str(r.url) else None]}
    with httpx.Client(base_url=demo.url, event_hooks=hooks) as h, sshapi.Client(demo.url, token=demo.token, http=h) as c:
        entries = c.list_files(demo.system, rdir, page_size=10)
        assert [e.name for e in entries] == names
        assert len(pages) == 3, pages
        assert all(e.is_file and e.path.endswith("/" + e.name) for e in entries)
        hidden = c.list_files(demo.system, rdir, show_hidden=True)
        assert ".hidden" in [e.name for e in hidden]


def test_upload_download_roundtrip_with_progress(client: sshapi.Client, demo: Demo, rdir: str, tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    src = tmp_path / "in.bin"
    src.write_bytes(data)
    ups: List[Tuple[int, Optional[int]]] = []
    res = client.upload(demo.system, src, f"{rdir}/sub/data.bin", progress=lambda d, t: ups.append((d, t)), parents=True)
    assert res.size == len(data) and res.sha256 == hashlib.sha256(data).hexdigest()
    assert ups[0] == (0, len(data)) and ups[-1] == (len(data), len(data))
    assert [d for d, _ in ups] == sorted(d for d, _ in ups)
    assert client.checksum(demo.system, f"{rdir}/sub/data.bin").checksum == res.sha256

    downs: List[Tuple[int, Optional[int]]] = []
    out = tmp_path / "out.bin"
    n = client.download(demo.system, f"{rdir}/sub/data.bin", out, progress=lambda d, t: downs.append((d, t)), verify=True)
    assert n == len(data) and out.read_bytes() == data
    assert downs[-1] == (len(data), len(data))
    assert not list(tmp_path.glob(".*sshapi-part")), "the partial file is renamed into place"


class Abort(Exception):
    pass


def test_download_resumes_a_partial_file(client: sshapi.Client, demo: Demo, rdir: str, tmp_path: Path) -> None:
    data = os.urandom(4 * 1024 * 1024)
    client.upload(demo.system, data, f"{rdir}/big.bin")
    out = tmp_path / "big.bin"

    def stop_after_1mib(done: int, total: Optional[int]) -> None:
        if done >= 1024 * 1024:
            raise Abort()

    with pytest.raises(Abort):
        client.download(demo.system, f"{rdir}/big.bin", out, progress=stop_after_1mib)
    part = tmp_path / ".big.bin.sshapi-part"
    have = part.stat().st_size
    assert 0 < have < len(data) and not out.exists()

    seen: List[int] = []
    client.download(demo.system, f"{rdir}/big.bin", out, progress=lambda d, t: seen.append(d))
    assert seen[0] == have, "the second download starts where the first stopped"
    assert out.read_bytes() == data

    # A partial file of a remote file that changed since is fetched again from the start.
    with pytest.raises(Abort):
        client.download(demo.system, f"{rdir}/big.bin", out, progress=stop_after_1mib)
    new = os.urandom(2 * 1024 * 1024)
    client.upload(demo.system, new, f"{rdir}/big.bin")
    client.run(demo.system, f"touch -d '2001-01-01' {rdir}/big.bin")
    seen.clear()
    client.download(demo.system, f"{rdir}/big.bin", out, progress=lambda d, t: seen.append(d))
    assert seen[0] == 0 and out.read_bytes() == new


def test_upload_sources_and_checksum(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    f = io.BytesIO(b"skip-this|payload")
    f.seek(10)
    assert client.upload(demo.system, f, f"{rdir}/fileobj").size == 7
    assert client.read_bytes(demo.system, f"{rdir}/fileobj") == b"payload"
    # verify=False asks the server not to hash the body (digest=none); the default answers with it.
    assert client.upload(demo.system, b"payload", f"{rdir}/nodigest", verify=False).sha256 == ""
    assert client.read_bytes(demo.system, f"{rdir}/nodigest") == b"payload"
    assert client.upload(demo.system, b"payload", f"{rdir}/nodigest").sha256 == hashlib.sha256(b"payload").hexdigest()
    with pytest.raises(sshapi.ConflictError) as e:
        client.upload(demo.system, b"x", f"{rdir}/fileobj", overwrite=False)
    assert e.value.status == 409
    with pytest.raises(sshapi.NotFoundError):
        client.upload(demo.system, b"x", f"{rdir}/no/such/dir/f")


def test_file_operations(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    s = demo.system
    client.mkdir(s, f"{rdir}/a/b/c", parents=True)
    client.mkdir(s, f"{rdir}/a/b/c", parents=True)  # idempotent with parents
    with pytest.raises(sshapi.ConflictError):
        client.mkdir(s, f"{rdir}/a")
    client.upload(s, b"one\ntwo\nthree\n", f"{rdir}/a/t.txt")
    assert client.head(s, f"{rdir}/a/t.txt", lines=1).text == "one\n"
    assert client.tail(s, f"{rdir}/a/t.txt", lines=2).text == "two\nthree\n"
    assert client.tail(s, f"{rdir}/a/t.txt", bytes=3).data == b"ee\n"
    client.mv(s, f"{rdir}/a/t.txt", f"{rdir}/a/u.txt")
    assert not client.exists(s, f"{rdir}/a/t.txt") and client.exists(s, f"{rdir}/a/u.txt")
    client.cp(s, f"{rdir}/a", f"{rdir}/copy", recursive=True)
    assert client.stat(s, f"{rdir}/copy/u.txt").size == 14
    client.chmod(s, f"{rdir}/copy/u.txt", "600")
    assert client.stat(s, f"{rdir}/copy/u.txt").mode == "0600"
    client.symlink(s, "u.txt", f"{rdir}/copy/link")
    link = client.stat(s, f"{rdir}/copy/link")
    assert link.type == "symlink" and link.link_target == "u.txt"
    with pytest.raises(sshapi.ConflictError):
        client.rm(s, f"{rdir}/copy")
    client.rm(s, f"{rdir}/copy", recursive=True)
    with pytest.raises(sshapi.NotFoundError) as e:
        client.stat(s, f"{rdir}/copy")
    assert e.value.status == 404 and e.value.title and "copy" in e.value.detail
    assert sorted(e.name for e in client.list_files(s, rdir, recursive=True)) == ["a", "a/b", "a/b/c", "a/u.txt"]

def test_open_reads_and_seeks(client: sshapi.Client, demo: Demo, rdir: str) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB
    client.upload(demo.system, data, f"{rdir}/r.bin")
    with client.open(demo.system, f"{rdir}/r.bin") as f:
        assert f.read(10) == data[:10]
        f.seek(1_000_000)
        assert f.read(5) == data[1_000_000:1_000_005]
        f.seek(-3, io.SEEK_END)
        assert f.read() == data[-3:]


def test_permission_denied_is_403(client: sshapi.Client, demo: Demo) -> None:
    with pytest.raises(sshapi.PermissionDeniedError) as e:
        client.upload(demo.system, b"x", "/root/sdk-should-not-exist")
    assert e.value.status == 403


def test_errors_name_fields(client: sshapi.Client) -> None:
    with pytest.raises(sshapi.BadRequestError) as e:
        client.create_system(id="no spaces allowed", host="127.0.0.1", trust_on_first_use=True)
    assert e.value.status == 400 and "id" in e.value.fields
    with pytest.raises(sshapi.NotFoundError):
        client.system("no-such-system")


def test_empty_files_and_a_complete_partial_file(client: sshapi.Client, demo: Demo, rdir: str, tmp_path: Path) -> None:
    assert client.upload(demo.system, b"", f"{rdir}/empty").size == 0
    assert client.download(demo.system, f"{rdir}/empty", tmp_path / "empty") == 0
    data = os.urandom(100_000)
    client.upload(demo.system, data, f"{rdir}/whole")
    # A partial file that already holds the whole unchanged file (interrupted before the
    # rename) is finished without fetching it again.
    part = tmp_path / ".whole.sshapi-part"
    part.write_bytes(data)
    mtime = client.stat(demo.system, f"{rdir}/whole").mtime
    assert mtime is not None
    os.utime(part, (mtime.timestamp(), mtime.timestamp()))
    seen: List[Tuple[int, Optional[int]]] = []
    assert client.download(demo.system, f"{rdir}/whole", tmp_path / "whole", progress=lambda d, t: seen.append((d, t))) == len(data)
    assert seen == [(len(data), len(data))] and (tmp_path / "whole").read_bytes() == data
