-- name: kernel_rule_matches
-- Which rule classified each distinct kernel name, with its time share: the place to look when 'other' is large.
-- reads: kernel_classes, kernel_names, kernel_rules, gpu_events
-- params: none
-- grain: one row per distinct (kernel name, kind, collective name)
with usage as (
    select name_id, kind, collective_name, count(*) as calls, sum(dur_ns) as total_ns
    from gpu_events
    group by all
),

final as (
    select
        kernel_classes.category,
        kernel_classes.rule_id,
        kernel_rules.name_pattern as rule_name_pattern,
        kernel_rules.collective_pattern as rule_collective_pattern,
        kernel_classes.rule_source,
        kernel_names.short_name,
        kernel_classes.kind,
        kernel_classes.collective_name,
        usage.calls,
        round(usage.total_ns / 1e6, 3) as total_ms,
        kernel_names.name
    from kernel_classes
    join kernel_names using (name_id)
    left join kernel_rules using (rule_id)
    left join usage on
        usage.name_id = kernel_classes.name_id
        and usage.kind = kernel_classes.kind
        and usage.collective_name is not distinct from kernel_classes.collective_name
)

select * from final
order by category, total_ms desc nulls last
