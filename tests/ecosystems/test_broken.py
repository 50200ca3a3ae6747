"""The ecosystem groups find real bugs: each broken saver or storage fails the test named for
its bug, with a message that says how to fix it, and its correct twin passes that test.

``CHECKPOINTKIT_PROOF_RUNS=10`` repeats every case ten times (one run by default).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from checkpointkit.conformance import run
from checkpointkit.conformance.ecosystems.harness import RUNNER_FAILED

from . import broken

RUNS = int(os.environ.get("CHECKPOINTKIT_PROOF_RUNS", "1"))

# case: (broken class, correct twin, ecosystem, the test that must fail, words of its reason)
CASES: dict[str, tuple[type, type, str, str, str | tuple[str, ...]]] = {
    "latest-cached-past-aput-writes": (
        broken.LatestCachedPastWritesSaver,
        broken.CachedLatestSaver,
        "langgraph",
        "test_sweep_every_read_after_every_kind_of_write",
        "aget_tuple latest right after aput_writes",
    ),
    "latest-cached-past-delete-for-runs": (
        broken.LatestCachedPastRunDeletionSaver,
        broken.CachedLatestRunsSaver,
        "langgraph",
        "test_sweep_every_read_after_every_kind_of_write",
        "aget_tuple latest right after adelete_for_runs",
    ),
    "limit-before-filter": (
        broken.LimitBeforeFilterSaver,
        broken.HeldSaver,
        "langgraph",
        "test_sweep_every_combination_of_listing_options",
        "alist filter + limit (2)",
    ),
    "finds-an-id-in-any-thread": (
        broken.FindsIdInAnyThreadSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_checkpoint_id_is_found_only_in_its_own_thread_and_namespace",
        ("aget_tuple of checkpoint", "never by the id alone"),
    ),
    "missing-namespace-is-none": (
        broken.MissingNamespaceIsNoneSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_config_without_a_namespace_reads_the_root_namespace",
        ("aget_tuple latest gave None", 'get("checkpoint_ns", "")'),
    ),
    "stores-only-passed-metadata": (
        broken.StoresOnlyPassedMetadataSaver,
        broken.HeldSaver,
        "langgraph",
        "test_config_metadata_is_kept_as_langgraph_merges_it",
        ("key 'user_id' missing", "get_checkpoint_metadata(config, metadata)"),
    ),
    "list-ignores-config-checkpoint-id": (
        broken.ListIgnoresConfigIdSaver,
        broken.HeldSaver,
        "langgraph",
        "test_sweep_every_combination_of_listing_options",
        ("alist checkpoint id (3 of 6):", "add checkpoint_id = ? to the query"),
    ),
    "latest-cached-past-sync-writes": (
        broken.LatestCachedPastSyncWritesSaver,
        broken.CachedLatestSaver,
        "langgraph",
        "test_sweep_every_read_after_every_kind_of_write",
        "aget_tuple latest right after put:",
    ),
    "reply-left-on-the-connection-saver": (
        broken.ReplyLeftOnConnectionSaver,
        broken.OneConnectionSaver,
        "langgraph",
        "test_sweep_every_read_cancelled_while_held",
        "the aget_tuple latest that followed answered",
    ),
    "reply-left-on-the-connection-storage": (
        broken.ReplyLeftOnConnectionStorage,
        broken.OneConnectionStorage,
        "agent-framework",
        "test_sweep_every_read_cancelled_while_held",
        "the get_latest that followed answered",
    ),
    "latest-fast-path-skips-the-filter": (
        broken.LatestFastPathSaver,
        broken.HeldSaver,
        "langgraph",
        "test_sweep_every_combination_of_listing_options",
        "alist filter + limit (1)",
    ),
    "sync-list-reads-one-page": (
        broken.SyncListsOnePageSaver,
        broken.PagedSaver,
        "langgraph",
        "test_sweep_threads_of_every_length",
        "list gave 100 of 101",
    ),
    "latest-cached-per-instance": (
        broken.LatestCachedPerInstanceSaver,
        broken.CachedLatestSaver,
        "langgraph",
        "test_sweep_every_read_after_another_instances_write",
        "aget_tuple latest right after aput through another instance",
    ),
    "reads-cached-per-instance": (
        broken.ReadsCachedPerInstanceStorage,
        broken.CachedReadsStorage,
        "agent-framework",
        "test_sweep_every_read_after_another_instances_write",
        "get_latest right after delete through another instance",
    ),
    "delete-thread-deletes-its-copies": (
        broken.DeletesCopiesSaver,
        broken.CopyingSaver,
        "langgraph",
        "test_sweep_every_read_after_every_kind_of_write",
        "right after source deleted",
    ),
    "delete-thread-leaves-writes": (
        broken.DeleteLeavesWritesSaver,
        broken.CopyingSaver,
        "langgraph",
        "test_sweep_every_read_after_every_kind_of_write",
        (
            "aget_tuple by id right after deleted, then copied again",
            "aget_tuple by id right after deleted, then put again",
            "delete the thread's pending writes",
        ),
    ),
    "reads-cached-past-delete": (
        broken.CachedPastDeleteStorage,
        broken.CachedReadsStorage,
        "agent-framework",
        "test_sweep_every_read_after_every_kind_of_write",
        "get_latest right after delete",
    ),
    "alist-returns-cached-objects": (
        broken.ListsCachedObjectsSaver,
        broken.HeldSaver,
        "langgraph",
        "test_mutating_a_loaded_checkpoint_changes_nothing_stored",
        "alist",
    ),
    "next-version-unpadded": (
        broken.UnpaddedVersionSaver,
        broken.HeldSaver,
        "langgraph",
        "test_next_versions_keep_increasing_as_langgraph_compares_them",
        "pad the number",
    ),
    "next-version-unpadded-stops-a-loop": (
        broken.UnpaddedVersionSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_loop_of_fifteen_updates_runs_every_step",
        ("n = 8", "pad the number"),
    ),
    "threads-found-by-prefix": (
        broken.ThreadPrefixSaver,
        broken.ThreadsComparedSaver,
        "langgraph",
        "test_threads_whose_ids_share_a_prefix_stay_apart",
        "key a thread by its whole id",
    ),
    "threads-matched-by-like": (
        broken.ThreadsMatchedByLikeSaver,
        broken.ThreadsComparedSaver,
        "langgraph",
        "test_sweep_thread_ids_of_every_shape",
        ("wildcard twins: alist of", "escape LIKE"),
    ),
    "threads-case-folded": (
        broken.ThreadsCaseFoldedSaver,
        broken.ThreadsComparedSaver,
        "langgraph",
        "test_sweep_thread_ids_of_every_shape",
        "case twins: alist of",
    ),
    "threads-padded": (
        broken.ThreadsPaddedSaver,
        broken.ThreadsComparedSaver,
        "langgraph",
        "test_sweep_thread_ids_of_every_shape",
        "trailing-space twins: alist of",
    ),
    "threads-normalized": (
        broken.ThreadsNormalizedSaver,
        broken.ThreadsComparedSaver,
        "langgraph",
        "test_sweep_thread_ids_of_every_shape",
        "normalization twins: alist of",
    ),
    "threads-cut-to-255": (
        broken.ThreadsCutTo255Saver,
        broken.ThreadsComparedSaver,
        "langgraph",
        "test_sweep_thread_ids_of_every_shape",
        "long twins: alist of",
    ),
    "workflows-matched-by-like": (
        broken.WorkflowsMatchedByLikeStorage,
        broken.WorkflowsComparedStorage,
        "agent-framework",
        "test_sweep_workflow_names_of_every_shape",
        "wildcard twins: list_checkpoint_ids of",
    ),
    "workflows-case-folded": (
        broken.WorkflowsCaseFoldedStorage,
        broken.WorkflowsComparedStorage,
        "agent-framework",
        "test_sweep_workflow_names_of_every_shape",
        "case twins: list_checkpoint_ids of",
    ),
    "dotted-filter-keys-nested": (
        broken.DottedFilterKeysNestedSaver,
        broken.FilterCheckedSaver,
        "langgraph",
        "test_sweep_metadata_filters_of_every_shape",
        "filter {'user.id': 'acme'}",
    ),
    "boolean-filter-as-text": (
        broken.BooleanFilterAsTextSaver,
        broken.FilterCheckedSaver,
        "langgraph",
        "test_sweep_metadata_filters_of_every_shape",
        "filter {'tenant': True}",
    ),
    "filter-of-one-thread-only": (
        broken.FilterOfOneThreadOnlySaver,
        broken.FilterCheckedSaver,
        "langgraph",
        "test_sweep_metadata_filters_of_every_shape",
        "alist(None) with filter {'source': 'input'}",
    ),
    "writes-keyed-by-channel": (
        broken.WritesKeyedByChannelSaver,
        broken.HeldSaver,
        "langgraph",
        "test_pending_writes_come_back_whole_and_in_order",
        "aget_tuple by id gave",
    ),
    "writes-newest-first": (
        broken.WritesNewestFirstSaver,
        broken.HeldSaver,
        "langgraph",
        "test_pending_writes_come_back_whole_and_in_order",
        "('log', 'b3'), ('other', {'n': 1}), ('log', 'b2')",
    ),
    "sync-put-writes-replaces": (
        broken.SyncPutWritesReplacesSaver,
        broken.HeldSaver,
        "langgraph",
        "test_parents_and_pending_writes_follow_langgraphs_rules",
        "by put_writes",
    ),
    "shared-write-values": (
        broken.SharedWriteValuesSaver,
        broken.HeldSaver,
        "langgraph",
        "test_mutating_a_loaded_checkpoint_changes_nothing_stored",
        "the write [1, 2, 99",
    ),
    "sync-list-boolean-filter-as-text": (
        broken.SyncListBooleanFilterAsTextSaver,
        broken.FilterCheckedSaver,
        "langgraph",
        "test_sweep_metadata_filters_of_every_shape",
        "list filter {'tenant': True}",
    ),
    "latest-blind-to-namespaces": (
        broken.NamespaceBlindLatestSaver,
        broken.HeldSaver,
        "langgraph",
        "test_each_namespace_has_its_own_latest",
        "filter by checkpoint_ns",
    ),
    "sync-latest-blind-to-namespaces": (
        broken.SyncLatestNamespaceBlindSaver,
        broken.HeldSaver,
        "langgraph",
        "test_each_namespace_has_its_own_latest",
        ("get_tuple latest of namespace ''", "in the sync methods as in the async ones"),
    ),
    "parent-config-without-namespace": (
        broken.ParentConfigWithoutNamespaceSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_subgraph_checkpoints_parent_config_names_its_namespace",
        ("aget_tuple latest: {'thread_id'", "'checkpoint_ns': ''", "build parent_config"),
    ),
    "namespaces-found-by-prefix": (
        broken.NamespacePrefixSaver,
        broken.NamespacesComparedSaver,
        "langgraph",
        "test_sweep_namespaces_of_every_shape",
        ("alist of namespace 'p:1': 6 checkpoints", "a key prefix needs a separator"),
    ),
    "namespace-bar-read-as-or": (
        broken.NamespaceAlternativesSaver,
        broken.NamespacesComparedSaver,
        "langgraph",
        "test_sweep_namespaces_of_every_shape",
        ("aget_tuple latest of namespace 'p:1|c:2': ", "(of namespace 'p:1')", "reads | as OR"),
    ),
    "latest-by-millisecond-score": (
        broken.LatestByMillisecondScoreStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_latest_is_the_newest_to_the_microsecond",
        "of three 300 µs apart",
    ),
    "list-checkpoints-returns-stored-objects": (
        broken.ListsStoredObjectsStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_mutating_a_loaded_checkpoint_changes_nothing_stored",
        "list_checkpoints",
    ),
    "latest-of-workflows-by-prefix": (
        broken.LatestByPrefixStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_get_latest_is_the_newest_by_timestamp",
        "the workflow's own",
    ),
    "chunks-read-back-in-text-order": (
        broken.ChunksInTextOrderSaver,
        broken.ChunkedSaver,
        "langgraph",
        "test_sweep_namespaces_listing_options_and_value_sizes",
        ("channel 'mib4' read back as 4,194,304 characters, not in order", "numeric order"),
    ),
    "aput-swallows-cancellation": (
        broken.SwallowsCancelSaver,
        broken.HeldSaver,
        "langgraph",
        "test_cancelled_aput_ends_promptly_while_held",
        "do not catch CancelledError",
    ),
    "aput-writes-after-cancel": (
        broken.WritesAfterCancelSaver,
        broken.HeldSaver,
        "langgraph",
        "test_cancelled_aput_does_not_land_later",
        "wait for it to end before raising CancelledError",
    ),
    "aput-writes-spawns-unawaited-task": (
        broken.UnawaitedTaskSaver,
        broken.HeldSaver,
        "langgraph",
        "test_every_operation_then_close_leaves_nothing_behind",
        ("pending", "await (or cancel and await) every task"),
    ),
    "aput-keeps-callers-object": (
        broken.ByReferenceSaver,
        broken.HeldSaver,
        "langgraph",
        "test_mutating_after_aput_changes_nothing_stored",
        "serialize (or deep-copy) the checkpoint inside aput",
    ),
    "aget-tuple-returns-stored-object": (
        broken.SharedLoadSaver,
        broken.HeldSaver,
        "langgraph",
        "test_mutating_a_loaded_checkpoint_changes_nothing_stored",
        "deserialize a new object on every aget_tuple",
    ),
    "latest-goes-backwards-under-two-instances": (
        broken.HeadGoesBackwardsSaver,
        broken.HeadSaver,
        "langgraph",
        "test_latest_is_the_newest_checkpoint_under_two_instances",
        "move a shared head only forward",
    ),
    "put-writes-loses-a-write-under-concurrency": (
        broken.LosesWritesSaver,
        broken.ListWritesSaver,
        "langgraph",
        "test_concurrent_put_writes_keep_every_write",
        "never read-modify-write a list",
    ),
    "read-sees-a-torn-checkpoint": (
        broken.TornSaver,
        broken.SplitSaver,
        "langgraph",
        "test_read_during_writes_is_never_torn",
        "publish a checkpoint only after its values",
    ),
    "deletes-a-thread-in-one-request": (
        broken.DeletesAThreadInOneRequestSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_thread_longer_than_a_backends_batch_is_listed_and_deleted_whole",
        "too many results to unpack",
    ),
    "put-writes-replaces-the-first-write": (
        broken.ReplacesFirstWriteSaver,
        broken.HeldSaver,
        "langgraph",
        "test_parents_and_pending_writes_follow_langgraphs_rules",
        "skip a regular write whose (task_id, idx) exists",
    ),
    "aput-never-awaits-a-coroutine": (
        broken.NeverAwaitsSaver,
        broken.HeldSaver,
        "langgraph",
        "test_every_operation_then_close_leaves_nothing_behind",
        ("never awaited", "await every coroutine it creates"),
    ),
    "save-swallows-cancellation": (
        broken.SwallowsCancelStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_cancelled_save_ends_promptly_while_held",
        "do not catch CancelledError",
    ),
    "save-lands-after-cancel": (
        broken.SavesAfterCancelStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_cancelled_save_does_not_land_later",
        "wait for it before raising CancelledError",
    ),
    "save-keeps-callers-object": (
        broken.ByReferenceStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_mutating_after_save_changes_nothing_stored",
        "never keep the caller's object",
    ),
    "latest-by-save-order": (
        broken.LatestBySaveOrderStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_latest_is_the_newest_under_two_instances",
        "order by timestamp, not by write time",
    ),
    "alist-reads-one-page": (
        broken.ListsOnePageSaver,
        broken.PagedSaver,
        "langgraph",
        "test_sweep_threads_of_every_length",
        ("alist gave 100 of 101", "follow the backend's continuation"),
    ),
    "delete-thread-deletes-one-page": (
        broken.DeletesOnePageSaver,
        broken.PagedSaver,
        "langgraph",
        "test_sweep_threads_of_every_length",
        ("adelete_thread left 1 of 101", "follow the backend's continuation"),
    ),
    "pending-writes-read-one-page": (
        broken.ReadsOnePageOfWritesSaver,
        broken.PagedSaver,
        "langgraph",
        "test_sweep_threads_of_every_length",
        ("pending write of a checkpoint holding 101", "100 of 101"),
    ),
    "list-checkpoints-reads-one-page": (
        broken.ListsOnePageStorage,
        broken.PagedStorage,
        "agent-framework",
        "test_sweep_workflows_of_every_length",
        ("list_checkpoints gave 100 of 101", "get_latest gave an older one"),
    ),
    "drops-lineage": (
        broken.DropsLineageStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_every_field_comes_back_from_every_read",
        ("load after save: previous_checkpoint_id None", "iteration_count 0, not 3"),
    ),
    "drops-messages": (
        broken.DropsMessagesStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_every_field_comes_back_from_every_read",
        ("load after save: messages {}, not {'executor-1'", "encode_checkpoint_value"),
    ),
    "state-through-json": (
        broken.JsonStateStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_every_field_comes_back_from_every_read",
        ("load after save: state['bytes']", "not json.dumps"),
    ),
    "upsert-updates-state-only": (
        broken.UpsertStateOnlyStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_every_field_comes_back_from_every_read",
        "load after saving the id again: workflow_name",
    ),
    "listings-projected": (
        broken.ListingsProjectedStorage,
        broken.WorkflowsComparedStorage,
        "agent-framework",
        "test_every_field_comes_back_from_every_read",
        "list_checkpoints after save: previous_checkpoint_id None",
    ),
    "partitioned-by-workflow": (
        broken.PartitionedByWorkflowStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_saving_an_id_again_replaces_it",
        ("listed 1 times under", "key the record by the id alone"),
    ),
    "delete-cascades-down-the-chain": (
        broken.CascadingDeleteStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_deleting_a_checkpoint_keeps_the_rest_of_its_chain",
        ("listed [], loaded [] (previous ids []), latest None", "no ON DELETE CASCADE"),
    ),
    "checkpoint-ids-case-folded": (
        broken.IdsCaseFoldedStorage,
        broken.IdsComparedStorage,
        "agent-framework",
        "test_sweep_checkpoint_ids_of_every_shape",
        ("case twins: load of", "-Case': the checkpoint of", "exact strings"),
    ),
    "delete-by-id-prefix": (
        broken.DeletesByPrefixStorage,
        broken.IdsComparedStorage,
        "agent-framework",
        "test_sweep_checkpoint_ids_of_every_shape",
        ("trailing-space twins: load of", "was deleted: nothing", "not every key it begins"),
    ),
    "sync-list-drives-alist-from-the-calling-thread": (
        broken.SyncListDrivesAlistSaver,
        broken.CursorListSaver,
        "langgraph",
        "test_listings_stopped_early_leave_nothing_behind",
        "There is no current event loop",
    ),
    "save-acknowledges-before-writing": (
        broken.WriteBehindStorage,
        broken.FileStorage,
        "agent-framework",
        "test_sigkill_mid_write_keeps_every_acknowledged_checkpoint",
        "make save return only after the write is durable",
    ),
    "prune-drops-subgraph-writes": (
        broken.PruneDropsSubgraphWritesSaver,
        broken.PruningSaver,
        "langgraph",
        "test_every_namespace_of_a_thread_is_copied_and_pruned_whole",
        (
            "after aprune keep_latest: aget_tuple latest of namespace 'p:1': pending writes {}",
            "group by checkpoint_ns",
        ),
    ),
    "prune-deletes-the-root-only": (
        broken.PruneDeletesRootOnlySaver,
        broken.PruningSaver,
        "langgraph",
        "test_every_namespace_of_a_thread_is_copied_and_pruned_whole",
        "after aprune delete: namespace 'p:1' still answers aget_tuple latest",
    ),
    "sync-copy-takes-the-root-only": (
        broken.SyncCopiesTheRootOnlySaver,
        broken.SyncFormsSaver,
        "langgraph",
        "test_every_namespace_of_a_thread_is_copied_and_pruned_whole",
        ("the copy by copy_thread: aget_tuple latest of namespace 'p:1'", "a sync form does"),
    ),
    "copy-takes-the-roots-writes-only": (
        broken.CopiesRootWritesOnlySaver,
        broken.PruningSaver,
        "langgraph",
        "test_every_namespace_of_a_thread_is_copied_and_pruned_whole",
        "the copy by acopy_thread: aget_tuple latest of namespace 'p:1': pending writes {}",
    ),
    "copy-takes-the-roots-values-only": (
        broken.CopiesRootValuesOnlySaver,
        broken.PruningSaver,
        "langgraph",
        "test_every_namespace_of_a_thread_is_copied_and_pruned_whole",
        "the copy by acopy_thread: aget_tuple by id of namespace 'p:1': another namespace's values",
    ),
    "copy-keeps-the-sources-parent-config": (
        broken.CopyParentNamesSourceSaver,
        broken.PruningSaver,
        "langgraph",
        "test_every_namespace_of_a_thread_is_copied_and_pruned_whole",
        (
            "the copy by acopy_thread: aget_tuple latest of namespace '': parent_config naming",
            "a copy's parent_config names the copy's thread",
        ),
    ),
    "listing-without-namespace-lists-the-root": (
        broken.ListsRootWithoutNamespaceSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_listing_without_a_namespace_gives_every_namespace",
        (
            "alist gave 2 of the thread's 4 checkpoints (none of namespaces ['p:1', 'p:1|c:2'])",
            "list gave 2 of",
        ),
    ),
    "before-looked-up-in-the-namespace": (
        broken.BeforeLookedUpInNamespaceSaver,
        broken.HeldSaver,
        "langgraph",
        "test_before_cuts_by_checkpoint_id_whatever_its_namespace",
        ("alist gave 3 of 1, 2 not expected", "checkpoint_id < ?"),
    ),
    "versions-padded-to-four-digits": (
        broken.VersionsPaddedToFourSaver,
        broken.HeldSaver,
        "langgraph",
        "test_next_versions_keep_increasing_as_langgraph_compares_them",
        "update 10000's version greater than '9999.",
    ),
    "metadata-numbers-as-doubles": (
        broken.MetadataNumbersAsDoublesSaver,
        broken.HeldSaver,
        "langgraph",
        "test_metadata_comes_back_as_put",
        ("'big' is 9007199254740992, not 9007199254740993", "keep integers exact"),
    ),
    "metadata-drops-none": (
        broken.MetadataDropsNoneSaver,
        broken.HeldSaver,
        "langgraph",
        "test_metadata_comes_back_as_put",
        "aget_tuple latest: key 'nothing' missing",
    ),
    "reads-values-in-one-batch": (
        broken.ReadsValuesInOneBatchSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_checkpoint_of_many_channels_and_writes_comes_back_whole",
        ("aget_tuple latest: 100 channel values, 900 lost", "send the unprocessed ones again"),
    ),
    "puts-values-in-one-batch": (
        broken.PutsValuesInOneBatchSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_checkpoint_of_many_channels_and_writes_comes_back_whole",
        "aget_tuple by id: 25 channel values, 975 lost",
    ),
    "writes-in-one-batch": (
        broken.WritesInOneBatchSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_checkpoint_of_many_channels_and_writes_comes_back_whole",
        "aget_tuple latest: writes 25 of 1000, 975 missing",
    ),
    "latest-by-timestamp-text": (
        broken.LatestByTimestampTextStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_latest_is_the_newest_whatever_its_utc_offset",
        ("get_latest gave the oldest checkpoint", "not by the ISO text"),
    ),
    "namespaces-cut-to-255": (
        broken.NamespacesCutTo255Saver,
        broken.NamespacesComparedSaver,
        "langgraph",
        "test_sweep_namespaces_of_every_shape",
        "deep twins: aget_tuple latest of namespace",
    ),
    "index-appended-after-a-check": (
        broken.IndexAppendedAfterCheckStorage,
        broken.IndexedStorage,
        "agent-framework",
        "test_saves_of_one_id_at_once_keep_it_once",
        ("listed more than once", "not a list appended to after a check"),
    ),
    "pending-writes-by-task-id": (
        broken.WritesByTaskIdSaver,
        broken.HeldSaver,
        "langgraph",
        "test_pending_writes_come_back_whole_and_in_order",
        ("gave the tasks in the order", "writes_sort_key"),
    ),
    "limit-per-namespace": (
        broken.LimitPerNamespaceSaver,
        broken.HeldSaver,
        "langgraph",
        "test_limit_counts_checkpoints_across_namespaces",
        ("limit=1, gave", "apply the limit once"),
    ),
    "lock-kept-by-a-cancelled-call": (
        broken.LockLeakSaver,
        broken.HeldSaver,
        "langgraph",
        "test_cancel_at_each_step_is_whole_or_absent",
        "the calls after a cancelled call must return",
    ),
    "emptied-channel-stored-as-none": (
        broken.EmptyAsNoneSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_channel_emptied_in_a_step_reads_back_absent",
        ("reads back absent", "never store it as the value None"),
    ),
    "parent-writes-cleared-by-a-child": (
        broken.ClearsParentWritesOnPutSaver,
        broken.HeldSaver,
        "langgraph",
        "test_pending_writes_stay_with_the_checkpoint_they_name",
        "keeps the writes put to it",
    ),
    "writes-filed-under-the-newest": (
        broken.WritesToHeadSaver,
        broken.HeldSaver,
        "langgraph",
        "test_pending_writes_stay_with_the_checkpoint_they_name",
        "keeps the writes put to it",
    ),
    "before-dropped-when-not-found": (
        broken.BeforeByLookupSaver,
        broken.HeldSaver,
        "langgraph",
        "test_before_naming_a_checkpoint_that_is_gone_still_cuts_by_id",
        "also when no checkpoint has it",
    ),
    "delta-history-by-listing": (
        broken.DeltaHistoryByListSaver,
        broken.HeldSaver,
        "langgraph",
        "test_delta_channel_history_follows_the_parent_chain",
        "follows the parent chain",
    ),
    "delta-history-with-the-targets-writes": (
        broken.DeltaHistoryIncludesTargetSaver,
        broken.HeldSaver,
        "langgraph",
        "test_delta_channel_history_follows_the_parent_chain",
        "follows the parent chain",
    ),
    "writes-one-request-each": (
        broken.PartialWritesOnCancelSaver,
        broken.HeldSaver,
        "langgraph",
        "test_cancelled_aput_writes_is_whole_or_absent",
        "all of its writes or none",
    ),
    "none-valued-writes-dropped": (
        broken.WritesNoneDroppedSaver,
        broken.HeldSaver,
        "langgraph",
        "test_writes_whose_value_is_none_come_back",
        "whose value is None come back",
    ),
    "thread-deleted-row-by-row": (
        broken.DeletePerRowSaver,
        broken.HeldSaver,
        "langgraph",
        "test_cancelled_delete_thread_leaves_each_checkpoint_whole_or_gone",
        "whole or gone",
    ),
    "live-values-stored-under-old-versions": (
        broken.StoresLiveValuesSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_channel_that_kept_its_version_keeps_its_value",
        "keeps the value stored with that version",
    ),
    # -- from a blind round: broken agent-framework storages the suite missed ------------------
    "cancelled-reads-swallowed": (
        broken.SwallowsCancelledReadStorage,
        broken.HeldEverywhereStorage,
        "agent-framework",
        "test_sweep_every_read_cancelled_while_held",
        "returned a value after cancel()",
    ),
    "cancelled-delete-swallowed": (
        broken.SwallowsCancelledDeleteStorage,
        broken.HeldEverywhereStorage,
        "agent-framework",
        "test_sweep_every_write_cancelled_while_held",
        "delete returned a value after cancel()",
    ),
    "cancelled-delete-lands-later": (
        broken.DeletesAfterCancelStorage,
        broken.HeldEverywhereStorage,
        "agent-framework",
        "test_cancelled_delete_does_not_land_later",
        "no longer loaded it",
    ),
    "index-listed-before-the-checkpoint": (
        broken.ListsTheIndexAloneStorage,
        broken.IndexedStorage,
        "agent-framework",
        "test_cancel_at_each_step_is_whole_or_absent",
        "list_checkpoint_ids lists",
    ),
    "workflows-found-by-a-prefix-scan": (
        broken.PrefixScanStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_sweep_workflow_names_of_every_shape",
        "prefix twins:",
    ),
    "delete-by-a-glob-of-the-id": (
        broken.GlobDeleteStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_sweep_checkpoint_ids_of_every_shape",
        "wildcard twins:",
    ),
    "delete-cuts-the-lineage": (
        broken.DeleteSetsNullStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_deleting_a_checkpoint_keeps_the_rest_of_its_chain",
        "(previous ids [None, ",
    ),
    "resaved-as-delete-and-insert": (
        broken.ResavedAsDeleteAndInsertStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_a_checkpoint_saved_again_reads_whole_throughout",
        "load raised WorkflowCheckpointException",
    ),
    "ids-of-numeric-affinity": (
        broken.NumericAffinityIdsStorage,
        broken.CanonicalIdsStorage,
        "agent-framework",
        "test_sweep_checkpoint_ids_of_every_shape",
        "number forms:",
    ),
    "ids-in-a-uuid-column": (
        broken.UuidColumnIdsStorage,
        broken.CanonicalIdsStorage,
        "agent-framework",
        "test_sweep_checkpoint_ids_of_every_shape",
        "uuid forms:",
    ),
    "listings-end-at-the-first-mebibyte": (
        broken.FirstMebibytePageStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_sweep_value_sizes",
        "list_checkpoint_ids gives",
    ),
    "stale-chunks-after-a-smaller-save": (
        broken.StaleChunksStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_sweep_value_sizes",
        "saved again with 1 KiB: load raised",
    ),
    "delete-data-first-listed-from-the-index": (
        broken.TwoStepDeleteListsTheIndexStorage,
        broken.TwoStepDeleteStorage,
        "agent-framework",
        "test_a_delete_cancelled_at_each_step_leaves_reads_that_agree",
        "list_checkpoint_ids lists",
    ),
    "version-in-a-numeric-column": (
        broken.VersionAsNumberStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_every_field_comes_back_from_every_read",
        "version '1.1', not '1.10'",
    ),
    "cancel-deletes-the-key": (
        broken.CancelDeletesTheKeyStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_a_cancelled_save_of_an_existing_id_keeps_the_old_or_the_new",
        "missing after a cancel at step",
    ),
    "channel-values-as-json": (
        broken.JsonChannelValuesSaver,
        broken.HeldSaver,
        "langgraph",
        "test_sweep_channel_values_of_every_shape",
        ("NaN: channel value nan read back as None", "pending write nan read back as None"),
    ),
    "state-in-a-json-column": (
        broken.JsonColumnStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_sweep_state_values_of_every_shape",
        ("NaN: nan loaded back as None", "NUL in a string"),
    ),
    # A third blind round (2026-12-06): savers on SQLite written from LangGraph's code.
    "filter-compared-as-text": (
        broken.FilterComparedAsTextSaver,
        broken.FilterCheckedSaver,
        "langgraph",
        "test_sweep_metadata_filters_of_every_shape",
        ("2 checkpoints", 'never compare their text: "7" is not 7'),
    ),
    "special-writes-by-position": (
        broken.SpecialWritesByPositionSaver,
        broken.HeldSaver,
        "langgraph",
        "test_parents_and_pending_writes_follow_langgraphs_rules",
        ("is kept beside its regular writes", "write None"),
    ),
    "delete-thread-leaves-values": (
        broken.DeleteLeavesValuesSaver,
        broken.HeldSaver,
        "langgraph",
        "test_a_deleted_threads_values_do_not_come_back",
        ("the deleting instance read {'secret': 'deleted data'", "a second instance read"),
    ),
    "latest-kept-by-reference": (
        broken.LatestKeptByReferenceSaver,
        broken.HeldSaver,
        "langgraph",
        "test_mutating_after_aput_changes_nothing_stored",
        "aget_tuple as the latest gave {'items': [1, 2, 3, 4, 5]",
    ),
    "latest-by-insertion": (
        broken.LatestByInsertionSaver,
        broken.HeldSaver,
        "langgraph",
        "test_latest_is_the_newest_checkpoint_under_two_instances",
        "the older checkpoint was put last",
    ),
    "lands-later-unless-closed": (
        broken.LandsLaterUnlessClosedSaver,
        broken.HeldSaver,
        "langgraph",
        "test_cancelled_aput_does_not_land_later",
        "a second instance saw it",
    ),
    # The same round's agent-framework storages on SQLite.
    "state-datetimes-to-utc": (
        broken.StateDatetimesToUtcStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_sweep_state_values_of_every_shape",
        "aware datetime (+05:30): datetime.datetime(2025, 3, 1, 9, 0, tzinfo=",
    ),
    "shares-loaded-values": (
        broken.SharesLoadedValuesStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_mutating_a_loaded_checkpoint_changes_nothing_stored",
        "'added 4'",
    ),
    "close-leaves-its-thread": (
        broken.CloseLeavesThreadStorage,
        broken.WorkerThreadStorage,
        "agent-framework",
        "test_every_operation_then_close_leaves_nothing_behind",
        "still running: storage-worker",
    ),
    "save-swallows-busy": (
        broken.SwallowsBusyStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_saves_held_then_released_store_what_they_were_given",
        "save 1 returned, and this instance finds nothing stored",
    ),
    "save-lands-later-unless-closed": (
        broken.SaveLandsLaterUnlessClosedStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_cancelled_save_does_not_land_later",
        "the hold released, the cancelled instance still open",
    ),
    "encodes-in-turn": (
        broken.EncodesInTurnStorage,
        broken.HeldStorage,
        "agent-framework",
        "test_saves_held_then_released_store_what_they_were_given",
        "save 2 stored {'items': ['first 2', 'changed after the call'], 'n': -1}",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_broken_target_fails_the_right_test_and_its_twin_passes(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECO_BROKEN_ROOT", str(tmp_path))
    bad, twin, ecosystem, test, words = CASES[case]
    for _ in range(RUNS):
        report = await run(broken.target(bad, ecosystem), pattern=test)
        result = report.result(test)
        assert result.outcome == "failed", f"{case}: {result.outcome}: {report.summary()}"
        for word in (words,) if isinstance(words, str) else words:
            assert word in result.reason, f"{case}: {result.reason}"
        good = await run(broken.target(twin, ecosystem), pattern=test)
        assert good.result(test).outcome == "passed", f"{case} twin: {good.summary()}"


async def test_a_failing_read_ends_the_suites_writer_so_hygiene_blames_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that finds a torn checkpoint fails the test while the suite's writer is
    still putting: the writer is cancelled and awaited (`together`), so the failure is the
    torn read alone, with no hygiene note that blames the saver for the suite's own task."""
    monkeypatch.setenv("ECO_BROKEN_ROOT", str(tmp_path))
    test = "test_read_during_writes_is_never_torn"
    report = await run(broken.target(broken.SlowTornSaver, "langgraph"), pattern=test)
    result = report.result(test)
    assert result.outcome == "failed", report.summary()
    assert "a checkpoint read while another is written must be whole" in result.reason
    assert "left something behind" not in result.reason, result.reason


async def test_a_storage_that_loses_messages_is_not_excused_as_the_runners_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph scenario, which agent-framework's runner fails on its own storage (it runs
    a completed executor again on resume), fails a storage that keeps no messages at an
    earlier promise (the resumed run does nothing): not excused as the runner's failure,
    where the correct twin is."""
    monkeypatch.setenv("ECO_BROKEN_ROOT", str(tmp_path))
    test = "test_graph_completed_step_survives_sibling_failure"
    bad = await run(broken.target(broken.DropsMessagesStorage, "agent-framework"), pattern=test)
    good = await run(broken.target(broken.HeldStorage, "agent-framework"), pattern=test)
    assert len(bad.results) == len(good.results) == 3
    for r in bad.results:
        assert r.outcome == "failed", bad.summary()
        assert "delivers the messages it holds in flight" in r.reason
        assert "fails this scenario at another promise" in r.reason
    for r in good.results:
        assert r.outcome == "skipped", good.summary()
        assert r.reason.startswith(RUNNER_FAILED), r.reason
