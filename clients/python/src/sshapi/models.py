"""Typed results of the sshapi API.

Every result is a frozen dataclass built from the server's JSON with ``from_json``; fields the
server adds later are ignored, fields it leaves out get their default, so the SDK keeps working
across server versions.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Dict, Mapping, Optional, Tuple

__all__ = [
    "System",
    "Credential",
    "CredentialCheck",
    "FileEntry",
    "UploadResult",
    "Excerpt",
    "Checksum",
    "CommandResult",
    "CommandEvent",
    "TransferEndpoint",
    "Transfer",
    "TransferItem",
    "TransferEvent",
    "parse_time",
]

_FRACTION = re.compile(r"\.(\d+)")


def parse_time(value: Any) -> Optional[datetime]:
    """Parses an RFC 3339 time as the server writes it (``Z``, up to nanoseconds); None stays None."""
    if not value or not isinstance(value, str):
        return None
    s = value.replace("Z", "+00:00").replace("z", "+00:00")
    s = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], s, count=1)
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _int(v: Any, default: int = 0) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _opt_int(v: Any) -> Optional[int]:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _bool(v: Any) -> bool:
    return v if isinstance(v, bool) else False


def _strs(v: Any) -> Tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()


def _decode(text: Any, encoding: Any) -> bytes:
    s = _str(text)
    if encoding == "base64":
        return base64.b64decode(s)
    return s.encode("utf-8")


@dataclass(frozen=True)
class System:
    """A registered system (``GET /v1/systems/{id}``): an SSH server, or an S3 bucket (``kind``
    "s3", with ``endpoint``, ``bucket`` and ``prefix``)."""

    id: str
    host: str
    port: int = 22
    host_keys: Tuple[str, ...] = ()
    host_key_fingerprints: Tuple[str, ...] = ()
    trust_on_first_use: bool = False
    max_sessions: int = 10
    root_dir: str = ""
    description: str = ""
    has_credential: bool = False
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    kind: str = "ssh"
    endpoint: str = ""
    region: str = ""
    bucket: str = ""
    prefix: str = ""
    capabilities: Tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "System":
        caps = d.get("capabilities")
        return cls(
            id=_str(d.get("id")),
            host=_str(d.get("host")),
            port=_int(d.get("port"), 22),
            host_keys=_strs(d.get("host_keys")),
            host_key_fingerprints=_strs(d.get("host_key_fingerprints")),
            trust_on_first_use=_bool(d.get("trust_on_first_use")),
            max_sessions=_int(d.get("max_sessions"), 10),
            root_dir=_str(d.get("root_dir")),
            description=_str(d.get("description")),
            has_credential=_bool(d.get("has_credential")),
            created_at=parse_time(d.get("created_at")),
            updated_at=parse_time(d.get("updated_at")),
            kind=_str(d.get("kind")) or "ssh",
            endpoint=_str(d.get("endpoint")),
            region=_str(d.get("region")),
            bucket=_str(d.get("bucket")),
            prefix=_str(d.get("prefix")),
            capabilities=_strs(caps.get("capabilities")) if isinstance(caps, dict) else (),
        )


@dataclass(frozen=True)
class Credential:
    """Metadata of a stored credential: an SSH key's, or an S3 system's access key id (kind
    "s3"). The private or secret key itself is never returned."""

    username: str
    key_type: str = ""
    public_key_fingerprint: str = ""
    certificate: bool = False
    created_at: Optional[datetime] = None
    kind: str = "ssh"
    access_key_id: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Credential":
        return cls(
            username=_str(d.get("username")),
            key_type=_str(d.get("key_type")),
            public_key_fingerprint=_str(d.get("public_key_fingerprint")),
            certificate=_bool(d.get("certificate")),
            created_at=parse_time(d.get("created_at")),
            kind=_str(d.get("kind")) or "ssh",
            access_key_id=_str(d.get("access_key_id")),
        )


@dataclass(frozen=True)
class CredentialCheck:
    """Outcome of logging in now (a failed login is ``ok=False``, not an exception)."""

    ok: bool
    latency_ms: int = 0
    error: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CredentialCheck":
        return cls(ok=_bool(d.get("ok")), latency_ms=_int(d.get("latency_ms")), error=_str(d.get("error")))


@dataclass(frozen=True)
class FileEntry:
    """One file, directory or symlink on a system."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: str = ""
    mtime: Optional[datetime] = None
    uid: int = 0
    gid: int = 0
    link_target: str = ""

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileEntry":
        return cls(
            name=_str(d.get("name")),
            path=_str(d.get("path")),
            type=_str(d.get("type")),
            size=_int(d.get("size")),
            mode=_str(d.get("mode")),
            mtime=parse_time(d.get("mtime")),
            uid=_int(d.get("uid")),
            gid=_int(d.get("gid")),
            link_target=_str(d.get("link_target")),
        )


@dataclass(frozen=True)
class UploadResult:
    """A file written by an upload: its final path, size and the SHA-256 the server computed
    (``""`` for an upload with ``verify=False``, which asks the server not to hash it)."""

    path: str
    size: int
    sha256: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "UploadResult":
        return cls(path=_str(d.get("path")), size=_int(d.get("size")), sha256=_str(d.get("sha256")))


@dataclass(frozen=True)
class Excerpt:
    """The first or last bytes or lines of a file (``head``/``tail``)."""

    data: bytes
    size: int = 0
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Excerpt":
        return cls(
            data=_decode(d.get("content"), d.get("encoding")),
            size=_int(d.get("size")),
            truncated=_bool(d.get("truncated")),
        )


@dataclass(frozen=True)
class Checksum:
    """A digest computed on the server."""

    path: str
    algorithm: str
    checksum: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Checksum":
        return cls(path=_str(d.get("path")), algorithm=_str(d.get("algorithm")), checksum=_str(d.get("checksum")))


@dataclass(frozen=True)
class CommandResult:
    """A finished command. A non-zero ``exit_status`` is a result, not an exception.

    ``stdout``/``stderr`` are text (invalid UTF-8 replaced); ``stdout_bytes``/``stderr_bytes`` are
    exactly what the command wrote (the server sends non-UTF-8 output as base64).
    """

    exit_status: Optional[int]
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    signal: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    duration_ms: int = 0

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CommandResult":
        return cls(
            exit_status=_opt_int(d.get("exit_status")),
            stdout_bytes=_decode(d.get("stdout"), d.get("stdout_encoding")),
            stderr_bytes=_decode(d.get("stderr"), d.get("stderr_encoding")),
            signal=_str(d.get("signal")),
            stdout_truncated=_bool(d.get("stdout_truncated")),
            stderr_truncated=_bool(d.get("stderr_truncated")),
            timed_out=_bool(d.get("timed_out")),
            duration_ms=_int(d.get("duration_ms")),
        )


@dataclass(frozen=True)
class CommandEvent:
    """One event of a streamed command: ``stdout``/``stderr`` data, the final ``exit`` with its
    result (whose stdout/stderr are empty: the output came as events), or an ``error`` with the
    problem details."""

    type: str
    data: bytes = b""
    result: Optional[CommandResult] = None
    error: Optional[Dict[str, Any]] = None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CommandEvent":
        res = d.get("result")
        err = d.get("error")
        return cls(
            type=_str(d.get("type")),
            data=_decode(d.get("data"), d.get("encoding")),
            result=CommandResult.from_json(res) if isinstance(res, dict) else None,
            error=dict(err) if isinstance(err, dict) else None,
        )


@dataclass(frozen=True)
class TransferEndpoint:
    """A path on a system, one end of a transfer."""

    system: str
    path: str

    @classmethod
    def from_json(cls, d: Any) -> "TransferEndpoint":
        d = d if isinstance(d, dict) else {}
        return cls(system=_str(d.get("system")), path=_str(d.get("path")))


TERMINAL_STATUSES = frozenset({"succeeded", "failed", "canceled"})


@dataclass(frozen=True)
class Transfer:
    """A system-to-system transfer and its progress."""

    id: str
    status: str
    source: TransferEndpoint
    destination: TransferEndpoint
    recursive: bool = False
    sync: str = ""
    verify: str = ""
    streams: int = 0
    chunk_size: int = 0
    same_system: bool = False
    idempotency_key: str = ""
    bytes_total: int = 0
    bytes_done: int = 0
    files_total: int = 0
    files_done: int = 0
    files_failed: int = 0
    files_skipped: int = 0
    bytes_read: int = 0
    rate_bytes_per_s: float = 0.0
    eta_s: Optional[int] = None
    attempts: int = 0
    error: str = ""
    created_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    deadline: Optional[datetime] = None

    @property
    def done(self) -> bool:
        """True once the transfer has finished (succeeded, failed or canceled)."""
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Transfer":
        rate = d.get("rate_bytes_per_s")
        return cls(
            id=_str(d.get("id")),
            status=_str(d.get("status")),
            source=TransferEndpoint.from_json(d.get("source")),
            destination=TransferEndpoint.from_json(d.get("destination")),
            recursive=_bool(d.get("recursive")),
            sync=_str(d.get("sync")),
            verify=_str(d.get("verify")),
            streams=_int(d.get("streams")),
            chunk_size=_int(d.get("chunk_size")),
            same_system=_bool(d.get("same_system")),
            idempotency_key=_str(d.get("idempotency_key")),
            bytes_total=_int(d.get("bytes_total")),
            bytes_done=_int(d.get("bytes_done")),
            files_total=_int(d.get("files_total")),
            files_done=_int(d.get("files_done")),
            files_failed=_int(d.get("files_failed")),
            files_skipped=_int(d.get("files_skipped")),
            bytes_read=_int(d.get("bytes_read")),
            rate_bytes_per_s=float(rate) if isinstance(rate, (int, float)) else 0.0,
            eta_s=_opt_int(d.get("eta_s")),
            attempts=_int(d.get("attempts")),
            error=_str(d.get("error")),
            created_at=parse_time(d.get("created_at")),
            started_at=parse_time(d.get("started_at")),
            finished_at=parse_time(d.get("finished_at")),
            deadline=parse_time(d.get("deadline")),
        )


@dataclass(frozen=True)
class TransferItem:
    """One file, directory or symlink of a transfer."""

    seq: int
    kind: str
    source: str
    destination: str
    size: int = 0
    status: str = ""
    bytes_done: int = 0
    sha256: str = ""
    error: str = ""
    attempts: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TransferItem":
        return cls(
            seq=_int(d.get("seq")),
            kind=_str(d.get("kind")),
            source=_str(d.get("source")),
            destination=_str(d.get("destination")),
            size=_int(d.get("size")),
            status=_str(d.get("status")),
            bytes_done=_int(d.get("bytes_done")),
            sha256=_str(d.get("sha256")),
            error=_str(d.get("error")),
            attempts=_int(d.get("attempts")),
        )


@dataclass(frozen=True)
class TransferEvent:
    """A Server-Sent Event of ``GET /v1/transfers/{id}/events``: ``progress`` and the final
    ``done`` carry the transfer; ``shutdown`` means the server is stopping (reconnect)."""

    event: str
    transfer: Optional[Transfer] = None
    raw: str = ""


@dataclass(frozen=True)
class Job:
    """A batch job (or one task of an array job, ``123_4``) as the scheduler reports it.

    ``state`` is normalised (pending, running, suspended, completed, failed, cancelled, timeout);
    ``slurm_state`` is the scheduler's own word. ``stdout``/``stderr`` are resolved paths."""

    job_id: str
    name: str = ""
    user: str = ""
    state: str = ""
    slurm_state: str = ""
    reason: str = ""
    held: bool = False
    finished: bool = False
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    array_job_id: str = ""
    array_task_id: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    submit_time: Optional[datetime] = None
    start_time: Optional[datetime] = None
    end_time: Optional[datetime] = None
    time_limit: str = ""
    nodes: int = 0
    cpus: int = 0
    node_list: str = ""
    working_dir: str = ""
    stdout: str = ""
    stderr: str = ""
    dependency: str = ""
    script: Optional[str] = None
    #: "accounting" for a job read from sacct after the controller forgot it.
    source: str = ""
    #: A finished job's efficiency from accounting (cpu_efficiency, max_rss_bytes, ...).
    efficiency: Optional[Dict[str, Any]] = None

    def reached(self, until: str) -> bool:
        """True once the job is ``running`` (or already finished) or ``finished``."""
        if until == "finished":
            return self.finished
        return self.finished or self.state in ("running", "suspended")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Job":
        sc = d.get("script")
        return cls(
            job_id=_str(d.get("job_id")),
            name=_str(d.get("name")),
            user=_str(d.get("user")),
            state=_str(d.get("state")),
            slurm_state=_str(d.get("slurm_state")),
            reason=_str(d.get("reason")),
            held=_bool(d.get("held")),
            finished=_bool(d.get("finished")),
            exit_code=_opt_int(d.get("exit_code")),
            signal=_opt_int(d.get("signal")),
            array_job_id=_str(d.get("array_job_id")),
            array_task_id=_str(d.get("array_task_id")),
            partition=_str(d.get("partition")),
            account=_str(d.get("account")),
            qos=_str(d.get("qos")),
            submit_time=parse_time(d.get("submit_time")),
            start_time=parse_time(d.get("start_time")),
            end_time=parse_time(d.get("end_time")),
            time_limit=_str(d.get("time_limit")),
            nodes=_int(d.get("nodes")),
            cpus=_int(d.get("cpus")),
            node_list=_str(d.get("node_list")),
            working_dir=_str(d.get("working_dir")),
            stdout=_str(d.get("stdout")),
            stderr=_str(d.get("stderr")),
            dependency=_str(d.get("dependency")),
            script=sc if isinstance(sc, str) else None,
            source=_str(d.get("source")),
            efficiency=dict(d["efficiency"]) if isinstance(d.get("efficiency"), dict) else None,
        )
