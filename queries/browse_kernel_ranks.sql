-- name: browse_kernel_ranks
-- How one kernel's duration varies across the ranks of a run: per trace of the run that $trace_id belongs to,
-- calls, steps it ran in (approximate count), calls per step and min/mean/max µs with the standard deviation.
-- reads: trace_runs, gpu_events
-- params: $trace_id, $name_id
-- grain: one row per trace (rank) of the run that ran the kernel
with run_traces as (  -- a run as trace_runs defines it (one definition for reports and TUI)
    select trace_id, rank, run_id as run_key
    from trace_runs
),

same_run as (
    select run_traces.trace_id
    from run_traces
    join run_traces as this_trace on this_trace.run_key = run_traces.run_key
    where this_trace.trace_id = $trace_id
)

select
    gpu_events.trace_id,
    any_value(gpu_events.rank) as rank,
    count(*) as calls,
    approx_count_distinct(gpu_events.step_index) as steps,
    round(count(*) / nullif(approx_count_distinct(gpu_events.step_index), 0), 2) as calls_per_step,
    round(min(gpu_events.dur_ns) / 1e3, 2) as min_us,
    round(avg(gpu_events.dur_ns) / 1e3, 2) as mean_us,
    round(max(gpu_events.dur_ns) / 1e3, 2) as max_us,
    round(stddev_samp(gpu_events.dur_ns) / 1e3, 2) as stddev_us
from gpu_events
where gpu_events.name_id = $name_id
    and gpu_events.trace_id in (select trace_id from same_run)
group by gpu_events.trace_id
order by rank nulls first, gpu_events.trace_id
