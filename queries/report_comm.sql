-- name: report_comm
-- AllReduce (and other collectives) across ranks, per run level and batch size: collectives per step, the
-- time per step each rank spends in them, split into transfer (the shortest duration of the paired kernels)
-- and wait (the rest: time spent waiting for the slowest rank; mean over ranks), the wait split by kind
-- (launch: at the step's first collective, the hosts started the step apart; gpu: at later collectives, GPU
-- work between collectives differed), start skew, the straggler (the rank whose lateness caused the most wait:
-- the wait it imposed on the others, per step, and its share of all wait) and, apart from it, the rank most
-- often last to arrive with how often; and how much to trust it all (comm_alignment: the clock alignment's p90
-- residual and 'good' | 'poor' | 'unpaired').
-- Runs without step markers pair their collectives over the whole trace (pairing = 'whole trace'; batch_size
-- NULL; wait_kind unknown, so launch + gpu wait is 0 there).
-- reads: phase_collectives (macro: collectives of selected_steps), trace_runs, traces, comm_alignment
-- params: $phase
-- grain: one row per (run, batch_size, category)
with selected as (
    -- batch_size -1 stands for "no batch size" (inferred steps) so that the joins below match it; shown as NULL
    select * from phase_collectives($phase)
),

per_collective as (
    select run_id, batch_size, min(step_index) as step_index, category, any_value(transfer_ns) as transfer_ns,
        any_value(skew_ns) as skew_ns, avg(wait_ns) as mean_wait_ns, any_value(wait_kind) as wait_kind,
        pair_step < 0 as whole_trace,
        arg_max(rank, is_late::int) as late_rank, count(*) as ranks
    from selected
    group by run_id, batch_size, pair_step, category, ordinal
),

per_step as (
    select
        run_id, batch_size, category, step_index,
        count(*) as calls, sum(transfer_ns) as transfer_ns, sum(mean_wait_ns) as mean_wait_ns,
        sum(mean_wait_ns) filter (where wait_kind = 'launch') as launch_wait_ns,
        sum(mean_wait_ns) filter (where wait_kind = 'gpu') as gpu_wait_ns,
        bool_or(whole_trace) as whole_trace,
        any_value(ranks) as ranks
    from per_collective
    group by all
),

late_counts as (
    select run_id, batch_size, category, late_rank, count(*) as times_late
    from per_collective
    group by all
),

last_ranks as (
    select run_id, batch_size, category,
        first(late_rank order by times_late desc, late_rank) as last_rank,  -- ties: the lowest rank
        max(times_late) * 100.0 / sum(times_late) as last_pct
    from late_counts
    group by all
),

caused as (
    select run_id, batch_size, category, rank, sum(caused_wait_ns) as caused_ns, count(distinct step_index) as steps
    from selected
    group by all
),

stragglers as (
    select run_id, batch_size, category,
        -- no wait at all: no straggler
        case when max(caused_ns) > 0 then first(rank order by caused_ns desc, rank) end as straggler_rank,
        case when max(caused_ns) > 0 then max(caused_ns) / max(steps) end as straggler_wait_ns_per_step,
        max(caused_ns) * 100.0 / nullif(sum(caused_ns), 0) as straggler_wait_pct
    from caused
    group by all
),

skews as (
    select run_id, batch_size, category,
        quantile_cont(skew_ns, 0.5) as skew_p50_ns, quantile_cont(skew_ns, 0.9) as skew_p90_ns,
        max(skew_ns) as skew_max_ns
    from per_collective
    group by all
)

select
    per_step.run_id,
    (select any_value(traces.level) from trace_runs join traces using (trace_id) where trace_runs.run_id = per_step.run_id) as level,
    nullif(per_step.batch_size, -1) as batch_size,
    per_step.category,
    case when any_value(per_step.whole_trace) then 'whole trace (no step markers)' else 'per step' end as pairing,
    count(*) as steps,
    any_value(per_step.ranks) as ranks,
    round(avg(per_step.calls), 2) as calls_per_step,
    round(avg(per_step.transfer_ns + per_step.mean_wait_ns) / 1e6, 4) as ms_per_step,
    round(avg(per_step.transfer_ns) / 1e6, 4) as transfer_ms_per_step,
    round(avg(per_step.mean_wait_ns) / 1e6, 4) as wait_ms_per_step,
    round(sum(per_step.mean_wait_ns) * 100.0 / nullif(sum(per_step.transfer_ns + per_step.mean_wait_ns), 0), 2) as wait_pct,
    round(avg(coalesce(per_step.launch_wait_ns, 0)) / 1e6, 4) as launch_wait_ms_per_step,
    round(avg(coalesce(per_step.gpu_wait_ns, 0)) / 1e6, 4) as gpu_wait_ms_per_step,
    round(any_value(skews.skew_p50_ns) / 1e3, 2) as skew_p50_us,
    round(any_value(skews.skew_p90_ns) / 1e3, 2) as skew_p90_us,
    round(any_value(skews.skew_max_ns) / 1e3, 2) as skew_max_us,
    any_value(stragglers.straggler_rank) as straggler_rank,
    round(any_value(stragglers.straggler_wait_ns_per_step) / 1e6, 4) as straggler_wait_ms_per_step,
    round(any_value(stragglers.straggler_wait_pct), 1) as straggler_wait_pct,
    any_value(last_ranks.last_rank) as last_rank,
    round(any_value(last_ranks.last_pct), 1) as last_pct,
    any_value(comm_alignment.alignment) as alignment,
    any_value(comm_alignment.residual_p90_us) as residual_p90_us
from per_step
join skews using (run_id, batch_size, category)
join stragglers using (run_id, batch_size, category)
join last_ranks using (run_id, batch_size, category)
left join comm_alignment using (run_id)
group by per_step.run_id, per_step.batch_size, per_step.category
order by per_step.run_id, per_step.batch_size, per_step.category
