-- name: compare_select
-- One side of `k25trace compare`: the steps it selects (a run, a capture level, some traces, a rank, a batch size,
-- or everything; NULL parameters select all; empty steps and front-end traces left out), once, for the other
-- compare_* queries of that side to read; compare_select_drop.sql drops it when the side is read.
-- creates: _compare_selection (temp table)
-- reads: selected_steps (macro), traces, trace_runs
-- params: $phase, $run_id, $level, $trace_ids, $rank, $batch_size
-- grain: one row per selected step per trace (rank)
create or replace temp table _compare_selection as
select
    coalesce(trace_runs.run_id, traces.path) as run_id,
    traces.level,
    steps.trace_id,
    steps.rank,
    steps.step_index,
    steps.phase,
    steps.batch_size,
    steps.wall_ns,
    steps.busy_ns,
    steps.idle_ns,
    steps.overlap_ns,
    steps.kernel_count
from selected_steps($phase, $rank, null) as steps
join traces using (trace_id)
left join trace_runs using (trace_id)
where not traces.is_frontend
    and ($run_id is null or trace_runs.run_id = $run_id)
    and ($level is null or traces.level = $level)
    and ($trace_ids is null or list_contains($trace_ids, steps.trace_id))
    and ($batch_size is null or steps.batch_size = $batch_size);
