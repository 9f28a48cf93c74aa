-- name: report_comm
-- AllReduce (and other collectives) across ranks, per run level and batch size: collectives per step, the
-- time per step each rank spends in them, split into transfer (the shortest duration of the paired kernels)
-- and wait (the rest: time spent waiting for the slowest rank; mean over ranks), the wait split by kind
-- (launch: at the step's first collective, the hosts started the step apart; gpu: at later collectives, GPU
-- work between collectives differed), start skew, the straggler (the rank whose lateness caused the most wait:
-- the wait it imposed on the others, per step, and its share of all wait) and, apart from it, the rank most
-- often last to arrive with how often; and how much to trust it all (comm_alignment: the clock alignment's p90
-- residual and 'good' | 'poor' | 'unpaired').
-- Why the late rank was late (collective_causes, comm_lateness.sql): each collective's mean wait is split in the
-- proportions of its lateness parts (wait x part / lateness): host launched late (host-bound idle and launch
-- overhead), sync (idle after a host sync, up to its return), longer GPU work, waited on the device (a stream,
-- event or graph edge), other (no earlier collective to compare with, clocks, or no lateness); the five add up to
-- wait_ms_per_step (to rounding). In why_late, other is "at the first collective (none before it)" for the run's
-- first collective, else "unexplained". why_late says it in words, largest first, with the share of the wait and,
-- for longer GPU work, the kernel categories that ran longer (each collective's longest, weighted by its part).
-- launch_wait/gpu_wait split the same wait by position only: at the step's first collective, or at a later one.
-- Runs without step markers pair their collectives over the whole trace (pairing = 'whole trace'; batch_size
-- NULL; wait_kind unknown, so launch + gpu wait is 0 there).
-- reads: phase_collectives (macro: collectives of selected_steps), collectives, collective_causes, trace_runs,
--   traces, comm_alignment
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run, batch_size, category)
with selected as (
    -- batch_size -1 stands for "no batch size" (inferred steps) so that the joins below match it; shown as NULL
    select * from phase_collectives($phase, of_batch_size := $batch_size, of_run_id := $run_id)
),

-- each paired collective's late rank: collectives.is_late, exactly one per collective over all of its ranks (the
-- rank that started last after alignment; ties: the shortest duration, then the lowest rank), so that a selection
-- holding only some of a whole-trace collective's rows still names its late rank
late as (
    select run_id, pair_step, category, ordinal, rank as late_rank
    from collectives
    where is_late
),

per_collective as (  -- any_value: transfer, skew and wait kind are the same on every rank of a collective
    select run_id, batch_size, min(step_index) as step_index, pair_step, category, ordinal,
        any_value(transfer_ns) as transfer_ns,
        any_value(skew_ns) as skew_ns, avg(wait_ns) as mean_wait_ns, any_value(wait_kind) as wait_kind,
        pair_step < 0 as whole_trace,
        min(late.late_rank) as late_rank, count(*) as ranks,
        -- the wait the late rank caused: the other ranks' (caused_wait_ns when every rank's row is selected)
        sum(wait_ns) filter (where rank != late.late_rank) as caused_ns
    from selected
    left join late using (run_id, pair_step, category, ordinal)
    group by run_id, batch_size, pair_step, category, ordinal
),

per_collective_why as (  -- the mean wait split in the proportions of the lateness parts
    select per_collective.*,
        coalesce(mean_wait_ns * (c.host_ns + c.launch_ns) / nullif(c.lateness_ns, 0), 0) as host_wait_ns,
        coalesce(mean_wait_ns * c.sync_ns / nullif(c.lateness_ns, 0), 0) as sync_wait_ns,
        coalesce(mean_wait_ns * c.gpu_ns / nullif(c.lateness_ns, 0), 0) as gpu_work_wait_ns,
        coalesce(mean_wait_ns * c.device_ns / nullif(c.lateness_ns, 0), 0) as device_wait_ns,
        case when not c.has_interval then mean_wait_ns else 0 end as first_wait_ns,
        split_part(c.longer_work, ', ', 1) as longest_category
    from per_collective
    left join collective_causes as c using (run_id, pair_step, category, ordinal)
),

longer_categories as (
    select run_id, batch_size, category,
        string_agg(longest_category, ', ' order by ns desc, longest_category) filter (where ns * 10 >= total_ns)
            as longer_work
    from (select run_id, batch_size, category, longest_category, sum(gpu_work_wait_ns) as ns,
              sum(sum(gpu_work_wait_ns)) over (partition by run_id, batch_size, category) as total_ns
          from per_collective_why
          where gpu_work_wait_ns > 0 and longest_category != ''
          group by run_id, batch_size, category, longest_category)
    group by run_id, batch_size, category
),

per_step as (
    select
        run_id, batch_size, category, step_index,
        count(*) as calls, sum(transfer_ns) as transfer_ns, sum(mean_wait_ns) as mean_wait_ns,
        sum(mean_wait_ns) filter (where wait_kind = 'launch') as launch_wait_ns,
        sum(mean_wait_ns) filter (where wait_kind = 'gpu') as gpu_wait_ns,
        sum(host_wait_ns) as host_wait_ns, sum(sync_wait_ns) as sync_wait_ns,
        sum(gpu_work_wait_ns) as gpu_work_wait_ns, sum(device_wait_ns) as device_wait_ns,
        sum(mean_wait_ns - host_wait_ns - sync_wait_ns - gpu_work_wait_ns - device_wait_ns) as other_wait_ns,
        sum(first_wait_ns) as first_wait_ns,
        bool_or(whole_trace) as whole_trace,
        any_value(ranks) as ranks
    from per_collective_why
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

caused as (  -- per late rank, the wait it caused (also where a filter left out that rank's own rows)
    select run_id, batch_size, category, late_rank as rank, sum(caused_ns) as caused_ns
    from per_collective
    group by all
),

rank_steps as (  -- the most steps a rank of the run has rows in
    select run_id, batch_size, category, max(steps) as steps
    from (select run_id, batch_size, category, rank, count(distinct step_index) as steps from selected group by all)
    group by all
),

stragglers as (
    select caused.run_id, caused.batch_size, caused.category,
        -- no wait at all: no straggler
        case when max(caused.caused_ns) > 0 then first(caused.rank order by caused.caused_ns desc, caused.rank) end
            as straggler_rank,
        case when max(caused.caused_ns) > 0 then max(caused.caused_ns) / any_value(rank_steps.steps) end
            as straggler_wait_ns_per_step,
        max(caused.caused_ns) * 100.0 / nullif(sum(caused.caused_ns), 0) as straggler_wait_pct
    from caused
    join rank_steps using (run_id, batch_size, category)
    group by caused.run_id, caused.batch_size, caused.category
),

why_parts as (  -- one row per (run, batch size, category, kind of lateness) with its share of the wait
    select per_step.run_id, per_step.batch_size, per_step.category, kinds.kind, kinds.words,
        case kinds.kind when 'host' then sum(host_wait_ns) when 'sync' then sum(sync_wait_ns)
            when 'gpu' then sum(gpu_work_wait_ns) when 'device' then sum(device_wait_ns)
            when 'first' then sum(first_wait_ns) else sum(other_wait_ns - first_wait_ns) end
            * 100.0 / nullif(sum(mean_wait_ns), 0) as share
    from per_step
    cross join (values ('host', 'host launched late'), ('sync', 'sync'), ('gpu', 'longer GPU work'),
                       ('device', 'waited on the device'), ('first', 'at the first collective (none before it)'),
                       ('other', 'unexplained')) as kinds(kind, words)
    group by per_step.run_id, per_step.batch_size, per_step.category, kinds.kind, kinds.words
),

why as (
    select why_parts.run_id, why_parts.batch_size, why_parts.category,
        string_agg(why_parts.words
                || case when why_parts.words = 'longer GPU work'
                        then coalesce(' (' || longer_categories.longer_work || ')', '') else '' end
                || ' ' || round(why_parts.share)::integer || ' %', ', ' order by why_parts.share desc, why_parts.words)
            filter (where why_parts.share >= 0.5) as why_late
    from why_parts
    left join longer_categories using (run_id, batch_size, category)
    group by why_parts.run_id, why_parts.batch_size, why_parts.category
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
    round(avg(per_step.host_wait_ns) / 1e6, 4) as wait_host_ms_per_step,
    round(avg(per_step.sync_wait_ns) / 1e6, 4) as wait_sync_ms_per_step,
    round(avg(per_step.gpu_work_wait_ns) / 1e6, 4) as wait_gpu_work_ms_per_step,
    round(avg(per_step.device_wait_ns) / 1e6, 4) as wait_device_ms_per_step,
    round(avg(per_step.other_wait_ns) / 1e6, 4) as wait_other_ms_per_step,
    any_value(why.why_late) as why_late,
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
left join why using (run_id, batch_size, category)
left join comm_alignment using (run_id)
group by per_step.run_id, per_step.batch_size, per_step.category
order by per_step.run_id, per_step.batch_size, per_step.category
