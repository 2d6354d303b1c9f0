"""The operator's outbound policy: which addresses are public, and what the settings allow."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from runwright.errors import ConfigError
from runwright.jobs._addresses import refusal
from runwright.jobs._outbound import OutboundPolicy, UnknownSecret


@pytest.mark.parametrize("text", ["8.8.8.8", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1",
                                  "::ffff:8.8.8.8"])
def test_public_addresses_pass(text):
    assert refusal(ip_address(text)) is None


@pytest.mark.parametrize("text", ["127.0.0.1", "10.0.0.1", "169.254.169.254", "::1", "fe80::1", "fc00::1",
                                  "224.0.0.1", "64:ff9b::7f00:1", "64:ff9b::c0a8:101", "2002:7f00:1::",
                                  "2002:ac10:1::1", "::ffff:10.0.0.1", "::7f00:1", "64:ff9b:1::808:808",
                                  "2001::1"])
def test_private_addresses_and_those_embedding_one_are_refused(text):
    assert refusal(ip_address(text)) is not None


def test_the_allow_list_holds_networks_and_host_names():
    policy = OutboundPolicy.from_env({"RUNWRIGHT_WEBHOOK_ALLOW": "127.0.0.1, 10.0.0.0/8,Hooks.Internal."})
    assert policy.allows("x", ip_address("127.0.0.1")) and policy.allows("x", ip_address("10.9.8.7"))
    assert policy.allows("x", ip_address("::ffff:127.0.0.1"))  # judged by what it embeds
    assert policy.allows("x", ip_address("64:ff9b::a00:1"))
    assert policy.allows("hooks.internal", ip_address("192.168.1.1"))
    assert not policy.allows("x", ip_address("192.168.1.1"))
    assert not OutboundPolicy.from_env({}).allows("localhost", ip_address("127.0.0.1"))


def test_secrets_are_named_by_the_operator():
    environ = {"RUNWRIGHT_WEBHOOK_SECRET": "d", "RUNWRIGHT_WEBHOOK_SECRETS": "crm=CRM_KEY,gone=GONE_KEY",
               "CRM_KEY": "c", "HOME": "/root"}
    policy = OutboundPolicy.from_env(environ)
    assert policy.secret(None, environ) == "d" and policy.secret("default", environ) == "d"
    assert policy.secret("crm", environ) == "c"
    with pytest.raises(UnknownSecret, match="'HOME' is not one of"):
        policy.secret("HOME", environ)
    with pytest.raises(ConfigError, match="GONE_KEY is not set"):
        policy.secret("gone", environ)
    assert OutboundPolicy.from_env({}).secret(None, {}) is None  # unsigned


@pytest.mark.parametrize("setting,value", [("RUNWRIGHT_WEBHOOK_SECRETS", "crm"),
                                           ("RUNWRIGHT_WEBHOOK_SECRETS", "crm=1BAD"),
                                           ("RUNWRIGHT_WEBHOOK_SECRETS", "=CRM_KEY"),
                                           ("RUNWRIGHT_WEBHOOK_ALLOW", "10.0.0.0/33x"),
                                           ("RUNWRIGHT_WEBHOOK_ALLOW", "http://x")])
def test_a_malformed_setting_is_named(setting, value):
    with pytest.raises(ConfigError, match=setting):
        OutboundPolicy.from_env({setting: value})
