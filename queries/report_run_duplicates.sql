-- name: report_run_duplicates
-- Files that claim the same rank of one run (same capture level, else same directory, and world size): each is
-- kept in a session of its own (the k-th file of each rank by first event is session k; run_labels.session), and
-- each session is labelled by what tells it apart (trace_runs.session_label: 'graph' or 'eager', else the part of
-- the file name the files do not share), so the sessions column reads e.g.
-- 'rank0.1796….pt.trace.json.gz -> both (TP1#s2 graph), rank0.1795….pt.trace.json.gz -> both (TP1#s1 eager)'.
-- run is the label of the group the sessions split.
-- reads: trace_runs, run_labels
-- params: none
-- grain: one row per (group of sessions, rank) with a duplicate
select
    run_labels.group_label as run,
    trace_runs.rank,
    count(*) as files,
    string_agg(trace_runs.file_name || ' -> ' || run_labels.run_label, ', ' order by trace_runs.run_id) as sessions
from trace_runs
join run_labels using (run_id)
where trace_runs.duplicate_of_rank
group by all
having count(*) > 1
order by run, trace_runs.rank
