-- name: findings_groups
-- The step groups the findings are about, per run and batch size (as report_breakdown groups them): engine steps
-- (distinct step indexes) and rank-steps (one per rank per engine step), the ranks seen against the run's world
-- size, how many rank-steps were inferred from idle gaps (no step markers) and how many ran eagerly (no
-- cudaGraphLaunch/hipGraphLaunch in the step: steps.graph_launches = 0), the mean wall time, and the in-step launch
-- overhead and host-bound idle of the eager rank-steps and of the others (step_idle, gaps_build.sql), per rank-step
-- of the whole group: the part of the idle that CUDA graphs would remove (launch overhead) is measured on the
-- eager steps only. Empty steps are left out (selected_steps).
-- reads: selected_steps (macro), step_idle, trace_runs, traces
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run_id, batch_size)
with selected as (
    select steps.trace_id, steps.rank, steps.step_index, steps.batch_size, steps.wall_ns, steps.is_inferred,
        steps.graph_launches = 0 as eager,
        coalesce(trace_runs.run_id, traces.path) as run_id,
        coalesce(trace_runs.world_size, traces.world_size) as world_size
    from selected_steps($phase, null, null, of_batch_size := $batch_size, of_run_id := $run_id) as steps
    join traces using (trace_id)
    left join trace_runs using (trace_id)
),

in_step as (
    select trace_id, step_index, launch_ns, host_ns
    from step_idle
),

run_ranks as (  -- the ranks of each run that were loaded (any phase)
    select run_id, count(distinct rank) as ranks_loaded
    from trace_runs
    group by all
)

select
    selected.run_id,
    selected.batch_size,
    count(distinct selected.step_index) as engine_steps,
    count(*) as rank_steps,
    count(distinct selected.rank) as ranks,
    any_value(run_ranks.ranks_loaded) as ranks_loaded,
    max(selected.world_size) as world_size,
    count(*) filter (where selected.is_inferred) as inferred_steps,
    count(*) filter (where selected.eager) as eager_steps,
    round(avg(selected.wall_ns) / 1e6, 4) as step_ms,
    round(coalesce(sum(in_step.launch_ns) filter (where selected.eager), 0) / count(*) / 1e6, 4) as eager_launch_ms,
    round(coalesce(sum(in_step.host_ns) filter (where selected.eager), 0) / count(*) / 1e6, 4) as eager_host_ms,
    round(coalesce(sum(in_step.launch_ns) filter (where not selected.eager), 0) / count(*) / 1e6, 4) as graph_launch_ms
from selected
left join in_step using (trace_id, step_index)
left join run_ranks using (run_id)
group by selected.run_id, selected.batch_size
order by selected.run_id, selected.batch_size nulls first
