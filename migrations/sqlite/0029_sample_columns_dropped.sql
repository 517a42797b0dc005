-- The per-signal columns of `samples`, now in `vals` (migration 0028; the server copied every
-- stored row's values into it before this migration ran).
ALTER TABLE samples DROP COLUMN gpu_util_pct;
ALTER TABLE samples DROP COLUMN mem_util_pct;
ALTER TABLE samples DROP COLUMN mem_used_bytes;
ALTER TABLE samples DROP COLUMN mem_total_bytes;
ALTER TABLE samples DROP COLUMN power_w;
ALTER TABLE samples DROP COLUMN power_limit_w;
ALTER TABLE samples DROP COLUMN energy_j;
ALTER TABLE samples DROP COLUMN temp_c;
ALTER TABLE samples DROP COLUMN sm_clock_mhz;
ALTER TABLE samples DROP COLUMN throttle_reasons;
ALTER TABLE samples DROP COLUMN sm_active_pct;
ALTER TABLE samples DROP COLUMN gr_engine_active_pct;
ALTER TABLE samples DROP COLUMN sm_occupancy_pct;
ALTER TABLE samples DROP COLUMN tensor_active_pct;
ALTER TABLE samples DROP COLUMN dram_active_pct;
ALTER TABLE samples DROP COLUMN fp16_active_pct;
ALTER TABLE samples DROP COLUMN fp32_active_pct;
ALTER TABLE samples DROP COLUMN fp64_active_pct;
ALTER TABLE samples DROP COLUMN int_active_pct;
ALTER TABLE samples DROP COLUMN pcie_tx_mib_s;
ALTER TABLE samples DROP COLUMN pcie_rx_mib_s;
ALTER TABLE samples DROP COLUMN nvlink_tx_mib_s;
ALTER TABLE samples DROP COLUMN nvlink_rx_mib_s;
ALTER TABLE samples DROP COLUMN tensor_hmma_active_pct;
