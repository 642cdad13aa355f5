"""paramiko peer: a pool of --conns transports (TCP_NODELAY set) with --sessions channels each,
served by a thread pool (FIFO slots)."""

import concurrent.futures
import json
import queue
import socket
import sys
import time

import paramiko

import protocol


class Refused(Exception):
    pass


def classify(exc, connecting):
    if isinstance(exc, (socket.timeout, TimeoutError, queue.Empty)):
        return "timeout"
    if isinstance(exc, paramiko.ChannelException):
        return "ssh: session refused (MaxSessions)"
    if isinstance(exc, paramiko.SSHException) and "Unable to open channel" in str(exc):
        return "ssh: channel open failed"
    if isinstance(exc, paramiko.AuthenticationException):
        return "ssh: authentication failed"
    if isinstance(exc, paramiko.BadHostKeyException):
        return "ssh: host key"
    if isinstance(exc, ConnectionRefusedError):
        return "transport: connection refused"
    if isinstance(exc, (ConnectionResetError, EOFError, paramiko.SSHException, BrokenPipeError)):
        return "ssh: dropped before auth (MaxStartups)" if connecting else "transport: connection reset"
    if isinstance(exc, OSError) and exc.errno == 24:
        return "client: too many open files"
    return "other: " + type(exc).__name__


def main():
    args = protocol.parse_args(__doc__)
    pkey = paramiko.PKey.from_path(args.key)
    want_type, want_b64 = args.host_key.split()[:2]

    def connect(timeout=30):
        sock = socket.create_connection((args.host, args.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = paramiko.Transport(sock)
        try:
            t.start_client(timeout=timeout)
            k = t.get_remote_server_key()
            if k.get_name() != want_type or k.get_base64() != want_b64:
                raise paramiko.BadHostKeyException(args.host, k, None)
            t.auth_publickey(args.user, pkey)
        except BaseException:
            t.close()
            raise
        t.set_keepalive(15)
        return t

    transports = [connect() for _ in range(args.conns)]
    slots = queue.Queue()
    for _ in range(args.sessions):
        for c in range(len(transports)):
            slots.put(c)

    def run(command, timeout):
        deadline = time.monotonic() + timeout
        c = slots.get(timeout=timeout)
        try:
            ch = transports[c].open_session(timeout=max(deadline - time.monotonic(), 0.001))
            try:
                ch.settimeout(max(deadline - time.monotonic(), 0.001))
                ch.set_combine_stderr(True)
                ch.exec_command(command)
                while ch.recv(65536):
                    pass
                return ch.recv_exit_status()
            finally:
                ch.close()
        finally:
            slots.put(c)

    def handle(req):
        rid, op, timeout = req["id"], req["op"], req.get("timeout", 30)
        try:
            if op == "run":
                status = run(req["command"], timeout)
                if status != 0:
                    protocol.fail(rid, "exit %d" % status)
                    return
            elif op == "connect":
                connect(timeout).close()
            else:
                protocol.fail(rid, "other: bad op", op)
                return
            protocol.ok(rid)
        except Exception as exc:  # every failure is reported, by kind
            protocol.fail(rid, classify(exc, op == "connect"), repr(exc))

    protocol.reply({"ready": True, "versions": {"paramiko": paramiko.__version__, "python": sys.version.split()[0]}})
    with concurrent.futures.ThreadPoolExecutor(max_workers=256) as ex:
        for line in sys.stdin:
            ex.submit(handle, json.loads(line))
    for t in transports:
        t.close()


if __name__ == "__main__":
    main()
