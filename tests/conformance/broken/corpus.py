"""The mutation corpus: broken adapters with their correct twins, and the test that kills each.

Every :class:`Mutant` is a small adapter with one mistake a backend author makes (on a
dict, on files, on ``sqlite3``, over worker threads, over a tiny TCP server, or in
checkpointkit's own file and SQLite adapters), the adapter without that mistake (its
twin), the protocol clauses the mistake breaks
(ids of :mod:`checkpointkit.conformance.clauses`) and the suite's test that must fail
on it: a test that names those clauses. The corpus proves the suite: the killer fails
the mutant in every run and passes the twin in every run
(``tests/conformance/test_corpus.py``; ``scripts/kill-table`` prints the table).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.conformance import Target
from checkpointkit.conformance.servers.redis import redis_standalone_target

from . import (
    adapters,
    close_bugs,
    error_answers,
    kv_dict,
    kv_files,
    kv_plain,
    kv_sqlite,
    kv_threads,
    model_bugs,
    netkv,
    pg_collation,
    saved_later,
    threaded,
    ttl_index,
)
from .nonlinear import CheckThenWrite

SETTLE = 0.3
"""The settle window of the corpus runs: every late landing here comes within 0.2 s."""

MakeTarget = Callable[[], AbstractContextManager[Target]]


@dataclass(frozen=True)
class Mutant:
    """One broken adapter, its twin, and how the suite must see the difference.

    Attributes:
        name: a short id, ``version-is-length``.
        clauses: the clauses the mistake breaks; the killer names all of them.
        group: the group of the killer.
        killer: the name of the test that must fail on the mutant and pass on the twin.
        broken: gives the mutant's target (a context manager: some start a server).
        twin: gives the twin's target.
        mistake: the mistake, in one line.
    """

    name: str
    clauses: tuple[str, ...]
    group: str
    killer: str
    broken: MakeTarget
    twin: MakeTarget
    mistake: str


@contextmanager
def _plain(cls: Any, name: str) -> Iterator[Target]:
    yield Target(cls, name=name, settle_window=SETTLE)


@contextmanager
def _made(make: Callable[[], Target]) -> Iterator[Target]:
    target = make()
    try:
        yield target
    finally:
        if target.cleanup is not None:
            target.cleanup()


def _cls(cls: Any) -> MakeTarget:
    return lambda: _plain(cls, cls.__name__)


def _with(make: Callable[[Any], Target], cls: Any) -> MakeTarget:
    return lambda: _made(lambda: make(cls))


def _doc(cls: Any) -> str:
    text = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(text.split()).removeprefix("Bug: ")


def _m(
    name: str,
    broken: Any,
    twin: Any,
    group: str,
    killer: str,
    *clauses: str,
    make: Callable[[Any], Target] | None = None,
) -> Mutant:
    if make is None:
        b, t = _cls(broken), _cls(twin)
    else:
        b, t = _with(make, broken), _with(make, twin)
    return Mutant(name, clauses, group, killer, b, t, _doc(broken))


D, P = kv_dict.DictKV, kv_plain.PlainKV
IO = adapters.IOMemoryStorage
SEM, CON, BAD, CAN, HYG, CAP = (
    "semantics",
    "concurrency",
    "bad-input",
    "cancellation",
    "hygiene",
    "capabilities",
)
HELD_PUT = "test_put_cancelled_while_held_in_backend_raises_promptly_and_never_lands"
HELD_DELETE = "test_delete_cancelled_while_held_in_backend_raises_promptly_and_never_lands"
LEAK = "test_storage_leaves_nothing_behind_after_close"
DESCRIPTORS = "test_storage_closes_every_descriptor_on_aclose"
MINT = "test_every_write_mints_a_new_version"
RECREATE = "test_version_changes_after_delete_and_recreate"
CREATE_RACE = "test_create_only_race_has_one_winner"
FOREIGN = "test_if_match_version_of_another_form_never_matches"
BATCHES = "test_delete_many_of_every_batch_size_deletes_exactly_the_keys_that_existed"
SHAPES = "test_every_key_shape_round_trips_lists_and_deletes"
BIG = "test_16_mib_value_round_trips"
PAGES = "test_list_pages_across_many_keys"
ODD = "test_odd_but_valid_keys_round_trip_and_list_exactly"
UNICODE = "test_unicode_keys_round_trip_and_stay_distinct"
LOST_REPLY = "test_a_write_whose_reply_is_lost_raises_outcome_unknown_or_answers_truly"
LOST_REQUEST = "test_a_write_whose_request_is_lost_while_another_client_writes_answers_truly"
TIMED_OUT = "test_a_call_whose_reply_never_comes_times_out_and_leaves_no_late_reply"
EMPTY_PRESENT = "test_a_key_holding_an_empty_value_is_present_to_every_operation"
SECOND_READER = "test_a_second_client_reading_during_overwrites_sees_each_put_whole"

_SQL = kv_sqlite.sqlite_target
_FILES = kv_files.files_target
_LOCKED = kv_threads.locked_target

MUTANTS: tuple[Mutant, ...] = (
    # -- versions -----------------------------------------------------------------------------
    _m("version-is-length", kv_dict.VersionIsLength, D, SEM, MINT, "version.changes"),
    _m(
        "version-is-mtime",
        kv_files.VersionIsMtime,
        kv_files.FilesKV,
        SEM,
        MINT,
        "version.changes",
        make=_FILES,
    ),
    _m(
        "version-is-content-hash",
        adapters.ContentHashVersion,
        IO,
        SEM,
        MINT,
        "version.never-repeats",
    ),
    _m(
        "version-resets-on-recreate",
        kv_dict.VersionResetsOnRecreate,
        D,
        SEM,
        RECREATE,
        "version.never-repeats",
    ),
    _m(
        "version-is-rowid",
        kv_sqlite.RowidVersion,
        kv_sqlite.SqliteKV,
        SEM,
        RECREATE,
        "version.never-repeats",
        make=_SQL,
    ),
    _m(
        "deletes-lost-on-reopen",
        kv_dict.DeletesLostOnReopen,
        kv_dict.WritesThroughACopy,
        SEM,
        "test_every_operation_answers_right_after_a_reopen",
        "cap.durable",
    ),
    _m(
        "large-values-lost-on-reopen",
        kv_dict.LargeValuesSpilledToTheProcess,
        kv_dict.DurableDictKV,
        SEM,
        "test_every_operation_answers_right_after_a_reopen",
        "cap.durable",
    ),
    _m(
        "version-counter-restarts-on-reopen",
        kv_dict.VersionCounterPerOpen,
        kv_dict.DurableDictKV,
        SEM,
        "test_versions_after_a_reopen_never_repeat_earlier_ones",
        "version.changes",
    ),
    _m(
        "put-returns-previous-version",
        kv_dict.PutReturnsPreviousVersion,
        D,
        SEM,
        "test_overwrite_returns_the_version_that_get_reports",
        "put.returns-version",
    ),
    # -- conditional puts -------------------------------------------------------------------
    _m(
        "create-overwrites",
        adapters.CreateOverwrites,
        IO,
        SEM,
        "test_create_only_rejects_existing_key",
        "put.create.existing",
    ),
    _m(
        "create-exists-then-write",
        kv_dict.CreateChecksThenWrites,
        D,
        CON,
        CREATE_RACE,
        "put.conditional.one-winner",
    ),
    _m(
        "list-bounded-by-the-next-character",
        kv_sqlite.ListBoundsByTheNextCharacter,
        kv_sqlite.SqliteKV,
        SEM,
        "test_prefixes_ending_in_the_highest_code_points_list_their_keys",
        "list.prefix-only",
        "list.order",
        make=_SQL,
    ),
    _m(
        "overwrite-updates-then-inserts",
        kv_sqlite.OverwriteUpdatesThenInserts,
        kv_sqlite.SqliteKV,
        CON,
        "test_overwrites_of_missing_keys_through_two_clients_all_write",
        "put.overwrite",
        "put.atomic",
        make=_SQL,
    ),
    _m(
        "create-select-then-insert",
        kv_sqlite.CreateSelectsThenInserts,
        kv_sqlite.SqliteKV,
        CON,
        CREATE_RACE,
        "put.conditional.one-winner",
        make=_SQL,
    ),
    _m(
        "create-path-exists-then-write",
        kv_files.CreateChecksExists,
        kv_files.FilesKV,
        CON,
        CREATE_RACE,
        "put.conditional.one-winner",
        make=_FILES,
    ),
    _m(
        "cas-check-then-write",
        CheckThenWrite,
        IO,
        CON,
        "test_cas_race_has_one_winner",
        "put.conditional.one-winner",
    ),
    _m(
        "if-match-ignores-version",
        adapters.IfMatchIgnoresVersion,
        IO,
        SEM,
        "test_if_match_put_rejects_stale_version",
        "put.if-match.stale",
    ),
    _m(
        "if-match-missing-creates",
        kv_dict.IfMatchMissingCreates,
        D,
        SEM,
        "test_if_match_put_rejects_missing_key",
        "put.if-match.missing",
    ),
    _m(
        "if-match-int-compare",
        kv_dict.IfMatchComparesNumbers,
        D,
        BAD,
        FOREIGN,
        "put.if-match.foreign",
        "version.exact-match",
    ),
    _m(
        "if-match-as-an-entity-tag-list",
        kv_dict.IfMatchSentAsAnEntityTagList,
        D,
        BAD,
        FOREIGN,
        "put.if-match.foreign",
        "version.exact-match",
    ),
    _m(
        "if-match-sql-cast",
        kv_sqlite.CastsVersion,
        kv_sqlite.SqliteKV,
        BAD,
        FOREIGN,
        "put.if-match.foreign",
        make=_SQL,
    ),
    _m(
        "refused-create-still-writes",
        kv_dict.RefusedCreateStillWrites,
        D,
        SEM,
        "test_create_only_rejects_existing_key",
        "put.refused-changes-nothing",
    ),
    _m(
        "unknown-mode-overwrites",
        kv_plain.UnknownModeOverwrites,
        P,
        BAD,
        "test_unknown_put_mode_is_rejected",
        "put.mode.unknown",
    ),
    # -- delete -------------------------------------------------------------------------------
    _m(
        "conditional-delete-checked-then-deleted",
        kv_dict.DeleteIfMatchChecksThenDeletes,
        D,
        CON,
        "test_conditional_delete_race_has_one_winner",
        "delete.conditional.one-winner",
    ),
    _m(
        "delete-checks-then-deletes",
        kv_dict.DeleteChecksThenDeletes,
        D,
        CON,
        "test_unconditional_delete_race_finds_the_value_once",
        "delete.one-true",
    ),
    _m(
        "conditional-delete-decides-from-a-snapshot",
        kv_dict.DeleteIfMatchDecidesFromASnapshot,
        D,
        CON,
        "test_conditional_delete_race_has_one_winner",
        "delete.conditional.one-winner",
        "delete.if-match.missing",
    ),
    _m(
        "conditional-write-refused-while-locked",
        kv_dict.ConditionalWritesRefusedWhileLocked,
        kv_dict.ConditionalWritesLockTheKey,
        CON,
        "test_a_current_conditional_write_wins_against_stale_ones_racing_it",
        "put.if-match.current",
        "delete.if-match.current",
    ),
    _m(
        "delete-many-counts-then-deletes",
        kv_dict.DeleteManyCountsThenDeletes,
        D,
        CON,
        "test_delete_many_racing_deletes_counts_the_value_once",
        "delete-many.one-true",
        "delete-many.count",
    ),
    _m(
        "create-of-a-deleted-key-checked-then-written",
        kv_dict.CreateOnATombstoneChecksThenWrites,
        D,
        CON,
        CREATE_RACE,
        "put.conditional.one-winner",
    ),
    _m(
        "deleted-key-keeps-its-version",
        kv_dict.DeleteKeepsATombstone,
        D,
        SEM,
        "test_every_operation_answers_right_in_every_key_state",
        "put.if-match.missing",
    ),
    _m(
        "delete-missing-returns-true",
        kv_dict.DeleteMissingReturnsTrue,
        D,
        SEM,
        "test_delete_missing_key_returns_false",
        "delete.missing",
    ),
    _m(
        "delete-if-match-missing-raises",
        kv_dict.DeleteIfMatchMissingRaises,
        D,
        SEM,
        "test_delete_if_match_of_missing_key_returns_false",
        "delete.if-match.missing",
    ),
    _m(
        "delete-ignores-if-match",
        kv_dict.DeleteIgnoresIfMatch,
        D,
        SEM,
        "test_delete_if_match_rejects_stale_version",
        "delete.if-match.stale",
    ),
    _m(
        "delete-if-match-int-vs-str",
        kv_dict.DeleteIfMatchComparesInts,
        D,
        SEM,
        "test_delete_if_match_current_version_deletes",
        "delete.if-match.current",
    ),
    _m(
        "delete-leaves-index",
        kv_dict.DeleteLeavesIndex,
        D,
        SEM,
        "test_listing_reflects_puts_and_deletes",
        "list.reflects-writes",
    ),
    _m(
        "index-row-replaced-on-overwrite",
        kv_dict.IndexRowReplacedOnOverwrite,
        kv_dict.IndexedListingKV,
        CON,
        "test_listing_while_present_keys_are_overwritten_yields_each_of_them",
        "list.concurrent-writes",
    ),
    _m(
        "delete-many-counts-requests",
        kv_dict.DeleteManyCountsRequests,
        D,
        SEM,
        "test_delete_many_counts_a_repeated_key_once",
        "delete-many.count",
    ),
    _m(
        "delete-many-reads-its-keys-twice",
        kv_dict.DeleteManyReadsItsKeysTwice,
        D,
        SEM,
        "test_delete_many_takes_any_iterable_of_keys",
        "delete-many.count",
    ),
    _m(
        "delete-many-stops-at-a-missing-key",
        kv_dict.DeleteManyStopsAtMissing,
        D,
        SEM,
        "test_delete_many_counts_a_repeated_key_once",
        "delete-many.count",
    ),
    _m(
        "delete-many-deletes-before-bad-key",
        kv_plain.DeleteManyStopsAtBadKey,
        P,
        SEM,
        "test_delete_many_with_an_invalid_key_deletes_nothing",
        "delete-many.validates-first",
    ),
    _m(
        "delete-many-skips-empty-keys",
        kv_plain.DeleteManySkipsEmptyKeys,
        P,
        SEM,
        "test_delete_many_with_an_invalid_key_deletes_nothing",
        "delete-many.validates-first",
    ),
    _m(
        "delete-many-checks-each-batch",
        kv_dict.DeleteManyChecksEachBatch,
        kv_dict.BatchDeleteKV,
        SEM,
        "test_delete_many_with_an_invalid_key_deletes_nothing",
        "delete-many.validates-first",
    ),
    _m(
        "delete-many-in-one-request-over-the-limit",
        kv_dict.DeleteManyInOneRequest,
        kv_dict.BatchDeleteKV,
        SEM,
        BATCHES,
        "delete-many.count",
        "delete-many.any-size",
    ),
    _m(
        "delete-many-drops-the-last-batch",
        kv_dict.DeleteManyDropsTheLastBatch,
        kv_dict.BatchDeleteKV,
        SEM,
        BATCHES,
        "delete-many.count",
        "delete-many.any-size",
    ),
    _m(
        "delete-many-counts-the-last-batch",
        kv_dict.DeleteManyCountsTheLastBatch,
        kv_dict.BatchDeleteKV,
        SEM,
        BATCHES,
        "delete-many.count",
        "delete-many.any-size",
    ),
    _m(
        "delete-many-xml-unescaped",
        kv_dict.DeleteManyXmlUnescaped,
        kv_dict.XmlBatchDeleteKV,
        SEM,
        SHAPES,
        "delete-many.count",
    ),
    _m(
        "delete-many-path-unencoded",
        kv_dict.DeleteManyPathUnencoded,
        kv_dict.PathBatchDeleteKV,
        SEM,
        SHAPES,
        "delete-many.count",
    ),
    _m(
        "prefix-range-up-to-uf8ff",
        kv_dict.PrefixUpperBoundF8FF,
        D,
        SEM,
        SHAPES,
        "list.prefix-only",
    ),
    _m(
        "prefix-range-up-to-uffff",
        kv_dict.PrefixUpperBoundFFFF,
        D,
        SEM,
        SHAPES,
        "list.prefix-only",
    ),
    _m(
        "slash-escaped-percent-not",
        kv_dict.SlashEscapedPercentNot,
        kv_dict.EscapedDocumentIdsKV,
        SEM,
        SHAPES,
        "key.one-to-one",
    ),
    _m(
        "listing-body-split-lines",
        kv_dict.ListingBodySplitLines,
        kv_dict.ListingBodySplitNewline,
        SEM,
        SHAPES,
        "key.multi-byte",
    ),
    _m(
        "delete-many-sql-in-list-over-the-limit",
        kv_sqlite.InListOverTheLimit,
        kv_sqlite.InListKV,
        SEM,
        BATCHES,
        "delete-many.count",
        "delete-many.any-size",
        make=_SQL,
    ),
    # -- get and values -----------------------------------------------------------------------
    _m(
        "decompresses-what-looks-compressed",
        kv_dict.SniffsCompression,
        kv_dict.FlaggedCompressionKV,
        SEM,
        "test_values_of_every_shape_round_trip",
        "put.round-trip",
    ),
    _m(
        "get-missing-returns-empty",
        kv_dict.GetMissingReturnsEmpty,
        D,
        SEM,
        "test_get_missing_key_raises_not_found",
        "get.missing",
    ),
    _m(
        "empty-value-reads-as-missing",
        kv_dict.EmptyValueReadsAsMissing,
        D,
        SEM,
        "test_empty_value_round_trips",
        "put.round-trip",
    ),
    _m(
        "create-takes-an-empty-value-for-missing",
        kv_dict.CreateTakesAnEmptyValueForMissing,
        D,
        SEM,
        EMPTY_PRESENT,
        "put.create.existing",
    ),
    _m(
        "if-match-takes-an-empty-value-for-missing",
        kv_dict.IfMatchTakesAnEmptyValueForMissing,
        D,
        SEM,
        EMPTY_PRESENT,
        "put.if-match.current",
    ),
    _m(
        "staging-records-named-like-keys",
        kv_dict.StagingRecordsNamedLikeKeys,
        kv_dict.StagedUploadsKV,
        SEM,
        "test_keys_named_like_an_adapters_own_records_round_trip_and_list_exactly",
        "key.one-to-one",
        "list.prefix-only",
    ),
    _m(
        "tombstone-told-by-its-value",
        kv_dict.TombstoneToldByItsValue,
        kv_dict.SoftDeleteKV,
        SEM,
        "test_values_of_every_shape_round_trip",
        "put.round-trip",
    ),
    _m(
        "index-record-named-like-a-key",
        kv_dict.IndexRecordNamedLikeAKey,
        D,
        SEM,
        "test_keys_named_like_an_adapters_own_records_round_trip_and_list_exactly",
        "key.one-to-one",
        "list.prefix-only",
    ),
    _m(
        "strips-trailing-nuls",
        kv_dict.StripsTrailingNuls,
        D,
        SEM,
        "test_values_ending_in_nul_bytes_round_trip",
        "put.round-trip",
    ),
    _m("truncates-at-64-kib", kv_dict.TruncatesAt64KiB, D, SEM, BIG, "put.round-trip"),
    _m(
        "parent-lost-to-a-child-at-once",
        kv_dict.ParentLostToAChildAtOnce,
        D,
        CON,
        "test_concurrent_puts_to_distinct_keys_are_all_readable",
        "put.round-trip",
    ),
    _m(
        "reads-one-64-kib-buffer",
        kv_files.ReadsOneBuffer,
        kv_files.FilesKV,
        SEM,
        BIG,
        "put.round-trip",
        make=_FILES,
    ),
    _m(
        "drops-partial-chunk-above-1-mib",
        kv_dict.DropsPartialChunkAbove1MiB,
        D,
        SEM,
        "test_values_of_every_size_class_round_trip",
        "put.round-trip",
    ),
    _m(
        "bytearray-kept-by-reference",
        kv_plain.KeepsBytearray,
        P,
        SEM,
        "test_bytes_like_data_is_stored_as_bytes",
        "put.bytes-like",
    ),
    _m(
        "caller-buffer-kept-by-reference",
        kv_plain.KeepsTheCallersBuffer,
        P,
        SEM,
        "test_bytes_like_data_is_stored_as_bytes",
        "put.bytes-like",
    ),
    _m(
        "put-not-atomic",
        adapters.NonAtomicPut,
        IO,
        CON,
        "test_concurrent_reader_sees_only_whole_values",
        "put.atomic",
    ),
    _m(
        "file-written-in-place",
        kv_files.WritesInPlace,
        kv_files.FilesKV,
        CON,
        "test_concurrent_reader_sees_only_whole_values",
        "put.atomic",
        make=_FILES,
    ),
    # -- keys ------------------------------------------------------------------------------------
    _m("keys-case-folded", kv_dict.CaseFoldsKeys, D, SEM, UNICODE, "key.one-to-one"),
    _m("keys-nfc-normalized", kv_dict.NormalizesKeysNFC, D, SEM, UNICODE, "key.one-to-one"),
    _m(
        "keys-sql-nocase",
        kv_sqlite.NocaseKeys,
        kv_sqlite.SqliteKV,
        SEM,
        ODD,
        "key.one-to-one",
        make=_SQL,
    ),
    _m(
        "space-and-plus-one-file",
        kv_files.SpacesAsPlus,
        kv_files.FilesKV,
        SEM,
        ODD,
        "key.one-to-one",
        make=_FILES,
    ),
    _m(
        "dot-segments-accepted",
        kv_plain.AcceptsDotSegments,
        P,
        BAD,
        "test_invalid_key_is_rejected_with_invalid_key",
        "key.invalid.dotdot",
        "error.invalid-key",
        "key.invalid.dot",
        "key.invalid.empty-segment",
        "key.invalid.slash",
        "key.invalid.character",
        "key.invalid.surrogate",
        "key.too-long",
    ),
    _m(
        "key-length-in-characters",
        kv_plain.CountsKeyCharacters,
        P,
        BAD,
        "test_key_over_1024_utf8_bytes_is_refused_though_shorter_in_characters",
        "key.too-long",
    ),
    _m(
        "key-limit-1000-bytes",
        kv_plain.KeyLimitTooShort,
        P,
        SEM,
        "test_every_key_shape_round_trips_lists_and_deletes",
        "key.max-length",
    ),
    _m(
        "shows-the-password-of-its-url",
        kv_dict.ShowsItsURL,
        kv_dict.ShowsItsHost,
        BAD,
        "test_no_repr_or_error_shows_the_password_of_the_url",
        "error.no-credentials",
        make=lambda cls: Target(
            cls, name=cls.__name__, settle_window=SETTLE, spec=kv_dict.SECRET_URL
        ),
    ),
    _m(
        "key-error-omits-key",
        kv_plain.KeyErrorOmitsKey,
        P,
        BAD,
        "test_invalid_key_error_names_the_key",
        "error.names-key",
    ),
    # -- bad input ---------------------------------------------------------------------------
    _m(
        "any-data-accepted",
        kv_plain.StoresAnyData,
        P,
        BAD,
        "test_non_bytes_data_is_rejected_with_type_error",
        "error.data-type",
    ),
    _m(
        "bad-data-deletes-first",
        kv_plain.BadDataDeletesFirst,
        P,
        BAD,
        "test_non_bytes_data_is_rejected_with_type_error",
        "error.loses-nothing",
    ),
    _m(
        "conditional-put-encodes-str",
        kv_plain.ConditionalPutEncodesStr,
        P,
        BAD,
        "test_non_bytes_data_is_rejected_with_type_error",
        "error.data-type",
    ),
    _m(
        "non-str-if-match-accepted",
        kv_plain.AcceptsNonStrIfMatch,
        P,
        BAD,
        "test_non_str_if_match_is_rejected",
        "error.arg-type",
    ),
    _m(
        "if-match-version-coerced",
        kv_plain.IfMatchVersionCoerced,
        P,
        BAD,
        "test_non_str_if_match_is_rejected",
        "error.arg-type",
    ),
    _m(
        "negative-limit-accepted",
        kv_plain.AcceptsNegativeLimit,
        P,
        BAD,
        "test_negative_list_limit_is_rejected",
        "error.limit-negative",
    ),
    # -- listing ---------------------------------------------------------------------------------
    _m(
        "lists-in-insertion-order",
        kv_dict.ListsInInsertionOrder,
        D,
        SEM,
        "test_list_returns_keys_in_ascending_order",
        "list.order",
    ),
    _m(
        "lists-in-utf16-order",
        model_bugs.Utf16Order,
        IO,
        SEM,
        "test_every_key_shape_round_trips_lists_and_deletes",
        "list.order",
    ),
    _m(
        "start-after-inclusive",
        kv_dict.StartAfterInclusive,
        D,
        SEM,
        "test_list_start_after_skips_keys_up_to_it",
        "list.start-after",
    ),
    _m(
        "limit-off-by-one",
        kv_plain.LimitOffByOne,
        P,
        SEM,
        "test_list_limit_caps_the_number_of_keys",
        "list.limit",
    ),
    _m("stops-after-first-page", kv_dict.StopsAfterFirstPage, D, SEM, PAGES, "list.pages"),
    _m("page-repeats-boundary-key", kv_dict.PageRepeatsBoundaryKey, D, SEM, PAGES, "list.pages"),
    _m(
        "prefix-on-whole-segments",
        kv_dict.PrefixMatchesWholeSegments,
        D,
        SEM,
        "test_list_prefix_isolates_keys",
        "list.prefix-only",
    ),
    _m(
        "list-leaks-outside-prefix",
        adapters.ListLeaksOutsidePrefix,
        IO,
        SEM,
        "test_list_prefix_isolates_keys",
        "list.prefix-only",
    ),
    _m(
        "prefix-as-sql-like",
        kv_sqlite.LikePrefix,
        kv_sqlite.SqliteKV,
        SEM,
        "test_list_prefix_with_like_wildcards_matches_literally",
        "list.prefix-only",
        make=_SQL,
    ),
    _m(
        "listing-stops-at-its-partition-limit",
        kv_dict.ListingStopsAtItsPartitionLimit,
        kv_dict.PartitionedListingKV,
        SEM,
        "test_listings_span_many_directories",
        "list.pages",
    ),
    _m(
        "prefix-as-glob",
        kv_dict.ListMatchesGlob,
        D,
        SEM,
        "test_list_prefix_with_glob_and_regex_characters_matches_literally",
        "list.prefix-only",
    ),
    _m(
        "prefix-as-regex",
        kv_dict.ListMatchesRegex,
        D,
        SEM,
        "test_list_prefix_with_glob_and_regex_characters_matches_literally",
        "list.prefix-only",
    ),
    # -- close -----------------------------------------------------------------------------------
    _m(
        "close-not-idempotent",
        kv_plain.CloseNotIdempotent,
        P,
        SEM,
        "test_close_is_idempotent",
        "close.idempotent",
    ),
    _m(
        "works-after-close",
        kv_plain.WorksAfterClose,
        P,
        SEM,
        "test_operations_after_close_raise_storage_closed",
        "close.storage-closed",
    ),
    _m(
        "delete-many-after-close",
        kv_plain.DeleteManyAfterClose,
        P,
        SEM,
        "test_operations_after_close_raise_storage_closed",
        "close.storage-closed",
    ),
    _m(
        "empty-batch-after-close",
        kv_plain.EmptyBatchAfterClose,
        P,
        SEM,
        "test_operations_after_close_raise_storage_closed",
        "close.storage-closed",
    ),
    _m(
        "conditional-put-after-close",
        kv_plain.ConditionalPutAfterClose,
        P,
        SEM,
        "test_operations_after_close_raise_storage_closed",
        "close.storage-closed",
    ),
    _m(
        "open-listing-outlives-close",
        kv_plain.OpenListingOutlivesClose,
        P,
        SEM,
        "test_next_page_of_a_listing_opened_before_close_raises_storage_closed",
        "close.open-listing",
    ),
    # -- cancellation ------------------------------------------------------------------------
    _m(
        "swallows-cancellation",
        adapters.SwallowsCancel,
        IO,
        CAN,
        "test_cancelled_put_raises_cancelled_error_promptly",
        "cancel.prompt",
    ),
    _m(
        "lands-later-from-a-task",
        adapters.LandsLater,
        IO,
        CAN,
        "test_cancelled_put_does_not_land_later",
        "cancel.no-late-landing",
    ),
    _m(
        "lands-later-from-a-thread",
        threaded.LateThread,
        threaded.ThreadedStore,
        CAN,
        "test_cancelled_put_does_not_land_later",
        "cancel.no-late-landing",
    ),
    _m(
        "sql-lands-after-cancel",
        kv_sqlite.SlowLandsAfterCancel,
        kv_sqlite.SlowSqliteKV,
        CAN,
        "test_cancelled_put_does_not_land_later",
        "cancel.no-late-landing",
        make=_SQL,
    ),
    _m(
        "cancelled-put-applied-twice",
        adapters.DoubleApply,
        IO,
        CAN,
        "test_cancelled_put_does_not_land_later",
        "cancel.no-late-landing",
    ),
    _m(
        "batch-delete-lands-after-cancel",
        kv_dict.BatchLandsAfterCancel,
        kv_dict.SettlingBatchDeleteKV,
        CAN,
        "test_cancelled_delete_does_not_land_later",
        "cancel.no-late-landing",
    ),
    _m(
        "held-delete-commits-after-cancel",
        kv_threads.CommitsAfterCancel,
        kv_threads.LockedKV,
        CAN,
        HELD_DELETE,
        "cancel.held-backend",
        "cancel.no-late-landing",
        make=_LOCKED,
    ),
    _m(
        "cancel-waits-2-s-for-worker",
        kv_threads.CancelWaitsForWorker,
        kv_threads.LockedKV,
        CAN,
        HELD_PUT,
        "cancel.held-backend",
        "cancel.prompt",
        make=_LOCKED,
    ),
    _m(
        "cancel-waits-for-abort-handshake",
        threaded.SlowCancel,
        threaded.ThreadedStore,
        CAN,
        HELD_PUT,
        "cancel.held-backend",
        "cancel.prompt",
    ),
    _m(
        "half-open-after-a-cancelled-first-call",
        kv_dict.HalfOpenAfterCancel,
        kv_dict.LazyClientKV,
        CAN,
        "test_first_call_of_a_fresh_storage_cancelled_leaves_it_healthy",
        "cancel.healthy-after",
    ),
    _m(
        "stale-reply-after-cancelled-get",
        adapters.StaleReply,
        IO,
        CAN,
        "test_next_call_after_cancelled_get_gets_its_own_answer",
        "cancel.healthy-after",
    ),
    # -- hygiene ---------------------------------------------------------------------------------
    _m(
        "task-left-pending",
        adapters.LeavesTaskPending,
        IO,
        HYG,
        LEAK,
        "hygiene.no-task-left",
        "cancel.nothing-left",
        "close.releases",
    ),
    _m("coroutine-never-awaited", adapters.NeverAwaits, IO, HYG, LEAK, "hygiene.never-awaited"),
    _m("finalizer-raises", adapters.FinalizerRaises, IO, HYG, LEAK, "hygiene.no-unraisable"),
    _m(
        "pool-cut-by-a-cancelled-aclose",
        kv_dict.PoolCutByCancelledClose,
        kv_dict.PooledClientKV,
        HYG,
        "test_aclose_cancelled_at_any_wait_still_releases_everything",
        "close.releases",
    ),
    _m(
        "second-aclose-returns-at-once",
        kv_dict.SecondCloseReturnsAtOnce,
        kv_dict.PoliteClientKV,
        HYG,
        "test_two_aclose_calls_at_once_each_return_once_released",
        "close.releases",
    ),
    _m(
        "socket-kept-open",
        adapters.KeepsSocketOpen,
        adapters.ClosesSocket,
        HYG,
        DESCRIPTORS,
        "hygiene.descriptors",
        "close.releases",
    ),
    _m(
        "sqlite-connection-leaked",
        kv_sqlite.LeaksConnection,
        kv_sqlite.SqliteKV,
        HYG,
        DESCRIPTORS,
        "hygiene.descriptors",
        "close.releases",
        make=_SQL,
    ),
    _m(
        "file-handle-leaked",
        kv_files.LeaksReadHandle,
        kv_files.FilesKV,
        HYG,
        DESCRIPTORS,
        "hygiene.descriptors",
        "close.releases",
        make=_FILES,
    ),
    _m(
        "checkpointer-thread-left-running",
        kv_sqlite.LeavesCheckpointer,
        kv_sqlite.SqliteKV,
        HYG,
        LEAK,
        "hygiene.no-thread-left",
        make=_SQL,
    ),
    # -- capabilities ------------------------------------------------------------------------
    _m(
        "durable-saved-only-on-close",
        kv_files.SavesOnClose,
        kv_files.SavesEachWrite,
        CAP,
        "test_declared_durable_data_survives_the_death_of_its_process",
        "cap.durable",
        make=kv_files.saved_files_target,
    ),
    _m(
        "durable-delete-many-saved-later",
        kv_files.DeleteManySavedLater,
        kv_files.DeleteManySavedTwin,
        CAP,
        "test_declared_durable_data_survives_the_death_of_its_process",
        "cap.durable",
        make=kv_files.saved_files_target,
    ),
    _m(
        "durable-conditional-delete-saved-later",
        kv_files.ConditionalDeleteSavedLater,
        kv_files.SavesLater,
        CAP,
        "test_declared_durable_data_survives_the_death_of_its_process",
        "cap.durable",
        make=kv_files.saved_files_target,
    ),
    _m(
        "durable-overwrite-saved-later",
        kv_files.OverwriteSavedLater,
        kv_files.SavesLater,
        CAP,
        "test_declared_durable_data_survives_the_death_of_its_process",
        "cap.durable",
        make=kv_files.saved_files_target,
    ),
    _m(
        "file-adapter-overwrite-renamed-later",
        saved_later.FileRenamedLater,
        FileStorage,
        CAP,
        "test_declared_durable_data_survives_the_death_of_its_process",
        "cap.durable",
        make=saved_later.saved_later_target,
    ),
    _m(
        "sqlite-adapter-commit-deferred",
        saved_later.SQLiteCommitsLater,
        SQLiteStorage,
        CAP,
        "test_declared_durable_data_survives_the_death_of_its_process",
        "cap.durable",
        make=saved_later.saved_later_target,
    ),
    _m(
        "durable-declared-kept-in-memory",
        kv_dict.DeclaresDurableInMemory,
        kv_dict.DurableDictKV,
        CAP,
        "test_declared_durable_data_survives_reopening",
        "cap.durable",
    ),
    _m(
        "version-counter-per-client",
        kv_dict.VersionCounterPerClient,
        kv_dict.SharedDictKV,
        CAP,
        "test_declared_shared_data_is_visible_to_a_second_client",
        "cap.shared",
    ),
    _m(
        "shared-declared-private-data",
        kv_dict.DeclaresSharedPrivate,
        kv_dict.SharedDictKV,
        CAP,
        "test_declared_shared_data_is_visible_to_a_second_client",
        "cap.shared",
    ),
    _m(
        "indexed-list-declared-scans",
        adapters.ScansEveryKey,
        MemoryStorage,
        CAP,
        "test_declared_indexed_list_is_flat_in_the_number_of_keys",
        "cap.indexed-list",
    ),
    _m(
        "capabilities-as-a-dict",
        kv_dict.CapabilitiesAsDict,
        D,
        CAP,
        "test_capabilities_are_declared",
        "cap.declared",
    ),
    # -- added for the clauses the first corpus left unproven -----------------------------
    _m(
        "delete-reports-after-the-fact",
        kv_dict.DeleteReportsAfterTheFact,
        D,
        SEM,
        "test_delete_removes_key_and_returns_true",
        "delete.existing",
    ),
    _m(
        "skips-same-size-overwrite",
        kv_dict.SkipsSameSizeOverwrite,
        D,
        SEM,
        "test_overwrite_replaces_value_and_changes_version",
        "put.overwrite",
    ),
    _m(
        "create-refuses-missing",
        kv_dict.CreateRefusesMissing,
        D,
        SEM,
        "test_create_only_writes_a_missing_key",
        "put.create.missing",
    ),
    _m(
        "if-match-against-next-version",
        kv_dict.IfMatchAgainstNextVersion,
        D,
        SEM,
        "test_if_match_put_succeeds_on_current_version",
        "put.if-match.current",
    ),
    _m(
        "version-as-int",
        kv_dict.VersionAsInt,
        D,
        SEM,
        "test_put_returns_the_version_that_get_reports",
        "version.opaque-str",
    ),
    _m("keys-ascii-only", kv_dict.KeysAsciiOnly, D, SEM, UNICODE, "key.multi-byte"),
    _m(
        "keys-with-characters-to-avoid-refused",
        kv_dict.RefusesCharactersToAvoid,
        D,
        SEM,
        "test_every_key_shape_round_trips_lists_and_deletes",
        "key.multi-byte",
    ),
    _m(
        "non-str-key-coerced",
        kv_plain.CoercesKeysToStr,
        P,
        BAD,
        "test_invalid_key_is_rejected_with_invalid_key",
        "key.invalid.empty",
    ),
    _m(
        "prefix-not-checked",
        kv_plain.AcceptsAnyPrefix,
        P,
        BAD,
        "test_invalid_list_prefix_is_rejected_with_invalid_key",
        "key.prefix",
    ),
    _m(
        "large-values-overwritten-in-place",
        kv_dict.LargeValuesOverwrittenInPlace,
        D,
        CON,
        "test_concurrent_reader_sees_only_whole_values",
        "put.atomic",
    ),
    _m(
        "large-values-in-parts-skip-the-condition",
        kv_dict.LargeValuesInPartsSkipTheCondition,
        D,
        SEM,
        "test_every_write_mode_on_large_values",
        "put.create.existing",
        "put.if-match.stale",
    ),
    _m(
        "large-values-read-with-the-first-version",
        kv_dict.LargeValuesReadWithTheFirstVersion,
        D,
        SEM,
        "test_every_write_mode_on_large_values",
        "version.exact-match",
    ),
    _m(
        "large-values-deleted-without-the-condition",
        kv_dict.LargeValuesDeletedWithoutTheCondition,
        D,
        SEM,
        "test_every_write_mode_on_large_values",
        "delete.if-match.stale",
    ),
    _m(
        "large-values-kept-by-delete-many",
        kv_dict.LargeValuesKeptByDeleteMany,
        kv_dict.LargeValuesInPartsKV,
        SEM,
        "test_every_write_mode_on_large_values",
        "delete-many.count",
    ),
    _m(
        "checks-then-writes-under-a-client-lock",
        kv_dict.ChecksThenWritesUnderAClientLock,
        kv_dict.SharedDictKV,
        CON,
        "test_conditional_races_across_two_clients_have_one_winner",
        "put.conditional.one-winner",
        "delete.conditional.one-winner",
        "cap.shared",
    ),
    _m(
        "delete-many-skips-keys-another-client-overwrote",
        kv_dict.VersionedBatchDelete,
        kv_dict.SharedDictKV,
        CON,
        "test_listing_and_delete_many_while_another_client_writes",
        "delete-many.count",
        "cap.shared",
    ),
    _m(
        "gets-cached-per-client",
        kv_dict.GetsCachedPerClient,
        kv_dict.CachedReadsKV,
        SEM,
        "test_every_operation_answers_right_after_another_clients_write",
        "cap.shared",
        "version.exact-match",
    ),
    _m(
        "listings-cached-per-client",
        kv_dict.ListingsCachedPerClient,
        kv_dict.CachedReadsKV,
        SEM,
        "test_every_operation_answers_right_after_another_clients_write",
        "cap.shared",
        "list.reflects-writes",
    ),
    _m(
        "conditions-ignore-expiry",
        kv_dict.ConditionsIgnoreExpiry,
        kv_dict.LateEvictionKV,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "delete-many-counts-expired-items",
        kv_dict.DeleteManyCountsExpiredItems,
        kv_dict.LateEvictionKV,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "short-keys-only-page-ends-the-listing",
        kv_dict.ShortKeysOnlyPageEndsTheListing,
        kv_dict.KeysOnlyByteCappedListingKV,
        SEM,
        "test_a_listing_of_a_megabyte_of_key_names",
        "list.pages",
    ),
    _m(
        "keys-compared-pad-space",
        kv_dict.KeysComparedPadSpace,
        D,
        SEM,
        "test_odd_but_valid_keys_round_trip_and_list_exactly",
        "key.one-to-one",
    ),
    _m(
        "keys-lose-trailing-dots",
        kv_dict.KeysLoseTrailingDots,
        D,
        SEM,
        "test_odd_but_valid_keys_round_trip_and_list_exactly",
        "key.one-to-one",
    ),
    _m(
        "lock-kept-by-a-cancelled-call",
        kv_dict.LockKeptByACancelledCall,
        kv_dict.LockedKV,
        CAN,
        "test_next_call_after_cancelled_get_gets_its_own_answer",
        "cancel.healthy-after",
    ),
    _m(
        "versions-from-a-short-hash",
        kv_dict.VersionsFromAShortHash,
        D,
        SEM,
        "test_versions_of_one_key_never_repeat_over_many_writes",
        "put.returns-version",
    ),
    _m(
        "names-cut-to-200-bytes",
        kv_dict.NamesCutTo200Bytes,
        D,
        SEM,
        SHAPES,
        "key.one-to-one",
    ),
    _m(
        "sends-keys-it-does-not-hold",
        kv_dict.SendsKeysItDoesNotHold,
        kv_dict.ShortKeysKV,
        SEM,
        "test_a_valid_key_the_storage_does_not_hold_is_refused_as_invalid",
        "error.invalid-key",
    ),
    _m(
        "keep-alive-cancelled-not-awaited",
        kv_dict.KeepAliveCancelledNotAwaited,
        kv_dict.KeepAliveKV,
        "lifecycle",
        "test_aclose_returns_with_nothing_of_the_storage_still_running",
        "hygiene.no-task-left",
    ),
    _m(
        "writer-thread-not-joined",
        kv_dict.WriterThreadNotJoined,
        kv_dict.WriterThreadKV,
        "lifecycle",
        "test_aclose_returns_with_nothing_of_the_storage_still_running",
        "hygiene.no-thread-left",
    ),
    _m(
        "extension-not-doubled",
        kv_dict.ExtensionNotDoubled,
        D,
        SEM,
        "test_keys_named_like_an_adapters_own_records_round_trip_and_list_exactly",
        "key.one-to-one",
    ),
    _m(
        "short-page-ends-the-listing",
        kv_dict.ShortPageEndsTheListing,
        kv_dict.ByteCappedListingKV,
        SEM,
        "test_every_write_mode_on_large_values",
        "list.pages",
    ),
    _m(
        "large-values-list-their-manifest",
        kv_dict.LargeValuesListTheirManifest,
        D,
        SEM,
        "test_every_write_mode_on_large_values",
        "list.prefix-only",
    ),
    _m(
        "large-values-checked-then-written",
        kv_dict.LargeValuesCheckedThenWritten,
        D,
        CON,
        "test_conditional_races_on_large_values_have_one_winner",
        "put.conditional.one-winner",
    ),
    _m(
        "close-drops-data-under-calls-in-flight",
        kv_dict.DropsDataUnderCallsInFlight,
        D,
        "lifecycle",
        "test_aclose_with_every_operation_in_flight",
        "close.in-flight",
    ),
    _m(
        "closed-writes-answer-storage-closed",
        kv_dict.ClosedWritesAnswerStorageClosed,
        kv_dict.ServerKV,
        "lifecycle",
        "test_aclose_with_every_operation_in_flight",
        "close.in-flight",
        make=lambda cls: Target(
            cls, name=cls.__name__, hold=kv_dict.WriteLock(), settle_window=SETTLE
        ),
    ),
    _m(
        "aclose-returns-under-held-writes",
        kv_dict.ClosesUnderHeldWrites,
        kv_dict.ServerKV,
        "lifecycle",
        "test_aclose_with_every_operation_in_flight",
        "close.in-flight",
        make=lambda cls: Target(
            cls, name=cls.__name__, hold=kv_dict.WriteLock(), settle_window=SETTLE
        ),
    ),
    _m(
        "call-goes-on-after-close",
        kv_dict.GoesOnAfterClose,
        kv_dict.LazyClientKV,
        "lifecycle",
        "test_aclose_while_a_fresh_storage_opens",
        "close.in-flight",
        "close.releases",
    ),
    _m(
        "large-values-in-parts-lose-a-byte",
        kv_dict.LargeValuesInPartsLoseAByte,
        D,
        SEM,
        "test_values_of_every_size_class_round_trip",
        "put.round-trip",
    ),
    _m(
        "item-limit-counts-the-value-only",
        kv_dict.ItemLimitCountsTheValueOnly,
        kv_dict.ItemSizedOffloadKV,
        SEM,
        "test_values_of_every_size_class_round_trip",
        "put.round-trip",
    ),
    _m(
        "part-sized-by-the-raw-value",
        kv_dict.PartSizedByTheRawValue,
        kv_dict.EscapedStatementKV,
        SEM,
        "test_values_of_every_size_class_round_trip",
        "put.round-trip",
    ),
    _m(
        "chunk-count-off-by-one",
        kv_dict.ChunkCountOffByOne,
        kv_dict.ChunkedValuesKV,
        SEM,
        "test_values_of_every_size_class_round_trip",
        "put.round-trip",
    ),
    _m(
        "cancelled-multipart-leaves-parts",
        kv_dict.ChunkedValue,
        D,
        CAN,
        "test_cancelled_put_is_whole_or_absent",
        "cancel.whole-or-absent",
    ),
    _m(
        "batch-fails-on-odd-version",
        adapters.NumericVersionBatch,
        adapters.GroupCommit,
        BAD,
        "test_bad_if_match_version_fails_only_its_own_call",
        "error.own-call",
    ),
    _m(
        "ttl-declared-never-expires",
        kv_dict.NeverExpires,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "ttl-never-applied-declared-when-opened-with-it",
        kv_dict.NeverExpiresDeclaredWhenOpenedWithIt,
        kv_dict.DeclaresTtlWhenOpenedWithIt,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "ttl-expiry-lost-on-reopen",
        kv_dict.ExpiriesLostOnReopen,
        kv_dict.DurableExpiringKV,
        CAP,
        "test_declared_ttl_holds_across_a_reopen",
        "ttl.across-reopen",
    ),
    _m(
        "ttl-counted-from-the-first-write",
        kv_dict.TtlFromTheFirstWrite,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_keeps_a_key_until_ttl_after_its_last_write",
        "ttl.not-early",
    ),
    _m(
        "if-match-keeps-the-expiry",
        kv_dict.IfMatchKeepsTheExpiry,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_keeps_a_key_until_ttl_after_its_last_write",
        "ttl.not-early",
    ),
    _m(
        "expired-keys-swept-by-reads-only",
        kv_dict.ExpiredKeysSweptByReadsOnly,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_expired_keys_are_gone_to_writes_before_any_read",
        "ttl.expires",
    ),
    _m(
        "ttl-of-the-first-client",
        kv_dict.TtlOfTheFirstClient,
        kv_dict.SharedExpiringKV,
        CAP,
        "test_declared_ttl_is_the_writing_storages_beside_one_without",
        "ttl.expires",
    ),
    _m(
        "ttl-in-whole-seconds",
        kv_dict.TtlInWholeSeconds,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_of_a_fraction_of_a_second_keeps_a_key_that_long",
        "ttl.not-early",
    ),
    _m(
        "if-match-drops-the-expiry",
        kv_dict.IfMatchDropsTheExpiry,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "create-sets-no-expiry",
        kv_dict.CreateSetsNoExpiry,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "parts-keep-their-first-expiry",
        kv_dict.PartsKeepTheirFirstExpiry,
        kv_dict.ExpiringPartsKV,
        CAP,
        "test_declared_ttl_keeps_a_key_until_ttl_after_its_last_write",
        "ttl.not-early",
    ),
    _m(
        "expired-items-end-the-listing",
        kv_dict.ExpiredItemsEndTheListing,
        kv_dict.LateEvictionKV,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "expired-keys-found-but-by-get",
        kv_dict.ExpiredKeysStillListed,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_expires_keys",
        "ttl.expires",
    ),
    _m(
        "revision-expires-with-the-key",
        kv_dict.RevisionExpiresWithTheKey,
        kv_dict.RevisionedExpiringKV,
        CAP,
        "test_declared_ttl_versions_after_an_expiry_never_repeat_earlier_ones",
        "version.never-repeats",
    ),
    _m(
        "refused-writes-renew-the-expiry",
        kv_dict.RefusedWritesRenewTheExpiry,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_is_not_renewed_by_refused_writes",
        "ttl.expires",
    ),
    _m(
        "create-keeps-the-deadline-a-delete-left",
        kv_dict.CreateKeepsTheDeadlineADeleteLeft,
        kv_dict.ExpiringDictKV,
        CAP,
        "test_declared_ttl_starts_again_for_a_key_deleted_and_written_again",
        "ttl.not-early",
    ),
    _m(
        "expiry-timers-per-client",
        kv_dict.ExpiryTimersPerClient,
        kv_dict.SharedExpiringKV,
        CAP,
        "test_declared_ttl_starts_again_for_a_key_another_client_writes",
        "ttl.not-early",
    ),
    _m(
        "writes-behind",
        kv_dict.WritesBehind,
        D,
        "lifecycle",
        "test_g3_sibling_failure_keeps_completed_saves",
        "runner.g3-sibling-failure",
    ),
    _m(
        "async-with-does-not-close",
        kv_plain.ExitDoesNotClose,
        P,
        SEM,
        "test_async_with_closes_the_storage",
        "close.context-manager",
    ),
    _m(
        "async-with-swallows-errors",
        kv_dict.ExitSwallowsErrors,
        D,
        SEM,
        "test_async_with_closes_the_storage",
        "close.context-manager",
    ),
    Mutant(
        "socket-errors-escape",
        ("error.unavailable",),
        "lifecycle",
        "test_get_while_the_backend_is_down_raises_storage_unavailable",
        lambda: netkv.netkv_target(netkv.NetKVRawErrors, name="NetKVRawErrors"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVRawErrors),
    ),
    Mutant(
        "refused-connect-escapes",
        ("error.unavailable",),
        "lifecycle",
        "test_every_operation_where_nothing_listens_raises_storage_unavailable",
        lambda: netkv.netkv_target(
            netkv.NetKVRefusedConnectEscapes, name="NetKVRefusedConnectEscapes"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVRefusedConnectEscapes),
    ),
    Mutant(
        "conditional-put-down-is-precondition",
        ("error.unavailable",),
        "lifecycle",
        "test_put_while_the_backend_is_down_raises_storage_unavailable",
        lambda: netkv.netkv_target(
            netkv.NetKVConditionalErrorsAsPrecondition,
            name="NetKVConditionalErrorsAsPrecondition",
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVConditionalErrorsAsPrecondition),
    ),
    Mutant(
        "conditional-delete-down-is-false",
        ("error.unavailable",),
        "lifecycle",
        "test_delete_while_the_backend_is_down_raises_storage_unavailable",
        lambda: netkv.netkv_target(
            netkv.NetKVConditionalDeleteDownIsFalse, name="NetKVConditionalDeleteDownIsFalse"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVConditionalDeleteDownIsFalse),
    ),
    Mutant(
        "batch-fails-only-if-every-request-fails",
        ("error.unavailable", "delete-many.count"),
        "lifecycle",
        "test_delete_many_whose_backend_goes_down_partway_raises_storage_unavailable",
        lambda: netkv.netkv_target(
            netkv.NetKVBatchFailsOnlyIfEveryRequestFails,
            name="NetKVBatchFailsOnlyIfEveryRequestFails",
        ),
        lambda: netkv.netkv_target(netkv.NetKVBatchStorage, name="NetKVBatchStorage"),
        _doc(netkv.NetKVBatchFailsOnlyIfEveryRequestFails),
    ),
    Mutant(
        "redis-refusal-is-not-found",
        ("error.unavailable",),
        "lifecycle",
        "test_each_operation_while_the_backend_answers_only_errors_raises_storage_unavailable",
        lambda: redis_standalone_target(storage_class=error_answers.RedisRefusalIsNotFound),
        lambda: redis_standalone_target(name="RedisStorage"),
        _doc(error_answers.RedisRefusalIsNotFound),
    ),
    Mutant(
        "postgres-refusal-is-not-found",
        ("error.unavailable",),
        "lifecycle",
        "test_each_operation_while_the_backend_answers_only_errors_raises_storage_unavailable",
        lambda: error_answers.pg_target(error_answers.PostgresRefusalIsNotFound),
        lambda: error_answers.pg_target(),
        _doc(error_answers.PostgresRefusalIsNotFound),
    ),
    Mutant(
        "s3-error-answer-is-not-found",
        ("error.unavailable",),
        "lifecycle",
        "test_each_operation_while_the_backend_answers_only_errors_raises_storage_unavailable",
        lambda: error_answers.moto_target(error_answers.S3ErrorAnswerIsNotFound),
        lambda: error_answers.moto_target(name="S3Storage"),
        _doc(error_answers.S3ErrorAnswerIsNotFound),
    ),
    Mutant(
        "s3-error-answer-fails-the-condition",
        ("error.unavailable",),
        "lifecycle",
        "test_each_operation_while_the_backend_answers_only_errors_raises_storage_unavailable",
        lambda: error_answers.moto_target(error_answers.S3ErrorAnswerFailsTheCondition),
        lambda: error_answers.moto_target(name="S3Storage"),
        _doc(error_answers.S3ErrorAnswerFailsTheCondition),
    ),
    Mutant(
        "s3-error-answer-ends-the-listing",
        ("error.unavailable", "list.pages"),
        "lifecycle",
        "test_each_operation_while_the_backend_answers_only_errors_raises_storage_unavailable",
        lambda: error_answers.moto_target(error_answers.S3ErrorAnswerEndsTheListing),
        lambda: error_answers.moto_target(name="S3Storage"),
        _doc(error_answers.S3ErrorAnswerEndsTheListing),
    ),
    Mutant(
        "get-reads-its-bytes-by-a-second-request",
        ("put.atomic", "put.returns-version"),
        CON,
        "test_a_get_with_another_clients_write_in_each_of_its_gaps_returns_one_put_whole",
        lambda: netkv.netkv_target(netkv.NetKVGetInTwoRequests, name="NetKVGetInTwoRequests"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVGetInTwoRequests),
    ),
    Mutant(
        "conditional-write-checks-then-writes-by-two-requests",
        ("put.conditional.one-winner", "put.if-match.stale", "delete.conditional.one-winner"),
        CON,
        "test_each_write_with_another_clients_write_in_each_of_its_gaps_loses_neither",
        lambda: netkv.netkv_target(netkv.NetKVChecksThenWrites, name="NetKVChecksThenWrites"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVChecksThenWrites),
    ),
    Mutant(
        "delete-checks-then-deletes-by-two-requests",
        ("delete.one-true",),
        CON,
        "test_each_write_with_another_clients_write_in_each_of_its_gaps_loses_neither",
        lambda: netkv.netkv_target(netkv.NetKVDeleteChecksFirst, name="NetKVDeleteChecksFirst"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVDeleteChecksFirst),
    ),
    Mutant(
        "listing-fetches-every-page-by-offset-first",
        ("list.concurrent-writes", "list.pages"),
        CON,
        "test_a_listing_with_another_clients_writes_in_each_of_its_gaps_yields_each_key_once",
        lambda: netkv.netkv_target(
            netkv.NetKVListsEveryPageByOffsetFirst, name="NetKVListsEveryPageByOffsetFirst"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVListsEveryPageByOffsetFirst),
    ),
    Mutant(
        "put-reads-its-version-back-by-a-second-request",
        ("put.returns-version",),
        CON,
        "test_each_write_with_another_clients_write_in_each_of_its_gaps_loses_neither",
        lambda: netkv.netkv_target(
            netkv.NetKVPutReadsItsVersionBack, name="NetKVPutReadsItsVersionBack"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVPutReadsItsVersionBack),
    ),
    Mutant(
        "deadline-for-the-reply-only",
        ("error.healthy-after",),
        CAN,
        "test_a_large_put_whose_link_stops_moving_ends_by_its_own_deadline",
        lambda: netkv.netkv_target(
            netkv.NetKVDeadlineForTheReplyOnly, name="NetKVDeadlineForTheReplyOnly"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVDeadlineForTheReplyOnly),
    ),
    Mutant(
        "two-step-write-cancelled-keeps-its-connection",
        ("cancel.no-late-landing", "cancel.healthy-after"),
        CAN,
        "test_each_write_cancelled_in_each_of_its_gaps_is_whole_or_absent",
        lambda: netkv.netkv_target(
            netkv.NetKVTwoStepKeepsItsConnection, name="NetKVTwoStepKeepsItsConnection"
        ),
        lambda: netkv.netkv_target(netkv.NetKVTwoStepStorage, name="NetKVTwoStepStorage"),
        _doc(netkv.NetKVTwoStepKeepsItsConnection),
    ),
    Mutant(
        "goodbye-on-close",
        ("close.backend-down",),
        "lifecycle",
        "test_aclose_while_the_backend_is_down_returns_and_releases_everything",
        lambda: netkv.netkv_target(netkv.NetKVGoodbyeOnClose, name="NetKVGoodbyeOnClose"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVGoodbyeOnClose),
    ),
    Mutant(
        "goodbye-on-close-waits-for-a-held-server",
        ("close.backend-down",),
        "cancellation",
        "test_aclose_while_the_backend_is_held_returns_promptly",
        lambda: netkv.netkv_target(netkv.NetKVGoodbyeOnClose, name="NetKVGoodbyeOnClose"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVGoodbyeOnClose),
    ),
    Mutant(
        "keeps-a-failed-setup",
        ("error.unavailable",),
        "lifecycle",
        "test_first_call_while_the_backend_is_down_raises_and_the_storage_recovers",
        lambda: netkv.netkv_target(netkv.NetKVKeepsAFailedSetup, name="NetKVKeepsAFailedSetup"),
        lambda: netkv.netkv_target(netkv.NetKVSetsUpAgain, name="NetKVSetsUpAgain"),
        _doc(netkv.NetKVKeepsAFailedSetup),
    ),
    Mutant(
        "client-shared-and-closed-by-the-first",
        ("close.other-storages",),
        "lifecycle",
        "test_closing_one_storage_leaves_another_open",
        lambda: netkv.netkv_target(netkv.NetKVSharedClient, name="NetKVSharedClient"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVSharedClient),
    ),
    Mutant(
        "parts-switched-to-before-stored",
        ("error.unavailable", "put.atomic"),
        "lifecycle",
        "test_put_whose_backend_goes_down_partway_leaves_the_key_whole",
        lambda: netkv.netkv_target(netkv.NetKVPartsManifestFirst, name="NetKVPartsManifestFirst"),
        lambda: netkv.netkv_target(netkv.NetKVPartsStorage, name="NetKVPartsStorage"),
        _doc(netkv.NetKVPartsManifestFirst),
    ),
    Mutant(
        "parts-read-until-one-fails",
        ("error.unavailable", "put.round-trip"),
        "lifecycle",
        "test_get_whose_backend_goes_down_partway_never_answers_part_of_a_value",
        lambda: netkv.netkv_target(
            netkv.NetKVPartsReadUntilOneFails, name="NetKVPartsReadUntilOneFails"
        ),
        lambda: netkv.netkv_target(netkv.NetKVPartsStorage, name="NetKVPartsStorage"),
        _doc(netkv.NetKVPartsReadUntilOneFails),
    ),
    Mutant(
        "later-page-error-ends-the-listing",
        ("error.unavailable", "list.pages"),
        "lifecycle",
        "test_list_whose_next_page_finds_the_backend_down_raises_storage_unavailable",
        lambda: netkv.netkv_target(
            netkv.NetKVLaterPageErrorEndsListing, name="NetKVLaterPageErrorEndsListing"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVLaterPageErrorEndsListing),
    ),
    Mutant(
        "write-resent-after-a-lost-reply",
        ("error.outcome-unknown",),
        "lifecycle",
        LOST_REPLY,
        lambda: netkv.netkv_target(netkv.NetKVResendsWrites, name="NetKVResendsWrites"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVResendsWrites),
    ),
    Mutant(
        "repeat-takes-a-conflict-for-its-own",
        ("error.outcome-unknown",),
        "lifecycle",
        LOST_REQUEST,
        lambda: netkv.netkv_target(
            netkv.NetKVRepeatTakesAConflictForItsOwn, name="NetKVRepeatTakesAConflictForItsOwn"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVRepeatTakesAConflictForItsOwn),
    ),
    Mutant(
        "repeat-takes-nothing-for-its-own-delete",
        ("error.outcome-unknown",),
        "lifecycle",
        LOST_REQUEST,
        lambda: netkv.netkv_target(
            netkv.NetKVRepeatTakesNothingForItsOwn, name="NetKVRepeatTakesNothingForItsOwn"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVRepeatTakesNothingForItsOwn),
    ),
    Mutant(
        "timed-out-call-keeps-its-connection",
        ("error.healthy-after",),
        "lifecycle",
        TIMED_OUT,
        lambda: netkv.netkv_target(
            netkv.NetKVTimeoutKeepsTheConnection, name="NetKVTimeoutKeepsTheConnection"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVTimeoutKeepsTheConnection),
    ),
    Mutant(
        "cursor-restarts-after-a-reconnect",
        ("list.pages",),
        "lifecycle",
        "test_a_listing_whose_connections_reset_between_pages_yields_each_key_once",
        lambda: netkv.netkv_target(
            netkv.NetKVCursorRestartsAfterReconnect, name="NetKVCursorRestartsAfterReconnect"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVCursorRestartsAfterReconnect),
    ),
    Mutant(
        "claims-to-settle-without-a-deadline",
        ("cancel.no-late-landing",),
        "cancellation",
        "test_put_cancelled_while_its_request_is_on_a_slow_link_never_lands_later",
        lambda: netkv.netkv_target(netkv.NetKVClaimsToSettle, name="NetKVClaimsToSettle"),
        lambda: netkv.netkv_target(netkv.NetKVFencedStorage, name="NetKVFencedStorage"),
        _doc(netkv.NetKVClaimsToSettle),
    ),
    Mutant(
        "keys-in-the-databases-collation",
        ("list.order",),
        "semantics",
        "test_list_returns_keys_in_ascending_order",
        lambda: pg_collation.icu_postgres_target(pg_collation.KeysInTheDatabasesCollation),
        lambda: pg_collation.icu_postgres_target(PostgresStorage),
        _doc(pg_collation.KeysInTheDatabasesCollation),
    ),
    Mutant(
        "closed-calls-answer-storage-closed",
        ("close.in-flight", "error.outcome-unknown"),
        "lifecycle",
        "test_a_write_that_aclose_cut_off_after_its_server_applied_it_says_so",
        lambda: netkv.netkv_target(
            netkv.NetKVClosedCallsAnswerStorageClosed, name="NetKVClosedCallsAnswerStorageClosed"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVClosedCallsAnswerStorageClosed),
    ),
    Mutant(
        "sends-on-a-connection-the-server-closed",
        ("error.idle-closed",),
        "lifecycle",
        "test_every_operation_after_the_server_closed_its_idle_connections_answers",
        lambda: netkv.netkv_target(
            netkv.NetKVSendsOnAClosedConnection, name="NetKVSendsOnAClosedConnection"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVSendsOnAClosedConnection),
    ),
    Mutant(
        "two-step-write-fenced-at-its-statement",
        ("cancel.no-late-landing",),
        "cancellation",
        "test_put_cancelled_while_its_request_is_on_a_slow_link_never_lands_later",
        lambda: netkv.netkv_target(netkv.NetKVTwoStepFencedApart, name="NetKVTwoStepFencedApart"),
        lambda: netkv.netkv_target(netkv.NetKVTwoStepStorage, name="NetKVTwoStepStorage"),
        _doc(netkv.NetKVTwoStepFencedApart),
    ),
    Mutant(
        "two-step-write-resent-after-its-commit",
        ("error.outcome-unknown",),
        "lifecycle",
        LOST_REPLY,
        lambda: netkv.netkv_target(
            netkv.NetKVTwoStepResendsWrites, name="NetKVTwoStepResendsWrites"
        ),
        lambda: netkv.netkv_target(netkv.NetKVTwoStepStorage, name="NetKVTwoStepStorage"),
        _doc(netkv.NetKVTwoStepResendsWrites),
    ),
    Mutant(
        "aclose-forgets-the-busy-connection",
        ("close.releases",),
        "lifecycle",
        "test_aclose_with_every_operation_in_flight",
        lambda: netkv.netkv_target(
            netkv.NetKVForgetsTheBusyConnection, name="NetKVForgetsTheBusyConnection"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVForgetsTheBusyConnection),
    ),
    _m(
        "one-client-lock-declared-shared",
        kv_files.LocksOneClient,
        kv_files.SharedFilesKV,
        CON,
        "test_conditional_races_across_two_clients_have_one_winner",
        "put.conditional.one-winner",
        "cap.shared",
        make=_FILES,
    ),
    _m(
        "delete-many-takes-no-lock",
        kv_files.DeleteManyTakesNoLock,
        kv_files.SharedFilesKV,
        CON,
        "test_delete_many_racing_if_match_puts_leaves_every_key_deleted",
        "delete-many.each-atomic",
        make=_FILES,
    ),
    _m(
        "overwrite-deletes-then-inserts",
        kv_sqlite.OverwriteDeletesThenInserts,
        kv_sqlite.WalSqliteKV,
        CON,
        SECOND_READER,
        "put.atomic",
        make=_SQL,
    ),
    _m(
        "get-reads-bytes-and-version-apart",
        kv_sqlite.GetReadsTwice,
        kv_sqlite.SqliteKV,
        CON,
        SECOND_READER,
        "put.returns-version",
        make=_SQL,
    ),
    _m(
        "listing-cache-marked-after-its-scan",
        kv_files.ListsFromAStaleCache,
        kv_files.SharedFilesKV,
        CON,
        "test_listings_started_after_a_put_completed_show_it_while_writes_go_on",
        "list.reflects-writes",
        make=_FILES,
    ),
    _m(
        "listing-snapshot-outlives-a-cut-short-listing",
        kv_sqlite.ListsInOneSnapshot,
        kv_sqlite.WalSqliteKV,
        SEM,
        "test_listings_after_one_cut_short_show_later_writes",
        "list.reflects-writes",
        make=_SQL,
    ),
    _m(
        "aclose-cancelled-leaves-worker-thread",
        close_bugs.ClosesThenShutsDown,
        close_bugs.ShutsDownInFinally,
        HYG,
        "test_aclose_cancelled_at_any_wait_still_releases_everything",
        "close.releases",
        "hygiene.no-thread-left",
        make=_SQL,
    ),
    _m(
        "delete-many-counts-unswept-expired-items",
        ttl_index.DeleteManyCountsUnsweptItems,
        ttl_index.ListingSweepsExpiredKV,
        CAP,
        "test_declared_ttl_delete_many_counts_no_expired_key_before_any_read",
        "delete-many.count",
        "ttl.expires",
    ),
    _m(
        "expiry-set-by-a-second-request",
        ttl_index.ExpirySetByASecondRequest,
        ttl_index.ExpiryInTheWrite,
        CAP,
        "test_declared_ttl_cancelled_put_leaves_no_key_without_its_expiry",
        "cancel.whole-or-absent",
        "ttl.expires",
    ),
    _m(
        "listing-scans-past-its-prefix",
        ttl_index.ListingScansPastItsPrefix,
        ttl_index.ListingStopsPastItsPrefix,
        CAP,
        "test_declared_indexed_list_is_flat_in_the_number_of_keys",
        "cap.indexed-list",
    ),
    Mutant(
        "aclose-drop-not-in-finally",
        ("close.in-flight", "close.releases"),
        "cancellation",
        "test_aclose_with_a_call_the_backend_does_not_answer_leaves_nothing_running",
        lambda: netkv.netkv_target(
            netkv.NetKVAcloseDropNotInFinally, name="NetKVAcloseDropNotInFinally"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVAcloseDropNotInFinally),
    ),
    Mutant(
        "aclose-drop-skipped-when-cancelled",
        ("close.releases",),
        "lifecycle",
        "test_aclose_cancelled_while_calls_are_in_flight_still_releases_everything",
        lambda: netkv.netkv_target(
            netkv.NetKVAcloseDropSkippedWhenCancelled, name="NetKVAcloseDropSkippedWhenCancelled"
        ),
        lambda: netkv.netkv_target(
            netkv.NetKVLeavesTheConnectionToAclose, name="NetKVLeavesTheConnectionToAclose"
        ),
        _doc(netkv.NetKVAcloseDropSkippedWhenCancelled),
    ),
    Mutant(
        "pool-slot-lost-to-a-failed-connect",
        ("error.unavailable",),
        "lifecycle",
        "test_calls_beyond_the_pool_size_while_the_backend_is_down_leave_the_storage_answering",
        lambda: netkv.netkv_target(
            netkv.NetKVPoolSlotLostToAFailedConnect, name="NetKVPoolSlotLostToAFailedConnect"
        ),
        lambda: netkv.netkv_target(netkv.NetKVPoolSlots, name="NetKVPoolSlots"),
        _doc(netkv.NetKVPoolSlotLostToAFailedConnect),
    ),
    Mutant(
        "unsent-write-reported-as-outcome-unknown",
        ("error.outcome-unknown",),
        "lifecycle",
        "test_every_operation_where_nothing_listens_raises_storage_unavailable",
        lambda: netkv.netkv_target(
            netkv.NetKVUnsentWriteIsOutcomeUnknown, name="NetKVUnsentWriteIsOutcomeUnknown"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVUnsentWriteIsOutcomeUnknown),
    ),
    Mutant(
        "connection-closed-gracefully",
        ("close.releases",),
        "cancellation",
        "test_aclose_with_a_large_put_stalled_on_the_link_closes_its_socket_at_once",
        lambda: netkv.netkv_target(netkv.NetKVClosesGracefully, name="NetKVClosesGracefully"),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVClosesGracefully),
    ),
    Mutant(
        "lost-write-reported-as-nothing-happened",
        ("error.outcome-unknown",),
        "lifecycle",
        LOST_REPLY,
        lambda: netkv.netkv_target(
            netkv.NetKVLostWriteIsUnavailable, name="NetKVLostWriteIsUnavailable"
        ),
        lambda: netkv.netkv_target(netkv.NetKVStorage, name="NetKVStorage"),
        _doc(netkv.NetKVLostWriteIsUnavailable),
    ),
    _m(
        "listing-index-built-by-the-first-write",
        kv_dict.ListingIndexBuiltByTheFirstWrite,
        kv_dict.DurableDictKV,
        SEM,
        "test_every_operation_answers_right_as_the_first_call_of_a_fresh_storage",
        "list.reflects-writes",
    ),
    _m(
        "continuation-kept-on-the-storage",
        kv_dict.ContinuationOnTheStorage,
        D,
        SEM,
        "test_interleaved_listings_each_get_their_own_keys",
        "list.pages",
        "list.prefix-only",
        "list.start-after",
    ),
    _m(
        "server-cursors-named-per-client",
        kv_dict.ServerCursorsNamedPerClient,
        kv_dict.ServerCursorsKV,
        CON,
        "test_interleaved_listings_of_two_clients_each_get_their_own_keys",
        "list.pages",
    ),
    _m(
        "listing-cache-kept-by-create",
        kv_dict.ListingCacheKeptByCreate,
        kv_dict.CachedListingsKV,
        SEM,
        "test_every_operation_answers_right_after_every_kind_of_write",
        "list.reflects-writes",
    ),
    _m(
        "listing-cache-kept-by-delete-many",
        kv_dict.ListingCacheKeptByDeleteMany,
        kv_dict.CachedListingsKV,
        SEM,
        "test_every_operation_answers_right_after_every_kind_of_write",
        "list.reflects-writes",
    ),
    _m(
        "listing-pages-by-offset",
        kv_dict.PagesByOffset,
        D,
        CON,
        "test_paged_listing_under_concurrent_writes_returns_each_lasting_key_once",
        "list.concurrent-writes",
    ),
)
"""Every mutant of the corpus."""

AWAITING: dict[str, str] = {}
"""Killers that other work on issue 17 adds to the suite, by name, with what adds them; a
mutant waiting for one is checked once it exists (its test says so until then)."""

UNPROVEN: dict[str, str] = {
    "runner.g1-snapshot": "kept by the runner (it encodes at completion), not by an adapter",
    "runner.g2-replay": "kept by the runner, not by an adapter",
    "runner.g4-cancel-prompt": "rests on cancel.prompt, proven by its own mutants",
    "runner.g5-hygiene": "rests on the hygiene clauses, proven by their own mutants",
    "runner.g6-pause": "rests on put.atomic and cancel.whole-or-absent",
    "runner.g7-isolation": "kept by the runner, not by an adapter",
    "runner.g9-loud-save": "kept by the runner, not by an adapter",
}
"""Clauses no mutant proves, with the reason."""


def by_name(name: str) -> Mutant:
    """The mutant called ``name``.

    Raises:
        KeyError: no such mutant (the message lists the names).
    """
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise KeyError(f"no mutant {name!r}; the corpus has {', '.join(m.name for m in MUTANTS)}")


def sample(day: datetime.date | None = None, size: int = 2) -> list[Mutant]:
    """``size`` mutants for one CI run, rotating through the corpus by the day of the year."""
    day = day or datetime.date.today()
    start = (day.timetuple().tm_yday * size) % len(MUTANTS)
    return [MUTANTS[(start + i) % len(MUTANTS)] for i in range(size)]


def after_run() -> None:
    """Close what the leaking mutants kept open on purpose, once a run has seen it."""
    while adapters._KEPT:
        adapters._KEPT.pop().close()
    kv_sqlite.close_kept()
    kv_files.close_open_files()
    kv_sqlite.stop_checkpointers()
    netkv.close_forgotten()
