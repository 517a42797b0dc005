-- Sampled time and data-quality flags of each rollup bucket (docs/METRICS.md, "Sampled time
-- and billing" and "Data quality"). sampled_ms: the time the bucket's samples cover, each the
-- time since its GPU's previous sample up to the offline rule; a minute's credit counts for it
-- instead of the whole minute. q_<flag>: samples with that flag (their impossible fields dropped).
ALTER TABLE rollups_1m ADD COLUMN sampled_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1m ADD COLUMN q_activity_over_100 BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1m ADD COLUMN q_util_without_gr_engine BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1m ADD COLUMN q_energy_counter_backwards BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1m ADD COLUMN q_clock_zero_while_busy BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1h ADD COLUMN sampled_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1h ADD COLUMN q_activity_over_100 BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1h ADD COLUMN q_util_without_gr_engine BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1h ADD COLUMN q_energy_counter_backwards BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rollups_1h ADD COLUMN q_clock_zero_while_busy BIGINT NOT NULL DEFAULT 0;
-- Buckets stored before this column: their samples' count times their mean interval (1 s for
-- a lone sample), at most the bucket. Their stored credits are left as they were.
UPDATE rollups_1m SET sampled_ms = CASE WHEN sample_count >= 2 AND last_ts_ms > first_ts_ms
    THEN LEAST(60000, (last_ts_ms - first_ts_ms) * sample_count / (sample_count - 1)) ELSE 1000 * sample_count END;
UPDATE rollups_1h SET sampled_ms = CASE WHEN sample_count >= 2 AND last_ts_ms > first_ts_ms
    THEN LEAST(3600000, (last_ts_ms - first_ts_ms) * sample_count / (sample_count - 1)) ELSE 1000 * sample_count END;
