-- name: report_run_duplicates
-- Files that claim the same rank of one run (same capture level, else same directory, and world size): each is
-- kept in a session of its own (trace_runs.run_id ends in '#s<k>', the k-th file of each rank by first event).
-- reads: trace_runs
-- params: none
-- grain: one row per (session run, rank) with a duplicate
select
    regexp_replace(run_id, '#s[0-9]+$', '') as run,
    rank,
    count(*) as files,
    string_agg(file_name || ' -> ' || regexp_extract(run_id, '#s[0-9]+$'), ', ' order by run_id) as sessions
from trace_runs
where duplicate_of_rank
group by all
having count(*) > 1
order by run, rank
