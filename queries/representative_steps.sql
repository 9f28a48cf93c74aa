-- name: representative_steps
-- One representative step per run and batch size (and capture level): among the steps of the phase found on the
-- most ranks of the run (the same step_index on every rank: markers are emitted identically), the one whose wall
-- time, averaged over its ranks, is nearest the median of those steps' walls (ties: the lowest step_index). The
-- timeline of `k25trace html` and the default selection of `k25trace export perfetto` show this step.
-- reads: steps, trace_runs, traces
-- params: $phase
-- grain: one row per (run_id, batch_size)
with per_step as (
    select
        trace_runs.run_id,
        any_value(traces.level) as level,
        steps.batch_size,
        steps.step_index,
        count(distinct steps.rank) as ranks,
        avg(steps.wall_ns) as mean_wall_ns,
        bool_or(steps.is_inferred) as inferred
    from steps
    join trace_runs using (trace_id)
    join traces using (trace_id)
    where not steps.is_empty and steps.gpu_start_ns is not null and ($phase = 'all' or steps.phase = $phase)
    group by trace_runs.run_id, steps.batch_size, steps.step_index
),

best_covered as (  -- the steps present on the most ranks (all of them, unless a rank lost a step)
    select *
    from per_step
    qualify ranks = max(ranks) over (partition by run_id, batch_size)
),

ranked as (
    select
        *,
        count(*) over (partition by run_id, batch_size) as candidates,
        median(mean_wall_ns) over (partition by run_id, batch_size) as median_wall_ns
    from best_covered
)

select
    run_id,
    level,
    batch_size,
    step_index,
    ranks,
    candidates,
    inferred,
    round(mean_wall_ns / 1e6, 4) as wall_ms,
    round(median_wall_ns / 1e6, 4) as median_wall_ms
from ranked
qualify row_number() over (partition by run_id, batch_size order by abs(mean_wall_ns - median_wall_ns), step_index) = 1
order by run_id, batch_size nulls last
