"""Fixtures: a real sshapi binary built from this repository, running ``sshapi demo --keep`` (a
throwaway OpenSSH sshd registered as system "demo"), and clients of it.

``SSHAPI_BIN`` names a binary built already (``make test-python`` passes bin/sshapi); otherwise
the session builds one with ``go build``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import sshapi  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Demo:
    """The running demo service and the sshd behind it."""

    url: str
    token: str
    system: str
    user: str
    data_dir: str
    bin: str
    ssh: Dict[str, Any]


@pytest.fixture(scope="session")
def sshapi_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    b = os.environ.get("SSHAPI_BIN")
    if b:
        return b
    out = tmp_path_factory.mktemp("bin") / "sshapi"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/sshapi"], cwd=REPO, check=True)
    return str(out)


@pytest.fixture(scope="session")
def demo(sshapi_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    d = tmp_path_factory.mktemp("demo")
    info, data, log = d / "info.json", d / "data", d / "demo.log"
    with open(log, "wb") as logf:
        p = subprocess.Popen(
            [sshapi_bin, "demo", "--keep", "--slurm", "--addr", "127.0.0.1:0", "--data-dir", str(data), "--info-file", str(info)],
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while not info.exists():
            if p.poll() is not None:
                raise RuntimeError(f"sshapi demo exited {p.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshapi demo not ready after 90 s:\n{log.read_text()}")
            time.sleep(0.05)  # polling for a file another process writes; there is no event to await
        i = json.loads(info.read_text())
        yield Demo(url=i["url"], token=i["token"], system=i["system"], user="demo-user", data_dir=str(data), bin=sshapi_bin, ssh=i["ssh"])
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture
def client(demo: Demo) -> Iterator[sshapi.Client]:
    with sshapi.Client(demo.url, token=demo.token) as c:
        yield c


@pytest.fixture
def rdir(client: sshapi.Client, demo: Demo) -> Iterator[str]:
    """A fresh remote directory in the sshd user's home, removed afterwards."""
    p = f"sdk-test-{uuid.uuid4().hex[:12]}"
    client.mkdir(demo.system, p)
    yield p
    client.rm(demo.system, p, recursive=True)


@pytest.fixture(scope="session")
def second_system(demo: Demo) -> str:
    """The same sshd registered a second time through the SDK, so transfers between the two
    systems pass through sshapi's streams instead of a server-side cp."""
    with sshapi.Client(demo.url, token=demo.token) as c:
        ssh = demo.ssh
        try:
            c.create_system(id="sdk2", host=ssh["host"], port=ssh["port"], host_keys=[ssh["host_key"]], description="second name of the demo sshd")
        except sshapi.ConflictError:
            pass
        c.set_credential("sdk2", username=ssh["user"], private_key=ssh["private_key"])
    return "sdk2"


@dataclass
class Versitygw:
    """A real S3 server (versitygw, posix backend) on loopback, and one bucket in it."""

    endpoint: str
    access_key_id: str
    secret_access_key: str
    bucket: str


@pytest.fixture(scope="session")
def versitygw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Versitygw]:
    """versitygw from ``SSHAPI_VERSITYGW``, or built from tools/versitygw into build/bin (as the Go
    tests do), started on a free port with a fresh root credential and one bucket directory."""
    import socket

    binary = os.environ.get("SSHAPI_VERSITYGW") or str(REPO / "build" / "bin" / "versitygw")
    if not os.environ.get("SSHAPI_VERSITYGW") and not Path(binary).exists():
        subprocess.run(["go", "build", "-o", binary, "github.com/versity/versitygw/cmd/versitygw"], cwd=REPO / "tools" / "versitygw", check=True)
    top = tmp_path_factory.mktemp("s3")
    bucket = "sdk-" + uuid.uuid4().hex[:8]
    (top / bucket).mkdir()  # the posix backend's bucket is a directory of its top directory
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key, secret = "AK" + uuid.uuid4().hex[:16], uuid.uuid4().hex + uuid.uuid4().hex[:8]
    env = dict(os.environ, ROOT_ACCESS_KEY_ID=key, ROOT_SECRET_ACCESS_KEY=secret)
    p = subprocess.Popen([binary, "--port", f"127.0.0.1:{port}", "--quiet", "posix", str(top)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("versitygw did not start")
                time.sleep(0.02)  # waiting for another process to listen; there is no event to await
        yield Versitygw(endpoint=f"http://127.0.0.1:{port}", access_key_id=key, secret_access_key=secret, bucket=bucket)
    finally:
        p.terminate()
        p.wait(timeout=10)
