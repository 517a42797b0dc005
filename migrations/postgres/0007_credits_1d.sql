-- Day credits (issue 6, billing): per GPU and UTC day (day_ms = the day's start, Unix ms), the
-- sum of the day's hour credits in rollups_1h, kept in step by ingest in the same transaction
-- (the same deltas as the hours) and by retention (with the 1-hour rollups), so a month's
-- credits are ~30 narrow rows per GPU instead of ~720 wide hour rows.
CREATE TABLE credits_1d (
    gpu_id BIGINT NOT NULL,
    day_ms BIGINT NOT NULL,
    c_s_offline DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_idle DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_idle_held DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_stalled DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_hollow DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_starved DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_low_occupancy DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_memory_bound DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_compute_bound DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_s_active DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_offline DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_idle DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_idle_held DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_stalled DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_hollow DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_starved DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_low_occupancy DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_memory_bound DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_compute_bound DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_w_active DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_offline DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_idle DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_idle_held DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_stalled DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_hollow DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_starved DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_low_occupancy DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_memory_bound DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_compute_bound DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_e_active DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_allocated_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_allocation_covered_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_util_pct_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_util_covered_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_sm_pct_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_sm_covered_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_tensor_pct_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    c_tensor_covered_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (gpu_id, day_ms)
);

INSERT INTO credits_1d (gpu_id, day_ms, c_s_offline, c_s_idle, c_s_idle_held, c_s_stalled, c_s_hollow, c_s_starved, c_s_low_occupancy, c_s_memory_bound, c_s_compute_bound, c_s_active, c_w_offline, c_w_idle, c_w_idle_held, c_w_stalled, c_w_hollow, c_w_starved, c_w_low_occupancy, c_w_memory_bound, c_w_compute_bound, c_w_active, c_e_offline, c_e_idle, c_e_idle_held, c_e_stalled, c_e_hollow, c_e_starved, c_e_low_occupancy, c_e_memory_bound, c_e_compute_bound, c_e_active, c_allocated_s, c_allocation_covered_s, c_util_pct_s, c_util_covered_s, c_sm_pct_s, c_sm_covered_s, c_tensor_pct_s, c_tensor_covered_s)
SELECT gpu_id, (bucket_ms / 86400000) * 86400000, SUM(c_s_offline), SUM(c_s_idle), SUM(c_s_idle_held), SUM(c_s_stalled), SUM(c_s_hollow), SUM(c_s_starved), SUM(c_s_low_occupancy), SUM(c_s_memory_bound), SUM(c_s_compute_bound), SUM(c_s_active), SUM(c_w_offline), SUM(c_w_idle), SUM(c_w_idle_held), SUM(c_w_stalled), SUM(c_w_hollow), SUM(c_w_starved), SUM(c_w_low_occupancy), SUM(c_w_memory_bound), SUM(c_w_compute_bound), SUM(c_w_active), SUM(c_e_offline), SUM(c_e_idle), SUM(c_e_idle_held), SUM(c_e_stalled), SUM(c_e_hollow), SUM(c_e_starved), SUM(c_e_low_occupancy), SUM(c_e_memory_bound), SUM(c_e_compute_bound), SUM(c_e_active), SUM(c_allocated_s), SUM(c_allocation_covered_s), SUM(c_util_pct_s), SUM(c_util_covered_s), SUM(c_sm_pct_s), SUM(c_sm_covered_s), SUM(c_tensor_pct_s), SUM(c_tensor_covered_s)
FROM rollups_1h GROUP BY gpu_id, (bucket_ms / 86400000) * 86400000;
