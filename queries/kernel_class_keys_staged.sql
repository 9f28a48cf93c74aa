-- name: kernel_class_keys_staged
-- The distinct (name, kind, collective) keys of a file's staged GPU activities (_stage_gpu, before they are
-- stored), as the temporary table _class_keys that kernel_classes.sql classifies: the classes of a file stored in
-- a transaction of its own beside others are written first (k25trace.ingest.loader).
-- creates: _class_keys (temporary table)
-- reads: _stage_gpu
-- grain: one row per distinct (name_id, kind, collective_name)
create or replace temp table _class_keys as
select distinct name_id, kind, collective_name
from _stage_gpu
