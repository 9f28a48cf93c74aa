-- name: db_columns
-- The columns of the open database's tables and views (temporary ones left out): what k25trace.db.connect
-- compares with the schema's (queries/schema.sql, made in memory) to tell whether the schema must be run.
-- reads: duckdb_columns()
-- params: none
-- grain: one row per column of a table or view
select table_name, column_name
from duckdb_columns()
where database_name = current_database() and schema_name = 'main' and not internal
order by table_name, column_name
