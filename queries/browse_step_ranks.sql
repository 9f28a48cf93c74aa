-- name: browse_step_ranks
-- The same step on every rank of the run (traces of the same capture level, else of the same folder): per rank
-- its trace and, when that trace has the step, its phase, batch size and GPU wall time.
-- reads: trace_runs, traces, steps
-- params: $trace_id, $step_index
-- grain: one row per trace of the run, the given one included
with run_traces as (  -- a run as trace_runs defines it (one definition for reports and TUI)
    select trace_id, rank, run_id as run_key
    from trace_runs
),

same_run as (
    select run_traces.trace_id, run_traces.rank
    from run_traces
    join run_traces as this_trace on this_trace.run_key = run_traces.run_key
    where this_trace.trace_id = $trace_id
)

select
    same_run.trace_id,
    same_run.rank,
    steps.step_index is not null as has_step,
    steps.phase,
    steps.batch_size,
    round(steps.wall_ns / 1e6, 4) as wall_ms
from same_run
left join steps on steps.trace_id = same_run.trace_id and steps.step_index = $step_index
order by same_run.rank nulls first, same_run.trace_id
