"""The API's plain request/response operations, described once for both clients."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote

import httpx

from ._core import Call, drop_none, file_url, flag, parse_none, system_url
from .models import (
    Checksum,
    CommandResult,
    Credential,
    CredentialCheck,
    Excerpt,
    FileEntry,
    Job,
    System,
    Transfer,
    TransferItem,
)

Endpoint = Tuple[str, str]


def systems() -> Call[List[System]]:
    return Call("GET", "/v1/systems", lambda r: [System.from_json(s) for s in r.json().get("systems") or []], idempotent=True)


def system(id: str) -> Call[System]:
    return Call("GET", system_url(id), lambda r: System.from_json(r.json()), idempotent=True)


def create_system(body: Dict[str, Any]) -> Call[System]:
    return Call("POST", "/v1/systems", lambda r: System.from_json(r.json()), json=body)


def update_system(id: str, body: Dict[str, Any]) -> Call[System]:
    return Call("PATCH", system_url(id), lambda r: System.from_json(r.json()), json=body)


def delete_system(id: str) -> Call[None]:
    return Call("DELETE", system_url(id), parse_none, idempotent=True)


def set_credential(system: str, body: Dict[str, Any]) -> Call[Credential]:
    return Call("PUT", system_url(system, "/credential"), lambda r: Credential.from_json(r.json()), json=body, idempotent=True)


def credential(system: str) -> Call[Credential]:
    return Call("GET", system_url(system, "/credential"), lambda r: Credential.from_json(r.json()), idempotent=True)


def delete_credential(system: str) -> Call[None]:
    return Call("DELETE", system_url(system, "/credential"), parse_none, idempotent=True)


def check_credential(system: str) -> Call[CredentialCheck]:
    return Call("POST", system_url(system, "/credential/check"), lambda r: CredentialCheck.from_json(r.json()), idempotent=True)


def command_body(command: str, timeout: Optional[float], stdin: Optional[str], max_output_bytes: Optional[int]) -> Dict[str, Any]:
    return drop_none({"command": command, "timeout_s": timeout, "stdin": stdin, "max_output_bytes": max_output_bytes})


def run(system: str, body: Dict[str, Any]) -> Call[CommandResult]:
    # A command may have side effects: it is never sent twice.
    return Call("POST", system_url(system, "/commands"), lambda r: CommandResult.from_json(r.json()), json=body)


def ls_page(
    system: str, path: str, page: Union[int, str], limit: Optional[int], recursive: bool, show_hidden: bool, pattern: Optional[str]
) -> Call[Tuple[List[FileEntry], Optional[Union[int, str]]]]:
    """One page of a listing. ``page`` is the offset of the page (SSH systems) or the cursor an
    S3 system gave as ``next_cursor``; the call returns the entries and the next page's, or None."""

    def parse(r: httpx.Response) -> Tuple[List[FileEntry], Optional[Union[int, str]]]:
        d = r.json()
        entries = [FileEntry.from_json(e) for e in d.get("entries") or []]
        cursor = d.get("next_cursor")
        if isinstance(cursor, str) and cursor:
            return entries, cursor
        nxt = d.get("next_offset")
        return entries, nxt if isinstance(nxt, int) else None

    params = drop_none(
        {
            "offset": page if isinstance(page, int) and page else None,
            "cursor": page if isinstance(page, str) and page else None,
            "limit": limit,
            "recursive": flag(recursive),
            "show_hidden": flag(show_hidden),
            "pattern": pattern,
        }
    )
    return Call("GET", file_url(system, "ls", path), parse, params=params, idempotent=True)


def stat(system: str, path: str, follow_links: bool) -> Call[FileEntry]:
    return Call(
        "GET",
        file_url(system, "stat", path),
        lambda r: FileEntry.from_json(r.json()),
        params=drop_none({"follow_links": flag(follow_links)}),
        idempotent=True,
    )


def op(system: str, name: str, body: Dict[str, Any], idempotent: bool) -> Call[None]:
    return Call("POST", system_url(system, f"/ops/{name}"), parse_none, json=drop_none(body), idempotent=idempotent)


def rm(system: str, path: str, recursive: bool) -> Call[None]:
    return Call("DELETE", file_url(system, "files", path), parse_none, params=drop_none({"recursive": flag(recursive)}), idempotent=True)


def excerpt(system: str, which: str, path: str, lines: Optional[int], nbytes: Optional[int]) -> Call[Excerpt]:
    return Call(
        "GET",
        file_url(system, which, path),
        lambda r: Excerpt.from_json(r.json()),
        params=drop_none({"lines": lines, "bytes": nbytes}),
        idempotent=True,
    )


def checksum(system: str, path: str, algorithm: str) -> Call[Checksum]:
    return Call(
        "GET", file_url(system, "checksum", path), lambda r: Checksum.from_json(r.json()), params={"algorithm": algorithm}, idempotent=True
    )


def transfer_path(p: str) -> str:
    """Transfer endpoints take absolute paths or paths relative to the home directory; the SDK
    accepts ``~`` and ``~/x`` there too, as everywhere else."""
    if p == "~":
        return "."
    if p.startswith("~/"):
        return p[2:].lstrip("/") or "."
    return p


def submit_transfer(
    source: Endpoint,
    destination: Endpoint,
    recursive: bool,
    sync: Optional[str],
    verify: Optional[str],
    streams: Optional[int],
    chunk_size: Optional[int],
    deadline: Optional[str],
    idempotency_key: Optional[str],
) -> Call[Transfer]:
    body = drop_none(
        {
            "source": {"system": source[0], "path": transfer_path(source[1])},
            "destination": {"system": destination[0], "path": transfer_path(destination[1])},
            "recursive": recursive or None,
            "sync": sync,
            "verify": verify,
            "streams": streams,
            "chunk_size": chunk_size,
            "deadline": deadline,
            "idempotency_key": idempotency_key,
        }
    )
    # With an idempotency key the server answers a repeated request with the first transfer,
    # so it is safe to send again.
    return Call("POST", "/v1/transfers", lambda r: Transfer.from_json(r.json()), json=body, idempotent=bool(idempotency_key))


def transfer(id: str) -> Call[Transfer]:
    return Call("GET", f"/v1/transfers/{id}", lambda r: Transfer.from_json(r.json()), idempotent=True)


def transfers(status: Optional[str], limit: Optional[int]) -> Call[List[Transfer]]:
    return Call(
        "GET",
        "/v1/transfers",
        lambda r: [Transfer.from_json(t) for t in r.json().get("transfers") or []],
        params=drop_none({"status": status, "limit": limit}),
        idempotent=True,
    )


def transfer_items(id: str, after: Optional[int], status: Optional[str]) -> Call[Tuple[List[TransferItem], Optional[int]]]:
    def parse(r: httpx.Response) -> Tuple[List[TransferItem], Optional[int]]:
        d = r.json()
        nxt = d.get("next_after")
        return [TransferItem.from_json(i) for i in d.get("items") or []], nxt if isinstance(nxt, int) else None

    return Call("GET", f"/v1/transfers/{id}/items", parse, params=drop_none({"after": after, "status": status}), idempotent=True)


def cancel_transfer(id: str) -> Call[Transfer]:
    return Call("DELETE", f"/v1/transfers/{id}", lambda r: Transfer.from_json(r.json()), idempotent=True)


def system_body(
    id: Optional[str],
    host: Optional[str],
    port: Optional[int],
    host_keys: Optional[Sequence[str]],
    host_key_fingerprints: Optional[Sequence[str]],
    trust_on_first_use: Optional[bool],
    max_sessions: Optional[int],
    root_dir: Optional[str],
    description: Optional[str],
) -> Dict[str, Any]:
    return drop_none(
        {
            "id": id,
            "host": host,
            "port": port,
            "host_keys": list(host_keys) if host_keys is not None else None,
            "host_key_fingerprints": list(host_key_fingerprints) if host_key_fingerprints is not None else None,
            "trust_on_first_use": trust_on_first_use,
            "max_sessions": max_sessions,
            "root_dir": root_dir,
            "description": description,
        }
    )


def s3_system_body(
    id: str, endpoint: str, bucket: str, region: Optional[str], prefix: Optional[str], path_style: Optional[bool], description: Optional[str]
) -> Dict[str, Any]:
    return drop_none(
        {
            "id": id,
            "kind": "s3",
            "endpoint": endpoint,
            "bucket": bucket,
            "region": region,
            "prefix": prefix,
            "path_style": path_style,
            "description": description,
        }
    )


def s3_credential_body(access_key_id: str, secret_access_key: str, session_token: Optional[str]) -> Dict[str, Any]:
    return drop_none({"access_key_id": access_key_id, "secret_access_key": secret_access_key, "session_token": session_token})


# --- batch jobs ------------------------------------------------------------------------------

JOB_FIELDS = (
    "working_dir", "name", "partition", "account", "qos", "time_limit", "nodes", "ntasks", "cpus_per_task",
    "memory", "gpus", "array", "dependency", "env", "output", "error", "extra_args",
)


def job_url(system: str, job_id: str = "", rest: str = "") -> str:
    return system_url(system, "/jobs" + (f"/{quote(job_id, safe='')}" if job_id else "") + rest)


def submit_job(system: str, script: Optional[str], script_path: Optional[str], options: Dict[str, Any]) -> Call[Job]:
    unknown = set(options) - set(JOB_FIELDS)
    if unknown:
        raise TypeError(f"unknown job options: {', '.join(sorted(unknown))}")
    body = drop_none({"script": script, "script_path": script_path, **options})
    if "nodes" in body and isinstance(body["nodes"], int):
        body["nodes"] = str(body["nodes"])
    # Not idempotent: sending it again would submit a second job.
    return Call("POST", job_url(system), lambda r: Job.from_json(r.json()), json=body)


def jobs(system: str, state: Optional[str], name: Optional[str], since: Optional[str]) -> Call[List[Job]]:
    return Call(
        "GET",
        job_url(system),
        lambda r: [Job.from_json(j) for j in r.json().get("jobs") or []],
        params=drop_none({"state": state, "name": name, "since": since}),
        idempotent=True,
    )


def job(system: str, job_id: str, script: bool = False, wait: Optional[str] = None, timeout: Optional[int] = None) -> Call[Job]:
    return Call(
        "GET",
        job_url(system, job_id),
        lambda r: Job.from_json(r.json()),
        params=drop_none({"script": flag(script), "wait": wait, "timeout": timeout}),
        idempotent=True,
    )


def job_action(system: str, job_id: str, action: str) -> Call[None]:
    if action == "cancel":
        return Call("DELETE", job_url(system, job_id), parse_none, idempotent=True)
    return Call("POST", job_url(system, job_id, "/" + action), parse_none, idempotent=True)


def job_output(system: str, job_id: str, stream: str, tail_bytes: Optional[int]) -> Call[bytes]:
    return Call(
        "GET",
        job_url(system, job_id, "/output"),
        lambda r: r.content,
        params=drop_none({"stream": stream, "tail_bytes": tail_bytes}),
        idempotent=True,
    )
