-- name: export_tables
-- The tables of the database (the public schema, and allreduce_bench when measured): their names, columns and
-- whether they carry trace_id and rank (so can be partitioned by run and rank), for `k25trace export parquet`.
-- Views (kernels) are left out: they are joins of the tables.
-- reads: duckdb_tables, duckdb_columns
-- params: none
-- grain: one row per base table of the main schema
select
    duckdb_tables.table_name,
    duckdb_tables.column_count,
    bool_or(duckdb_columns.column_name = 'trace_id') as has_trace_id,
    bool_or(duckdb_columns.column_name = 'rank') as has_rank
from duckdb_tables()
join duckdb_columns() using (database_name, schema_name, table_name)
where duckdb_tables.database_name = current_database()
    and duckdb_tables.schema_name = 'main'
    and not duckdb_tables.temporary
    and not duckdb_tables.internal
group by all
order by duckdb_tables.table_name
