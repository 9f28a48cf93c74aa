-- name: report_alignment
-- The multi-rank runs whose cross-rank figures are not to be read as exact: comm_alignment rows other than
-- 'good' (large residuals after clock alignment, or collectives that could not be paired).
-- reads: comm_alignment
-- params: none
-- grain: one row per multi-rank run with poor or no alignment
select *
from comm_alignment
where alignment <> 'good'
order by run_id
