-- name: compare_steps
-- One side of `k25trace compare`: the selected steps (a run, a capture level, some traces, a rank, a batch size,
-- or everything; NULL parameters select all) with their wall, busy, idle and overlap time. The comparison averages
-- a step over its ranks (one observation per run and step index) and tests step-to-step variation.
-- reads: _compare_selection
-- params: none
-- grain: one row per step per trace (rank); empty steps left out
select *
from _compare_selection
order by run_id, step_index, rank
