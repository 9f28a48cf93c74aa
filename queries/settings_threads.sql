-- name: settings_threads
-- The database instance's DuckDB threads (k25trace.db.threads_within_cpus lowers them to the CPUs allowed).
-- reads: current_setting()
-- params: none
-- grain: one row
select current_setting('threads') as threads
