"""The operator's settings for outbound calls (the webhook job and the llm job's callback).

Both are read from the environment of the worker that makes the call, never from a job's
arguments: what signs a body and which private hosts may be called are the operator's,
and a submitter can only pick a signing secret by the name the operator gave it.

- `RUNWRIGHT_WEBHOOK_SECRETS="billing=BILLING_HOOK_KEY,crm=CRM_HOOK_KEY"`: named signing
  secrets, each read from the environment variable it names. `RUNWRIGHT_WEBHOOK_SECRET`
  (one variable holding the key itself) is the secret named `default`, which signs a call
  that names none. Defaults to no secrets (calls go unsigned).
- `RUNWRIGHT_WEBHOOK_ALLOW="127.0.0.1,10.0.0.0/8,::1,hooks.internal"`: private targets the
  operator allows, as addresses, networks (CIDR) or host names (a host name listed here
  may resolve to anything). Defaults to none: only public addresses are called.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import ConfigError
from ._addresses import Address, Network, within

__all__ = ["ALLOW_ENV", "DEFAULT_SECRET", "DEFAULT_SECRET_ENV", "SECRETS_ENV", "OutboundPolicy",
           "UnknownSecret"]

SECRETS_ENV = "RUNWRIGHT_WEBHOOK_SECRETS"
DEFAULT_SECRET_ENV = "RUNWRIGHT_WEBHOOK_SECRET"
DEFAULT_SECRET = "default"
ALLOW_ENV = "RUNWRIGHT_WEBHOOK_ALLOW"
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST = re.compile(r"[a-z0-9]([a-z0-9\-.]*[a-z0-9])?")


class UnknownSecret(LookupError):
    """A signing secret named by a submitter that the operator did not configure."""


@dataclass(frozen=True)
class OutboundPolicy:
    """Named signing secrets (name -> environment variable) and the allowed private targets."""

    secrets: Mapping[str, str] = field(default_factory=dict)
    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> OutboundPolicy:
        """The policy the environment configures (ConfigError, naming the setting, if malformed)."""
        networks, hosts = _allow_list(environ.get(ALLOW_ENV, ""))
        return cls(_secrets(environ), networks, hosts)

    def secret(self, name: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
        """The key that signs a call naming secret `name` (None: the default one, if any)."""
        if name is None:
            variable = self.secrets.get(DEFAULT_SECRET)
            return (environ.get(variable) or None) if variable else None  # unsigned without one
        variable = self.secrets.get(name)
        if variable is None:
            raise UnknownSecret(f"secret {name!r} is not one of the signing secrets the operator "
                                f"configured ({SECRETS_ENV} on the worker)")
        value = environ.get(variable)
        if not value:
            raise ConfigError(f"secret {name!r} is configured ({SECRETS_ENV}) but its variable "
                              f"{variable} is not set on this worker")
        return value

    def allows(self, hostname: str, address: Address) -> bool:
        """True when the operator allows calling `address` (which `hostname` resolved to)."""
        return hostname.lower().rstrip(".") in self.hosts or within(address, self.networks)


def _secrets(environ: Mapping[str, str]) -> dict[str, str]:
    secrets = {DEFAULT_SECRET: DEFAULT_SECRET_ENV} if environ.get(DEFAULT_SECRET_ENV) else {}
    for item in filter(None, (part.strip() for part in environ.get(SECRETS_ENV, "").split(","))):
        name, sep, variable = (side.strip() for side in item.partition("="))
        if not sep or not _NAME.fullmatch(name) or not _VARIABLE.fullmatch(variable):
            raise ConfigError(f"{SECRETS_ENV} must read name=ENV_VARIABLE[,name=ENV_VARIABLE...] "
                              f"(names of letters, digits, '_', '.', '-'), got {item!r}")
        secrets[name] = variable
    return secrets


def _allow_list(text: str) -> tuple[tuple[Network, ...], frozenset[str]]:
    networks: list[Network] = []
    hosts: set[str] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
            continue
        except ValueError:
            pass
        host = item.lower().rstrip(".")
        if not _HOST.fullmatch(host):
            raise ConfigError(f"{ALLOW_ENV} must list addresses, networks (CIDR) or host names, "
                              f"comma-separated; {item!r} is none of them")
        hosts.add(host)
    return tuple(networks), frozenset(hosts)
