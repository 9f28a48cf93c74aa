-- name: kernel_rule_check
-- Compile one rule pattern in DuckDB's regex engine (RE2), the one kernel_classes.sql matches with: an error here
-- is a bad pattern, reported by k25trace.classify.install_rules with the rule that holds it.
-- reads: none
-- params: $pattern
-- grain: one row
select regexp_matches('', $pattern) as matches_empty
