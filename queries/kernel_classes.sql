-- name: kernel_classes
-- Classify the (name, kind, collective) keys in the temporary table _class_keys (kernel_class_keys.sql: one trace's,
-- or every trace's; kernel_class_keys_staged.sql: a file's staged GPU activities) that kernel_classes does not know
-- yet, with the ordered rules in kernel_rules (first match wins, no match = 'other'); matching runs on distinct
-- keys, never per event. kernel_categories_set.sql then writes gpu_events.category. A full re-classification
-- empties kernel_classes first (kernel_classes_reset.sql, k25trace.classify.classify).
-- The rules become one CASE expression with every pattern a constant, written here from kernel_rules and run by
-- DuckDB's query() table function on the new keys (the known ones are deleted from _class_keys first): a constant
-- pattern is compiled once per statement, where a pattern read from a column is compiled again for every (key, rule)
-- pair (123 keys of a real rank: 0.04 s against 0.2 s). With no new key, the statement run is one without the rules
-- (a few ms, not 50).
-- creates: kernel_classes (rows added); deletes the known keys from _class_keys, then drops it
-- reads: _class_keys, kernel_names, kernel_rules, kernel_classes
-- grain: one row per new distinct (name_id, kind, collective_name)
delete from _class_keys as keys
where exists (
    select 1 from kernel_classes as known
    where known.name_id = keys.name_id
        and known.kind = keys.kind
        and known.collective_name is not distinct from keys.collective_name
);

set variable kernel_rule_match = (
    with conditions as (
        select
            rule_id,
            concat_ws(
                ' and ',
                'kind = ''' || replace(kind, '''', '''''') || '''',
                'regexp_matches(name, ''' || replace(name_pattern, '''', '''''') || ''')',
                '(collective_name is not null and regexp_matches(collective_name, '''
                || replace(collective_pattern, '''', '''''') || '''))'
            ) as condition
        from kernel_rules
    )

    select
        case
            when not exists (select 1 from _class_keys)  -- every key known (a file after the first, mostly)
                then 'select name_id, kind, collective_name, null::integer as rule_id from _class_keys'
            else
                'select name_id, kind, collective_name, '
                || coalesce(
                    'case ' || string_agg('when ' || coalesce(nullif(condition, ''), 'true') || ' then ' || rule_id,
                        ' ' order by rule_id) || ' end',
                    'null::integer'
                )
                || ' as rule_id from _class_keys join kernel_names using (name_id)'
        end
    from conditions
);

insert into kernel_classes by name
select
    keys.name_id,
    keys.kind,
    keys.collective_name,
    coalesce(kernel_rules.category, 'other') as category,
    keys.rule_id,
    kernel_rules.source as rule_source
from query(getvariable('kernel_rule_match')) as keys
left join kernel_rules using (rule_id);

reset variable kernel_rule_match;

drop table _class_keys
