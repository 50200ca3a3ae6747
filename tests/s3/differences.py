"""How an S3 server differs from AWS where checkpointkit relies on S3: probed with plain boto3.

``probe(endpoint_url)`` answers each question of :data:`QUESTIONS` on one server, in a
fresh bucket; ``table(answers)`` prints the table of ``docs/adapters/s3.md``
("Which S3-compatible servers are safe"). ``scripts/s3-differences`` runs it against
moto and SeaweedFS; ``tests/s3/test_s3_differences.py`` checks the page against it.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import botocore.exceptions
from checkpointkit.conformance.servers.s3 import boto3_client

__all__ = ["AWS", "QUESTIONS", "RACES", "probe", "table"]

T = TypeVar("T")

QUESTIONS = (
    "create-only PutObject of an existing key",
    "if-match PutObject of a missing key",
    "if-match DeleteObject of a missing key",
    "ListObjectsV2 order of a/-, a/b, a b, a0",
    "ListObjectsV2 StartAfter=a of a/-, a/b, a b, a0",
    "PutObject of a 256-byte name segment",
    "PutObject of a 1024-byte name",
    "DeleteObjects of 1,001 keys",
    "DeleteObjects of a key by an old ETag",
    "4 create-only CompleteMultipartUpload of one key at once (20 rounds)",
    "PutObject of k and of k/x at once (200 rounds)",
)

AWS = {
    QUESTIONS[0]: "412",
    QUESTIONS[1]: "404",
    QUESTIONS[2]: "404",
    QUESTIONS[3]: "a b, a/-, a/b, a0",
    QUESTIONS[4]: "a b, a/-, a/b, a0",
    QUESTIONS[5]: "200",
    QUESTIONS[6]: "200",
    QUESTIONS[7]: "400",
    QUESTIONS[8]: "kept (PreconditionFailed)",
    QUESTIONS[9]: "1 winner",
    QUESTIONS[10]: "both kept",
}
"""What AWS documents: conditional writes answer 412 for a failed condition and 404 for a
missing key; listings in ascending UTF-8 byte order, StartAfter by key; names of up to
1024 bytes; at most 1,000 keys in one DeleteObjects (more: 400 MalformedXML), each
deleted only if its ETag, when given, is the object's (conditional deletes: else the
object is kept and its entry of the answer is an error, PreconditionFailed); of
concurrent conditional writes of one key (CompleteMultipartUpload with If-None-Match
included) the first to finish succeeds and the others fail; an object's name is a flat
key, so k and k/x are two objects like any others."""

RACES = (QUESTIONS[9], QUESTIONS[10])
"""The race questions, whose answers change with the machine's load, so the test of the page
leaves their rows out. SeaweedFS let several create-only completions win in 9 and 10 rounds
of 20 on a quiet machine, in fewer than `SEVERAL` under the load of the project's test run
(the completions then rarely overlap); it lost k, written at once with k/x, in 4 rounds of
200 (2026-12-06, quiet machine)."""

NESTED_ROUNDS = 200
"""Rounds of the race of a key and a key below it (two PutObjects started at once)."""

RACE_ROUNDS, RACERS = 20, 4
"""Rounds of the multipart race, and uploads completed at once in each."""

SEVERAL = 3
"""Rounds of `RACE_ROUNDS` with more than one winner that make the answer "several winners"
(fewer, "1 winner"): SeaweedFS 4.48 had 9 and 10 of 20, moto 0 of 20, in two runs each."""


def _status(call: Callable[[], Any]) -> str:
    try:
        call()
    except botocore.exceptions.ClientError as exc:
        return str(exc.response["ResponseMetadata"]["HTTPStatusCode"])
    return "200"


def _race(client: Any, bucket: str) -> str:
    """`RACE_ROUNDS` rounds of `RACERS` one-part multipart uploads of one key, completed at
    once with ``If-None-Match: *``: "1 winner", or "several winners" in `SEVERAL` rounds."""
    several = sum(_winners(client, bucket, f"race/{r}") > 1 for r in range(RACE_ROUNDS))
    return "several winners" if several >= SEVERAL else "1 winner"


def _winners(client: Any, bucket: str, key: str) -> int:
    uploads = []
    for i in range(RACERS):
        upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        part = client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=bytes([i]) * 1024
        )
        uploads.append((upload, part["ETag"]))

    def complete(upload: str, etag: str) -> bool:
        parts = {"Parts": [{"PartNumber": 1, "ETag": etag}]}
        status = _status(
            lambda: client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload, MultipartUpload=parts, IfNoneMatch="*"
            )
        )
        return status == "200"

    return sum(_at_once([lambda u=u, e=e: complete(u, e) for u, e in uploads]))


def _nested(client: Any, bucket: str) -> str:
    """`NESTED_ROUNDS` rounds of two PutObjects started at once, of ``n/R`` and ``n/R/x``,
    each answered 200, then a HeadObject of each: "both kept", or "one lost" in a round."""
    lost = 0
    for r in range(NESTED_ROUNDS):
        keys = (f"n/{r}", f"n/{r}/x")
        _at_once([lambda k=k: client.put_object(Bucket=bucket, Key=k, Body=b"x") for k in keys])
        kept = [_status(lambda k=k: client.head_object(Bucket=bucket, Key=k)) for k in keys]
        lost += kept != ["200", "200"]
    return "one lost" if lost else "both kept"


def _old_etag_delete(client: Any, bucket: str) -> str:
    """A key written twice, then a ``DeleteObjects`` of it with the first write's ETag:
    "kept (CODE)" with the code of its error entry, or "deleted"."""
    old = client.put_object(Bucket=bucket, Key="e/k", Body=b"one")["ETag"]
    client.put_object(Bucket=bucket, Key="e/k", Body=b"two")
    answer = client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "e/k", "ETag": old}], "Quiet": True}
    )
    codes = [str(error.get("Code")) for error in answer.get("Errors", [])]
    if _status(lambda: client.head_object(Bucket=bucket, Key="e/k")) == "200":
        return f"kept ({', '.join(codes) or 'no error'})"
    return "deleted" + (f" ({', '.join(codes)})" if codes else "")


def _at_once(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Each call in a thread of its own, all released at once by a barrier; their results,
    in order."""
    barrier = threading.Barrier(len(calls))
    results: list[T | None] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results  # type: ignore[return-value]  # every thread set its result


def probe(endpoint_url: str, *, race: bool = True) -> dict[str, str]:
    """The server's answer to each of :data:`QUESTIONS`, in a bucket of its own."""
    client = boto3_client(endpoint_url)
    bucket = f"probe-{secrets.token_hex(4)}"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="p/exists", Body=b"x")
    for key in ("o/a/-", "o/a/b", "o/a b", "o/a0"):
        client.put_object(Bucket=bucket, Key=key, Body=b"x")

    def listed(**extra: str) -> str:
        page = client.list_objects_v2(Bucket=bucket, Prefix="o/", **extra)
        return ", ".join(o["Key"][2:] for o in page.get("Contents", []))

    answers = {
        QUESTIONS[0]: _status(
            lambda: client.put_object(Bucket=bucket, Key="p/exists", Body=b"y", IfNoneMatch="*")
        ),
        QUESTIONS[1]: _status(
            lambda: client.put_object(Bucket=bucket, Key="p/missing", Body=b"y", IfMatch='"0"')
        ),
        QUESTIONS[2]: _status(
            lambda: client.delete_object(Bucket=bucket, Key="p/missing", IfMatch='"0"')
        ),
        QUESTIONS[3]: listed(),
        QUESTIONS[4]: listed(StartAfter="o/a"),
        QUESTIONS[5]: _status(lambda: client.put_object(Bucket=bucket, Key="l" * 256, Body=b"")),
        QUESTIONS[6]: _status(lambda: client.put_object(Bucket=bucket, Key="l" * 1024, Body=b"")),
        QUESTIONS[7]: _status(
            lambda: client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": f"d/{i}"} for i in range(1001)]}
            )
        ),
        QUESTIONS[8]: _old_etag_delete(client, bucket),
    }
    if race:  # races: their answers can change with the machine's load (see RACES)
        answers[RACES[0]] = _race(client, bucket)
        answers[RACES[1]] = _nested(client, bucket)
    client.close()
    return answers


def table(answers: dict[str, dict[str, str]]) -> str:
    """A Markdown table: one row per question, AWS's documented answer, then each server's."""
    servers = list(answers)
    lines = [
        "| question | AWS (documented) | " + " | ".join(servers) + " |",
        "| --- | --- | " + " | ".join("---" for _ in servers) + " |",
    ]
    for q in (q for q in QUESTIONS if all(q in a for a in answers.values())):
        cells = [AWS[q]] + [answers[s][q] for s in servers]
        marked = [cells[0]] + [c if c == AWS[q] else f"**{c}**" for c in cells[1:]]
        lines.append(f"| {q} | " + " | ".join(marked) + " |")
    return "\n".join(lines)
