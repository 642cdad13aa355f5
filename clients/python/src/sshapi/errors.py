"""Exceptions. Every error the API answers with is an :class:`APIError` carrying the RFC 9457
problem details (``status``, ``title``, ``detail``, ``errors``), raised as the subclass for its
status where there is one."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Type

__all__ = [
    "SshapiError",
    "ConnectionFailed",
    "UploadInterrupted",
    "APIError",
    "BadRequestError",
    "UnauthorizedError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "ChecksumMismatchError",
    "RateLimitedError",
    "BadGatewayError",
    "ServiceUnavailableError",
    "InsufficientStorageError",
    "TransferFailedError",
    "WaitTimeout",
]


class SshapiError(Exception):
    """Base class of every exception this SDK raises."""


class ConnectionFailed(SshapiError):
    """The service could not be reached (after the retries the policy allows); ``__cause__`` is
    the underlying httpx error."""


class UploadInterrupted(ConnectionFailed):
    """A resumable upload gave up after failed requests in a row. What the server committed
    stays: ``upload(..., upload_url=e.upload_url)`` continues from ``offset`` (until the
    service's ``http.tus_expiry``)."""

    def __init__(self, message: str, upload_url: str, offset: int):
        super().__init__(message)
        self.upload_url = upload_url
        self.offset = offset


class APIError(SshapiError):
    """The API answered with an error status and (usually) problem+json details."""

    status: int
    title: str
    detail: str
    type: str
    instance: str
    errors: List[Dict[str, Any]]
    retry_after: Optional[float]
    problem: Dict[str, Any]

    def __init__(self, status: int, problem: Mapping[str, Any], retry_after: Optional[float] = None):
        self.status = status
        self.problem = dict(problem)
        self.title = str(problem.get("title") or "")
        self.detail = str(problem.get("detail") or "")
        self.type = str(problem.get("type") or "about:blank")
        self.instance = str(problem.get("instance") or "")
        errs = problem.get("errors")
        self.errors = [dict(e) for e in errs if isinstance(e, dict)] if isinstance(errs, list) else []
        self.retry_after = retry_after
        msg = f"{status} {self.title}".strip()
        if self.detail:
            msg += f": {self.detail}"
        for e in self.errors:
            msg += f" [{e.get('field', '')}: {e.get('message', '')}]"
        super().__init__(msg)

    @property
    def fields(self) -> List[str]:
        """The request fields the server named as wrong."""
        return [str(e.get("field", "")) for e in self.errors]


class BadRequestError(APIError):
    """400: the request was invalid; ``errors`` names the fields."""


class UnauthorizedError(APIError):
    """401: no token, or one the service does not accept."""


class PermissionDeniedError(APIError):
    """403: permission denied on the system, or outside the system's root_dir."""


class NotFoundError(APIError):
    """404: no such system, file or transfer (a system of another user is also 404)."""


class ConflictError(APIError):
    """409: exists, not empty, wrong type, no credential yet, or an idempotency key reused."""


class ChecksumMismatchError(APIError):
    """422: the uploaded bytes did not match the checksum sent with them; nothing was written."""


class RateLimitedError(APIError):
    """429: too many requests; ``retry_after`` says when to try again."""


class BadGatewayError(APIError):
    """502: the SSH server rejected the credential or host key, or the connection broke
    mid-command (a command that may have run is never re-run)."""


class ServiceUnavailableError(APIError):
    """503: no SSH channel before the deadline or the connection dropped; ``retry_after`` says
    when to try again."""


class InsufficientStorageError(APIError):
    """507: no space left or quota exceeded on the system."""


class TransferFailedError(SshapiError):
    """A transfer ended failed or canceled; ``transfer`` is its final state."""

    def __init__(self, transfer: Any):
        self.transfer = transfer
        super().__init__(f"transfer {transfer.id} {transfer.status}: {transfer.error}".rstrip(": "))


class WaitTimeout(SshapiError, TimeoutError):
    """A wait ended before the transfer finished; ``transfer`` is the last state seen."""

    def __init__(self, message: str, transfer: Any = None):
        self.transfer = transfer
        super().__init__(message)


_BY_STATUS: Dict[int, Type[APIError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: ChecksumMismatchError,
    429: RateLimitedError,
    502: BadGatewayError,
    503: ServiceUnavailableError,
    507: InsufficientStorageError,
}


def error_for(status: int, body: bytes, retry_after: Optional[float] = None) -> APIError:
    """Builds the exception for an error response (problem+json, or any body)."""
    problem: Dict[str, Any] = {}
    try:
        parsed = json.loads(body) if body else {}
        if isinstance(parsed, dict):
            problem = parsed
    except ValueError:
        pass
    if not problem:
        text = body.decode("utf-8", errors="replace").strip()[:500]
        problem = {"title": _reason(status), "status": status, "detail": text}
    cls = _BY_STATUS.get(status, APIError)
    return cls(status, problem, retry_after)


def _reason(status: int) -> str:
    try:
        from http import HTTPStatus

        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
