-- name: ingest_stage_summary
-- One file's staged GPU activities, summed up for the traces row and the loader's warnings: how many, the device
-- most of them ran on (its deviceProperties entry names the GPU), and how many last longer than $long_ns.
-- creates: none
-- reads: _stage_gpu
-- params: $long_ns
-- grain: one row
select
    count(*) as gpu_events,
    (select device from _stage_gpu group by device order by count(*) desc, device nulls last limit 1) as main_device,
    count(*) filter (where dur_ns > $long_ns) as long_events,
    max(dur_ns) filter (where dur_ns > $long_ns) as longest_ns
from _stage_gpu;
