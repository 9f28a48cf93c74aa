-- name: report_rank_comm
-- Per rank: how long it waits in collectives per step (wait suffered), how much wait its own lateness caused the
-- other ranks per step (wait caused, and its share of all the run's wait), how often it is the last to start a
-- paired collective, and its clock offset. The straggler is the rank with the most wait caused; a rank that is
-- last by a microsecond on most collectives causes little. Why this rank was late, where it was the late one
-- (collective_causes): its lateness per step split into host launched late (host-bound idle and launch overhead),
-- sync, longer GPU work, waited on the device and other (no earlier collective to compare with, clocks); the five
-- add up to late_ms_per_step (to rounding).
-- reads: collectives, collective_causes, rank_offsets, selected_steps (macro)
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run, rank, category)
with selected as (
    select collectives.*
    from collectives
    join selected_steps($phase, null, null, of_batch_size := $batch_size, of_run_id := $run_id) as steps
        using (trace_id, step_index)
),

per_rank as (
    select
        run_id, rank, category,
        count(distinct step_index) as steps,
        count(*) as calls,
        sum(dur_ns) as total_ns,
        sum(transfer_ns) as transfer_ns,
        sum(wait_ns) as wait_ns,
        sum(caused_wait_ns) as caused_ns,
        sum(is_late::int) as times_late
    from selected
    group by all
),

late as (
    select
        causes.run_id, causes.rank, causes.category,
        sum(causes.lateness_ns) as late_ns,
        sum(causes.host_ns + causes.launch_ns) as host_ns,
        sum(causes.sync_ns) as sync_ns,
        sum(causes.gpu_ns) as gpu_ns,
        sum(causes.device_ns) as device_ns,
        sum(causes.other_ns) as other_ns
    from collective_causes as causes
    join selected_steps($phase, null, null, of_batch_size := $batch_size, of_run_id := $run_id) as steps
        using (trace_id, step_index)
    group by all
)

select
    per_rank.run_id,
    per_rank.rank,
    per_rank.category,
    per_rank.steps,
    round(per_rank.calls / per_rank.steps, 2) as calls_per_step,
    round(per_rank.total_ns / per_rank.steps / 1e6, 4) as ms_per_step,
    round(per_rank.transfer_ns / per_rank.steps / 1e6, 4) as transfer_ms_per_step,
    round(per_rank.wait_ns / per_rank.steps / 1e6, 4) as wait_ms_per_step,
    round(per_rank.caused_ns / per_rank.steps / 1e6, 4) as caused_wait_ms_per_step,
    round(per_rank.caused_ns * 100.0
        / nullif(sum(per_rank.caused_ns) over (partition by per_rank.run_id, per_rank.category), 0), 1) as caused_wait_pct,
    round(per_rank.times_late * 100.0 / per_rank.calls, 2) as late_pct,
    round(coalesce(late.late_ns, 0) / per_rank.steps / 1e6, 4) as late_ms_per_step,
    round(coalesce(late.host_ns, 0) / per_rank.steps / 1e6, 4) as late_host_ms_per_step,
    round(coalesce(late.sync_ns, 0) / per_rank.steps / 1e6, 4) as late_sync_ms_per_step,
    round(coalesce(late.gpu_ns, 0) / per_rank.steps / 1e6, 4) as late_gpu_work_ms_per_step,
    round(coalesce(late.device_ns, 0) / per_rank.steps / 1e6, 4) as late_device_ms_per_step,
    round(coalesce(late.other_ns, 0) / per_rank.steps / 1e6, 4) as late_other_ms_per_step,
    round(rank_offsets.offset_ns / 1e3, 3) as clock_offset_us
from per_rank
left join late using (run_id, rank, category)
left join rank_offsets on rank_offsets.run_id = per_rank.run_id and rank_offsets.rank = per_rank.rank
order by per_rank.run_id, per_rank.category, per_rank.rank
