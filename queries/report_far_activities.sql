-- name: report_far_activities
-- Traces with GPU activities timestamped far outside the trace (more than 1 s past its CPU span and past the GPU
-- work that ran on from it: queries/steps_*.sql, steps.far_activities), kept out of the step walls: one row per
-- such trace, with the file and the number of activities. `k25trace load` warns about each trace it just loaded.
-- reads: steps, traces
-- params: none
-- grain: one row per trace with far activities
select trace_id, traces.path, sum(steps.far_activities)::bigint as far_activities
from steps
join traces using (trace_id)
group by all
having sum(steps.far_activities) > 0
order by trace_id
