-- name: ingest_capture
-- A `k25trace capture` directory's manifest (as far as it is sound) and its levels' request statistics, replacing
-- what an earlier load of the same directory stored. _capture_levels is an Arrow table the loader registers (the
-- capture_levels columns it has, k25trace.capture.manifest.LEVEL_COLUMNS, plus capture_dir).
-- creates: none (inserts into captures, capture_levels)
-- reads: _capture_levels
-- params: $capture_dir, $manifest
-- grain: captures = one row; capture_levels = one row per level
insert or replace into captures by name
select $capture_dir as capture_dir, $manifest as manifest;

insert or replace into capture_levels by name
select * from _capture_levels;
