"""The asyncio client: the same methods as :class:`sshapi.Client`, awaited."""

from __future__ import annotations

import asyncio
import os
import time
from types import TracebackType
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Tuple, Type, TypeVar, Union

import httpx

from . import _ops as ops
from ._base import Base
from ._core import (
    Call,
    already_complete,
    Counter,
    Progress,
    Source,
    SSEParser,
    UploadSource,
    async_chunks,
    command_event,
    event_error,
    file_url,
    part_name,
    raise_for_status,
    response_total,
    resume_headers,
    set_mtime,
    system_url,
    upload_call,
)
from . import _tus as tus
from ._tus import DEFAULT_CHUNK_SIZE, UploadURLHook
from .errors import APIError, ChecksumMismatchError, ConnectionFailed, NotFoundError, UploadInterrupted, WaitTimeout
from .models import (
    Checksum,
    CommandEvent,
    CommandResult,
    Credential,
    CredentialCheck,
    Excerpt,
    FileEntry,
    Job,
    System,
    Transfer,
    TransferEvent,
    TransferItem,
    UploadResult,
)

T = TypeVar("T")

__all__ = ["AsyncClient", "AsyncRemoteReader"]


class AsyncClient(Base):
    """The asyncio twin of :class:`sshapi.Client`; see there for the arguments.

    >>> async with sshapi.AsyncClient(url, token=tok) as c:
    ...     res = await c.run("hpc", "hostname")
    """

    def __init__(self, url: str, token: Optional[str] = None, auth: Any = None, *, timeout: float = 60.0, retry: Any = None, http: Optional[httpx.AsyncClient] = None, verify: Any = True):
        super().__init__(url, token, auth, timeout, retry)
        self._http = http or httpx.AsyncClient(base_url=self.url, timeout=self._timeout, verify=verify, headers=self._default_headers())
        self._own_http = http is None

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, t: Optional[Type[BaseException]], v: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.aclose()

    # --- plumbing --------------------------------------------------------------------------

    async def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        # A provider that must fetch (run a command, call a token endpoint) blocks: do that in
        # a worker thread, not on the event loop.
        tok = self._auth.token() if self._auth.fresh() else await asyncio.to_thread(self._auth.token)
        h = {"Authorization": "Bearer " + tok}
        if extra:
            h.update(extra)
        return h

    async def _send(self, call: Call[Any], timeout: Optional[float] = None, stream: bool = False, content: Any = None) -> httpx.Response:
        attempt, reauthed = 0, False
        while True:
            req = self._http.build_request(
                call.method,
                call.path,
                params=call.params or None,
                json=call.json,
                content=content() if callable(content) else content,
                headers=await self._headers(call.headers),
                timeout=self._request_timeout(timeout),
            )
            try:
                r = await self._http.send(req, stream=stream)
            except httpx.TransportError as e:
                wait = self._retry.on_error(attempt, e, call.idempotent)
                if wait is None:
                    raise ConnectionFailed(f"{call.method} {call.path}: {e}") from e
                await asyncio.sleep(wait)
                attempt += 1
                continue
            if r.status_code == 401 and not reauthed:
                reauthed = True
                await r.aclose()
                self._auth.invalidate()
                continue
            wait = self._retry.on_status(attempt, r, call.idempotent)
            if wait is None:
                return r
            await r.aclose()
            await asyncio.sleep(wait)
            attempt += 1

    async def _do(self, call: Call[T], timeout: Optional[float] = None) -> T:
        r = await self._send(call, timeout, stream=True)
        try:
            body = await r.aread()
        finally:
            await r.aclose()
        raise_for_status(r, body)
        return call.parse(r)

    # --- systems and credentials -----------------------------------------------------------

    async def systems(self) -> List[System]:
        return await self._do(ops.systems())

    async def system(self, id: str) -> System:
        return await self._do(ops.system(id))

    async def create_system(
        self,
        id: str,
        host: str,
        port: int = 22,
        host_keys: Optional[Sequence[str]] = None,
        host_key_fingerprints: Optional[Sequence[str]] = None,
        trust_on_first_use: Optional[bool] = None,
        max_sessions: Optional[int] = None,
        root_dir: Optional[str] = None,
        description: Optional[str] = None,
    ) -> System:
        body = ops.system_body(id, host, port, host_keys, host_key_fingerprints, trust_on_first_use, max_sessions, root_dir, description)
        return await self._do(ops.create_system(body))

    async def create_s3_system(
        self,
        id: str,
        endpoint: str,
        bucket: str,
        region: Optional[str] = None,
        prefix: Optional[str] = None,
        path_style: Optional[bool] = None,
        description: Optional[str] = None,
    ) -> System:
        """Registers an S3 bucket (optionally under ``prefix``) as a system; its file routes work
        like an SSH system's. Set its keys with ``set_s3_credential``."""
        body = ops.s3_system_body(id, endpoint, bucket, region, prefix, path_style, description)
        return await self._do(ops.create_system(body))

    async def update_system(self, id: str, **fields: Any) -> System:
        return await self._do(ops.update_system(id, {k: v for k, v in fields.items() if v is not None}))

    async def delete_system(self, id: str) -> None:
        await self._do(ops.delete_system(id))

    async def set_credential(
        self, system: str, username: str, private_key: str, passphrase: Optional[str] = None, certificate: Optional[str] = None
    ) -> Credential:
        body = {"username": username, "private_key": private_key, "passphrase": passphrase, "certificate": certificate}
        return await self._do(ops.set_credential(system, {k: v for k, v in body.items() if v is not None}))

    async def set_s3_credential(self, system: str, access_key_id: str, secret_access_key: str, session_token: Optional[str] = None) -> Credential:
        """Stores an S3 system's access keys (encrypted; only the access key id comes back)."""
        return await self._do(ops.set_credential(system, ops.s3_credential_body(access_key_id, secret_access_key, session_token)))

    async def credential(self, system: str) -> Credential:
        return await self._do(ops.credential(system))

    async def delete_credential(self, system: str) -> None:
        await self._do(ops.delete_credential(system))

    async def check_credential(self, system: str) -> CredentialCheck:
        return await self._do(ops.check_credential(system))

    # --- commands --------------------------------------------------------------------------

    async def run(
        self, system: str, command: str, timeout: Optional[float] = None, stdin: Optional[Union[str, bytes]] = None, max_output_bytes: Optional[int] = None
    ) -> CommandResult:
        body = ops.command_body(command, timeout, self._stdin(stdin), max_output_bytes)
        return await self._do(ops.run(system, body), timeout=self._command_timeout(timeout))

    async def run_stream(
        self, system: str, command: str, timeout: Optional[float] = None, stdin: Optional[Union[str, bytes]] = None
    ) -> AsyncIterator[CommandEvent]:
        body = ops.command_body(command, timeout, self._stdin(stdin), None)
        call: Call[None] = Call("POST", system_url(system, "/commands"), lambda r: None, json=body, headers={"Accept": "application/x-ndjson"})
        r = await self._send(call, self._command_timeout(timeout), stream=True)
        try:
            if r.status_code >= 400:
                raise_for_status(r, await r.aread())
            async for line in r.aiter_lines():
                ev = command_event(line)
                if ev is None:
                    continue
                if ev.type == "error":
                    raise event_error(ev)
                yield ev
        finally:
            await r.aclose()

    # --- files -----------------------------------------------------------------------------

    async def iter_files(
        self, system: str, path: str = "~", recursive: bool = False, show_hidden: bool = False, pattern: Optional[str] = None, page_size: Optional[int] = None
    ) -> AsyncIterator[FileEntry]:
        page: Optional[Union[int, str]] = 0  # an offset, or an S3 system's cursor
        while page is not None:
            entries, page = await self._do(ops.ls_page(system, path, page, page_size, recursive, show_hidden, pattern))
            for e in entries:
                yield e

    async def list_files(
        self, system: str, path: str = "~", recursive: bool = False, show_hidden: bool = False, pattern: Optional[str] = None, page_size: Optional[int] = None
    ) -> List[FileEntry]:
        return [e async for e in self.iter_files(system, path, recursive, show_hidden, pattern, page_size)]

    async def stat(self, system: str, path: str, follow_links: bool = False) -> FileEntry:
        return await self._do(ops.stat(system, path, follow_links))

    async def exists(self, system: str, path: str) -> bool:
        try:
            await self.stat(system, path)
            return True
        except NotFoundError:
            return False

    async def mkdir(self, system: str, path: str, parents: bool = False) -> None:
        await self._do(ops.op(system, "mkdir", {"path": path, "parents": parents or None}, idempotent=parents))

    async def mv(self, system: str, source: str, destination: str, overwrite: bool = False) -> None:
        await self._do(ops.op(system, "move", {"source": source, "destination": destination, "overwrite": overwrite or None}, False))

    async def cp(self, system: str, source: str, destination: str, recursive: bool = False, overwrite: bool = False, dereference: bool = False) -> None:
        body = {"source": source, "destination": destination, "recursive": recursive or None, "overwrite": overwrite or None, "dereference": dereference or None}
        await self._do(ops.op(system, "copy", body, overwrite))

    async def chmod(self, system: str, path: str, mode: str, recursive: bool = False) -> None:
        await self._do(ops.op(system, "chmod", {"path": path, "mode": mode, "recursive": recursive or None}, True))

    async def chown(self, system: str, path: str, owner: Optional[str] = None, group: Optional[str] = None, recursive: bool = False) -> None:
        await self._do(ops.op(system, "chown", {"path": path, "owner": owner, "group": group, "recursive": recursive or None}, True))

    async def symlink(self, system: str, target: str, link: str) -> None:
        await self._do(ops.op(system, "symlink", {"target": target, "link": link}, False))

    async def rm(self, system: str, path: str, recursive: bool = False) -> None:
        await self._do(ops.rm(system, path, recursive))

    async def head(self, system: str, path: str, lines: Optional[int] = None, bytes: Optional[int] = None) -> Excerpt:
        return await self._do(ops.excerpt(system, "head", path, lines, bytes))

    async def tail(self, system: str, path: str, lines: Optional[int] = None, bytes: Optional[int] = None) -> Excerpt:
        return await self._do(ops.excerpt(system, "tail", path, lines, bytes))

    async def checksum(self, system: str, path: str, algorithm: str = "sha256") -> Checksum:
        return await self._do(ops.checksum(system, path, algorithm))

    async def upload(
        self,
        system: str,
        source: Source,
        remote_path: str,
        progress: Optional[Progress] = None,
        verify: bool = True,
        overwrite: bool = True,
        parents: bool = False,
        mode: Optional[str] = None,
        resumable: bool = False,
        *,
        upload_url: Optional[str] = None,
        on_upload_url: Optional[UploadURLHook] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> UploadResult:
        """See :meth:`sshapi.Client.upload` (``resumable``, ``upload_url``, ``on_upload_url``
        and ``chunk_size`` too)."""
        src = UploadSource(source)
        size = src.size()
        if resumable or upload_url is not None:
            if not src.rewindable or size is None:
                raise TypeError("a resumable upload needs a path, bytes or a seekable file")
            if mode is not None:
                raise TypeError("mode is not supported with resumable=True")
            if chunk_size <= 0:
                raise ValueError("chunk_size must be positive")
            digest = await asyncio.to_thread(src.sha256) if verify else None
            return await self._upload_resumable(system, src, size, remote_path, progress, digest, overwrite, parents, upload_url, on_upload_url, chunk_size)
        digest = await asyncio.to_thread(src.sha256) if verify and src.rewindable else None
        url, params, headers = upload_call(system, remote_path, overwrite, parents, mode, digest, size, server_digest=verify)
        counters: List[Counter] = []

        def body() -> AsyncIterator[bytes]:
            c = Counter(size, progress, hash_it=verify and digest is None)
            counters.append(c)
            return async_chunks(src.open(), c)

        call: Call[UploadResult] = Call("PUT", url, lambda r: UploadResult.from_json(r.json()), params=params, headers=headers, idempotent=src.rewindable and overwrite)
        r = await self._send(call, content=body)
        await r.aread()
        raise_for_status(r, r.content)
        res = call.parse(r)
        if verify and digest is None and counters and counters[-1].hash is not None and counters[-1].hash.hexdigest() != res.sha256:
            raise ChecksumMismatchError(422, {"title": "Checksum mismatch", "detail": f"sent sha256 {counters[-1].hash.hexdigest()}, server wrote {res.sha256}"})
        return res

    async def _upload_resumable(
        self,
        system: str,
        src: UploadSource,
        size: int,
        remote_path: str,
        progress: Optional[Progress],
        digest: Optional[str],
        overwrite: bool,
        parents: bool,
        upload_url: Optional[str],
        on_upload_url: Optional[UploadURLHook],
        chunk_size: int,
    ) -> UploadResult:
        """The tus client behind ``upload(..., resumable=True)``; the loop of
        :meth:`sshapi.Client._upload_resumable`, awaited."""
        done = UploadResult(path=remote_path, size=size, sha256=digest or "")
        if upload_url is None:
            url = await self._do(tus.create_call(system, size, remote_path, digest, overwrite, parents))
            if on_upload_url is not None:
                on_upload_url(url)
            offset: int = 0 if size else size  # an empty upload is finished by its creation
        else:
            url = upload_url
            try:
                offset, length = await self._do(tus.head_call(url))
            except NotFoundError:
                if await self._uploaded(system, src, size, remote_path, digest):
                    Counter(size, progress, done=size)
                    return done  # an earlier run finished it and lost the answer
                raise
            if length != size:
                raise ValueError(f"the upload at {url} is {length} bytes long, the source {size}: not the same file")
        failures, current = 0, True
        locked, lock_deadline = 0, 0.0  # 423s in a row, and until when they are waited out
        while offset < size:
            try:
                if not current:
                    # After a failure: the committed offset, then an empty PATCH there, which
                    # succeeds only once the failed request has ended on the server (it may still
                    # be writing what it had received: 423 or 409), so the PATCH with the bytes
                    # after it is not refused halfway through its body.
                    try:
                        offset, _ = await self._do(tus.head_call(url))
                    except NotFoundError:
                        if await self._uploaded(system, src, size, remote_path, digest):
                            Counter(size, progress, done=size)
                            break  # the last PATCH finished the upload and its answer was lost
                        raise
                    offset = await self._patch(tus.patch_call(url, offset, 0), b"")
                    current, locked = True, 0
                    continue
                n = min(chunk_size, size - offset)
                counter = Counter(size, progress, done=offset)
                patch = tus.patch_call(url, offset, n)
                body = lambda at=offset, n=n, c=counter: tus.async_range_chunks(src.open_at(at), n, c)  # noqa: E731 (read again per attempt)
                offset = await self._patch(patch, body)
                failures, locked = 0, 0
            except (ConnectionFailed, APIError) as e:
                smaller = tus.halved(e, chunk_size, size - offset) if current else None
                if smaller is not None:
                    # a proxy's body limit: smaller PATCHes from the committed offset, not a failure
                    chunk_size, current = smaller, False
                    continue
                if not tus.worth_resuming(e):
                    raise
                current = False
                if tus.locked(e):
                    # the server is up and busy finishing the failed request: wait it out
                    if not locked:
                        lock_deadline = time.monotonic() + tus.LOCK_WAIT
                    locked += 1
                    if time.monotonic() < lock_deadline:
                        await asyncio.sleep(self._retry.delay(min(locked, 3)))
                        continue
                failures += 1
                if failures >= self._retry.attempts:
                    raise UploadInterrupted(f"resumable upload to {remote_path}: {failures} failed requests in a row ({e}); {offset} of {size} bytes committed at {url}", url, offset) from e
                await asyncio.sleep(self._retry.delay(failures - 1))
        return done

    async def _patch(self, call: Call[int], body: Any) -> int:
        """Sends one tus PATCH (body: bytes, or a function returning an async iterator for each
        attempt) and returns the committed offset it answered."""
        r = await self._send(call, content=body)
        await r.aread()
        raise_for_status(r, r.content)
        return call.parse(r)

    async def _uploaded(self, system: str, src: UploadSource, size: int, remote_path: str, digest: Optional[str]) -> bool:
        """Whether remote_path holds the source's bytes (the upload finished elsewhere)."""
        try:
            want = digest or await asyncio.to_thread(src.sha256)
            return (await self.checksum(system, remote_path)).checksum == want
        except NotFoundError:
            return False

    async def download(
        self, system: str, remote_path: str, local_path: Union[str, "os.PathLike[str]"], progress: Optional[Progress] = None, resume: bool = True, verify: bool = False
    ) -> int:
        local = os.fspath(local_path)
        part = part_name(local)
        attempt = 0
        while True:
            offset, headers = resume_headers(part, resume or attempt > 0)
            call: Call[None] = Call("GET", file_url(system, "content", remote_path), lambda r: None, headers=headers, idempotent=True)
            r = await self._send(call, stream=True)
            try:
                if r.status_code == 416 and offset and already_complete(r, offset):
                    Counter(offset, progress, done=offset)
                    break
                if r.status_code == 416 and offset:
                    os.remove(part)
                    continue
                if r.status_code >= 400:
                    raise_for_status(r, await r.aread())
                start, total = response_total(r, offset)
                c = Counter(total, progress, done=start)
                try:
                    with open(part, "r+b" if start else "wb") as f:
                        f.seek(start)
                        f.truncate()
                        async for b in r.aiter_bytes(1 << 20):
                            f.write(b)
                            c.add(b)
                finally:
                    set_mtime(part, r)
            except httpx.TransportError as e:
                wait = self._retry.on_error(attempt, e, True)
                if wait is None:
                    raise ConnectionFailed(f"download {remote_path}: {e}") from e
                await asyncio.sleep(wait)
                attempt += 1
                continue
            finally:
                await r.aclose()
            break
        if verify:
            want = (await self.checksum(system, remote_path)).checksum
            got = await asyncio.to_thread(UploadSource(part).sha256)
            if got != want:
                os.remove(part)
                raise ChecksumMismatchError(422, {"title": "Checksum mismatch", "detail": f"downloaded sha256 {got}, server has {want}"})
        os.replace(part, local)
        return os.path.getsize(local)

    async def read_bytes(self, system: str, path: str) -> bytes:
        async with self.open(system, path) as f:
            return await f.read()

    def open(self, system: str, path: str) -> "AsyncRemoteReader":
        """An async reader of the remote file: ``async with c.open(s, p) as f: await f.read(n)``."""
        return AsyncRemoteReader(self, system, path)

    # --- transfers -------------------------------------------------------------------------

    async def submit_transfer(
        self,
        source: Tuple[str, str],
        destination: Tuple[str, str],
        recursive: bool = False,
        sync: Optional[str] = None,
        verify: Optional[str] = None,
        streams: Optional[int] = None,
        chunk_size: Optional[int] = None,
        deadline: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Transfer:
        return await self._do(ops.submit_transfer(source, destination, recursive, sync, verify, streams, chunk_size, deadline, idempotency_key))

    async def transfer(self, id: str) -> Transfer:
        return await self._do(ops.transfer(id))

    async def transfers(self, status: Optional[str] = None, limit: Optional[int] = None) -> List[Transfer]:
        return await self._do(ops.transfers(status, limit))

    async def transfer_items(self, id: str, status: Optional[str] = None) -> AsyncIterator[TransferItem]:
        after: Optional[int] = None
        while True:
            items, after = await self._do(ops.transfer_items(id, after, status))
            for i in items:
                yield i
            if after is None:
                return

    async def cancel_transfer(self, id: str) -> Transfer:
        return await self._do(ops.cancel_transfer(id))

    async def transfer_events(self, id: str) -> AsyncIterator[TransferEvent]:
        call: Call[None] = Call("GET", f"/v1/transfers/{id}/events", lambda r: None, headers={"Accept": "text/event-stream"}, idempotent=True)
        r = await self._send(call, timeout=None, stream=True)
        try:
            if r.status_code >= 400:
                raise_for_status(r, await r.aread())
            p = SSEParser()
            async for line in r.aiter_lines():
                ev = p.feed(line)
                if ev is not None:
                    yield ev
                    if ev.event in ("done", "shutdown"):
                        return
        finally:
            await r.aclose()

    async def wait_transfer(self, id: str, timeout: Optional[float] = None, progress: Optional[Progress] = None, check: bool = True) -> Transfer:
        try:
            return await asyncio.wait_for(self._wait(id, progress, check), timeout)
        except asyncio.TimeoutError:
            raise self._timeout_error(await self.transfer(id), timeout) from None

    async def _wait(self, id: str, progress: Optional[Progress], check: bool) -> Transfer:
        state = await self.transfer(id)
        attempt = 0
        while not state.done:
            self._report(progress, state)
            try:
                async for ev in self.transfer_events(id):
                    if ev.transfer is not None:
                        state = ev.transfer
                        self._report(progress, state)
                    attempt = 0
            except (ConnectionFailed, httpx.TransportError) as e:
                wait = self._retry.on_error(attempt, e if isinstance(e, httpx.TransportError) else httpx.ConnectError(str(e)), True)
                if wait is None:
                    raise
                await asyncio.sleep(wait)
                attempt += 1
            if not state.done:
                state = await self.transfer(id)
        self._report(progress, state)
        return self._finished(state, check)

    # --- batch jobs (Slurm) ----------------------------------------------------------------

    async def submit_job(self, system: str, script: Optional[str] = None, *, script_path: Optional[str] = None, **options: Any) -> Job:
        """Submits a batch job: ``script`` (its text, sent on sbatch's standard input) or
        ``script_path`` (a script already on the system). ``options`` are the API's fields:
        working_dir, name, partition, account, qos, time_limit, nodes, ntasks, cpus_per_task,
        memory, gpus, array, dependency, env (a dict), output, error, extra_args (allowed sbatch
        options). Not retried: a second send would submit a second job."""
        return await self._do(ops.submit_job(system, script, script_path, options))

    async def jobs(self, system: str, state: Optional[str] = None, name: Optional[str] = None, since: Optional[str] = None) -> List[Job]:
        """The caller's jobs the controller holds (one entry per array task)."""
        return await self._do(ops.jobs(system, state, name, since))

    async def job(self, system: str, job_id: str, script: bool = False) -> Job:
        """One job or array task (``"123_4"``); ``script`` adds its batch script."""
        return await self._do(ops.job(system, job_id, script))

    async def cancel_job(self, system: str, job_id: str) -> None:
        await self._do(ops.job_action(system, job_id, "cancel"))

    async def hold_job(self, system: str, job_id: str) -> None:
        await self._do(ops.job_action(system, job_id, "hold"))

    async def release_job(self, system: str, job_id: str) -> None:
        await self._do(ops.job_action(system, job_id, "release"))

    async def wait_job(self, system: str, job_id: str, until: str = "finished", timeout: Optional[float] = None) -> Job:
        """Waits until the job is ``running`` (or already finished) or ``finished``, by long polls
        the server answers from its shared poll (no polling here). Raises
        :class:`~sshapi.WaitTimeout` after ``timeout`` seconds."""
        if until not in ("running", "finished"):
            raise ValueError("until must be 'running' or 'finished'")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 60.0 if deadline is None else min(60.0, deadline - time.monotonic())
            if left <= 0:
                j = await self.job(system, job_id)
                if j.reached(until):
                    return j
                raise WaitTimeout(f"job {job_id} still {j.state} after {timeout} s", j)
            j = await self._do(ops.job(system, job_id, wait=until, timeout=max(0, int(left))), timeout=left + 30)
            if j.reached(until):
                return j
            if left < 1:
                await asyncio.sleep(left)

    async def job_output(self, system: str, job_id: str, stream: str = "stdout", tail_bytes: Optional[int] = None) -> bytes:
        """The end of the job's stdout or stderr (``tail_bytes``, default 64 KiB)."""
        return await self._do(ops.job_output(system, job_id, stream, tail_bytes))


class AsyncRemoteReader:
    """A remote file read as a stream (``read(n)``, ``read()``); opened on first read."""

    def __init__(self, client: AsyncClient, system: str, path: str):
        self._c = client
        self._url = file_url(system, "content", path)
        self._resp: Optional[httpx.Response] = None
        self._it: Optional[AsyncIterator[bytes]] = None
        self._buf = b""
        self.size: Optional[int] = None

    async def _open(self) -> None:
        r = await self._c._send(Call("GET", self._url, lambda r: None, idempotent=True), stream=True)
        if r.status_code >= 400:
            body = await r.aread()
            await r.aclose()
            raise_for_status(r, body)
        self.size = response_total(r, 0)[1]
        self._resp, self._it = r, r.aiter_bytes(1 << 20)

    async def read(self, n: int = -1) -> bytes:
        if self._it is None and self._resp is None:
            await self._open()
        out = [self._buf]
        have = len(self._buf)
        while self._it is not None and (n < 0 or have < n):
            try:
                b = await self._it.__anext__()
            except StopAsyncIteration:
                self._it = None
                break
            out.append(b)
            have += len(b)
        data = b"".join(out)
        if n >= 0:
            data, self._buf = data[:n], data[n:]
        else:
            self._buf = b""
        return data

    async def aclose(self) -> None:
        if self._resp is not None:
            await self._resp.aclose()

    async def __aenter__(self) -> "AsyncRemoteReader":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
