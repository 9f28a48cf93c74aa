-- name: sol_graph_step_groups
-- What sol_graph_kernels.sql gives, with the graph steps that ran the same kernels the same number of times taken
-- together: steps of one run, phase, batch size, world size and device whose (signature, kernels) lists are equal
-- form one group, and each group has one row per kernel signature (per kernel name where the signature is NULL),
-- with the group's steps, its summed kernels and kernel time, and the category of its first step. trace_id and
-- step_index name the group's first step; groups come in the order of their first steps, as the steps come in
-- sol_graph_kernels.sql. The roofline (k25trace/analysis/roofline.py) then decides once per group what it would
-- decide for each of its steps: 64 ranks have ~100,000 (step, signature) rows and a few hundred groups.
-- reads: sol_graph_step_kernels (macro of sol_steps.sql), graph_kernels, kernel_names, steps, trace_runs, traces
-- params: $phase, $rank, $trace_id
-- grain: one row per (step group, kernel signature), per kernel name where the signature is NULL
with per_step as (
    select * from sol_graph_step_kernels($phase, $rank, $trace_id)
),

fingerprints as (
    select trace_id, step_index, list((sig, unsigned_name_id, kernels) order by sig, unsigned_name_id) as fingerprint
    from per_step
    group by all
),

grouped as (
    select
        per_step.run_id, per_step.phase, per_step.batch_size, per_step.world_size, per_step.device_name,
        fingerprints.fingerprint, per_step.sig, per_step.unsigned_name_id,
        any_value(per_step.short_name) as short_name,
        count(*) as steps,
        sum(per_step.kernels)::bigint as kernels,
        sum(per_step.kernel_ns)::bigint as kernel_ns,
        arg_min(per_step.category, (per_step.trace_id, per_step.step_index)) as category,
        min((per_step.trace_id, per_step.step_index)) as first_step
    from per_step
    join fingerprints using (trace_id, step_index)
    group by all
),

ordered as (
    select
        grouped.* exclude (first_step),
        min(grouped.first_step) over (
            partition by grouped.run_id, grouped.phase, grouped.batch_size, grouped.world_size, grouped.device_name,
                grouped.fingerprint
        ) as group_first
    from grouped
)

select
    ordered.run_id, ordered.phase, ordered.batch_size, ordered.world_size, ordered.device_name,
    ordered.group_first[1] as trace_id, ordered.group_first[2] as step_index, ordered.steps,
    ordered.sig, ordered.unsigned_name_id, ordered.kernels, ordered.kernel_ns, ordered.category, ordered.short_name
from ordered
order by ordered.run_id, ordered.group_first, ordered.sig, ordered.short_name, ordered.unsigned_name_id
