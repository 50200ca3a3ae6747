"""Each storage's client is built from a session of its own that shares the process's
botocore data loader (the S3 model parsed once, not once per storage), and its connections
share one SSL context per CA bundle (the bundle parsed once), unless the client presents a
certificate of its own. Its endpoint is resolved once per bucket and operation, not once
per key."""

from __future__ import annotations

import json
import shutil
import ssl
from pathlib import Path
from typing import Any

import botocore.endpoint_provider
import certifi
import pytest
from checkpointkit.adapters.s3 import S3Storage, _rule_parameters


def _storage(n: int) -> S3Storage:
    return S3Storage(
        f"bucket-{n}",
        endpoint_url="http://127.0.0.1:1",  # nothing answers: opening sends no request
        access_key_id=f"AKIA{n:016d}",
        secret_access_key=f"secret-{n}",
    )


async def test_storages_share_one_data_loader_and_keep_their_own_credentials() -> None:
    clients, loaders = [], []
    for n in range(3):
        storage = _storage(n)
        try:
            client = await storage._open()
            credentials = client._get_credentials()
            clients.append((credentials.access_key, credentials.secret_key))
            loaders.append(client._loader)
        finally:
            await storage.aclose()
    assert clients == [(f"AKIA{n:016d}", f"secret-{n}") for n in range(3)]
    assert loaders[0] is loaders[1] is loaders[2]
    paths = list(loaders[0].search_paths)
    storage = _storage(9)
    try:
        await storage._open()
    finally:
        await storage.aclose()
    assert loaders[0].search_paths == paths  # opening a storage adds no search path


async def _ssl_context_of(storage: S3Storage, **changes: Any) -> ssl.SSLContext:
    """The SSL context that the storage's client makes its connector with (``changes``: of
    its aiobotocore session first)."""
    client = await storage._open()
    session = client._endpoint.http_session
    for name, value in changes.items():
        setattr(session, name, value)
    made: list[ssl.SSLContext] = []
    get = session._get_ssl_context

    def spy() -> ssl.SSLContext:
        made.append(get())
        return made[-1]

    session._get_ssl_context = spy
    try:
        connector = session._create_connector(None)
    except FileNotFoundError:  # the client certificate of the test does not exist
        return made[-1]
    await connector.close()
    assert connector._ssl is made[-1]
    return made[-1]


async def test_storages_share_one_ssl_context_per_ca_bundle_unless_they_show_a_certificate(
    tmp_path: Path,
) -> None:
    bundle = tmp_path / "ca.pem"  # a CA bundle of its own: another path
    shutil.copyfile(certifi.where(), bundle)
    changes: list[dict[str, Any]] = [
        {},
        {},
        {},
        {"_verify": str(bundle)},
        {"_cert_file": str(tmp_path / "client.pem")},  # goes into the context: never shared
    ]
    contexts = []
    for n, change in enumerate(changes):
        storage = _storage(n)
        try:
            contexts.append(await _ssl_context_of(storage, **change))
        finally:
            await storage.aclose()
    first, second, third, own_bundle, with_certificate = contexts
    assert first is second is third
    assert own_bundle is not first and own_bundle is not with_certificate
    assert with_certificate is not first
    assert type(with_certificate) is ssl.SSLContext  # a context of its own, as botocore makes
    assert first.verify_mode == ssl.CERT_REQUIRED
    assert first.cert_store_stats()["x509_ca"] > 0  # the bundle is loaded


def test_the_rule_walk_finds_references_and_template_parameters() -> None:
    rules = [
        {
            "conditions": [{"fn": "isSet", "argv": [{"ref": "Bucket"}]}],
            "endpoint": {"url": "https://{Region}.example/{url#path}", "headers": {}},
            "type": "endpoint",
        },
        {"conditions": [], "error": "no {Endpoint} here", "type": "error"},
    ]
    assert _rule_parameters(rules, set()) == {"Bucket", "Region", "url", "Endpoint"}


async def test_the_client_passes_the_endpoint_rules_only_the_parameters_they_read() -> None:
    storage = _storage(1)
    try:
        client = await storage._open()
        passed = set(client._ruleset_resolver._param_definitions)
        ruleset = client._loader.load_service_model("s3", "endpoint-rule-set-1")
    finally:
        await storage.aclose()
    declared = set(ruleset["parameters"])
    text = json.dumps(ruleset["rules"])
    dropped = declared - passed
    # botocore 1.40.61's S3 rules declare these three and never read them
    assert {"Key", "Prefix", "CopySource"} <= dropped
    for name in dropped:  # nothing the rules read is dropped
        assert f'"ref": "{name}"' not in text and "{" + name not in text
    assert {"Bucket", "Region", "Endpoint", "ForcePathStyle"} <= passed


async def test_the_rules_are_walked_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import checkpointkit.adapters.s3 as s3_module

    storage = _storage(2)
    try:
        await storage._open()  # walks the rules unless a storage of this process did
    finally:
        await storage.aclose()
    walked: list[object] = []
    walk = s3_module._rule_parameters

    def counted(node: object, found: set[str]) -> set[str]:
        walked.append(node)
        return walk(node, found)

    monkeypatch.setattr(s3_module, "_rule_parameters", counted)
    for n in (3, 4):
        storage = _storage(n)
        try:
            client = await storage._open()
        finally:
            await storage.aclose()
        assert "Key" not in client._ruleset_resolver._param_definitions
    assert walked == []


async def test_requests_for_new_keys_resolve_the_endpoint_once_per_operation(
    s3: S3Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluated: list[str] = []
    evaluate = botocore.endpoint_provider.RuleSet.evaluate

    def counted(self: Any, input_parameters: dict[str, Any]) -> Any:
        evaluated.append(str(sorted(input_parameters)))
        return evaluate(self, input_parameters)

    monkeypatch.setattr(botocore.endpoint_provider.RuleSet, "evaluate", counted)

    async def each_operation(key: str) -> None:
        version = await s3.put(key, b"v")
        await s3.get(key)
        assert [k async for k in s3.list(key)] == [key]
        assert await s3.delete(key, if_match=version)

    await each_operation("warm-up")
    assert evaluated  # the first call of each operation evaluates the rules
    evaluated.clear()
    for n in range(10):
        await each_operation(f"runs/r{n}/step")
    assert evaluated == []
