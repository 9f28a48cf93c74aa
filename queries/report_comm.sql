-- name: report_comm
-- AllReduce (and other collectives) across ranks, per run level and batch size: collectives per step, the
-- time per step each rank spends in them, split into transfer (the shortest duration of the paired kernels)
-- and wait (the rest: time spent waiting for the slowest rank), start skew, and the straggler rank (the rank
-- most often last to start) with how often it is last.
-- reads: collectives, steps, trace_runs, traces
-- params: $phase
-- grain: one row per (run, batch_size, category)
with steps_of_run as (
    select trace_runs.run_id, steps.step_index, any_value(steps.batch_size) as batch_size, any_value(steps.phase) as phase
    from steps
    join trace_runs using (trace_id)
    where not steps.is_empty and ($phase = 'all' or steps.phase = $phase)
    group by all
),

per_collective as (
    select run_id, min(step_index) as step_index, category, any_value(transfer_ns) as transfer_ns,
        any_value(skew_ns) as skew_ns, avg(wait_ns) as mean_wait_ns, max(wait_ns) as max_wait_ns,
        arg_max(rank, is_late::int) as late_rank, count(*) as ranks
    from collectives
    group by run_id, pair_step, category, ordinal
),

per_step as (
    select
        steps_of_run.run_id, steps_of_run.batch_size, per_collective.category, per_collective.step_index,
        count(*) as calls, sum(transfer_ns) as transfer_ns, sum(mean_wait_ns) as mean_wait_ns, any_value(ranks) as ranks
    from per_collective
    join steps_of_run using (run_id, step_index)
    group by all
),

late_counts as (
    select steps_of_run.run_id, steps_of_run.batch_size, per_collective.category, per_collective.late_rank, count(*) as times_late
    from per_collective
    join steps_of_run using (run_id, step_index)
    group by all
),

stragglers as (
    select run_id, batch_size, category,
        arg_max(late_rank, times_late) as straggler_rank,
        max(times_late) * 100.0 / sum(times_late) as straggler_late_pct
    from late_counts
    group by all
),

skews as (
    select steps_of_run.run_id, steps_of_run.batch_size, per_collective.category,
        quantile_cont(per_collective.skew_ns, 0.5) as skew_p50_ns, quantile_cont(per_collective.skew_ns, 0.9) as skew_p90_ns,
        max(per_collective.skew_ns) as skew_max_ns
    from per_collective
    join steps_of_run using (run_id, step_index)
    group by all
)

select
    per_step.run_id,
    (select any_value(traces.level) from trace_runs join traces using (trace_id) where trace_runs.run_id = per_step.run_id) as level,
    per_step.batch_size,
    per_step.category,
    count(*) as steps,
    any_value(per_step.ranks) as ranks,
    round(avg(per_step.calls), 2) as calls_per_step,
    round(avg(per_step.transfer_ns + per_step.mean_wait_ns) / 1e6, 4) as ms_per_step,
    round(avg(per_step.transfer_ns) / 1e6, 4) as transfer_ms_per_step,
    round(avg(per_step.mean_wait_ns) / 1e6, 4) as wait_ms_per_step,
    round(sum(per_step.mean_wait_ns) * 100.0 / nullif(sum(per_step.transfer_ns + per_step.mean_wait_ns), 0), 2) as wait_pct,
    round(any_value(skews.skew_p50_ns) / 1e3, 2) as skew_p50_us,
    round(any_value(skews.skew_p90_ns) / 1e3, 2) as skew_p90_us,
    round(any_value(skews.skew_max_ns) / 1e3, 2) as skew_max_us,
    any_value(stragglers.straggler_rank) as straggler_rank,
    round(any_value(stragglers.straggler_late_pct), 1) as straggler_late_pct
from per_step
join skews using (run_id, batch_size, category)
join stragglers using (run_id, batch_size, category)
group by per_step.run_id, per_step.batch_size, per_step.category
order by per_step.run_id, per_step.batch_size, per_step.category
