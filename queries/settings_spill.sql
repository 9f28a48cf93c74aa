-- name: settings_spill
-- Where DuckDB spills past its memory limit and the file of the database in use (NULL in memory), for
-- k25trace.db.memory_bounded: it bounds memory only where the spill goes to the database's own FILE.duckdb.tmp.
-- reads: current_setting(), duckdb_databases()
-- params: none
-- grain: one row
select
    current_setting('temp_directory') as temp_directory,
    (select path from duckdb_databases() where database_name = current_database()) as database_path
