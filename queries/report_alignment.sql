-- name: report_alignment
-- The multi-rank runs whose cross-rank figures are not to be read as exact: comm_alignment rows other than
-- 'good' (large residuals after clock alignment, or collectives that could not be paired), with the run's label.
-- reads: comm_alignment, run_labels
-- params: none
-- grain: one row per multi-rank run with poor or no alignment
select comm_alignment.*, run_labels.run_label
from comm_alignment
left join run_labels using (run_id)
where comm_alignment.alignment <> 'good'
order by comm_alignment.run_id
