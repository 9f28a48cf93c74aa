-- name: report_selection
-- What the step filters select before the phase and the batch size (what a filter that selects nothing names):
-- per run, phase and batch size, the engine steps (one per run and step index: one scheduler step, seen on every rank),
-- the rank-steps (one per rank that saw it), both with GPU work, the empty steps (no GPU work) and the ranks.
-- reads: phase_steps (macro), traces, trace_runs
-- params: $rank, $trace_id, $run_id
-- grain: one row per (run_id, phase, batch_size)
select
    coalesce(trace_runs.run_id, traces.path) as run_id,
    steps.phase,
    steps.batch_size,
    count(distinct coalesce(trace_runs.run_id, traces.path) || '#' || steps.step_index)
        filter (where not steps.is_empty) as engine_steps,
    count(*) filter (where not steps.is_empty) as rank_steps,
    count(*) filter (where steps.is_empty) as empty_steps,
    count(distinct steps.rank) filter (where not steps.is_empty) as ranks
from phase_steps('all', $rank, $trace_id, of_run_id := $run_id) as steps
join traces using (trace_id)
left join trace_runs using (trace_id)
group by all
order by run_id, steps.phase, steps.batch_size nulls last
