-- name: sol_step_counts
-- How many steps (of all ranks) each (run, phase, batch size) has among the selected steps: the divisor of the
-- per-step figures of the speed-of-light views (k25trace/sol.py). Empty steps are left out, as in the breakdown.
-- reads: sol_selected_steps (macro of sol_steps.sql), steps, trace_runs, traces
-- params: $phase, $rank, $trace_id
-- grain: one row per (run_id, phase, batch_size)
select run_id, phase, batch_size, count(*) as steps
from sol_selected_steps($phase, $rank, $trace_id)
group by all
order by 1, 2, 3
