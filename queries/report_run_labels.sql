-- name: report_run_labels
-- Every run with the label reports, warnings and the TUI print for it (the run_labels view, trace_runs' label
-- columns: the capture directory or folder name, the capture level, the tensor-parallel width and the session).
-- reads: run_labels
-- params: none
-- grain: one row per run (trace_runs.run_id)
select run_id, run_label, group_label, run_name, session
from run_labels
order by run_id
