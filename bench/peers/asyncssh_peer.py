"""asyncssh peer: a pool of --conns connections with --sessions channels each (FIFO slots)."""

import asyncio
import json
import sys

import asyncssh

import protocol


def classify(exc, connecting):
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, asyncssh.ChannelOpenError):
        return "ssh: session refused (MaxSessions)"
    if isinstance(exc, asyncssh.PermissionDenied):
        return "ssh: authentication failed"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return "ssh: host key"
    if isinstance(exc, ConnectionRefusedError):
        return "transport: connection refused"
    if isinstance(exc, (ConnectionResetError, asyncssh.ConnectionLost, asyncssh.DisconnectError, BrokenPipeError)):
        return "ssh: dropped before auth (MaxStartups)" if connecting else "transport: connection reset"
    if isinstance(exc, OSError) and exc.errno == 24:
        return "client: too many open files"
    return "other: " + type(exc).__name__


async def main():
    args = protocol.parse_args(__doc__)
    opts = dict(host=args.host, port=args.port, username=args.user, client_keys=[args.key],
                known_hosts=args.known_hosts, agent_path=None, config=None)
    conns = [await asyncssh.connect(**opts) for _ in range(args.conns)]
    slots = asyncio.Queue()
    for _ in range(args.sessions):
        for c in range(len(conns)):
            slots.put_nowait(c)

    async def run(command):
        c = await slots.get()
        try:
            res = await conns[c].run(command, check=False)
        finally:
            slots.put_nowait(c)
        return res.exit_status

    async def connect():
        conn = await asyncssh.connect(**opts)
        conn.close()
        await conn.wait_closed()

    async def handle(req):
        rid, op = req["id"], req["op"]
        try:
            if op == "run":
                status = await asyncio.wait_for(run(req["command"]), req.get("timeout", 30))
                if status != 0:
                    protocol.fail(rid, "exit %d" % (status if status is not None else -1))
                    return
            elif op == "connect":
                await asyncio.wait_for(connect(), req.get("timeout", 30))
            else:
                protocol.fail(rid, "other: bad op", op)
                return
            protocol.ok(rid)
        except Exception as exc:  # every failure is reported, by kind
            protocol.fail(rid, classify(exc, op == "connect"), repr(exc))

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    protocol.reply({"ready": True, "versions": {"asyncssh": asyncssh.__version__, "python": sys.version.split()[0]}})
    tasks = set()
    while True:
        line = await reader.readline()
        if not line:
            break
        t = asyncio.create_task(handle(json.loads(line)))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    for c in conns:
        c.close()


if __name__ == "__main__":
    asyncio.run(main())
