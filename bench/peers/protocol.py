"""Line protocol shared by the Python peers of `sshapi bench --compare`.

The Go bench tool starts a peer, which opens its connection pool and prints one line
``{"ready": true, "versions": {...}}``. The tool then writes one JSON request per line on the
peer's stdin::

    {"id": 7, "op": "run", "command": "uptime", "timeout": 30}
    {"id": 8, "op": "connect", "timeout": 30}

and the peer answers each, in any order, with ``{"id": 7, "ok": true}`` or
``{"id": 7, "ok": false, "kind": "exit 1", "error": "..."}``. The tool schedules the requests
(open loop) and measures latency itself, so every peer is measured by the same code. The peer
exits when its stdin closes, after answering what it started.
"""

import argparse
import json
import sys
import threading

_out_lock = threading.Lock()


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, default=22)
    p.add_argument("--user", required=True)
    p.add_argument("--key", required=True, help="private key file")
    p.add_argument("--known-hosts", required=True, help="known_hosts file with the server's key")
    p.add_argument("--host-key", required=True, help='expected host key, "ssh-ed25519 AAAA..."')
    p.add_argument("--conns", type=int, default=6, help="pooled connections")
    p.add_argument("--sessions", type=int, default=8, help="concurrent channels per connection")
    return p.parse_args()


def reply(obj):
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def ok(req_id):
    reply({"id": req_id, "ok": True})


def fail(req_id, kind, err=""):
    reply({"id": req_id, "ok": False, "kind": kind, "error": str(err)[:300]})
