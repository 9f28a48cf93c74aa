-- name: browse_step_counts
-- How many engine steps there are per phase and batch size (all traces, or one when $trace_id is given), with
-- how many ranks have them and the median GPU wall time of a step.
-- reads: steps
-- params: $trace_id
-- grain: one row per (phase, batch_size)
select
    phase,
    batch_size,
    count(*) as steps,
    count(distinct rank) as ranks,
    round(median(wall_ns) / 1e6, 4) as median_wall_ms,
    round(max(wall_ns) / 1e6, 4) as max_wall_ms
from steps
where $trace_id is null or trace_id = $trace_id
group by phase, batch_size
order by phase, batch_size nulls last
