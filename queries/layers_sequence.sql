-- name: layers_sequence
-- The kernel sequence of each step of one trace, for the layer segmentation (layers_infer.sql, layers_build.sql):
-- every GPU activity of a step (kernels, copies, memsets) numbered 0, 1, … in the step's order (start_ns, end_ns,
-- event_id), with its token (the kernel name id), its category and, when the trace has layer annotations, the
-- layer its launch was made in: the CPU user annotation named `…layers.N` (e.g. `model.layers.17`, a vLLM module
-- name or a record_function range; sub-module names such as `model.layers.17.mlp` do not count) on the launching
-- thread that encloses the launch call. CUDA-graph kernels share their cudaGraphLaunch, which no layer encloses.
-- alone: no other activity of the step overlaps it (every earlier one ended by its start, the next starts after its
-- end): its time is busy and exclusive to its category as it is, and only the others need the interval sweep.
-- creates: _layer_seq (temp table; read by layers_infer.sql and layers_build.sql, which drops it)
-- reads: gpu_events, launches, annotations
-- params: $trace_id
-- grain: one row per GPU activity of the trace that belongs to a step
create or replace temp table _layer_seq as
with acts as materialized (  -- one ordered pass: position, the latest end before, the next start (over the
                             -- whole trace: a neighbour of another step only makes an activity not alone, and the
                             -- sweep is exact either way)
    select step_index, event_id, name_id as token, coalesce(category, 'other') as category, start_ns, end_ns,
        dur_ns, correlation,
        row_number() over w as rn,
        max(end_ns) over (w rows between unbounded preceding and 1 preceding) as prev_end_ns,
        lead(start_ns) over w as next_start_ns
    from gpu_events
    where trace_id = $trace_id and step_index is not null
    window w as (order by step_index, start_ns, end_ns, event_id)
),

firsts as (
    select step_index, min(rn) as rn0 from acts group by step_index
),

layer_marks as (
    select tid, start_ns, end_ns, regexp_extract(name, '(^|\.)layers\.([0-9]{1,6})$', 2)::integer as layer
    from annotations
    where trace_id = $trace_id and kind = 'user_annotation' and regexp_matches(name, '(^|\.)layers\.[0-9]{1,6}$')
),

calls as (  -- the launch call of each correlation (only when the trace has layer annotations)
    select correlation, min(start_ns) as launch_ns, arg_min(tid, start_ns) as tid
    from launches
    where trace_id = $trace_id and correlation is not null and (select count(*) from layer_marks) > 0
    group by correlation
),

annotated as (  -- the latest layer range on the launching thread that started at or before the call and holds it
    select calls.correlation, layer_marks.layer
    from calls
    asof join layer_marks on calls.tid = layer_marks.tid and calls.launch_ns >= layer_marks.start_ns
    where calls.launch_ns < layer_marks.end_ns
)

select acts.step_index, (acts.rn - firsts.rn0)::integer as pos, acts.event_id, acts.token, acts.category,
    acts.start_ns, acts.end_ns, acts.dur_ns, annotated.layer,
    coalesce(acts.start_ns >= acts.prev_end_ns, true) and coalesce(acts.next_start_ns >= acts.end_ns, true) as alone
from acts
join firsts using (step_index)
left join annotated using (correlation);
