-- name: browse_traces
-- The traces the TUI can browse, with the run they belong to (trace_runs: capture directory and level, else the
-- folder the file came from, and world size) so that the ranks of one run can be found from any of them, the run's
-- name (run_labels.run_name: the capture directory's or the folder's name), and step counts by phase.
-- reads: traces, trace_runs, run_labels, steps
-- params: none
-- grain: one row per loaded trace
with step_counts as (
    select
        trace_id,
        count(*) as steps,
        count(*) filter (where phase = 'decode') as decode,
        count(*) filter (where phase = 'prefill') as prefill,
        count(*) filter (where phase = 'mixed') as mixed,
        count(*) filter (where phase = 'unknown') as unknown,
        count(*) filter (where is_empty) as empty
    from steps
    group by trace_id
),

final as (
    select
        traces.trace_id,
        coalesce(trace_runs.run_id, traces.path) as run_key,  -- a run as trace_runs defines it (a trace not yet analysed: itself)
        run_labels.run_name as run,
        traces.level,
        traces.concurrency,
        traces.rank,
        traces.world_size,
        traces.device_name,
        traces.file_name,
        traces.gpu_event_count,
        coalesce(step_counts.steps, 0) as steps,
        coalesce(step_counts.decode, 0) as decode,
        coalesce(step_counts.prefill, 0) as prefill,
        coalesce(step_counts.mixed, 0) as mixed,
        coalesce(step_counts.unknown, 0) as unknown,
        coalesce(step_counts.empty, 0) as empty
    from traces
    left join trace_runs using (trace_id)
    left join run_labels using (run_id)
    left join step_counts using (trace_id)
    where not traces.is_frontend
)

select * from final
order by run_key, level nulls first, rank nulls first, trace_id
