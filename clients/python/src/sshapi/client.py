"""The synchronous client."""

from __future__ import annotations

import io
import os
import time
from types import TracebackType
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Type, TypeVar, Union

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
    command_event,
    event_error,
    file_url,
    part_name,
    raise_for_status,
    response_total,
    resume_headers,
    result_of,
    set_mtime,
    system_url,
    sync_chunks,
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


class Client(Base):
    """A client of one sshapi service.

    >>> with sshapi.Client("http://127.0.0.1:8080", token="...") as c:
    ...     for e in c.list_files("hpc", "~"):
    ...         print(e.name, e.size)

    ``token`` is a fixed bearer token; ``auth`` a :class:`~sshapi.auth.TokenProvider` (a command,
    OIDC client credentials). ``retry`` is the :class:`~sshapi.RetryPolicy`; ``timeout`` the
    connect/read timeout in seconds (commands add their own timeout to it).
    """

    def __init__(self, url: str, token: Optional[str] = None, auth: Any = None, *, timeout: float = 60.0, retry: Any = None, http: Optional[httpx.Client] = None, verify: Any = True):
        super().__init__(url, token, auth, timeout, retry)
        self._http = http or httpx.Client(base_url=self.url, timeout=self._timeout, verify=verify, headers=self._default_headers())
        self._own_http = http is None

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, t: Optional[Type[BaseException]], v: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    # --- plumbing --------------------------------------------------------------------------

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {"Authorization": "Bearer " + self._auth.token()}
        if extra:
            h.update(extra)
        return h

    def _send(self, call: Call[Any], timeout: Optional[float] = None, stream: bool = False, content: Any = None) -> httpx.Response:
        """Sends ``call`` with retries; the caller reads (and, when streaming, closes) the answer."""
        attempt, reauthed = 0, False
        while True:
            req = self._http.build_request(
                call.method,
                call.path,
                params=call.params or None,
                json=call.json,
                content=content() if callable(content) else content,
                headers=self._headers(call.headers),
                timeout=self._request_timeout(timeout),
            )
            try:
                r = self._http.send(req, stream=stream)
            except httpx.TransportError as e:
                wait = self._retry.on_error(attempt, e, call.idempotent)
                if wait is None:
                    raise ConnectionFailed(f"{call.method} {call.path}: {e}") from e
                time.sleep(wait)
                attempt += 1
                continue
            if r.status_code == 401 and not reauthed:
                reauthed = True
                r.close()
                self._auth.invalidate()
                continue
            wait = self._retry.on_status(attempt, r, call.idempotent)
            if wait is None:
                return r
            r.close()
            time.sleep(wait)
            attempt += 1

    def _do(self, call: Call[T], timeout: Optional[float] = None) -> T:
        r = self._send(call, timeout)
        return result_of(r, call.parse)

    # --- systems and credentials -----------------------------------------------------------

    def systems(self) -> List[System]:
        """The caller's systems, sorted by id."""
        return self._do(ops.systems())

    def system(self, id: str) -> System:
        return self._do(ops.system(id))

    def create_system(
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
        """Registers a system. ``host_keys`` are known_hosts/``ssh-keyscan`` lines."""
        body = ops.system_body(id, host, port, host_keys, host_key_fingerprints, trust_on_first_use, max_sessions, root_dir, description)
        return self._do(ops.create_system(body))

    def create_s3_system(
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
        return self._do(ops.create_system(body))

    def update_system(self, id: str, **fields: Any) -> System:
        """Changes the given fields of a system (host, port, host_keys, ..., description)."""
        return self._do(ops.update_system(id, {k: v for k, v in fields.items() if v is not None}))

    def delete_system(self, id: str) -> None:
        self._do(ops.delete_system(id))

    def set_credential(
        self, system: str, username: str, private_key: str, passphrase: Optional[str] = None, certificate: Optional[str] = None
    ) -> Credential:
        """Stores the caller's SSH key for ``system`` (encrypted; only metadata comes back)."""
        body = {"username": username, "private_key": private_key, "passphrase": passphrase, "certificate": certificate}
        return self._do(ops.set_credential(system, {k: v for k, v in body.items() if v is not None}))

    def set_s3_credential(self, system: str, access_key_id: str, secret_access_key: str, session_token: Optional[str] = None) -> Credential:
        """Stores an S3 system's access keys (encrypted; only the access key id comes back)."""
        return self._do(ops.set_credential(system, ops.s3_credential_body(access_key_id, secret_access_key, session_token)))

    def credential(self, system: str) -> Credential:
        return self._do(ops.credential(system))

    def delete_credential(self, system: str) -> None:
        self._do(ops.delete_credential(system))

    def check_credential(self, system: str) -> CredentialCheck:
        """Logs in now and reports the outcome."""
        return self._do(ops.check_credential(system))

    # --- commands --------------------------------------------------------------------------

    def run(
        self, system: str, command: str, timeout: Optional[float] = None, stdin: Optional[Union[str, bytes]] = None, max_output_bytes: Optional[int] = None
    ) -> CommandResult:
        """Runs ``command`` with the remote login shell and returns its result (a non-zero exit
        is a result). ``timeout`` kills the remote process group after that many seconds."""
        body = ops.command_body(command, timeout, self._stdin(stdin), max_output_bytes)
        return self._do(ops.run(system, body), timeout=self._command_timeout(timeout))

    def run_stream(
        self, system: str, command: str, timeout: Optional[float] = None, stdin: Optional[Union[str, bytes]] = None
    ) -> Iterator[CommandEvent]:
        """Runs ``command`` and yields its output as it arrives: ``stdout``/``stderr`` events, then
        one ``exit`` event with the result. A failure after the start raises the APIError."""
        body = ops.command_body(command, timeout, self._stdin(stdin), None)
        call: Call[None] = Call("POST", system_url(system, "/commands"), lambda r: None, json=body, headers={"Accept": "application/x-ndjson"})
        r = self._send(call, self._command_timeout(timeout), stream=True)
        try:
            if r.status_code >= 400:
                raise_for_status(r, r.read())
            for line in r.iter_lines():
                ev = command_event(line)
                if ev is None:
                    continue
                if ev.type == "error":
                    raise event_error(ev)
                yield ev
        finally:
            r.close()

    # --- files -----------------------------------------------------------------------------

    def iter_files(
        self, system: str, path: str = "~", recursive: bool = False, show_hidden: bool = False, pattern: Optional[str] = None, page_size: Optional[int] = None
    ) -> Iterator[FileEntry]:
        """Yields a directory's entries, fetching page after page as needed."""
        page: Optional[Union[int, str]] = 0  # an offset, or an S3 system's cursor
        while page is not None:
            entries, page = self._do(ops.ls_page(system, path, page, page_size, recursive, show_hidden, pattern))
            yield from entries

    def list_files(
        self, system: str, path: str = "~", recursive: bool = False, show_hidden: bool = False, pattern: Optional[str] = None, page_size: Optional[int] = None
    ) -> List[FileEntry]:
        """A directory's entries, sorted by name (all pages)."""
        return list(self.iter_files(system, path, recursive, show_hidden, pattern, page_size))

    def stat(self, system: str, path: str, follow_links: bool = False) -> FileEntry:
        return self._do(ops.stat(system, path, follow_links))

    def exists(self, system: str, path: str) -> bool:
        try:
            self.stat(system, path)
            return True
        except NotFoundError:
            return False

    def mkdir(self, system: str, path: str, parents: bool = False) -> None:
        self._do(ops.op(system, "mkdir", {"path": path, "parents": parents or None}, idempotent=parents))

    def mv(self, system: str, source: str, destination: str, overwrite: bool = False) -> None:
        self._do(ops.op(system, "move", {"source": source, "destination": destination, "overwrite": overwrite or None}, False))

    def cp(self, system: str, source: str, destination: str, recursive: bool = False, overwrite: bool = False, dereference: bool = False) -> None:
        """Copies on the server (no data passes through sshapi)."""
        body = {"source": source, "destination": destination, "recursive": recursive or None, "overwrite": overwrite or None, "dereference": dereference or None}
        self._do(ops.op(system, "copy", body, overwrite))

    def chmod(self, system: str, path: str, mode: str, recursive: bool = False) -> None:
        self._do(ops.op(system, "chmod", {"path": path, "mode": mode, "recursive": recursive or None}, True))

    def chown(self, system: str, path: str, owner: Optional[str] = None, group: Optional[str] = None, recursive: bool = False) -> None:
        self._do(ops.op(system, "chown", {"path": path, "owner": owner, "group": group, "recursive": recursive or None}, True))

    def symlink(self, system: str, target: str, link: str) -> None:
        self._do(ops.op(system, "symlink", {"target": target, "link": link}, False))

    def rm(self, system: str, path: str, recursive: bool = False) -> None:
        self._do(ops.rm(system, path, recursive))

    def head(self, system: str, path: str, lines: Optional[int] = None, bytes: Optional[int] = None) -> Excerpt:
        return self._do(ops.excerpt(system, "head", path, lines, bytes))

    def tail(self, system: str, path: str, lines: Optional[int] = None, bytes: Optional[int] = None) -> Excerpt:
        return self._do(ops.excerpt(system, "tail", path, lines, bytes))

    def checksum(self, system: str, path: str, algorithm: str = "sha256") -> Checksum:
        return self._do(ops.checksum(system, path, algorithm))

    def upload(
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
        """Uploads a local file (a path, bytes, or a binary file object) to ``remote_path``.

        The server writes a temporary file and renames it into place only when complete, so a
        failed upload leaves nothing. With ``verify`` the SHA-256 is sent along (seekable
        sources) and the server refuses a mismatch with 422; for other sources the SDK compares
        it with the server's after the upload; without it the server does not hash the body
        either, and the result's ``sha256`` is empty. A retried upload reads the source from its start
        again; ``progress(done, total)`` starts again from 0 then.

        With ``resumable`` the upload goes through the service's tus endpoint
        (``/v1/systems/{id}/uploads``) in PATCHes of ``chunk_size`` bytes: after a lost
        connection (or a 5xx, 409 or 423 answer) the SDK asks the server's committed offset
        (HEAD) and sends the rest from there, and ``progress`` goes on from that offset. It needs
        a source that can be read again (a path, bytes or a seekable file); ``mode`` is not
        supported. After as many failed requests in a row as the retry policy's ``attempts`` (423
        answers, the server still finishing a cut request, are waited out for up to two minutes
        and not counted) it raises :class:`~sshapi.UploadInterrupted`, whose ``upload_url`` continues the upload
        later: ``upload(..., upload_url=e.upload_url)`` (the same source; implies
        ``resumable``). ``on_upload_url(url)`` is told the URL as soon as the upload exists, to
        keep it across a crash of the calling process.
        """
        src = UploadSource(source)
        size = src.size()
        if resumable or upload_url is not None:
            if not src.rewindable or size is None:
                raise TypeError("a resumable upload needs a path, bytes or a seekable file")
            if mode is not None:
                raise TypeError("mode is not supported with resumable=True")
            if chunk_size <= 0:
                raise ValueError("chunk_size must be positive")
            digest = src.sha256() if verify else None
            return self._upload_resumable(system, src, size, remote_path, progress, digest, overwrite, parents, upload_url, on_upload_url, chunk_size)
        digest = src.sha256() if verify and src.rewindable else None
        url, params, headers = upload_call(system, remote_path, overwrite, parents, mode, digest, size, server_digest=verify)
        counters: List[Counter] = []

        def body() -> Iterator[bytes]:
            c = Counter(size, progress, hash_it=verify and digest is None)
            counters.append(c)
            return sync_chunks(src.open(), c)

        call: Call[UploadResult] = Call("PUT", url, lambda r: UploadResult.from_json(r.json()), params=params, headers=headers, idempotent=src.rewindable and overwrite)
        res = result_of(self._send(call, content=body), call.parse)
        if verify and digest is None and counters and counters[-1].hash is not None and counters[-1].hash.hexdigest() != res.sha256:
            raise ChecksumMismatchError(422, {"title": "Checksum mismatch", "detail": f"sent sha256 {counters[-1].hash.hexdigest()}, server wrote {res.sha256}"})
        return res

    def _upload_resumable(
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
        """The tus client behind ``upload(..., resumable=True)``."""
        done = UploadResult(path=remote_path, size=size, sha256=digest or "")
        if upload_url is None:
            url = self._do(tus.create_call(system, size, remote_path, digest, overwrite, parents))
            if on_upload_url is not None:
                on_upload_url(url)
            offset: int = 0 if size else size  # an empty upload is finished by its creation
        else:
            url = upload_url
            try:
                offset, length = self._do(tus.head_call(url))
            except NotFoundError:
                if self._uploaded(system, src, size, remote_path, digest):
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
                        offset, _ = self._do(tus.head_call(url))
                    except NotFoundError:
                        if self._uploaded(system, src, size, remote_path, digest):
                            Counter(size, progress, done=size)
                            break  # the last PATCH finished the upload and its answer was lost
                        raise
                    offset = self._patch(tus.patch_call(url, offset, 0), b"")
                    current, locked = True, 0
                    continue
                n = min(chunk_size, size - offset)
                counter = Counter(size, progress, done=offset)
                patch = tus.patch_call(url, offset, n)
                body = lambda at=offset, n=n, c=counter: tus.range_chunks(src.open_at(at), n, c)  # noqa: E731 (read again per attempt)
                offset = self._patch(patch, body)
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
                        time.sleep(self._retry.delay(min(locked, 3)))
                        continue
                failures += 1
                if failures >= self._retry.attempts:
                    raise UploadInterrupted(f"resumable upload to {remote_path}: {failures} failed requests in a row ({e}); {offset} of {size} bytes committed at {url}", url, offset) from e
                time.sleep(self._retry.delay(failures - 1))
        return done

    def _patch(self, call: Call[int], body: Any) -> int:
        """Sends one tus PATCH (body: bytes, or a function returning an iterator for each
        attempt) and returns the committed offset it answered."""
        return result_of(self._send(call, content=body), call.parse)

    def _uploaded(self, system: str, src: UploadSource, size: int, remote_path: str, digest: Optional[str]) -> bool:
        """Whether remote_path holds the source's bytes (the upload finished elsewhere)."""
        try:
            return self.checksum(system, remote_path).checksum == (digest or src.sha256())
        except NotFoundError:
            return False

    def download(
        self, system: str, remote_path: str, local_path: Union[str, "os.PathLike[str]"], progress: Optional[Progress] = None, resume: bool = True, verify: bool = False
    ) -> int:
        """Downloads ``remote_path`` to ``local_path`` and returns its size.

        Bytes go to a partial file next to ``local_path`` (``.NAME.sshapi-part``) that is renamed
        into place when complete. With ``resume``, an earlier partial file is continued with a
        Range request, and a lost connection continues where it stopped; the server sends the
        whole file again if it changed since. With ``verify`` the SHA-256 is compared with the
        server's checksum afterwards.
        """
        local = os.fspath(local_path)
        part = part_name(local)
        attempt = 0
        while True:
            offset, headers = resume_headers(part, resume or attempt > 0)
            call: Call[None] = Call("GET", file_url(system, "content", remote_path), lambda r: None, headers=headers, idempotent=True)
            r = self._send(call, stream=True)
            try:
                if r.status_code == 416 and offset and already_complete(r, offset):
                    Counter(offset, progress, done=offset)
                    break
                if r.status_code == 416 and offset:
                    os.remove(part)  # the partial file is longer than the remote one: start over
                    continue
                if r.status_code >= 400:
                    raise_for_status(r, r.read())
                start, total = response_total(r, offset)
                c = Counter(total, progress, done=start)
                try:
                    with open(part, "r+b" if start else "wb") as f:
                        f.seek(start)
                        f.truncate()
                        for b in r.iter_bytes(1 << 20):
                            f.write(b)
                            c.add(b)
                finally:
                    set_mtime(part, r)
            except httpx.TransportError as e:
                wait = self._retry.on_error(attempt, e, True)
                if wait is None:
                    raise ConnectionFailed(f"download {remote_path}: {e}") from e
                time.sleep(wait)
                attempt += 1
                continue
            finally:
                r.close()
            break
        if verify:
            self._verify_download(system, remote_path, part)
        os.replace(part, local)
        return os.path.getsize(local)

    def _verify_download(self, system: str, remote_path: str, local: str) -> None:
        want = self.checksum(system, remote_path).checksum
        got = UploadSource(local).sha256()
        if got != want:
            os.remove(local)
            raise ChecksumMismatchError(422, {"title": "Checksum mismatch", "detail": f"downloaded sha256 {got}, server has {want}"})

    def read_bytes(self, system: str, path: str) -> bytes:
        """A whole remote file in memory."""
        with self.open(system, path) as f:
            return f.read()

    def open(self, system: str, path: str) -> "RemoteReader":
        """A read-only, seekable file object streaming the remote file (``with`` closes it)."""
        return io.BufferedReader(_RawRemote(self, system, path), buffer_size=1 << 20)

    # --- transfers -------------------------------------------------------------------------

    def submit_transfer(
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
        """Queues a system-to-system transfer of ``source`` = (system, path) to ``destination``."""
        return self._do(ops.submit_transfer(source, destination, recursive, sync, verify, streams, chunk_size, deadline, idempotency_key))

    def transfer(self, id: str) -> Transfer:
        return self._do(ops.transfer(id))

    def transfers(self, status: Optional[str] = None, limit: Optional[int] = None) -> List[Transfer]:
        """The caller's transfers, newest first."""
        return self._do(ops.transfers(status, limit))

    def transfer_items(self, id: str, status: Optional[str] = None) -> Iterator[TransferItem]:
        """A transfer's files, directories and symlinks (all pages)."""
        after: Optional[int] = None
        while True:
            items, after = self._do(ops.transfer_items(id, after, status))
            yield from items
            if after is None:
                return

    def cancel_transfer(self, id: str) -> Transfer:
        return self._do(ops.cancel_transfer(id))

    def transfer_events(self, id: str) -> Iterator[TransferEvent]:
        """The transfer's Server-Sent Events of one connection: ``progress`` events, then
        ``done`` (or ``shutdown`` when the server stops; :meth:`wait_transfer` reconnects)."""
        return self._events(id, None)

    def _events(self, id: str, deadline: Optional[float]) -> Iterator[TransferEvent]:
        """Events until done, shutdown, or the monotonic ``deadline`` (checked between events and
        as the read timeout, since httpx has no overall deadline for a stream)."""
        read = None if deadline is None else max(0.1, deadline - time.monotonic())
        call: Call[None] = Call("GET", f"/v1/transfers/{id}/events", lambda r: None, headers={"Accept": "text/event-stream"}, idempotent=True)
        r = self._send(call, timeout=read, stream=True)
        try:
            if r.status_code >= 400:
                raise_for_status(r, r.read())
            p = SSEParser()
            for line in r.iter_lines():
                ev = p.feed(line)
                if ev is not None:
                    yield ev
                    if ev.event in ("done", "shutdown"):
                        return
                if deadline is not None and time.monotonic() >= deadline:
                    return
        except httpx.ReadTimeout:
            if deadline is None:
                raise
        finally:
            r.close()

    def wait_transfer(self, id: str, timeout: Optional[float] = None, progress: Optional[Progress] = None, check: bool = True) -> Transfer:
        """Waits until the transfer has finished, following its event stream (reconnecting when
        it breaks) and calling ``progress(bytes_done, bytes_total)``. Raises
        :class:`~sshapi.TransferFailedError` if it failed or was canceled (unless ``check`` is
        False) and :class:`~sshapi.WaitTimeout` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        state = self.transfer(id)
        attempt = 0
        while not state.done:
            if deadline is not None and time.monotonic() >= deadline:
                raise self._timeout_error(state, timeout)
            self._report(progress, state)
            try:
                for ev in self._events(id, deadline):
                    if ev.transfer is not None:
                        state = ev.transfer
                        self._report(progress, state)
                    attempt = 0
            except (ConnectionFailed, httpx.TransportError) as e:
                wait = self._retry.on_error(attempt, e if isinstance(e, httpx.TransportError) else httpx.ConnectError(str(e)), True)
                if wait is None:
                    raise
                time.sleep(wait)
                attempt += 1
            if not state.done:
                state = self.transfer(id)
        self._report(progress, state)
        return self._finished(state, check)

    # --- batch jobs (Slurm) ----------------------------------------------------------------

    def submit_job(self, system: str, script: Optional[str] = None, *, script_path: Optional[str] = None, **options: Any) -> Job:
        """Submits a batch job: ``script`` (its text, sent on sbatch's standard input) or
        ``script_path`` (a script already on the system). ``options`` are the API's fields:
        working_dir, name, partition, account, qos, time_limit, nodes, ntasks, cpus_per_task,
        memory, gpus, array, dependency, env (a dict), output, error, extra_args (allowed sbatch
        options). Not retried: a second send would submit a second job."""
        return self._do(ops.submit_job(system, script, script_path, options))

    def jobs(self, system: str, state: Optional[str] = None, name: Optional[str] = None, since: Optional[str] = None) -> List[Job]:
        """The caller's jobs the controller holds (one entry per array task)."""
        return self._do(ops.jobs(system, state, name, since))

    def job(self, system: str, job_id: str, script: bool = False) -> Job:
        """One job or array task (``"123_4"``); ``script`` adds its batch script."""
        return self._do(ops.job(system, job_id, script))

    def cancel_job(self, system: str, job_id: str) -> None:
        self._do(ops.job_action(system, job_id, "cancel"))

    def hold_job(self, system: str, job_id: str) -> None:
        self._do(ops.job_action(system, job_id, "hold"))

    def release_job(self, system: str, job_id: str) -> None:
        self._do(ops.job_action(system, job_id, "release"))

    def wait_job(self, system: str, job_id: str, until: str = "finished", timeout: Optional[float] = None) -> Job:
        """Waits until the job is ``running`` (or already finished) or ``finished``, by long polls
        the server answers from its shared poll (no polling here). Raises
        :class:`~sshapi.WaitTimeout` after ``timeout`` seconds."""
        if until not in ("running", "finished"):
            raise ValueError("until must be 'running' or 'finished'")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 60.0 if deadline is None else min(60.0, deadline - time.monotonic())
            if left <= 0:
                j = self.job(system, job_id)
                if j.reached(until):
                    return j
                raise WaitTimeout(f"job {job_id} still {j.state} after {timeout} s", j)
            j = self._do(ops.job(system, job_id, wait=until, timeout=max(0, int(left))), timeout=left + 30)
            if j.reached(until):
                return j
            if left < 1:
                time.sleep(left)

    def job_output(self, system: str, job_id: str, stream: str = "stdout", tail_bytes: Optional[int] = None) -> bytes:
        """The end of the job's stdout or stderr (``tail_bytes``, default 64 KiB)."""
        return self._do(ops.job_output(system, job_id, stream, tail_bytes))


class _RawRemote(io.RawIOBase):
    """A remote file as a raw stream; each (re)positioning opens a Range request."""

    def __init__(self, client: Client, system: str, path: str):
        super().__init__()
        self._c = client
        self._url = file_url(system, "content", path)
        self._pos = 0
        self._size: Optional[int] = None
        self._resp: Optional[httpx.Response] = None
        self._it: Optional[Iterator[bytes]] = None
        self._buf = b""
        self._open_at(0)

    def _open_at(self, pos: int) -> None:
        self._drop()
        headers = {"Range": f"bytes={pos}-"} if pos else {}
        r = self._c._send(Call("GET", self._url, lambda r: None, headers=headers, idempotent=True), stream=True)
        if r.status_code == 416:
            r.close()
            self._pos = pos
            return
        if r.status_code >= 400:
            body = r.read()
            r.close()
            raise_for_status(r, body)
        start, total = response_total(r, pos)
        if total is not None:
            self._size = total
        self._resp, self._it, self._pos = r, r.iter_bytes(1 << 20), start

    def _drop(self) -> None:
        if self._resp is not None:
            self._resp.close()
        self._resp, self._it, self._buf = None, None, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence == io.SEEK_END:
            if self._size is None:
                raise io.UnsupportedOperation("size unknown")
            offset += self._size
        if offset != self._pos:
            self._open_at(offset)
        return self._pos

    def readinto(self, b: Any) -> int:
        if self._it is None:
            return 0
        if not self._buf:
            self._buf = next(self._it, b"")
            if not self._buf:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        self._pos += n
        return n

    def close(self) -> None:
        self._drop()
        super().close()


#: What :meth:`Client.open` returns: a buffered, seekable binary reader.
RemoteReader = io.BufferedReader

__all__ = ["Client", "RemoteReader", "APIError"]
