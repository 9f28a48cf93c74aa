-- name: kernel_class_keys
-- The distinct (name, kind, collective) keys of one trace's GPU activities ($trace_id; NULL = every trace), as the
-- temporary table _class_keys that kernel_classes.sql classifies.
-- creates: _class_keys (temporary table)
-- reads: gpu_events
-- params: $trace_id
-- grain: one row per distinct (name_id, kind, collective_name)
create or replace temp table _class_keys as
select distinct name_id, kind, collective_name
from gpu_events
where $trace_id is null or trace_id = $trace_id
