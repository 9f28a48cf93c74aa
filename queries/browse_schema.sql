-- name: browse_schema
-- The tables and views of the database with their columns and types, for the ad-hoc SQL panel.
-- reads: duckdb_columns()
-- params: none
-- grain: one row per column of every table and view in the main schema
select table_name, column_name, data_type, column_index
from duckdb_columns()
where schema_name = 'main' and not internal
order by table_name, column_index
