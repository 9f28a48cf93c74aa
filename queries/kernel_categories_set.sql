-- name: kernel_categories_set
-- Write gpu_events.category from kernel_classes for one trace ($trace_id; NULL = every trace), where it differs.
-- creates: gpu_events.category (updated)
-- reads: gpu_events, kernel_classes
-- params: $trace_id
-- grain: one row per GPU activity whose category changed
update gpu_events
set category = kernel_classes.category
from kernel_classes
where ($trace_id is null or gpu_events.trace_id = $trace_id)
    and gpu_events.name_id = kernel_classes.name_id
    and gpu_events.kind = kernel_classes.kind
    and gpu_events.collective_name is not distinct from kernel_classes.collective_name
    and gpu_events.category is distinct from kernel_classes.category
