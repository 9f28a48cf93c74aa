-- name: ingest_stage_drop
-- Drop the list of removed staged rows (ingest_stage.sql) after a file's load, whatever happened (the loader
-- unregisters the staged Arrow views itself).
-- creates: none (drops _stage_dropped)
-- reads: none
-- params: none
-- grain: none
drop table if exists _stage_dropped;
