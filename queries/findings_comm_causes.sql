-- name: findings_comm_causes
-- Who made the others wait in collectives, and why, per run, batch size, collective category and late rank: the
-- wait of report_comm (each paired collective's mean wait over its ranks, per engine step) given to the rank that
-- started that collective last, and split as report_comm splits it (wait x lateness part / lateness, from
-- collective_causes, comm_lateness.sql): host launched late (host-bound idle and launch overhead), sync (idle after
-- a host sync, up to its return), longer GPU work, waited on the device, at the run's first collective (no earlier
-- collective to compare with), unexplained (the rest: clocks, no lateness recorded). Summed over the late ranks,
-- wait_ms_per_step is report_comm's wait_ms_per_step (to rounding), and the six parts add up to it. longer_work:
-- the kernel categories that ran longer on the late rank (each collective's longest, weighted by its GPU-work part
-- of the wait; those of at least 10 % of it, longest first); longer_kernel: the kernel that ran longest beyond, of
-- the collective with the largest GPU-work part (ties: the earliest).
-- reads: phase_collectives (macro: collectives of selected_steps), collectives, collective_causes
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run_id, batch_size, category, late_rank)
with
-- each paired collective's late rank: collectives.is_late, exactly one per collective over all of its ranks (the
-- rank that started last after alignment; ties: the shortest duration, then the lowest rank), so that a selection
-- holding only some of a whole-trace collective's rows still names its late rank
late as (
    select run_id, pair_step, category, ordinal, rank as late_rank
    from collectives
    where is_late
),

per_collective as (  -- as report_comm
    select run_id, batch_size, min(step_index) as step_index, pair_step, category, ordinal,
        avg(wait_ns) as mean_wait_ns, min(late.late_rank) as late_rank
    from phase_collectives($phase, of_batch_size := $batch_size, of_run_id := $run_id)
    left join late using (run_id, pair_step, category, ordinal)
    group by run_id, batch_size, pair_step, category, ordinal
),

per_collective_why as (
    select per_collective.*,
        count(distinct per_collective.step_index) over (partition by run_id, batch_size, category) as steps,
        coalesce(mean_wait_ns * (c.host_ns + c.launch_ns) / nullif(c.lateness_ns, 0), 0) as host_wait_ns,
        coalesce(mean_wait_ns * c.sync_ns / nullif(c.lateness_ns, 0), 0) as sync_wait_ns,
        coalesce(mean_wait_ns * c.gpu_ns / nullif(c.lateness_ns, 0), 0) as gpu_work_wait_ns,
        coalesce(mean_wait_ns * c.device_ns / nullif(c.lateness_ns, 0), 0) as device_wait_ns,
        case when not c.has_interval then mean_wait_ns else 0 end as first_wait_ns,
        split_part(c.longer_work, ', ', 1) as longest_category,
        c.longer_kernel
    from per_collective
    left join collective_causes as c using (run_id, pair_step, category, ordinal)
),

longer as (
    select run_id, batch_size, category, late_rank,
        string_agg(longest_category, ', ' order by ns desc, longest_category) filter (where ns * 10 >= total_ns)
            as longer_work
    from (select run_id, batch_size, category, late_rank, longest_category, sum(gpu_work_wait_ns) as ns,
              sum(sum(gpu_work_wait_ns)) over (partition by run_id, batch_size, category, late_rank) as total_ns
          from per_collective_why
          where gpu_work_wait_ns > 0 and longest_category != ''
          group by run_id, batch_size, category, late_rank, longest_category)
    group by run_id, batch_size, category, late_rank
)

select
    per_collective_why.run_id,
    nullif(per_collective_why.batch_size, -1) as batch_size,
    per_collective_why.category,
    per_collective_why.late_rank,
    any_value(per_collective_why.steps) as steps,
    count(*) filter (where per_collective_why.mean_wait_ns > 0) as collectives_waited,
    round(sum(mean_wait_ns) / any_value(steps) / 1e6, 4) as wait_ms_per_step,
    round(sum(host_wait_ns) / any_value(steps) / 1e6, 4) as host_ms_per_step,
    round(sum(sync_wait_ns) / any_value(steps) / 1e6, 4) as sync_ms_per_step,
    round(sum(gpu_work_wait_ns) / any_value(steps) / 1e6, 4) as gpu_work_ms_per_step,
    round(sum(device_wait_ns) / any_value(steps) / 1e6, 4) as device_ms_per_step,
    round(sum(first_wait_ns) / any_value(steps) / 1e6, 4) as first_ms_per_step,
    round(sum(mean_wait_ns - host_wait_ns - sync_wait_ns - gpu_work_wait_ns - device_wait_ns - first_wait_ns)
        / any_value(steps) / 1e6, 4) as unexplained_ms_per_step,
    any_value(longer.longer_work) as longer_work,
    -- ties: the earliest collective
    arg_max(per_collective_why.longer_kernel, (per_collective_why.gpu_work_wait_ns, -per_collective_why.pair_step,
            -per_collective_why.ordinal))
        filter (where per_collective_why.gpu_work_wait_ns > 0) as longer_kernel
from per_collective_why
left join longer using (run_id, batch_size, category, late_rank)
group by per_collective_why.run_id, per_collective_why.batch_size, per_collective_why.category,
    per_collective_why.late_rank
order by per_collective_why.run_id, per_collective_why.batch_size, per_collective_why.category,
    wait_ms_per_step desc, per_collective_why.late_rank
