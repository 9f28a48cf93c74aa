-- name: layers_lateness
-- Which rank arrives late at each layer's collectives (multi-rank runs): every collective_causes row (a paired
-- collective whose late rank started after the earliest one) is mapped to the segment of the late rank's step
-- whose window holds that rank's collective start (step_layers); per run, batch size, segment and late rank:
-- how many collectives it was late to, its summed and median lateness, and the main cause (host, launch, sync,
-- device, gpu, other, unknown: the one whose collectives hold the most lateness; ties by name) with the total of
-- each part. Steps of the phase filter only ($phase, 'all'
-- for any).
-- reads: collective_causes, step_layers, phase_collectives, run_labels
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per run, batch size, segment label and late rank
with late as (
    select causes.*, pc.start_ns, pc.batch_size
    from collective_causes as causes
    join phase_collectives($phase, of_batch_size := $batch_size, of_run_id := $run_id) as pc
        on pc.run_id = causes.run_id and pc.pair_step = causes.pair_step and pc.category = causes.category
        and pc.ordinal = causes.ordinal and pc.trace_id = causes.trace_id
),

placed as (
    select late.*, step_layers.label, step_layers.segment_index, step_layers.kind
    from late
    asof join (select * from step_layers where end_ns > start_ns) as step_layers
        on step_layers.trace_id = late.trace_id and step_layers.step_index = late.step_index
        and late.start_ns >= step_layers.start_ns
),

main_cause as (
    select run_id, batch_size, segment_index, rank, cause
    from placed
    group by run_id, batch_size, segment_index, rank, cause
    qualify row_number() over (
        partition by run_id, batch_size, segment_index, rank order by sum(lateness_ns) desc, cause
    ) = 1
)

select run_id, any_value(run_labels.run_label) as run, nullif(batch_size, -1) as batch_size, label as segment, any_value(kind) as kind, rank as late_rank,
    count(*) as late_collectives, round(sum(lateness_ns) / 1e6, 4) as lateness_ms,
    round(median(lateness_ns) / 1e3, 2) as lateness_p50_us, any_value(main_cause.cause) as cause,
    round(sum(host_ns) / 1e6, 4) as host_ms, round(sum(launch_ns) / 1e6, 4) as launch_ms,
    round(sum(sync_ns) / 1e6, 4) as sync_ms, round(sum(device_ns) / 1e6, 4) as device_ms,
    round(sum(gpu_ns) / 1e6, 4) as gpu_ms, round(sum(other_ns) / 1e6, 4) as other_ms
from placed
left join run_labels using (run_id)
left join main_cause using (run_id, batch_size, segment_index, rank)
group by run_id, batch_size, segment_index, label, rank
order by run_id, batch_size, segment_index, rank
