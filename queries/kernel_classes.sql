-- name: kernel_classes
-- Classify every distinct GPU activity key with the ordered rules in kernel_rules: first matching rule wins,
-- no match gives 'other'. Applied to distinct (name, kind, collective) keys, never per event.
-- creates: kernel_classes (table)
-- reads: gpu_events, kernel_names, kernel_rules
-- params: none
-- grain: one row per distinct (name_id, kind, collective_name) present in gpu_events
create or replace table kernel_classes as
with keys as (
    select distinct name_id, kind, collective_name
    from gpu_events
),

named as (
    select keys.name_id, keys.kind, keys.collective_name, kernel_names.name
    from keys
    join kernel_names using (name_id)
),

matched as (
    select
        named.name_id,
        named.kind,
        named.collective_name,
        kernel_rules.rule_id,
        kernel_rules.category,
        kernel_rules.source,
        row_number() over (
            partition by named.name_id, named.kind, named.collective_name
            order by kernel_rules.rule_id
        ) as match_rank
    from named
    join kernel_rules on
        (kernel_rules.kind is null or kernel_rules.kind = named.kind)
        and (kernel_rules.name_pattern is null or regexp_matches(named.name, kernel_rules.name_pattern))
        and (
            kernel_rules.collective_pattern is null
            or (named.collective_name is not null and regexp_matches(named.collective_name, kernel_rules.collective_pattern))
        )
),

final as (
    select
        named.name_id,
        named.kind,
        named.collective_name,
        coalesce(matched.category, 'other') as category,
        matched.rule_id,
        matched.source as rule_source
    from named
    left join matched on
        matched.match_rank = 1
        and matched.name_id = named.name_id
        and matched.kind = named.kind
        and matched.collective_name is not distinct from named.collective_name
)

select * from final
