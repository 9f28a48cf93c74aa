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
--     distances (steady tokens; a kernel launched twice per layer alternates two distances), the one with the
--     most occurrences wins (the layer count L: it counts every layer, also dense layers that lack the MoE's
--     kernels), then the one with the most tokens. Layers of two kinds in turn (gpt-oss: sliding-window and full
--     attention, whose kernels differ) make that signature repeat once per two layers: when more tokens
--     alternate two distances a, b (neither under a third of a + b; a + b in 3/4 of their pairs of distances)
--     with a + b that signature's distance and twice (±1) its occurrences than hold it, they are the layers. With
--     a model config ($layers) only a steady signature of exactly $layers occurrences counts, or alternating
--     tokens of $layers occurrences when none does. The earliest token is the anchor. Layer k starts phi
--     activities before the anchor's k-th occurrence: phi is how far back the activities before the occurrences
--     agree (at each distance the most common kernel, held by layer 0's and by all but one in ten (at least one)
--     of the others; it stops where layer 0's predecessor, the pre's last activity, differs). Where layer 0 alone
--     differs, one activity short of the others (vLLM's first layer whose copy torch.compile fused into the
--     embedding) or one over, and its activities moved by one agree for two or more distances more (two norms
--     agree), phi goes on and layer 0 starts one activity nearer (farther from) its anchor. When the one
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
          -- (gap) and to the one before it (pair)
    select step_index, token, pos,
        case when lag(step_index) over w = step_index and lag(token) over w = token then pos - lag(pos) over w end
            as gap,
        case when lag(step_index, 2) over w = step_index and lag(token, 2) over w = token
            then pos - lag(pos, 2) over w end as pair
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
        sum(at_gap) as gaps, min(gap) as min_gap
    from token_gaps
    group by all
),

pair_mode as (  -- the most common distance over two occurrences
    select step_index, token, arg_max(pair, at_pair * 4294967296 - pair) as mode_pair, max(at_pair) as at_mode_pair,
        sum(at_pair) as pairs
    from (select step_index, token, pair, count(*) as at_pair from occ where pair is not null group by all)
    group by all
),

tokens as (  -- steady tokens (one distance in 3/4 of their gaps) and alternating ones (two distances a, b, neither
             -- under a third of a + b, with a + b in 3/4 of their pairs)
    select occ.step_index, occ.token, count(*)::integer as c, min(occ.pos) as first_pos,
        string_agg(occ.gap::varchar, ',' order by occ.pos) as signature,
        any_value(token_mode.mode_gap) as mode_gap, any_value(pair_mode.mode_pair) as mode_pair,
        any_value(token_mode.at_mode * 4 < token_mode.gaps * 3) as alternating
    from occ
    join token_mode using (step_index, token)
    left join pair_mode using (step_index, token)
    where (token_mode.mode_gap >= 4 and token_mode.at_mode * 4 >= token_mode.gaps * 3)
        or (pair_mode.pairs >= 3 and pair_mode.mode_pair >= 8 and pair_mode.at_mode_pair * 4 >= pair_mode.pairs * 3
            and token_mode.min_gap * 3 >= pair_mode.mode_pair)
    group by all
),

signatures as (
    select step_index, c, signature, count(*)::integer as members, min(first_pos) as first_pos,
        arg_min(token, first_pos) as anchor, any_value(mode_gap) as gap
    from tokens
    where not alternating
    group by all
),

candidates as (
    select *, max(members) over (partition by step_index) as top_members
    from signatures
    where members >= 2 and c >= 4 and ($layers is null or c = $layers)
),

steady_chosen as (
    select step_index, c, anchor, members, gap
    from (select *, row_number() over (partition by step_index order by c desc, members desc, first_pos) as r
          from candidates
          where members * 4 >= top_members)
    where r = 1
),

alternating_chosen as (  -- layers of two kinds in turn (e.g. sliding-window and full attention): the steady
                         -- signature found repeats once per two layers, and more tokens occur twice as often with
                         -- two distances that add up to its distance (once per layer) than hold it; with a model
                         -- config, alternating tokens that occur $layers times when no steady signature does
    select step_index, c, anchor
    from (select alt.*, row_number() over (partition by alt.step_index order by alt.members desc, alt.c desc,
                                           alt.first_pos) as r
          from (select step_index, c, mode_pair, count(*)::integer as members, min(first_pos) as first_pos,
                    arg_min(token, first_pos) as anchor
                from tokens
                where alternating
                group by all) as alt
          left join steady_chosen as steady using (step_index)
          where alt.members >= 2 and alt.c >= 4
              and (($layers is null and alt.c between 2 * steady.c - 1 and 2 * steady.c + 1
                    and alt.mode_pair = steady.gap and alt.members > steady.members)
                   or ($layers is not null and alt.c = $layers and steady.step_index is null)))
    where r = 1
),

chosen as (
    select step_index, c, anchor from alternating_chosen
    union all
    select step_index, c, anchor from steady_chosen
    where step_index not in (select step_index from alternating_chosen)
),

anchors as (
    select s.step_index, s.pos as q, (row_number() over (partition by s.step_index order by s.pos) - 1)::integer as k
    from _layer_seq as s
    join chosen on s.step_index = chosen.step_index and s.token = chosen.anchor
),

back as (  -- the activities before each occurrence (back to the previous one), by distance i from it
    select s.step_index, a.q - s.pos as i, s.token, count(*) as hits, count(*) filter (where a.k = 0) as first_hits,
        any_value(s.category) as category
    from _layer_seq as s
    asof join anchors as a on s.step_index = a.step_index and s.pos < a.q
    where s.step_index in (select step_index from chosen)
    group by all
),

back_mode as (  -- per distance: the most common activity, how many layers have it, and whether layer 0 has it
    select step_index, i, arg_max(token, hits * 4294967296 - token) as token, max(hits) as hits,
        arg_max(first_hits > 0, hits * 4294967296 - token) as first_agrees,
        arg_max(category, hits * 4294967296 - token) as category
    from back
    group by all
),

agreed as (  -- per distance: the most common activity, whether layer 0 has it, whether all but one layer in ten
            -- (at least 1) do
    select back_mode.step_index, back_mode.i, back_mode.token, back_mode.category, back_mode.first_agrees,
        back_mode.hits >= chosen.c - greatest(1, chosen.c // 10) as holds
    from back_mode
    join chosen using (step_index)
),

phase as (  -- the first distance where layer 0 differs or more than one layer in ten does (m0), and whether the
            -- others agree there (then layer 0 alone differs)
    select step_index, coalesce(min(i) filter (where not first_agrees or not holds), max(i) + 1) as m0,
        coalesce(arg_min(holds, i) filter (where not first_agrees or not holds), false) as m0_holds
    from agreed
    group by step_index
),

shifted as (  -- layer 0 one activity short of the others at m0 (shift 1: vLLM's first layer can lack a copy that
              -- torch.compile fused into the embedding) or one over (shift -1): the first distance where its
              -- activities, moved by one, no longer agree (two norms agree: the first layer's has no residual add)
    select phase.step_index, sh.shift, phase.m0,
        coalesce(min(agreed.i) filter (where not agreed.holds or (l0.token is distinct from agreed.token
                                                                  and not (l0.category = 'norm'
                                                                           and agreed.category = 'norm'))),
                 max(agreed.i) + 1) as m
    from phase
    cross join (values (1), (-1)) as sh(shift)
    join agreed on agreed.step_index = phase.step_index and agreed.i >= phase.m0 + (sh.shift = 1)::integer
    left join (select step_index, i, token, category from back where first_hits > 0) as l0
        on l0.step_index = phase.step_index and l0.i = agreed.i - sh.shift
    where phase.m0_holds
    group by all
),

phased as (  -- phi, and layer 0's shift when its moved activities agree for 2 or more distances beyond m0
    select chosen.step_index, chosen.c, coalesce(best.m, phase.m0, 1) - 1 as phi, coalesce(best.shift, 0) as shift0
    from chosen
    left join phase using (step_index)
    left join (select step_index, arg_max(shift, m * 4 + shift) as shift, max(m) as m
               from shifted
               where m - m0 - (shift = 1)::integer >= 2
               group by step_index) as best using (step_index)
),

before as (  -- the activity just before each layer's start
    select a.step_index, a.k, s.token, s.category
    from anchors as a
    join phased using (step_index)
    join _layer_seq as s on s.step_index = a.step_index
        and s.pos = a.q - phased.phi + (a.k = 0)::integer * phased.shift0 - 1
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
    select a.step_index, a.k, a.q, a.q - framed.lead_in + (a.k = 0)::integer * framed.shift0 as s0,
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
    select step_index, k, s from ann_starts
    where step_index in (select step_index from step_list where evidence = 'annotation')
    union all
    select step_index, k, s from seq_starts
    where step_index in (select step_index from step_list where evidence = 'sequence')
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
