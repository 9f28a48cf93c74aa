-- name: report_comm_site
-- Collectives per call site: the k-th collective of a category in a step is the same call site of the model on
-- every step (a layer's attention or MoE all-reduce; site 0 is the step's first). Per run, batch size, category
-- and site: how many steps have it, the mean transfer and wait (mean over ranks) in µs, the largest wait, its
-- share of all the wait of that batch size, the wait kind (launch at the step's first collective, else gpu; a site
-- that is the first in some steps only: the kind of most of them, ties launch), the
-- rank that caused the most wait there and how often it was the last to arrive. Sites with no wait at all are
-- kept (wait 0) so that the rows of a batch size add up. Only runs with paired steps (markers) have sites.
-- why_late: what made the late ranks late there (collective_causes: the lateness parts summed over the site's
-- steps), the largest kind in words with its share of the site's lateness: host launched late | sync | longer GPU
-- work (the categories, and the kernel that ran longest beyond) | waited on the device | at the first collective
-- (none before it) | unexplained.
-- reads: phase_collectives (macro: collectives of selected_steps), collective_causes
-- params: $phase, $batch_size, $run_id
-- optional: $batch_size, $run_id
-- grain: one row per (run, batch_size, category, site)
with selected as (
    -- batch_size -1 stands for "no batch size" (inferred steps) so that the joins below match it; shown as NULL
    select * from phase_collectives($phase, of_batch_size := $batch_size, of_run_id := $run_id)
    where pair_step >= 0
),

per_collective as (  -- any_value: transfer and wait kind are the same on every rank of a collective
    select run_id, batch_size, category, ordinal as site, pair_step,
        any_value(transfer_ns) as transfer_ns, avg(wait_ns) as mean_wait_ns, max(wait_ns) as max_wait_ns,
        any_value(wait_kind) as wait_kind
    from selected
    group by all
),

site_kinds as (  -- a site's wait kind: the kind of most of its steps (ties: launch)
    select run_id, batch_size, category, site,
        first(wait_kind order by steps desc, wait_kind = 'launch' desc, wait_kind) as wait_kind
    from (select run_id, batch_size, category, site, wait_kind, count(*) as steps from per_collective group by all)
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

site_causes as (
    select c.run_id, steps.batch_size, c.category, c.ordinal as site,
        sum(c.host_ns + c.launch_ns) as host_ns, sum(c.sync_ns) as sync_ns, sum(c.gpu_ns) as gpu_ns,
        sum(c.device_ns) as device_ns, sum(c.other_ns) filter (where not c.has_interval) as first_ns,
        sum(c.other_ns) filter (where c.has_interval) as other_ns, sum(c.lateness_ns) as lateness_ns,
        -- the collective with the most longer GPU work (ties: the earliest step)
        arg_max(c.longer_work, (c.gpu_ns, -c.pair_step)) filter (where c.gpu_ns > 0) as longer_work,
        arg_max(c.longer_kernel, (c.gpu_ns, -c.pair_step)) filter (where c.gpu_ns > 0) as longer_kernel
    from collective_causes as c
    join (select distinct run_id, pair_step, category, ordinal, batch_size from selected) as steps
        using (run_id, pair_step, category, ordinal)
    group by all
),

site_why as (
    select run_id, batch_size, category, site,
        case greatest(host_ns, sync_ns, gpu_ns, device_ns, coalesce(first_ns, 0), coalesce(other_ns, 0))
            when host_ns then 'host launched late'
            when gpu_ns then 'longer GPU work' || coalesce(' (' || longer_work || coalesce(': ' || longer_kernel, '')
                || ')', '')
            when sync_ns then 'sync'
            when device_ns then 'waited on the device'
            when first_ns then 'at the first collective (none before it)'
            else 'unexplained' end
        || ' ' || round(100.0 * greatest(host_ns, sync_ns, gpu_ns, device_ns, coalesce(first_ns, 0),
                                         coalesce(other_ns, 0)) / nullif(lateness_ns, 0))::integer || ' %' as why_late
    from site_causes
),

per_site as (
    select run_id, batch_size, category, site,
        count(*) as steps,
        avg(transfer_ns) as transfer_ns,
        avg(mean_wait_ns) as wait_ns,
        max(max_wait_ns) as max_wait_ns,
        sum(mean_wait_ns) as total_wait_ns
    from per_collective
    group by all
)

select
    per_site.run_id,
    nullif(per_site.batch_size, -1) as batch_size,
    per_site.category,
    per_site.site,
    per_site.steps,
    site_kinds.wait_kind,
    round(per_site.transfer_ns / 1e3, 2) as transfer_us,
    round(per_site.wait_ns / 1e3, 2) as wait_us,
    round(per_site.max_wait_ns / 1e3, 2) as max_wait_us,
    round(per_site.total_wait_ns * 100.0
        / nullif(sum(per_site.total_wait_ns) over (partition by per_site.run_id, per_site.batch_size, per_site.category), 0), 2)
        as wait_share_pct,
    site_stragglers.late_rank,
    round(site_stragglers.late_rank_times_last * 100.0 / per_site.steps, 1) as late_rank_last_pct,
    site_why.why_late
from per_site
join site_stragglers using (run_id, batch_size, category, site)
join site_kinds using (run_id, batch_size, category, site)
left join site_why using (run_id, batch_size, category, site)
order by per_site.run_id, per_site.batch_size, per_site.category, per_site.site
