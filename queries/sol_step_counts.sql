-- name: sol_step_counts
-- How many steps (of all ranks) each (run, phase, batch size) has among the selected steps: the divisor of the
-- per-step figures of the speed-of-light views (k25trace/sol.py). Empty steps are left out, as in the breakdown.
-- reads: steps, trace_runs
-- params: $phase, $rank, $trace_id
-- grain: one row per (run_id, phase, batch_size)
select trace_runs.run_id, steps.phase, steps.batch_size, count(*) as steps
from steps
join trace_runs using (trace_id)
where not steps.is_empty
    and ($phase = 'all' or steps.phase = $phase)
    and ($rank is null or steps.rank = $rank)
    and ($trace_id is null or steps.trace_id = $trace_id)
group by all
order by 1, 2, 3
