"""Bearer tokens mapped to tenants. A tenant sees only its own runs; another tenant's run
answers 404, exactly like a run that does not exist, so ids cannot be probed."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field

from ..errors import ConfigError

__all__ = ["Auth"]


@dataclass(frozen=True)
class Auth:
    """`tokens` maps token -> tenant. `enabled=False` serves everyone as tenant None
    (local use only; the server says so loudly at start)."""

    tokens: dict[str, str] = field(default_factory=dict)
    enabled: bool = True

    @classmethod
    def from_env(cls) -> Auth:
        """RUNWRIGHT_TOKENS="token1=tenant-a,token2=tenant-b"; RUNWRIGHT_AUTH=off disables."""
        if os.environ.get("RUNWRIGHT_AUTH", "on").lower() in ("off", "0", "false", "no"):
            return cls(enabled=False)
        tokens = {}
        for item in filter(None, os.environ.get("RUNWRIGHT_TOKENS", "").split(",")):
            token, sep, tenant = item.strip().partition("=")
            if not sep or not token or not tenant:
                raise ConfigError("RUNWRIGHT_TOKENS must read token=tenant[,token=tenant...]")
            tokens[token] = tenant
        if not tokens:
            raise ConfigError("no API tokens: set RUNWRIGHT_TOKENS=token=tenant[,...], or "
                              "RUNWRIGHT_AUTH=off for local use without auth")
        return cls(tokens)

    def tenant_of(self, authorization: str | None) -> str | None | bool:
        """The caller's tenant; False when the credentials are missing or wrong."""
        if not self.enabled:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        for known, tenant in self.tokens.items():
            if hmac.compare_digest(known, token.strip()):  # no timing hints about tokens
                return tenant
        return False
