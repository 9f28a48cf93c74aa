-- name: report_comm_site
-- Collectives per call site: the k-th collective of a category in a step is the same call site of the model on
-- every step (a layer's attention or MoE all-reduce; site 0 is the step's first). Per run, batch size, category
-- and site: how many steps have it, the mean transfer and wait (mean over ranks) in µs, the largest wait, its
-- share of all the wait of that batch size, the wait kind (launch at the step's first collective, else gpu), the
-- rank that caused the most wait there and how often it was the last to arrive. Sites with no wait at all are
-- kept (wait 0) so that the rows of a batch size add up. Only runs with paired steps (markers) have sites.
-- reads: phase_collectives (macro: collectives of selected_steps)
-- params: $phase
-- grain: one row per (run, batch_size, category, site)
with selected as (
    -- batch_size -1 stands for "no batch size" (inferred steps) so that the joins below match it; shown as NULL
    select * from phase_collectives($phase)
    where pair_step >= 0
),

per_collective as (
    select run_id, batch_size, category, ordinal as site, pair_step,
        any_value(transfer_ns) as transfer_ns, avg(wait_ns) as mean_wait_ns, max(wait_ns) as max_wait_ns,
        any_value(wait_kind) as wait_kind, arg_max(rank, is_late::int) as late_rank
    from selected
    group by all
),

caused as (
    select run_id, batch_size, category, ordinal as site, rank, sum(caused_wait_ns) as caused_ns,
        sum(is_late::int) as times_late
    from selected
    group by all
),

site_stragglers as (
    select run_id, batch_size, category, site,
        case when max(caused_ns) > 0 then first(rank order by caused_ns desc, rank) end as late_rank,
        first(times_late order by caused_ns desc, rank) as late_rank_times_last
    from caused
    group by all
),

per_site as (
    select run_id, batch_size, category, site,
        count(*) as steps,
        avg(transfer_ns) as transfer_ns,
        avg(mean_wait_ns) as wait_ns,
        max(max_wait_ns) as max_wait_ns,
        sum(mean_wait_ns) as total_wait_ns,
        any_value(wait_kind) as wait_kind
    from per_collective
    group by all
)

select
    per_site.run_id,
    nullif(per_site.batch_size, -1) as batch_size,
    per_site.category,
    per_site.site,
    per_site.steps,
    per_site.wait_kind,
    round(per_site.transfer_ns / 1e3, 2) as transfer_us,
    round(per_site.wait_ns / 1e3, 2) as wait_us,
    round(per_site.max_wait_ns / 1e3, 2) as max_wait_us,
    round(per_site.total_wait_ns * 100.0
        / nullif(sum(per_site.total_wait_ns) over (partition by per_site.run_id, per_site.batch_size, per_site.category), 0), 2)
        as wait_share_pct,
    site_stragglers.late_rank,
    round(site_stragglers.late_rank_times_last * 100.0 / per_site.steps, 1) as late_rank_last_pct
from per_site
join site_stragglers using (run_id, batch_size, category, site)
order by per_site.run_id, per_site.batch_size, per_site.category, per_site.site
