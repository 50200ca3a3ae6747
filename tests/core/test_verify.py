"""Integrity you can rely on (issue 13): records bound to their key, corruption as one error
type, plaintext refused under encryption, and verify/rekey over a whole store.

The attacker of these tests can write to the storage (copy, replace, plant, flip bits) but
does not hold the encryption keys.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from checkpointkit import (
    CheckpointCorrupted,
    ConfigurationError,
    DecryptionError,
)
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.codec import Codec
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.crypto import Encryption
from checkpointkit.envelope import read_header
from checkpointkit.runner import Workflow, step
from checkpointkit.storage import Capabilities, IfMatch, PutMode, Storage
from checkpointkit.store import CheckpointStore, StepRecord
from checkpointkit.verify import Progress, rekey, verify

OLD = bytes(range(32))
NEW = bytes(range(100, 132))


def old_codec(**options: Any) -> Codec:
    return Codec(encryption=Encryption({"old": OLD}, active="old", **options))


def rotated_codec(**options: Any) -> Codec:
    return Codec(encryption=Encryption({"old": OLD, "new": NEW}, active="new", **options))


def new_only_codec(**options: Any) -> Codec:
    return Codec(encryption=Encryption({"new": NEW}, active="new", **options))


async def make_run(store: CheckpointStore, run_id: str, *, checkpoints: int = 3) -> None:
    """A run with an input, two step records, a response and ``checkpoints`` checkpoints."""
    await store.create_run(run_id, {"secret": f"secret of {run_id}"})
    lease = await store.acquire(run_id)
    for i in range(2):
        record = StepRecord(f"s@{i}", {"i": i, "run": run_id}, fingerprint="f", seq=i + 1)
        await store.save_step(run_id, record.step, store.encode_step(record, run_id=run_id))
    await store.save_response(run_id, "q1", f"answer of {run_id}")
    for i in range(1, checkpoints + 1):
        _, new_lease = await store.save_checkpoint(
            run_id, status="paused", state={"n": i, "run": run_id}, lease=lease
        )
        assert new_lease is not None
        lease = new_lease
    await store.release(lease)


async def copy(storage: Storage, source: str, target: str) -> None:
    await storage.put(target, (await storage.get(source)).data)


async def flip_last_byte(storage: Storage, key: str) -> None:
    data = bytearray((await storage.get(key)).data)
    data[-1] ^= 0x01
    await storage.put(key, bytes(data))


def checkpoint_key(store: CheckpointStore, run_id: str, seq: int) -> str:
    return f"{store.run_prefix(run_id)}c/{2**64 - 1 - seq:016x}"


def kinds(report: Any) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for finding in report.findings:
        found.setdefault(finding.key, set()).add(f"{finding.severity}:{finding.kind}")
    return found


@pytest.fixture
async def storage() -> AsyncIterator[MemoryStorage]:
    async with MemoryStorage() as s:
        yield s


# -- 1. records bound to their key -----------------------------------------------------------


async def test_checkpoint_copied_between_runs_is_corrupted(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage, namespace="app")
    await make_run(store, "A")
    await make_run(store, "F")
    a3, f3 = checkpoint_key(store, "A", 3), checkpoint_key(store, "F", 3)
    await copy(storage, a3, f3)
    with pytest.raises(CheckpointCorrupted) as info:
        await store.latest("F")
    assert f"the envelope at key {f3!r} does not belong there" in str(info.value)
    with pytest.raises(CheckpointCorrupted, match="does not belong"):
        await store.load_checkpoint("F", "3")
    report = await verify(store)
    [finding] = [f for f in report.findings if f.key == f3]
    assert (finding.kind, finding.severity, finding.written_for) == ("misplaced", "damage", a3)
    assert a3 in finding.message and not report.ok


async def test_older_checkpoint_copied_over_the_newest_is_corrupted(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage)
    await make_run(store, "A")
    c1, c3 = checkpoint_key(store, "A", 1), checkpoint_key(store, "A", 3)
    await copy(storage, c1, c3)
    with pytest.raises(CheckpointCorrupted, match="does not belong"):
        await store.latest("A")
    report = await verify(store)
    assert "damage:misplaced" in kinds(report)[c3]
    assert [f.written_for for f in report.findings if f.key == c3] == [c1]


async def test_checkpoint_rolled_back_is_refused_by_latest_and_found_by_verify(
    storage: MemoryStorage,
) -> None:
    # A writer without keys re-seals checkpoint 1's content as checkpoint 3 (clear store):
    # key binding holds (it is sealed for its key); only the run head's digest tells.
    store = CheckpointStore(storage)
    await make_run(store, "A")
    c1, c3 = checkpoint_key(store, "A", 1), checkpoint_key(store, "A", 3)
    body = Codec().decode((await storage.get(c1)).data, key=c1)
    await storage.put(c3, Codec().encode({**body, "id": "3"}, key=c3))
    with pytest.raises(CheckpointCorrupted, match="rolled back"):
        await store.latest("A")
    report = await verify(store)
    assert "damage:head" in kinds(report)[f"{store.run_prefix('A')}head"]
    assert not report.ok


async def test_head_rolled_back_behind_its_checkpoints_is_found_by_verify(
    storage: MemoryStorage,
) -> None:
    store = CheckpointStore(storage)
    head = f"{store.run_prefix('A')}head"
    await store.create_run("A", None)
    await store.save_checkpoint("A", status="paused", state={"n": 1})
    old_head = (await storage.get(head)).data
    await store.save_checkpoint("A", status="paused", state={"n": 2})
    await store.save_checkpoint("A", status="paused", state={"n": 3})
    await storage.put(head, old_head)  # replayed: bound to its key, valid digest of c/1
    report = await verify(store)
    [finding] = [f for f in report.findings if f.key == head]
    assert (finding.kind, finding.severity) == ("head", "damage")
    assert "rolled back" in finding.message and "checkpoint 3 exists" in finding.message


async def test_encrypted_input_moved_between_runs_is_refused(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    await make_run(store, "X")
    await make_run(store, "Y")
    x_input, y_input = f"{store.run_prefix('X')}input", f"{store.run_prefix('Y')}input"
    await copy(storage, x_input, y_input)
    with pytest.raises(CheckpointCorrupted) as info:
        await store.load_input("Y")
    assert y_input in str(info.value) and "secret of X" not in str(info.value)
    report = await verify(store)
    [finding] = [f for f in report.findings if f.key == y_input]
    assert (finding.kind, finding.written_for) == ("misplaced", x_input)


async def test_response_moved_between_runs_is_refused(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    await make_run(store, "X")
    await make_run(store, "Y")
    await copy(storage, f"{store.run_prefix('X')}r/q1", f"{store.run_prefix('Y')}r/q1")
    with pytest.raises(CheckpointCorrupted, match="does not belong"):
        await store.load_responses("Y")


# -- 3. one error type -----------------------------------------------------------------------


async def test_corrupted_step_record_under_resume_raises_checkpoint_corrupted(
    storage: MemoryStorage,
) -> None:
    crash = True

    @step(name="one")
    async def one(x: int) -> int:
        return x + 1

    @step(name="two")
    async def two(x: int) -> int:
        return x * 10

    @step(name="three")
    async def three(x: int) -> int:
        if crash:
            raise RuntimeError("crash")
        return x

    async def main(x: int) -> int:
        return await three(await two(await one(x)))

    wf = Workflow(main, storage=storage)
    with pytest.raises(RuntimeError, match="crash"):
        await wf.run(1, run_id="r1")
    key = wf.store.step_key("r1", "one@0")
    await flip_last_byte(storage, key)
    crash = False
    with pytest.raises(CheckpointCorrupted) as info:
        await wf.resume("r1")
    assert key in str(info.value)
    report = await verify(wf.store)
    assert kinds(report)[key] == {"damage:corrupted"}


async def test_several_corrupted_step_records_raise_one_checkpoint_corrupted(
    storage: MemoryStorage,
) -> None:
    store = CheckpointStore(storage)
    await make_run(store, "A")
    for i in range(2):
        await flip_last_byte(storage, store.step_key("A", f"s@{i}"))
    with pytest.raises(CheckpointCorrupted) as info:  # not an ExceptionGroup around it
        await store.load_steps("A")
    assert type(info.value) is CheckpointCorrupted
    assert any(store.step_key("A", f"s@{i}") in str(info.value) for i in range(2))


@pytest.mark.parametrize(
    ("suffix", "read"),
    [
        ("input", lambda s: s.load_input("A")),
        ("s/s@1", lambda s: s.load_steps("A")),
        ("r/q1", lambda s: s.load_responses("A")),
        ("c/fffffffffffffffc", lambda s: s.latest("A")),
        ("c/fffffffffffffffc", lambda s: s.load_checkpoint("A", "3")),
        ("head", lambda s: s.latest("A")),
    ],
)
async def test_every_read_path_raises_checkpoint_corrupted_naming_the_key(
    storage: MemoryStorage, suffix: str, read: Callable[[CheckpointStore], Any]
) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    await make_run(store, "A")
    key = f"{store.run_prefix('A')}{suffix}"
    await flip_last_byte(storage, key)
    with pytest.raises(CheckpointCorrupted) as info:
        await read(store)
    assert key in str(info.value)


# -- 4. plaintext refused once encryption is on ------------------------------------------------


async def test_planted_plaintext_record_is_refused_when_encryption_is_on(
    storage: MemoryStorage,
) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    await make_run(store, "A")
    key = store.step_key("A", "s@0")
    planter = CheckpointStore(storage)  # no keys, but write access
    forged = StepRecord("s@0", {"i": "forged"}, fingerprint="f", seq=1)
    await storage.put(key, planter.encode_step(forged, run_id="A"))
    with pytest.raises(DecryptionError) as info:
        await store.load_steps("A")
    assert key in str(info.value) and "allow_plaintext=True" in str(info.value)
    report = await verify(store)
    assert kinds(report)[key] == {"damage:plaintext"}


async def test_store_written_before_encryption_is_read_with_allow_plaintext(
    storage: MemoryStorage,
) -> None:
    await make_run(CheckpointStore(storage), "A")
    with pytest.raises(DecryptionError, match="allow_plaintext"):
        await CheckpointStore(storage, codec=old_codec()).load_input("A")
    legacy = CheckpointStore(storage, codec=old_codec(allow_plaintext=True))
    assert await legacy.load_input("A") == {"secret": "secret of A"}
    latest = await legacy.latest("A")
    assert latest is not None and latest.state == {"n": 3, "run": "A"}
    report = await verify(legacy)
    assert report.ok and {f.kind for f in report.findings} == {"plaintext"}


# -- 5. verify ---------------------------------------------------------------------------------


async def test_verify_finds_nothing_in_a_sound_store_and_reports_as_json(
    storage: MemoryStorage,
) -> None:
    store = CheckpointStore(storage, codec=old_codec(), namespace="app")
    for run in ("A", "B"):
        await make_run(store, run)
    seen: list[Progress] = []
    report = await verify(store, progress=seen.append)
    assert report.ok and report.findings == [] and report.runs == 2
    assert report.records == 2 * 8  # input, head, 2 steps, 1 response, 3 checkpoints
    assert [p.done for p in seen] == list(range(1, report.records + 1))
    as_json = json.loads(report.to_json())
    assert as_json == {
        "ok": True,
        "records": 16,
        "runs": 2,
        "damaged": 0,
        "warnings": 0,
        "findings": [],
    }


async def test_verify_reports_every_damage_in_one_pass(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    for run in ("A", "B", "C"):
        await make_run(store, run)
    a3, b3 = checkpoint_key(store, "A", 3), checkpoint_key(store, "B", 3)
    await copy(storage, a3, b3)
    await copy(storage, f"{store.run_prefix('A')}input", f"{store.run_prefix('C')}input")
    planted = store.step_key("C", "s@1")
    await storage.put(planted, Codec().encode({"step": "s@1"}, key=planted))
    await flip_last_byte(storage, store.step_key("A", "s@0"))
    report = await verify(store)
    as_json = json.loads(report.to_json())
    assert as_json["ok"] is False and as_json["damaged"] == 4
    assert {(f["key"], f["kind"]) for f in as_json["findings"]} == {
        (b3, "misplaced"),
        (f"{store.run_prefix('C')}input", "misplaced"),
        (planted, "plaintext"),
        (store.step_key("A", "s@0"), "corrupted"),
    }


async def test_verify_warns_about_format_1_records_and_finds_copies_by_their_content(
    storage: MemoryStorage,
) -> None:
    store = CheckpointStore(storage)
    await make_run(store, "A")
    await make_run(store, "F")
    # Records as checkpointkit wrote them before format 2: not bound to their key.
    step_key = store.step_key("A", "s@0")
    step_body = Codec().decode((await storage.get(step_key)).data, key=step_key)
    await storage.put(step_key, Codec().encode(step_body))
    a2, f2 = checkpoint_key(store, "A", 2), checkpoint_key(store, "F", 2)
    body = Codec().decode((await storage.get(a2)).data, key=a2)
    await storage.put(f2, Codec().encode(body))  # a format-1 copy of A's checkpoint 2 at F's
    report = await verify(store)
    assert kinds(report)[step_key] == {"warning:unbound"}
    assert kinds(report)[f2] == {"warning:unbound", "damage:mismatch"}
    [mismatch] = [f for f in report.findings if f.key == f2 and f.kind == "mismatch"]
    assert mismatch.written_for == a2 and "run 'A'" in mismatch.message


async def test_verify_and_rekey_refuse_bad_arguments(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage)
    with pytest.raises(ConfigurationError, match="concurrency"):
        await verify(store, concurrency=0)
    with pytest.raises(ConfigurationError, match="codec and namespace"):
        await verify(store, namespace="x")
    with pytest.raises(TypeError, match="CheckpointStore or a Storage"):
        await verify("file:///tmp/x")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs an Encryption"):
        await rekey(store)
    with pytest.raises(ConfigurationError, match="retries"):
        await rekey(store, encryption=Encryption({"k": OLD}, "k"), retries=0)

    class NoCas(StorageWrapper):
        capabilities = Capabilities(conditional_put=False)

    with pytest.raises(ConfigurationError, match="compare-and-swap"):
        await rekey(NoCas(storage), codec=rotated_codec())


# -- 5. rekey ----------------------------------------------------------------------------------


async def test_rekey_moves_every_record_to_the_active_key_and_runs_stay_readable(
    storage: MemoryStorage,
) -> None:
    before = CheckpointStore(storage, codec=old_codec(), namespace="app")
    for run in ("A", "B"):
        await make_run(before, run)
    seen: list[Progress] = []
    report = await rekey(storage, codec=rotated_codec(), namespace="app", progress=seen.append)
    assert report.complete and report.rewritten == report.records == 16
    assert seen[-1] == Progress(16, 16, 16, 0)
    after = CheckpointStore(storage, codec=new_only_codec(allow_unbound=False), namespace="app")
    for run in ("A", "B"):
        latest = await after.latest(run)  # the head's digest still names it
        assert latest is not None and latest.state == {"n": 3, "run": run}
        assert await after.load_input(run) == {"secret": f"secret of {run}"}
        assert set(await after.load_steps(run)) == {"s@0", "s@1"}
    assert (await verify(after)).findings == []
    again = await rekey(storage, codec=rotated_codec(), namespace="app")
    assert (again.rewritten, again.current) == (0, 16)


async def test_rekey_binds_format_1_records(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    await make_run(store, "A")
    key = f"{store.run_prefix('A')}input"
    await storage.put(key, old_codec().encode({"legacy": True}))  # format 1, under "old"
    assert not read_header((await storage.get(key)).data).bound
    report = await rekey(store.storage, codec=rotated_codec())
    assert report.complete
    header = read_header((await storage.get(key)).data)
    assert header.bound and header.key_id == "new"
    strict = CheckpointStore(storage, codec=new_only_codec(allow_unbound=False))
    assert await strict.load_input("A") == {"legacy": True}


async def test_rekey_never_overwrites_a_record_changed_while_it_runs(
    storage: MemoryStorage,
) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    await make_run(store, "A")
    target = f"{store.run_prefix('A')}r/q1"
    attempts: list[PutMode] = []

    class ConcurrentWriter(StorageWrapper):
        async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
            if key == target:
                attempts.append(mode)
                if len(attempts) == 1:  # another writer lands between rekey's get and put
                    await storage.put(key, old_codec().encode("changed", key=key))
            return await super().put(key, data, mode=mode)

    report = await rekey(ConcurrentWriter(storage), codec=rotated_codec())
    assert report.complete and len(attempts) == 2
    assert all(isinstance(mode, IfMatch) for mode in attempts)
    reader = CheckpointStore(storage, codec=new_only_codec())
    assert await reader.load_responses("A") == {"q1": "changed"}


async def test_rekey_leaves_damaged_records_alone(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage, codec=old_codec())
    await make_run(store, "A")
    await make_run(store, "B")
    moved = f"{store.run_prefix('B')}input"
    await copy(storage, f"{store.run_prefix('A')}input", moved)
    planted = store.step_key("B", "s@0")
    await storage.put(planted, Codec().encode({"step": "s@0"}, key=planted))
    corrupted = store.step_key("A", "s@1")
    await flip_last_byte(storage, corrupted)
    damaged = {key: (await storage.get(key)).data for key in (moved, planted, corrupted)}
    report = await rekey(store.storage, codec=rotated_codec())
    assert not report.complete
    assert {(f.key, f.kind) for f in report.failures} == {
        (moved, "misplaced"),
        (planted, "plaintext"),
        (corrupted, "corrupted"),
    }
    assert report.rewritten == report.records - 3
    for key, data in damaged.items():
        assert (await storage.get(key)).data == data  # never laundered


async def test_rekey_encrypts_a_store_written_before_encryption_only_when_allowed(
    storage: MemoryStorage,
) -> None:
    await make_run(CheckpointStore(storage), "A")
    refused = await rekey(storage, codec=rotated_codec())
    assert refused.rewritten == 0 and {f.kind for f in refused.failures} == {"plaintext"}
    report = await rekey(storage, codec=rotated_codec(), allow_plaintext=True)
    assert report.complete and report.rewritten == report.records
    encrypted = CheckpointStore(storage, codec=new_only_codec())
    latest = await encrypted.latest("A")
    assert latest is not None and latest.state == {"n": 3, "run": "A"}
    assert (await verify(encrypted)).findings == []


_KILLED_REKEY = """
import asyncio, sys, threading
from checkpointkit.adapters.file import FileStorage
from checkpointkit.codec import Codec
from checkpointkit.crypto import Encryption
from checkpointkit.store import CheckpointStore
from checkpointkit.verify import rekey

async def main() -> None:
    async with FileStorage(sys.argv[1]) as storage:
        keys = {"old": bytes(range(32)), "new": bytes(range(100, 132))}
        store = CheckpointStore(storage, codec=Codec(encryption=Encryption(keys, active="new")))

        def progress(p):
            if p.done == p.total // 2:
                print("HALF", p.rewritten, flush=True)
                threading.Event().wait()  # the loop stops here, other puts in flight

        await rekey(store, progress=progress, concurrency=4)
        print("DONE", flush=True)

asyncio.run(main())
"""


async def test_rekey_survives_sigkill_halfway_and_completes_when_run_again(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    async with FileStorage(root) as fs:
        store = CheckpointStore(fs, codec=old_codec())
        for run in ("A", "B", "C", "D"):
            await make_run(store, run)
        total = len([k async for k in fs.list("runs/")])
    assert total == 32
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_REKEY, str(root), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
    assert line.split()[0] == b"HALF", line
    proc.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), timeout=60) == -signal.SIGKILL
    async with FileStorage(root) as fs:
        headers = [read_header((await fs.get(k)).data) async for k in fs.list("runs/")]
        moved = sum(h.key_id == "new" for h in headers)
        assert total // 2 <= moved < total  # killed halfway: both keys in use
        both = CheckpointStore(fs, codec=rotated_codec())
        assert (await verify(both)).findings == []  # readable throughout
        report = await rekey(both)
        assert report.complete and (report.rewritten, report.current) == (total - moved, moved)
        after = CheckpointStore(fs, codec=new_only_codec(allow_unbound=False))
        assert (await verify(after)).findings == []
        for run in ("A", "B", "C", "D"):
            latest = await after.latest(run)
            assert latest is not None and latest.state == {"n": 3, "run": run}
            assert await after.load_input(run) == {"secret": f"secret of {run}"}


async def test_verify_accepts_a_run_pruned_to_no_checkpoint(storage: MemoryStorage) -> None:
    store = CheckpointStore(storage)
    await make_run(store, "A")
    assert await store.prune("A", keep_last=0) == 3
    report = await verify(store)
    assert report.ok and report.findings == []


async def test_rekey_does_not_take_the_lease_of_a_live_run(storage: MemoryStorage) -> None:
    await make_run(CheckpointStore(storage, codec=old_codec()), "A")
    # The worker knows the new key (deployed first) but still encrypts with the old one.
    knows_both = Codec(encryption=Encryption({"old": OLD, "new": NEW}, active="old"))
    worker = CheckpointStore(storage, codec=knows_both)
    lease = await worker.acquire("A")
    report = await rekey(storage, codec=rotated_codec())  # rewrites the head under it
    assert report.complete and report.rewritten == 8
    checkpoint, lease = await worker.save_checkpoint("A", status="done", state={}, lease=lease)
    assert checkpoint.checkpoint_id == "4" and lease is not None
    latest = await CheckpointStore(storage, codec=rotated_codec()).latest("A")
    assert latest is not None and latest.status == "done"


async def test_verify_warns_about_keys_outside_the_layout_and_orphan_index_entries(
    storage: MemoryStorage,
) -> None:
    store = CheckpointStore(storage)
    await make_run(store, "A")
    await storage.put("index/ghost", b"")
    await storage.put("runs/A/stray", b"?")
    report = await verify(store)
    assert report.ok
    assert kinds(report) == {"index/ghost": {"warning:orphan"}, "runs/A/stray": {"warning:unknown"}}
