-- name: layers_infer
-- The layer segments of each step of one trace (k25trace/layers.py; README "Layers"): a step is `pre`, layers
-- 0..L-1, `post`, each a run of consecutive activities of the step's order (_layer_seq, layers_sequence.sql). Best
-- evidence first:
--   annotation: every annotated activity's layer (its launch inside a `…layers.N` range) gives its segment; layer
--     k starts at its first annotated activity, `post` after the last annotated activity of the last layer. Used
--     when the annotated layers of the step are 0..L-1 and appear in order (never interleaved); else the sequence.
--   sequence (inferred from the kernel sequence, e.g. one CUDA graph per step): the kernel names (tokens) that
--     occur two or more times in the step, each with the list of distances between its consecutive occurrences
--     (its gap signature). Tokens launched once per layer at the same place share one signature. Among the
--     signatures of at least 4 occurrences, held by at least two tokens and by at least a quarter as many tokens
--     as the most common signature, whose tokens' most common distance is 4 or more and is at least 3/4 of their
--     distances (a kernel launched twice per layer alternates two distances), the one with the most occurrences wins (the layer count L: it counts every layer, also dense
--     layers that lack the MoE's kernels), then the one with the most tokens. With a model config ($layers) only
--     a signature of exactly $layers occurrences counts. Its earliest token is the anchor. Layer k starts phi
--     activities before the anchor's k-th occurrence: phi is how far back the activities before the occurrences
--     agree (at each distance the most common kernel, held by layer 0's and by all but one in ten (at least one)
--     of the others; it stops where layer 0's predecessor, the pre's last activity, differs). When the one
--     activity before the layers' start is a norm kernel, the same in every layer but the first, and a norm in
--     the first too (vLLM: rms_norm, then fused_add_rms_norm), the layers start there. A layer with an activity
--     more or less before its anchor (a spin kernel, an injected copy) whose start is not the layers' first
--     kernel starts at that kernel right after the layers' last kernel, at most 3 activities away. The last layer
--     ends after the layers' last kernel nearest to its start plus the layers' most common length.
-- A step is left unsegmented (one segment `step`, kind `unsegmented`, evidence `none`, with its reason) when no
-- such signature exists, the last layer's end is not found, or the layers cover less than half of its activities.
-- Kinds from the model config: layer k is dense when k < $dense_layers or k % $moe_every != 0, else moe (without
-- a config layers_build.sql tells the kind from the layer's kernels).
-- creates: _layer_plan (temp table; read by layers_build.sql, which drops it)
-- reads: _layer_seq, steps
-- params: $trace_id, $layers, $dense_layers, $moe_every
-- grain: one row per segment per step of the trace (one row for an unsegmented step)
create or replace temp table _layer_plan as
with sizes as (
    select step_index, count(*)::integer as n from _layer_seq group by step_index
),

ann as (
    select step_index, pos, layer,
        max(layer) over (partition by step_index order by pos rows between unbounded preceding and 1 preceding)
            as prev_max
    from _layer_seq
    where layer is not null
),

ann_ok as (  -- steps whose annotated layers are 0..L-1, in order
    select step_index, max(layer) + 1 as layers, max(pos) + 1 as end_pos
    from ann
    group by step_index
    having min(layer) = 0 and count(distinct layer) = max(layer) + 1 and bool_and(prev_max is null or layer >= prev_max)
),

ann_starts as (
    select step_index, layer as k, min(pos) as s
    from ann
    where step_index in (select step_index from ann_ok)
    group by all
),

occ as (  -- one ordered pass (a partitioned window is slower): the distance to the token's previous occurrence
    select step_index, token, pos,
        case when lag(step_index) over w = step_index and lag(token) over w = token then pos - lag(pos) over w end
            as gap
    from _layer_seq
    where step_index not in (select step_index from ann_ok)
    window w as (order by step_index, token, pos)
),

token_gaps as (
    select step_index, token, gap, count(*) as at_gap
    from occ
    where gap is not null
    group by all
),

token_mode as (
    select step_index, token, arg_max(gap, at_gap * 4294967296 - gap) as mode_gap, max(at_gap) as at_mode,
        sum(at_gap) as gaps
    from token_gaps
    group by all
),

tokens as (
    select occ.step_index, occ.token, count(*)::integer as c, min(occ.pos) as first_pos,
        string_agg(occ.gap::varchar, ',' order by occ.pos) as signature
    from occ
    join token_mode using (step_index, token)
    where token_mode.mode_gap >= 4 and token_mode.at_mode * 4 >= token_mode.gaps * 3
    group by all
),

signatures as (
    select step_index, c, signature, count(*)::integer as members, min(first_pos) as first_pos,
        arg_min(token, first_pos) as anchor
    from tokens
    group by all
),

candidates as (
    select *, max(members) over (partition by step_index) as top_members
    from signatures
    where members >= 2 and c >= 4 and ($layers is null or c = $layers)
),

chosen as (
    select step_index, c, anchor
    from (select *, row_number() over (partition by step_index order by c desc, members desc, first_pos) as r
          from candidates
          where members * 4 >= top_members)
    where r = 1
),

anchors as (
    select s.step_index, s.pos as q, (row_number() over (partition by s.step_index order by s.pos) - 1)::integer as k
    from _layer_seq as s
    join chosen on s.step_index = chosen.step_index and s.token = chosen.anchor
),

back as (  -- the activities before each occurrence (back to the previous one), by distance i from it
    select s.step_index, a.q - s.pos as i, s.token, count(*) as hits, count(*) filter (where a.k = 0) as first_hits
    from _layer_seq as s
    asof join anchors as a on s.step_index = a.step_index and s.pos < a.q
    where s.step_index in (select step_index from chosen)
    group by all
),

back_mode as (  -- per distance: the most common activity, how many layers have it, and whether layer 0 has it
    select step_index, i, arg_max(token, hits * 4294967296 - token) as token, max(hits) as hits,
        arg_max(first_hits > 0, hits * 4294967296 - token) as first_agrees
    from back
    group by all
),

phase as (  -- the first distance where layer 0 differs or more than one layer in ten (at least 1) does
    select back_mode.step_index,
        coalesce(min(back_mode.i) filter (where not back_mode.first_agrees
                                          or back_mode.hits < chosen.c - greatest(1, chosen.c // 10)),
                 max(back_mode.i) + 1) - 1 as phi
    from back_mode
    join chosen using (step_index)
    group by back_mode.step_index
),

phased as (
    select chosen.step_index, chosen.c, coalesce(phase.phi, 0) as phi
    from chosen
    left join phase using (step_index)
),

before as (  -- the activity just before each layer's start
    select a.step_index, a.k, s.token, s.category
    from anchors as a
    join phased using (step_index)
    join _layer_seq as s on s.step_index = a.step_index and s.pos = a.q - phased.phi - 1
),

norm_start as (  -- every layer but the first preceded by one norm kernel, the first by a norm too
    select before.step_index,
        count(*) filter (where before.k >= 1) = any_value(phased.c) - 1
        and count(distinct before.token) filter (where before.k >= 1) = 1
        and count(*) filter (where before.k = 0) = 1
        and bool_and(before.category = 'norm') as extend
    from before
    join phased using (step_index)
    group by before.step_index
),

framed as (
    select phased.*, phased.phi + coalesce(norm_start.extend, false)::integer as lead_in
    from phased
    left join norm_start using (step_index)
),

edges as (  -- the layers' first kernel (head) and the one before it (the previous layer's last, tail), in most layers
    select framed.step_index,
        arg_max(h.token, h.hits * 4294967296 - h.token) filter (where h.i = framed.lead_in) as head_token,
        arg_max(h.token, h.hits * 4294967296 - h.token) filter (where h.i = framed.lead_in + 1) as tail_token
    from framed
    join (select step_index, i, token, hits - first_hits as hits from back) as h using (step_index)
    group by framed.step_index
),

rough as (
    select a.step_index, a.k, a.q, a.q - framed.lead_in as s0,
        lag(a.q) over (partition by a.step_index order by a.k) as prev_q
    from anchors as a
    join framed using (step_index)
),

refined as (  -- a layer with one kernel more or less before its anchor (e.g. a spin kernel): when its rough start
              -- is not the layers' head kernel, the head kernel after a tail kernel at most 3 activities away
    select rough.step_index, rough.k,
        arg_min(s.pos, abs(s.pos - rough.s0) * 4294967296 + s.pos) as s
    from rough
    join edges using (step_index)
    join _layer_seq as here on here.step_index = rough.step_index and here.pos = rough.s0
        and here.token != edges.head_token
    join _layer_seq as s on s.step_index = rough.step_index and s.token = edges.head_token
        and s.pos > rough.prev_q and s.pos <= rough.q and s.pos between rough.s0 - 3 and rough.s0 + 3
    join _layer_seq as t on t.step_index = rough.step_index and t.pos = s.pos - 1 and t.token = edges.tail_token
    where rough.k >= 1
    group by all
),

seq_starts as (
    select rough.step_index, rough.k, coalesce(refined.s, rough.s0) as s, rough.q
    from rough
    left join refined using (step_index, k)
),

lengths as (
    select step_index, s - lag(s) over (partition by step_index order by k) as len
    from seq_starts
),

last_layer as (  -- the last layer's start and anchor, the layers' usual length
    select seq_starts.step_index, max(seq_starts.s) as s_last, max(seq_starts.q) as q_last,
        any_value(modes.len) as usual_len
    from seq_starts
    join (select step_index, arg_max(len, n * 4294967296 - len) as len
          from (select step_index, len, count(*) as n from lengths where len is not null group by all)
          group by step_index) as modes using (step_index)
    group by seq_starts.step_index
),

ends as (  -- the end nearest to the expected one (start + the usual length) after a kernel like the layers' last
    select last_layer.step_index,
        arg_min(s.pos + 1, abs(s.pos + 1 - (last_layer.s_last + last_layer.usual_len)) * 4294967296 + s.pos) as end_pos
    from last_layer
    join edges using (step_index)
    join _layer_seq as s on s.step_index = last_layer.step_index and s.token = edges.tail_token
        and s.pos >= last_layer.q_last
    group by last_layer.step_index
),

seq_ok as (
    select phased.step_index, phased.c as layers, ends.end_pos, min(seq_starts.s) as first_start
    from phased
    join ends using (step_index)
    join seq_starts using (step_index)
    join sizes using (step_index)
    group by all
    having (ends.end_pos - min(seq_starts.s)) * 2 >= any_value(sizes.n)
),

step_list as (
    select steps.step_index, coalesce(sizes.n, 0) as n,
        case when ann_ok.step_index is not null then 'annotation'
             when seq_ok.step_index is not null then 'sequence' end as evidence,
        coalesce(ann_ok.layers, seq_ok.layers) as layers,
        coalesce(ann_ok.end_pos, seq_ok.end_pos) as end_pos,
        case
            when sizes.n is null then 'no GPU work'
            when ann_ok.step_index is not null or seq_ok.step_index is not null then null
            when chosen.step_index is null and $layers is not null
                then 'no kernel sequence repeats ' || $layers || ' times (the model config''s layer count)'
            when chosen.step_index is null then 'no repeating kernel sequence (not periodic)'
            when ends.step_index is null then 'the last layer''s end was not found'
            else 'the repeating part covers less than half of the step''s activities'
        end as reason
    from steps
    left join sizes using (step_index)
    left join ann_ok using (step_index)
    left join seq_ok using (step_index)
    left join chosen using (step_index)
    left join ends using (step_index)
    where steps.trace_id = $trace_id
),

layer_rows as (
    select step_index, k, s from ann_starts where step_index in (select step_index from step_list where evidence = 'annotation')
    union all
    select step_index, k, s from seq_starts where step_index in (select step_index from step_list where evidence = 'sequence')
),

segments as (
    select step_index, 0 as segment_index, 'pre' as label, null::integer as layer, 'pre' as config_kind,
        0 as first_pos
    from step_list where evidence is not null
    union all
    select layer_rows.step_index, layer_rows.k + 1, layer_rows.k::varchar, layer_rows.k,
        case when $layers is null or $dense_layers is null then null
             when layer_rows.k < $dense_layers or layer_rows.k % coalesce($moe_every, 1) != 0 then 'dense'
             else 'moe' end,
        layer_rows.s
    from layer_rows
    union all
    select step_index, layers + 1, 'post', null, 'post', end_pos
    from step_list where evidence is not null
    union all
    select step_index, 0, 'step', null, 'unsegmented', 0
    from step_list where evidence is null
)

select segments.step_index, segments.segment_index::integer as segment_index, segments.label, segments.layer,
    segments.config_kind, coalesce(step_list.evidence, 'none') as evidence, coalesce(step_list.layers, 0)::integer
        as layers,
    step_list.reason, segments.first_pos::integer as first_pos,
    coalesce(lead(segments.first_pos) over (partition by segments.step_index order by segments.segment_index),
             step_list.n)::integer as end_pos
from segments
join step_list using (step_index);
