-- name: trace_paths
-- Every loaded trace file's path and the capture directory it came from (NULL outside a capture): files that
-- `k25trace html` and `k25trace export` must never write over (k25trace.export.input_files).
-- reads: traces
-- params: none
-- grain: one row per loaded trace, in trace_id order
select path, capture_dir
from traces
order by trace_id
