-- name: compare_select_drop
-- Drop one side's selected steps (_compare_selection, compare_select.sql) once the compare_* queries of that side
-- have read them: k25trace.compare runs it when the side is read, also when reading failed.
-- creates: _compare_selection (temp table dropped)
-- reads: none
-- params: none
-- grain: no rows
drop table if exists _compare_selection;
