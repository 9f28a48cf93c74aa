-- name: floor_bench_run_rows
-- How many allreduce_bench rows the bench run $bench_run has (0: not in the database; `bench import` skips a run
-- already there).
-- reads: allreduce_bench
-- params: $bench_run
-- grain: one row
select count(*) as rows
from allreduce_bench
where bench_run = $bench_run
