"""Token providers: where the bearer token comes from.

A provider has ``token()`` (the current token, fetched or refreshed when needed) and
``invalidate()`` (called after a 401 so the next ``token()`` fetches a fresh one). Providers are
thread-safe; :class:`sshapi.AsyncClient` calls them in a worker thread when they must fetch.
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import threading
import time
from typing import Any, Callable, Optional, Sequence, Union

import httpx

from .errors import SshapiError

__all__ = ["TokenProvider", "StaticToken", "CommandToken", "ClientCredentials", "jwt_expiry"]


class TokenProvider:
    """Base class of token providers."""

    def token(self) -> str:
        """The token to send now."""
        raise NotImplementedError

    def invalidate(self) -> None:
        """Forget the cached token (the service rejected it)."""

    def fresh(self) -> bool:
        """True when ``token()`` will answer from its cache without blocking."""
        return True


class StaticToken(TokenProvider):
    """A fixed token, for example from ``sshapi token`` or an environment variable."""

    def __init__(self, token: str):
        if not token:
            raise ValueError("token is empty")
        self._token = token

    def token(self) -> str:
        return self._token

    def __repr__(self) -> str:  # never show the token
        return "StaticToken(***)"


def jwt_expiry(token: str) -> Optional[float]:
    """The ``exp`` claim of a JWT as a Unix time, without verifying it; None if absent."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, (int, float)) else None


class _Cached(TokenProvider):
    """A token cached until ``margin`` seconds before it expires."""

    def __init__(self, margin: float, clock: Callable[[], float] = time.time):
        self._margin = margin
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Optional[str] = None
        self._expires: float = 0.0

    def _fetch(self) -> "tuple[str, float]":
        raise NotImplementedError

    def fresh(self) -> bool:
        return self._token is not None and self._clock() < self._expires - self._margin

    def token(self) -> str:
        with self._lock:
            if not self.fresh():
                self._token, self._expires = self._fetch()
            assert self._token is not None
            return self._token

    def invalidate(self) -> None:
        with self._lock:
            self._token = None


class CommandToken(_Cached):
    """A token printed by a command (for example ``oidc-token myprovider`` or ``sshapi token``).

    The command runs again ``margin`` seconds before the token's ``exp`` claim, or every ``ttl``
    seconds for tokens without one.
    """

    def __init__(self, command: Union[str, Sequence[str]], margin: float = 60.0, ttl: float = 300.0, timeout: float = 60.0):
        super().__init__(margin)
        self._argv = shlex.split(command) if isinstance(command, str) else list(command)
        self._ttl = ttl
        self._timeout = timeout
        self.runs = 0

    def _fetch(self) -> "tuple[str, float]":
        try:
            out = subprocess.run(self._argv, capture_output=True, check=True, timeout=self._timeout)
        except (OSError, subprocess.SubprocessError) as e:
            raise SshapiError(f"token command {self._argv[0]!r} failed: {e}") from e
        tok = out.stdout.decode().strip()
        if not tok:
            raise SshapiError(f"token command {self._argv[0]!r} printed nothing")
        self.runs += 1
        exp = jwt_expiry(tok)
        return tok, exp if exp is not None else self._clock() + self._ttl + self._margin

    def __repr__(self) -> str:
        return f"CommandToken({self._argv[0]!r})"


class ClientCredentials(_Cached):
    """OAuth 2.0 client credentials grant (an OIDC provider's token endpoint), refreshed
    ``margin`` seconds before the access token expires.

    ``auth_method`` is ``"basic"`` (client_secret_basic, the default) or ``"post"``
    (client_secret_post).
    """

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        scope: Optional[str] = None,
        audience: Optional[str] = None,
        margin: float = 30.0,
        auth_method: str = "basic",
        timeout: float = 30.0,
        verify: Any = True,
    ):
        super().__init__(margin)
        if auth_method not in ("basic", "post"):
            raise ValueError("auth_method must be 'basic' or 'post'")
        self._url = token_url
        self._id = client_id
        self._secret = client_secret
        self._scope = scope
        self._audience = audience
        self._method = auth_method
        self._timeout = timeout
        self._verify = verify
        self.fetches = 0

    def _fetch(self) -> "tuple[str, float]":
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        if self._audience:
            form["audience"] = self._audience
        auth: Optional[httpx.BasicAuth] = None
        if self._method == "basic":
            auth = httpx.BasicAuth(self._id, self._secret)
        else:
            form.update(client_id=self._id, client_secret=self._secret)
        now = self._clock()
        try:
            r = httpx.post(self._url, data=form, auth=auth, timeout=self._timeout, verify=self._verify)
        except httpx.HTTPError as e:
            raise SshapiError(f"token endpoint {self._url}: {e}") from e
        if r.status_code != 200:
            raise SshapiError(f"token endpoint {self._url}: HTTP {r.status_code}: {r.text[:200]}")
        body = r.json()
        tok = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(tok, str) or not tok:
            raise SshapiError(f"token endpoint {self._url}: no access_token in the answer")
        self.fetches += 1
        expires_in = body.get("expires_in")
        if isinstance(expires_in, (int, float)):
            return tok, now + float(expires_in)
        exp = jwt_expiry(tok)
        return tok, exp if exp is not None else now + 300.0

    def __repr__(self) -> str:
        return f"ClientCredentials({self._url!r}, client_id={self._id!r})"
