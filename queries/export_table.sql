-- name: export_table
-- All rows of one table, as they are, for `k25trace export parquet` (one file per table).
-- reads: the table named by $table
-- params: $table
-- grain: one row per row of $table
select * from query_table($table)
