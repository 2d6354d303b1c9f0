"""Bearer tokens mapped to tenants, and the operator's tokens. A tenant sees only its own
runs; another tenant's run answers 404, exactly like a run that does not exist, so ids
cannot be probed. An operator token acts as the deployment itself: every run, and what
is the deployment's alone (its schedules, the metrics over every tenant's runs)."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field

from ..errors import ConfigError

__all__ = ["Auth"]


@dataclass(frozen=True)
class Auth:
    """`tokens` maps token -> tenant; `operators` are the operator's tokens (tenant None).
    `enabled=False` serves everyone as the operator (local use only; the server says so
    loudly at start)."""

    tokens: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    operators: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls) -> Auth:
        """RUNWRIGHT_TOKENS="token1=tenant-a,token2=tenant-b", RUNWRIGHT_OPERATOR_TOKENS=
        "token3,..."; RUNWRIGHT_AUTH=off disables."""
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
            raise ConfigError("no API tokens: set RUNWRIGHT_TOKENS=token=tenant[,...] (and "
                              "RUNWRIGHT_OPERATOR_TOKENS=token[,...]), or RUNWRIGHT_AUTH=off for "
                              "local use without auth")
        return cls(tokens, operators=operators)

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
