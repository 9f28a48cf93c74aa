-- name: compare_runs
-- The runs a side of `k25trace compare` can be picked from (a capture level is a run): per run (trace_runs.run_id)
-- its capture directory and level, ranks, GPUs, vLLM versions, trace ids, decode steps and decode batch sizes, and
-- its label (trace_runs.run_label).
-- Used to resolve `--a run=…` (an id, a label or a unique part of an id), to describe each side, and as the TUI
-- compare screen's list of runs.
-- reads: trace_runs, traces, steps
-- params: none
-- grain: one row per run
with step_counts as (
    select
        trace_id,
        count(*) filter (where not is_empty) as steps,
        count(*) filter (where phase = 'decode' and not is_empty) as decode_steps,
        list(distinct batch_size order by batch_size) filter (where phase = 'decode' and not is_empty
            and batch_size is not null) as decode_batch_sizes
    from steps
    group by trace_id
)

select
    trace_runs.run_id,
    any_value(traces.capture_dir) as capture_dir,
    any_value(traces.level) as level,
    any_value(traces.concurrency) as concurrency,
    count(*) as traces,
    count(distinct trace_runs.rank) as ranks,
    max(trace_runs.world_size) as world_size,
    string_agg(distinct traces.device_name, ', ' order by traces.device_name) as devices,
    string_agg(distinct traces.vllm_version, ', ' order by traces.vllm_version) as vllm_versions,
    list(trace_runs.trace_id order by trace_runs.rank, trace_runs.trace_id) as trace_ids,
    coalesce(sum(step_counts.steps), 0)::bigint as steps,
    coalesce(sum(step_counts.decode_steps), 0)::bigint as decode_steps,
    list_sort(list_distinct(flatten(list(coalesce(step_counts.decode_batch_sizes, []))))) as decode_batch_sizes,
    any_value(trace_runs.run_label) as label
from trace_runs
join traces using (trace_id)
left join step_counts using (trace_id)
where not traces.is_frontend
group by trace_runs.run_id
order by any_value(traces.capture_dir) nulls last, min(traces.concurrency) nulls last, trace_runs.run_id
