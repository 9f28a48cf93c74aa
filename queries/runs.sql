-- name: runs
-- The runs of the database (trace_runs: the ranks of one capture level or directory), with what a report page or
-- an export needs to name and select them: ranks, world size, GPUs, capture level, steps by phase and batch
-- sizes, whether the ranks' clocks were aligned (rank_offsets) and how well (comm_alignment).
-- reads: trace_runs, traces, steps, rank_offsets, comm_alignment
-- params: none
-- grain: one row per run
with step_counts as (
    select
        trace_runs.run_id,
        count(*) filter (where not steps.is_empty) as steps,
        count(*) filter (where steps.phase = 'decode' and not steps.is_empty) as decode_steps,
        bool_or(steps.is_inferred) as inferred,
        list_sort(list(distinct steps.batch_size) filter (where steps.batch_size is not null and not steps.is_empty))
            as batch_sizes
    from steps
    join trace_runs using (trace_id)
    group by all
),

offsets as (
    select run_id, count(*) as aligned_ranks, max(abs(offset_ns)) as max_offset_ns
    from rank_offsets
    group by all
)

select
    trace_runs.run_id,
    count(distinct trace_runs.rank) as ranks,
    any_value(trace_runs.world_size) as world_size,
    list_sort(list(distinct trace_runs.rank)) as rank_list,
    string_agg(distinct traces.device_name, ', ' order by traces.device_name) as devices,
    any_value(traces.capture_dir) as capture_dir,
    any_value(traces.level) as level,
    any_value(traces.concurrency) as concurrency,
    coalesce(any_value(step_counts.steps), 0) as steps,
    coalesce(any_value(step_counts.decode_steps), 0) as decode_steps,
    coalesce(any_value(step_counts.inferred), false) as inferred,
    any_value(step_counts.batch_sizes) as batch_sizes,
    coalesce(any_value(offsets.aligned_ranks), 0) as aligned_ranks,
    any_value(offsets.max_offset_ns) as max_offset_ns,
    any_value(comm_alignment.alignment) as alignment,
    any_value(comm_alignment.residual_p90_us) as residual_p90_us
from trace_runs
join traces using (trace_id)
left join step_counts using (run_id)
left join offsets using (run_id)
left join comm_alignment using (run_id)
group by trace_runs.run_id
order by trace_runs.run_id
