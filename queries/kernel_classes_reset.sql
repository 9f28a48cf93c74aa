-- name: kernel_classes_reset
-- Forget every classified (name, kind, collective) key before a full re-classification (k25trace.classify.classify:
-- new rules); kernel_classes.sql with $trace_id NULL then classifies every key again.
-- creates: kernel_classes (all rows deleted)
-- reads: none
-- params: none
-- grain: no rows
delete from kernel_classes;
