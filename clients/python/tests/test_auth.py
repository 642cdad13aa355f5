"""Token providers against the real service: tokens minted by the real binary."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, List
from urllib.parse import parse_qs

import pytest

import sshapi
from conftest import Demo


def mint(demo: Demo, ttl: str = "1h") -> str:
    out = subprocess.run([demo.bin, "token", "--user", demo.user, "--data-dir", demo.data_dir, "--ttl", ttl], check=True, capture_output=True)
    return out.stdout.decode().strip()


def test_command_token_runs_once_while_valid(demo: Demo) -> None:
    p = sshapi.CommandToken([demo.bin, "token", "--user", demo.user, "--data-dir", demo.data_dir, "--ttl", "1h"])
    with sshapi.Client(demo.url, auth=p) as c:
        assert [s.id for s in c.systems()][:1] == ["demo"]
        c.system("demo")
    assert p.runs == 1
    # A token that expires within the margin is fetched again before each use.
    short = sshapi.CommandToken([demo.bin, "token", "--user", demo.user, "--data-dir", demo.data_dir, "--ttl", "30s"], margin=60)
    with sshapi.Client(demo.url, auth=short) as c:
        c.systems()
        c.systems()
    assert short.runs == 2


def test_bad_token_is_unauthorized(demo: Demo) -> None:
    with sshapi.Client(demo.url, token="not-a-jwt") as c:
        with pytest.raises(sshapi.UnauthorizedError) as e:
            c.systems()
    assert e.value.status == 401


class TokenEndpoint:
    """An OAuth 2.0 token endpoint (client credentials) that mints real sshapi tokens."""

    def __init__(self, demo: Demo, expires_in: int):
        self.calls: List[str] = []
        ep = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                basic = base64.b64encode(b"gateway:s3cret").decode()
                ok = form.get("grant_type") == ["client_credentials"] and self.headers.get("Authorization") == f"Basic {basic}"
                ep.calls.append(form.get("scope", [""])[0])
                body = json.dumps({"access_token": mint(demo), "token_type": "Bearer", "expires_in": expires_in} if ok else {"error": "invalid_client"}).encode()
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint_long(demo: Demo) -> Iterator[TokenEndpoint]:
    e = TokenEndpoint(demo, expires_in=3600)
    yield e
    e.close()


@pytest.fixture
def endpoint_short(demo: Demo) -> Iterator[TokenEndpoint]:
    e = TokenEndpoint(demo, expires_in=10)
    yield e
    e.close()


def test_client_credentials_caches_until_expiry(demo: Demo, endpoint_long: TokenEndpoint) -> None:
    p = sshapi.ClientCredentials(endpoint_long.url, "gateway", "s3cret", scope="sshapi")
    with sshapi.Client(demo.url, auth=p) as c:
        c.systems()
        c.systems()
    assert endpoint_long.calls == ["sshapi"] and p.fetches == 1
    assert "s3cret" not in repr(p)


def test_client_credentials_refresh_before_expiry(demo: Demo, endpoint_short: TokenEndpoint) -> None:
    p = sshapi.ClientCredentials(endpoint_short.url, "gateway", "s3cret", margin=30)
    with sshapi.Client(demo.url, auth=p) as c:
        c.systems()
        c.systems()
    assert p.fetches == 2, "a token within the margin of its expiry is refreshed before use"


def test_client_credentials_wrong_secret(demo: Demo, endpoint_long: TokenEndpoint) -> None:
    p = sshapi.ClientCredentials(endpoint_long.url, "gateway", "wrong")
    with sshapi.Client(demo.url, auth=p) as c:
        with pytest.raises(sshapi.SshapiError, match="HTTP 401"):
            c.systems()
