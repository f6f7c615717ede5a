"""The regression corpus: every query or run that ever showed a mismatch with plain Spark or a lost or doubled row
has a fixed, small case in the default suite (``make test``), named here with what found it.

The cases themselves live beside the code they test; this module checks that each one still exists and that the
default suite selects it (not marked slow or bench), so that a case moved to ``-m slow`` to save time fails here
instead of silently leaving the net.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = "tests/verify/test_spark_sources.py::test_sparks_batches_and_rows"
SPLIT = "tests/verify/test_one_stream_split.py::test_sparks_rows_when_one_stream_is_split_by_filters"
SHAPES = (
    "tests/verify/test_query_shapes.py::test_selections_above_the_stateful_node_are_picked_in_arrow_only_when_they_only_"
    "select"
)

# (what found it, the test's node id)
CORPUS = (
    ("issue 61: one stream split into a self-join's sides kept no row", f"{SPLIT}[the issue's self-join, files]"),
    (
        "issue 61: the self-join with its state on the executors",
        "tests/verify/test_one_stream_split.py::test_the_self_join_with_its_state_on_the_executors"
        "[the issue's self-join, files]",
    ),
    ("issue 61: a union of one stream's branches", f"{SPLIT}[a union of the two branches, aggregated]"),
    (
        "issue 61: a filter copied into a union's later branch was refused",
        f"{SPLIT}[two streams unioned below one withWatermark, a key filter above the aggregation]",
    ),
    (
        "misa fuzz --deployments seed 520: a row a static join drops still moves Spark's watermark",
        f"{SOURCES}[a stream-static join drops a row that still moves Spark's watermark]",
    ),
    (
        "issue 63 (an independent generator, twice): a key first seen without event time, forgotten by Spark",
        f"{SOURCES}[dropDuplicatesWithinWatermark, a key first seen without event time, "
        "forgotten at the first eviction]",
    ),
    (
        "misa fuzz --deployments seed 1122: a keyless row Spark filters below the watermark",
        f"{SOURCES}[two streams joined, a keyless row that Spark filters below the watermark]",
    ),
    (
        "misa fuzz --deployments seed 20124 (Kafka): a filter Spark infers for a join's other side only in batches "
        "where the filtered side has no input",
        "tests/jobs/test_pushdown.py::"
        "test_a_filter_spark_infers_only_in_batches_where_the_other_side_has_no_input_is_refused",
    ),
    (
        "39e4f6b: a filter on one join side that Spark infers for the other",
        f"{SOURCES}[two streams joined, a filter on one side that Spark infers for the other]",
    ),
    (
        "39e4f6b: a filter on a group key above the aggregation",
        f"{SOURCES}[a filter on a group key above the aggregation]",
    ),
    (
        "misa fuzz --deployments seed 2559: adaptive execution changed a join's row order",
        f"{SOURCES}[a deduplication over a Python source joined with a static table]",
    ),
    (
        "misa fuzz --deployments seed 504: a batch 0 planned for misa's request source alone",
        "tests/misa/runtime/test_no_data_batches.py::"
        "test_a_first_batch_planned_for_the_request_source_alone_is_one_spark_does_not_run",
    ),
    (
        "misa fuzz --from-query seed 9508: a join's residual condition dropped by column picks",
        f"{SHAPES}[a self-join with a residual condition (a where misa adds), then its columns (runs in Spark)]",
    ),
    (
        "misa fuzz --from-query seed 9522 (shrunk): Spark's watermark read before the hint job ran",
        "tests/verify/test_differential_queries.py::test_spark_watermark_is_read_after_the_batchs_hint_job_ran",
    ),
    (
        "misa fuzz --from-query seed 10307: a count over a dropDuplicates of an array key read the plan's attribute",
        "tests/verify/test_chained_key_types.py::test_a_count_per_key_of_every_type_over_a_deduplication",
    ),
    (
        "misa fuzz --from-query seed 10763: a join below a count judged late rows by a watermark Spark's batch without "
        "data had moved, and on a side whose event time Spark prunes",
        "tests/verify/test_chained_operators.py::"
        "test_a_join_in_a_chain_judges_late_rows_by_the_watermark_of_sparks_batch_without_data",
    ),
    (
        "misa fuzz --from-query seed 9115: sessions of object aggregates only",
        "tests/misa/operators/test_sessions.py::test_an_aggregation_of_object_aggregates_only_has_sessions_without_cells",
    ),
    (
        "soak seed 45, iteration 66: a damaged older DFS version no local copy repairs",
        "tests/misa/runtime/test_recovery.py::"
        "test_a_damaged_older_version_no_local_copy_can_repair_is_forgotten_on_a_new_machine",
    ),
    (
        "soak seed 45, iteration 71: the last mirror of Spark's log failed after the query ended",
        "tests/verify/test_soak.py::test_a_failure_of_the_last_mirror_of_sparks_log_after_the_query_ended_starts_the_query_again",
    ),
    (
        "soak: a source entry no offsets entry planned merged two source batches",
        "tests/misa/runtime/test_recovery.py::test_a_source_entry_no_offsets_entry_planned_is_forgotten_on_resume",
    ),
    (
        "soak: an older retained version named an SST compaction had dropped",
        "tests/misa/runtime/test_recovery.py::test_the_heal_covers_every_retained_version_with_a_local_copy_not_only_the_target",
    ),
    (
        "soak: a restart with nothing to replay left a damaged DFS copy",
        "tests/misa/runtime/test_recovery.py::test_a_restart_with_nothing_to_replay_heals_the_dfs_copy_from_the_local_one",
    ),
    (
        "soak with worker processes: a batch's offsets mirrored before the commit of the batch before",
        "tests/misa/runtime/test_spark_mirror.py::"
        "test_a_step_over_two_batches_never_mirrors_a_batchs_offsets_before_the_commit_of_the_batch_before",
    ),
    (
        "seeds 51, 299, 1208, 72, 347, 1195 (2026-11-30): a null struct of non-nullable fields in the deltas; and a "
        "cast array (vector_sum) and a struct of a literal, whose SQL text Spark writes without the cast and names",
        "tests/verify/test_complex_casts.py::test_casts_to_arrays_and_structs_and_structs_of_literals_give_sparks_rows",
    ),
    (
        "seeds 757, 1199 (2026-11-30): approx_top_k's ties over sliding windows follow the rows' order",
        "tests/misa/operators/test_pane_order.py::"
        "test_an_aggregate_of_the_rows_order_is_refused_over_sliding_windows_naming_the_reason[approx_top_k]",
    ),
)


def default_selection(node_ids: list[str]) -> set[str]:
    """The node ids among ``node_ids`` that the default suite (setup.cfg's ``-m "not slow and not bench"``) runs."""
    files = sorted({node.split("::")[0] for node in node_ids})
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {line.strip() for line in collected.stdout.splitlines() if "::" in line}


def test_every_case_of_the_corpus_runs_in_the_default_suite():
    wanted = [node for _, node in CORPUS]
    selected = default_selection(wanted)
    missing = [f"{why}: {node}" for why, node in CORPUS if node not in selected]
    assert not missing, "not in make test's suite (gone, renamed or marked slow):\n" + "\n".join(missing)
