"""Python SDK for sshapi: run commands and move files on HPC systems over pooled SSH.

``Client`` and ``AsyncClient`` have the same methods; results are dataclasses
(:mod:`sshapi.models`), errors are exceptions carrying the problem details
(:mod:`sshapi.errors`), and tokens come from a provider (:mod:`sshapi.auth`).
"""

from ._base import VERSION as __version__
from ._core import Progress, RetryPolicy
from .async_client import AsyncClient, AsyncRemoteReader
from .auth import ClientCredentials, CommandToken, StaticToken, TokenProvider
from .client import Client, RemoteReader
from .errors import (
    APIError,
    BadGatewayError,
    BadRequestError,
    ChecksumMismatchError,
    ConflictError,
    ConnectionFailed,
    InsufficientStorageError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ServiceUnavailableError,
    SshapiError,
    TransferFailedError,
    UnauthorizedError,
    UploadInterrupted,
    WaitTimeout,
)
from .models import (
    Checksum,
    CommandEvent,
    CommandResult,
    Credential,
    CredentialCheck,
    Excerpt,
    FileEntry,
    System,
    Job,
    Transfer,
    TransferEndpoint,
    TransferEvent,
    TransferItem,
    UploadResult,
)

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "RemoteReader",
    "AsyncRemoteReader",
    "RetryPolicy",
    "Progress",
    "TokenProvider",
    "StaticToken",
    "CommandToken",
    "ClientCredentials",
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
    "System",
    "Credential",
    "CredentialCheck",
    "FileEntry",
    "UploadResult",
    "Excerpt",
    "Checksum",
    "CommandResult",
    "CommandEvent",
    "Job",
    "Transfer",
    "TransferEndpoint",
    "TransferItem",
    "TransferEvent",
]
