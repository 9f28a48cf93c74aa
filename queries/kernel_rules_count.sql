-- name: kernel_rules_count
-- How many classification rules the database holds (none: a new database, the built-in rules get installed).
-- creates: none
-- reads: kernel_rules
-- params: none
-- grain: one row
select count(*) as rules
from kernel_rules;
