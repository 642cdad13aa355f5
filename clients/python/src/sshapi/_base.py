"""Configuration and small rules both clients share."""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

import httpx

from ._core import Progress, RetryPolicy
from .auth import StaticToken, TokenProvider
from .errors import TransferFailedError, WaitTimeout
from .models import Transfer

#: The SDK's version, sent in the User-Agent.
VERSION = "0.1.0"


class Base:
    """What Client and AsyncClient share: the URL, the token provider, timeouts and retries."""

    def __init__(self, url: str, token: Optional[str], auth: Optional[TokenProvider], timeout: float, retry: Optional[RetryPolicy]):
        if not url:
            raise ValueError("url is required")
        if (token is None) == (auth is None):
            raise ValueError("give exactly one of token= and auth=")
        self.url = url.rstrip("/")
        self._auth: TokenProvider = auth if auth is not None else StaticToken(token or "")
        self._timeout_s = timeout
        self._timeout = httpx.Timeout(timeout)
        self._retry = retry or RetryPolicy()

    @staticmethod
    def _default_headers() -> Dict[str, str]:
        return {"User-Agent": f"sshapi-python/{VERSION}"}

    def _request_timeout(self, seconds: Optional[float]) -> httpx.Timeout:
        if seconds is None:
            return self._timeout
        return httpx.Timeout(self._timeout_s, read=seconds)

    def _command_timeout(self, timeout: Optional[float]) -> float:
        # The server's default command timeout is 60 s; wait for it plus a margin.
        return (timeout if timeout is not None else 60.0) + self._timeout_s

    @staticmethod
    def _stdin(stdin: Optional[Union[str, bytes]]) -> Optional[str]:
        if isinstance(stdin, bytes):
            return stdin.decode("utf-8")
        return stdin

    @staticmethod
    def _report(progress: Optional[Progress], t: Transfer) -> None:
        if progress is not None:
            progress(t.bytes_done, t.bytes_total or None)

    @staticmethod
    def _finished(t: Transfer, check: bool) -> Transfer:
        if check and t.status != "succeeded":
            raise TransferFailedError(t)
        return t

    @staticmethod
    def _timeout_error(t: Transfer, timeout: Any) -> WaitTimeout:
        return WaitTimeout(f"transfer {t.id} still {t.status} after {timeout} s", t)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
