"""Commands through the SDK: results, streaming, stdin, timeouts."""

from __future__ import annotations

import pytest

import sshapi
from conftest import Demo


def test_run_returns_a_typed_result(client: sshapi.Client, demo: Demo) -> None:
    r = client.run(demo.system, "echo out; echo err >&2; exit 3")
    assert isinstance(r, sshapi.CommandResult)
    assert (r.exit_status, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)


def test_run_stdin_binary_output_and_timeout(client: sshapi.Client, demo: Demo) -> None:
    assert client.run(demo.system, "tr a-z A-Z", stdin="hello").stdout == "HELLO"
    r = client.run(demo.system, r"printf '\377\376ok'")
    assert r.stdout_bytes == b"\xff\xfeok"
    r = client.run(demo.system, "sleep 30", timeout=1)
    assert r.timed_out and r.exit_status is None


def test_run_stream_yields_output_then_exit(client: sshapi.Client, demo: Demo) -> None:
    events = list(client.run_stream(demo.system, "for i in 1 2 3; do echo $i; done; echo e >&2; exit 5"))
    out = b"".join(e.data for e in events if e.type == "stdout")
    assert out == b"1\n2\n3\n"
    assert [e.text for e in events if e.type == "stderr"] == ["e\n"]
    assert events[-1].type == "exit" and events[-1].result is not None and events[-1].result.exit_status == 5


def test_unknown_system_is_not_found(client: sshapi.Client) -> None:
    with pytest.raises(sshapi.NotFoundError) as e:
        client.run("no-such-system", "true")
    assert e.value.status == 404
    with pytest.raises(sshapi.NotFoundError):
        list(client.run_stream("no-such-system", "true"))


def test_system_without_credential_is_conflict(client: sshapi.Client, demo: Demo) -> None:
    ssh = demo.ssh
    try:
        client.create_system(id="sdk-nocred", host=ssh["host"], port=ssh["port"], host_keys=[ssh["host_key"]])
        with pytest.raises(sshapi.ConflictError) as e:
            client.run("sdk-nocred", "true")
        assert e.value.status == 409
        with pytest.raises(sshapi.ConflictError):
            client.create_system(id="sdk-nocred", host=ssh["host"], port=ssh["port"], host_keys=[ssh["host_key"]])
        cred = client.set_credential("sdk-nocred", username=ssh["user"], private_key=ssh["private_key"])
        assert cred.username == ssh["user"] and cred.public_key_fingerprint.startswith("SHA256:")
        assert client.check_credential("sdk-nocred").ok
        assert client.run("sdk-nocred", "echo ok").stdout == "ok\n"
    finally:
        client.delete_system("sdk-nocred")
    with pytest.raises(sshapi.NotFoundError):
        client.system("sdk-nocred")
