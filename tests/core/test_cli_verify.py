"""``checkpointkit verify`` and ``checkpointkit rekey`` over a real file store.

Driven through :func:`checkpointkit.cli.invoke` with captured streams; keys come from a
keys file (or ``--codec``), never from the command line.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.cli import Output as CliOutput
from checkpointkit.cli import RecordProgress, invoke
from checkpointkit.codec import Codec
from checkpointkit.crypto import Encryption
from checkpointkit.envelope import read_header
from checkpointkit.store import CheckpointStore, StepRecord
from checkpointkit.verify import Progress

pytest.importorskip("cryptography")

OLD = bytes(range(32))
NEW = bytes(range(100, 132))


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.pop("CHECKPOINTKIT_KEYS", None)
    os.environ.update(env or {})
    try:
        code = invoke(list(args), stdin=io.StringIO(), stdout=out, stderr=err)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Result(code, out.getvalue(), err.getvalue())


def assert_one_line_error(result: Result, code: int, *needles: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def keys_file(tmp_path: Path, active: str, **keys: bytes) -> str:
    path = tmp_path / f"keys-{active}-{'-'.join(keys)}.json"
    doc = {"active": active, "keys": {k: base64.b64encode(v).decode() for k, v in keys.items()}}
    path.write_text(json.dumps(doc))
    return str(path)


async def _make_store(root: Path, codec: Codec | None, runs: int = 2) -> None:
    async with FileStorage(root) as storage:
        store = CheckpointStore(storage, codec=codec)
        for n in range(runs):
            run_id = f"run-{n}"
            await store.create_run(run_id, {"secret": f"secret {n}"})
            record = StepRecord("s@0", {"n": n}, fingerprint="f", seq=1)
            await store.save_step(run_id, "s@0", store.encode_step(record, run_id=run_id))
            await store.save_checkpoint(run_id, status="completed", state={"n": n})


def make_store(tmp_path: Path, codec: Codec | None = None) -> str:
    root = tmp_path / "store"
    root.mkdir()
    asyncio.run(_make_store(root, codec))
    return str(root)


async def _flip(url: str) -> str:
    async with FileStorage(Path(url)) as storage:
        keys = [k async for k in storage.list("runs/run-1/c/")]
        key = keys[0]
        data = bytearray((await storage.get(key)).data)
        data[-1] ^= 1
        await storage.put(key, bytes(data))
        return key


def flip_a_byte(url: str) -> str:
    """Flip the last byte of run-1's checkpoint; return its key."""
    return asyncio.run(_flip(url))


async def _key_ids(url: str) -> set[str | None]:
    async with FileStorage(Path(url)) as storage:
        return {
            read_header((await storage.get(key)).data, key=key).key_id
            async for key in storage.list("runs/")
        }


def key_ids(url: str) -> set[str | None]:
    """The key ids of every record of the store (None: not encrypted)."""
    return asyncio.run(_key_ids(url))


# -- verify ------------------------------------------------------------------------------------
def test_verify_of_a_sound_store_exits_0_and_prints_one_json_document(tmp_path: Path) -> None:
    url = make_store(tmp_path)
    text = cli("verify", url)
    assert text.exit_code == 0, text.stderr
    assert text.stdout.startswith("ok: ") and "0 damaged" in text.stdout
    result = cli("verify", url, "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert set(doc) == {
        "storage",
        "namespace",
        "ok",
        "records",
        "runs",
        "damaged",
        "warnings",
        "findings",
    }
    assert doc["ok"] is True and doc["runs"] == 2 and doc["records"] >= 8
    assert doc["storage"] == url


def test_verify_exits_1_and_names_the_damaged_record(tmp_path: Path) -> None:
    url = make_store(tmp_path)
    key = flip_a_byte(url)
    text = cli("verify", "--storage", url)
    assert text.exit_code == 1
    assert text.stdout.startswith("DAMAGED: ") and "1 damaged" in text.stdout
    assert any("corrupted" in line and key in line for line in text.stdout.splitlines())
    doc = json.loads(cli("verify", url, "--json").stdout)
    assert doc["ok"] is False
    assert [(f["key"], f["kind"], f["severity"]) for f in doc["findings"]] == [
        (key, "corrupted", "damage")
    ]


def test_verify_prints_a_progress_line_outside_a_terminal(tmp_path: Path) -> None:
    url = make_store(tmp_path)
    result = cli("verify", url, "--json")
    assert result.stderr.splitlines()[0].startswith("verifying ")
    assert result.stderr.splitlines()[0].endswith(" records")
    json.loads(result.stdout)  # progress never reaches the document


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_record_progress_redraws_on_a_terminal_and_prints_lines_every_interval() -> None:
    now = [0.0]
    lines = io.StringIO()
    progress = RecordProgress(CliOutput(stderr=lines), "verifying", clock=lambda: now[0])
    for done in range(1, 5):
        now[0] += 6.0  # a line at most every 10 s: after the first, at 18 s (not at 12 or 24)
        progress(Progress(done, 4, 0, 0))
    assert lines.getvalue().splitlines() == ["verifying 4 records", "verifying: 3/4 records, 18 s"]
    live = Terminal()
    shown = RecordProgress(CliOutput(stderr=live), "rekeying")
    shown(Progress(1, 2, 1, 0))
    shown.close()
    assert live.getvalue() == "\r\x1b[Krekeying: 1/2 records, 1 rewritten\r\x1b[K"


def test_verify_reads_an_encrypted_store_with_its_keys_file(tmp_path: Path) -> None:
    url = make_store(tmp_path, Codec(encryption=Encryption({"old": OLD}, active="old")))
    without = json.loads(cli("verify", url, "--json").stdout)
    assert without["ok"] is False and {f["kind"] for f in without["findings"]} == {"undecryptable"}
    keys = keys_file(tmp_path, "old", old=OLD)
    assert cli("verify", url, "--keys", keys).exit_code == 0
    assert cli("verify", url, env={"CHECKPOINTKIT_KEYS": keys}).exit_code == 0


def test_verify_accepts_the_applications_codec_by_module_and_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = make_store(tmp_path, Codec(encryption=Encryption({"old": OLD}, active="old")))
    (tmp_path / "app_codec.py").write_text(
        "from checkpointkit.codec import Codec\n"
        "from checkpointkit.crypto import Encryption\n"
        f"def codec() -> Codec:\n    return Codec(encryption=Encryption({{'old': {OLD!r}}}, "
        "active='old'))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli("verify", url, "--codec", "app_codec:codec").exit_code == 0
    assert_one_line_error(cli("verify", url, "--codec", "app_codec:nope"), 2, "has no 'nope'")
    assert_one_line_error(cli("verify", url, "--codec", "app_codec"), 2, "MODULE:NAME")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "cannot read the keys file"),
        ("{not json", "is not JSON"),
        ('{"keys": {}}', 'must hold {"active": ID'),
        ('{"active": "a", "keys": {"a": "!!!not base64"}}', "key of id 'a' is not base64"),
        ('{"active": "b", "keys": {"a": "' + base64.b64encode(OLD).decode() + '"}}', "'b'"),
        ('{"active": "a", "keys": {"a": "' + base64.b64encode(b"short").decode() + '"}}', "'a'"),
    ],
)
def test_a_bad_keys_file_is_a_usage_error_that_never_shows_a_key(
    tmp_path: Path, content: str | None, needle: str
) -> None:
    url = make_store(tmp_path)
    path = tmp_path / "keys.json"
    if content is not None:
        path.write_text(content)
    for command in (["verify"], ["rekey", "--yes"]):
        result = cli(*command, url, "--keys", str(path))
        assert_one_line_error(result, 2, str(path), needle)
        assert base64.b64encode(OLD).decode() not in result.stderr + result.stdout


def test_url_and_storage_naming_two_storages_is_a_usage_error(tmp_path: Path) -> None:
    url = make_store(tmp_path)
    assert_one_line_error(cli("verify", url, "--storage", "/elsewhere"), 2, "two storages")


# -- rekey -------------------------------------------------------------------------------------
def test_rekey_moves_every_record_to_the_active_key_and_verify_agrees(tmp_path: Path) -> None:
    url = make_store(tmp_path, Codec(encryption=Encryption({"old": OLD}, active="old")))
    rotated = keys_file(tmp_path, "new", old=OLD, new=NEW)
    plan = json.loads(cli("rekey", url, "--keys", rotated, "--dry-run", "--json").stdout)
    assert plan["dry_run"] is True and plan["current"] == 0 and plan["to_rewrite"] >= 8
    assert key_ids(url) == {"old"}  # a dry run changes nothing
    result = cli("rekey", url, "--keys", rotated, "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["complete"] is True and doc["key_id"] == "new"
    assert doc["rewritten"] == plan["to_rewrite"] and doc["failures"] == []
    assert key_ids(url) == {"new"}
    assert cli("verify", url, "--keys", keys_file(tmp_path, "new", new=NEW)).exit_code == 0
    again = cli("rekey", url, "--keys", rotated, "--yes")
    assert again.exit_code == 0 and "0 record(s) rewritten" in again.stdout


def test_rekey_exits_1_when_a_damaged_record_is_left_behind(tmp_path: Path) -> None:
    url = make_store(tmp_path, Codec(encryption=Encryption({"old": OLD}, active="old")))
    key = flip_a_byte(url)
    rotated = keys_file(tmp_path, "new", old=OLD, new=NEW)
    text = cli("rekey", url, "--keys", rotated, "--yes")
    assert text.exit_code == 1
    assert "rekey INCOMPLETE" in text.stdout and "keep the old keys" in text.stdout
    doc = json.loads(cli("rekey", url, "--keys", rotated, "--yes", "--json").stdout)
    assert doc["complete"] is False and [f["key"] for f in doc["failures"]] == [key]


def test_rekey_asks_first_and_needs_keys(tmp_path: Path) -> None:
    url = make_store(tmp_path, Codec(encryption=Encryption({"old": OLD}, active="old")))
    rotated = keys_file(tmp_path, "new", old=OLD, new=NEW)
    assert_one_line_error(cli("rekey", url, "--keys", rotated), 2, "pass --yes")
    assert key_ids(url) == {"old"}
    assert_one_line_error(cli("rekey", url, "--yes"), 2, "rekey needs the encryption keys")


def test_rekey_encrypts_plaintext_records_only_with_allow_plaintext(tmp_path: Path) -> None:
    url = make_store(tmp_path)  # written before encryption was turned on
    keys = keys_file(tmp_path, "new", new=NEW)
    result = cli("rekey", url, "--keys", keys, "--yes", "--json")
    refused: dict[str, Any] = json.loads(result.stdout)
    assert refused["complete"] is False and refused["rewritten"] == 0
    assert {f["kind"] for f in refused["failures"]} == {"plaintext"}
    done = cli("rekey", url, "--keys", keys, "--allow-plaintext", "--yes")
    assert done.exit_code == 0, done.stdout
    assert key_ids(url) == {"new"}


def test_verify_of_an_empty_store_says_so_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    text = cli("verify", str(tmp_path / "empty"))
    assert text.exit_code == 1
    assert (
        "no checkpointkit runs, LangGraph threads or agent-framework workflows found under "
        "the store's root: it holds no key at all"
    ) in text.stderr
    assert not text.stdout.startswith("ok")
    doc = json.loads(cli("verify", str(tmp_path / "empty"), "--json").stdout)
    assert doc["ok"] is False and doc["unrecognised"]["keys"] == 0


def test_verify_of_keys_it_does_not_recognise_names_them_and_exits_1(tmp_path: Path) -> None:
    async def put() -> None:
        async with FileStorage(tmp_path / "other") as storage:
            await storage.put("reports/2026/q1", b"not a checkpoint", mode="create")
            await storage.put("c/loose", b"looks like a LangGraph prefix, is not", mode="create")

    asyncio.run(put())
    text = cli("verify", str(tmp_path / "other"))
    assert text.exit_code == 1 and not text.stdout
    assert "found under the store's root: it holds 2 key(s)" in text.stderr
    assert "'c', 'reports'" in text.stderr
    doc = json.loads(cli("verify", str(tmp_path / "other"), "--json").stdout)
    assert doc["ok"] is False and doc["unrecognised"]["keys"] == 2


def test_verify_of_langgraph_data_only_checks_its_records_and_exits_0(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from checkpointkit.integrations.langgraph import CheckpointkitSaver
    from langgraph.checkpoint.base import empty_checkpoint

    url = f"sqlite:///{tmp_path}/lg.db"

    async def save() -> None:
        async with CheckpointkitSaver.from_url(url) as saver:
            config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
            await saver.aput(config, empty_checkpoint(), {"step": 0}, {})

    asyncio.run(save())
    text = cli("verify", url)
    assert text.exit_code == 0, text.stdout + text.stderr
    assert text.stdout.startswith("ok: 1 record(s) of 0 run(s), 1 LangGraph thread(s), 0 damaged")
    doc = json.loads(cli("verify", url, "--json").stdout)
    assert doc["ok"] is True and doc["runs"] == 0 and doc["threads"] == 1
    assert doc["records"] == 1 and "unrecognised" not in doc and "workflows" not in doc
