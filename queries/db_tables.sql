-- name: db_tables
-- The tables of the open database file (temporary ones left out): what tells a k25trace database from an empty
-- file or another program's DuckDB database before anything is written to it.
-- reads: duckdb_tables()
-- params: none
-- grain: one row per table
select table_name
from duckdb_tables()
where database_name = current_database() and not temporary
order by table_name
