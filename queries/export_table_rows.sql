-- name: export_table_rows
-- How many rows one table has, for `k25trace export parquet` (its manifest and its message).
-- reads: the table named by $table
-- params: $table
-- grain: one row
select count(*) as rows from query_table($table)
