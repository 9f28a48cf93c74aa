-- name: kernel_rules_install
-- Replace the classification rules with $rules (k25trace.classify.install_rules: the user's rules, then the
-- built-in ones of queries/kernel_rules.csv, each already checked). The table is queries/schema.sql's.
-- creates: kernel_rules (all rows replaced)
-- reads: none
-- params: $rules
-- grain: one row per rule, in matching order (rule_id)
delete from kernel_rules;

insert into kernel_rules by name
select unnest(
    $rules::struct(
        rule_id integer, category varchar, kind varchar, name_pattern varchar, collective_pattern varchar,
        note varchar, source varchar
    )[],
    recursive := true
);
