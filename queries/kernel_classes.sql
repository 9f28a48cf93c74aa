-- name: kernel_classes
-- Classify the (name, kind, collective) keys in the temporary table _class_keys (kernel_class_keys.sql: one trace's,
-- or every trace's; kernel_class_keys_staged.sql: a file's staged GPU activities) that kernel_classes does not know
-- yet, with the ordered rules in kernel_rules (first match wins, no match = 'other'); matching runs on distinct
-- keys, never per event. kernel_categories_set.sql then writes gpu_events.category. A full re-classification
-- empties kernel_classes first (kernel_classes_reset.sql, k25trace.classify.classify).
-- creates: kernel_classes (rows added); drops _class_keys
-- reads: _class_keys, kernel_names, kernel_rules, kernel_classes
-- grain: one row per new distinct (name_id, kind, collective_name)
insert into kernel_classes by name
with keys as (
    select name_id, kind, collective_name from _class_keys
),

new_keys as (
    select keys.*, kernel_names.name
    from keys
    join kernel_names using (name_id)
    where not exists (
        select 1 from kernel_classes as known
        where known.name_id = keys.name_id
            and known.kind = keys.kind
            and known.collective_name is not distinct from keys.collective_name
    )
),

matched as (
    select
        new_keys.name_id,
        new_keys.kind,
        new_keys.collective_name,
        kernel_rules.rule_id,
        kernel_rules.category,
        kernel_rules.source,
        row_number() over (
            partition by new_keys.name_id, new_keys.kind, new_keys.collective_name
            order by kernel_rules.rule_id
        ) as match_rank
    from new_keys
    join kernel_rules on
        (kernel_rules.kind is null or kernel_rules.kind = new_keys.kind)
        and (kernel_rules.name_pattern is null or regexp_matches(new_keys.name, kernel_rules.name_pattern))
        and (
            kernel_rules.collective_pattern is null
            or (new_keys.collective_name is not null and regexp_matches(new_keys.collective_name, kernel_rules.collective_pattern))
        )
)

select
    new_keys.name_id,
    new_keys.kind,
    new_keys.collective_name,
    coalesce(matched.category, 'other') as category,
    matched.rule_id,
    matched.source as rule_source
from new_keys
left join matched on
    matched.match_rank = 1
    and matched.name_id = new_keys.name_id
    and matched.kind = new_keys.kind
    and matched.collective_name is not distinct from new_keys.collective_name;

drop table _class_keys
