-- name: ingest_dropped
-- How many staged rows ingest_clean.sql removed, per staging table and problem (the loader's warnings and the
-- traces.skipped counts).
-- creates: none
-- reads: _stage_dropped
-- params: none
-- grain: one row per (staging table, problem) with at least one removed row
select staged, problem, count(*) as n
from _stage_dropped
group by all
order by all;
