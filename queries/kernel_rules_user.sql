-- name: kernel_rules_user
-- The classification rules the database holds that are not the built-in ones (a user's --rules file), in matching
-- order, and whether it holds built-in rules at all (none: classify --replace): what an upgrade keeps when it
-- installs this k25trace's built-in rules (k25trace.pipeline.upgrade).
-- reads: kernel_rules
-- params: none
-- grain: one row per user rule; with_builtin on every row (one row of NULLs when there are no user rules)
with builtin as (select count(*) filter (where source = 'builtin') > 0 as with_builtin from kernel_rules)
select r.rule_id, r.category, r.kind, r.name_pattern, r.collective_pattern, r.note, r.source, builtin.with_builtin
from builtin
left join kernel_rules r on r.source is distinct from 'builtin'
order by r.rule_id nulls first
