"""Bearer tokens mapped to tenants, and the operator's tokens. A tenant sees only its own
runs; another tenant's run answers 404, exactly like a run that does not exist, so ids
cannot be probed. An operator token acts as the deployment itself: every run, and what
is the deployment's alone (its schedules, the metrics over every tenant's runs)."""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
from dataclasses import dataclass, field

from ..errors import ConfigError

__all__ = ["Auth", "is_loopback"]

SETTINGS_HINT = ("set RUNWRIGHT_OPERATOR_TOKENS=token[,...] and/or RUNWRIGHT_TOKENS=token=tenant[,...] "
                 "for fixed tokens, or RUNWRIGHT_AUTH=off for local use without auth")


@dataclass(frozen=True)
class Auth:
    """`tokens` maps token -> tenant; `operators` are the operator's tokens (tenant None).
    `enabled=False` serves everyone as the operator (local use only; the server says so
    loudly at start). `one_off` is an operator token made for this process alone (one of
    `operators`), when none was configured: `runwright serve` prints it in a sign-in link.
    `operator_decode` (`runwright serve --operator-decode`): the operator may ask to read
    tenants' encrypted payloads plain (server._decode); off, they stay sealed to it."""

    tokens: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    operators: frozenset[str] = frozenset()
    one_off: str | None = None
    operator_decode: bool = False

    @classmethod
    def from_env(cls, *, host: str | None = None) -> Auth:
        """RUNWRIGHT_TOKENS="token1=tenant-a,token2=tenant-b", RUNWRIGHT_OPERATOR_TOKENS=
        "token3,..."; RUNWRIGHT_AUTH=off disables. With no token configured, a server that
        listens on a loopback `host` gets a one-off operator token (`one_off`), as Jupyter
        does: only this machine can reach it, and only its terminal is told the token.
        Anywhere else (or with no host) none is configured is a ConfigError: a server others
        can reach is a deployment, whose clients need tokens that outlive a restart, and
        whose output often goes to a log that others read."""
        if os.environ.get("RUNWRIGHT_AUTH", "on").lower() in ("off", "0", "false", "no"):
            return cls(enabled=False)
        tokens = {}
        for item in filter(None, os.environ.get("RUNWRIGHT_TOKENS", "").split(",")):
            token, sep, tenant = item.strip().partition("=")
            if not sep or not token or not tenant:
                raise ConfigError("RUNWRIGHT_TOKENS must read token=tenant[,token=tenant...]")
            tokens[token] = tenant
        operators = frozenset(t.strip() for t in os.environ.get("RUNWRIGHT_OPERATOR_TOKENS", "").split(",")
                              if t.strip())
        if operators & set(tokens):
            raise ConfigError("a token is both a tenant's (RUNWRIGHT_TOKENS) and the operator's "
                              "(RUNWRIGHT_OPERATOR_TOKENS); give each its own")
        if not tokens and not operators:
            if host is not None and is_loopback(host):
                one_off = secrets.token_urlsafe(32)
                return cls(operators=frozenset({one_off}), one_off=one_off)
            where = f" for a server on {host}, which is not a loopback address" if host is not None else ""
            raise ConfigError(f"no API tokens{where}: {SETTINGS_HINT}"
                              + (" (on 127.0.0.1 a one-off token is made and printed)" if host else ""))
        return cls(tokens, operators=operators)

    def who(self, authorization: str | None, address: str) -> str:
        """The operator behind a request, for an audit line: its token's fingerprint (never
        the token), or, with auth off, where the request came from."""
        from ._decode import token_fingerprint

        if not self.enabled:
            return f"anyone at {address} (auth off)"
        return f"operator token {token_fingerprint((authorization or '').partition(' ')[2].strip())}"

    def tenant_of(self, authorization: str | None) -> str | None | bool:
        """The caller's tenant (None: the operator); False when the credentials are missing
        or wrong."""
        if not self.enabled:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        # Compared as bytes: compare_digest refuses a str with non-ASCII characters, and a
        # token typed into the sign-in form may hold any.
        given = token.strip().encode()
        found: str | None | bool = False
        for known, tenant in self.tokens.items():  # every one compared: no timing hints
            if hmac.compare_digest(known.encode(), given):
                found = tenant
        for known in self.operators:
            if hmac.compare_digest(known.encode(), given):
                found = None
        return found


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (127.0.0.0/8, ::1): only this
    machine can reach a server there. A name that does not resolve is not."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback
                               for info in found)
