-- name: settings_memory_limit
-- The database instance's memory limit as DuckDB prints it (k25trace.db.release_cached_blocks sets it back).
-- reads: current_setting()
-- params: none
-- grain: one row
select current_setting('memory_limit') as memory_limit
