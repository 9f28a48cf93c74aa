-- name: report_idle
-- Why the GPU is idle, per run and batch size (and capture level): per step, the GPU wall = busy + idle, the idle
-- split by cause (host-bound, after a host sync, launch overhead, device-bound, unknown: queries/gaps_build.sql;
-- step_idle adds them up per step), and the time between steps (from the previous step's last GPU activity to this
-- step's first), split into GPU idle by the same causes and GPU work of no step. Per rank and batch size, span =
-- wall + between exactly (when steps do not overlap); span_pct_between says how much of the GPU span is between
-- steps. Means over the steps of all ranks of the run (of one rank with $rank, one trace with $trace_id; NULL: all);
-- a step with no previous step contributes no between-step time (the previous step is the trace's, whatever the
-- filters).
-- reads: steps, selected_steps (macro), step_idle, trace_runs
-- params: $phase, $rank, $trace_id, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run, batch_size)
with per_step as (
    select
        trace_runs.run_id, steps.trace_id, steps.step_index, steps.batch_size, steps.wall_ns, steps.busy_ns,
        steps.idle_ns,
        -- every step with GPU work, empty ones included: the gap before a step starts at whichever came last
        greatest(steps.gpu_start_ns - lag(steps.gpu_end_ns) over (partition by steps.trace_id
            order by steps.gpu_start_ns, steps.step_index), 0) as gap_before_ns
    from steps
    left join trace_runs using (trace_id)
    where steps.gpu_start_ns is not null
),

gap_sums as (
    select trace_id, step_index, host_ns, sync_ns, launch_ns, device_ns, unknown_ns, between_idle_ns,
        between_host_ns, between_sync_ns, between_launch_ns, between_device_ns + between_unknown_ns as between_device_ns
    from step_idle
),

selected as (
    select per_step.*, gap_sums.* exclude (trace_id, step_index)
    from per_step
    semi join selected_steps($phase, $rank, $trace_id, of_batch_size := $batch_size, of_run_id := $run_id) as chosen
        using (trace_id, step_index)
    left join gap_sums using (trace_id, step_index)
)

select
    run_id,
    batch_size,
    count(*) as steps,
    round(avg(wall_ns) / 1e6, 4) as wall_ms,
    round(avg(busy_ns) / 1e6, 4) as busy_ms,
    round(avg(idle_ns) / 1e6, 4) as idle_ms,
    round(avg(coalesce(host_ns, 0)) / 1e6, 4) as host_ms,
    round(avg(coalesce(sync_ns, 0)) / 1e6, 4) as sync_ms,
    round(avg(coalesce(launch_ns, 0)) / 1e6, 4) as launch_overhead_ms,
    round(avg(coalesce(device_ns, 0)) / 1e6, 4) as device_ms,
    round(avg(coalesce(unknown_ns, 0)) / 1e6, 4) as unknown_ms,
    round(sum(coalesce(idle_ns, 0)) * 100.0 / nullif(sum(wall_ns), 0), 2) as idle_pct,
    round(avg(gap_before_ns) / 1e6, 4) as between_ms,
    round(avg(coalesce(between_host_ns, 0)) / 1e6, 4) as between_host_ms,
    round(avg(coalesce(between_sync_ns, 0)) / 1e6, 4) as between_sync_ms,
    round(avg(coalesce(between_launch_ns, 0)) / 1e6, 4) as between_launch_ms,
    round(avg(coalesce(between_device_ns, 0)) / 1e6, 4) as between_device_ms,
    round(avg(gap_before_ns - coalesce(between_idle_ns, 0)) / 1e6, 4) as between_busy_ms,
    round(sum(gap_before_ns) * 100.0 / nullif(sum(wall_ns) + sum(gap_before_ns), 0), 2) as between_pct_of_span
from selected
group by all
order by run_id, batch_size nulls first
