-- The marks of minutes waiting for the rollup job (`rollup_pending`) in hourly partitions, as
-- `samples` and `rollups_1m` since 0026 (issue 21). A live server holds about two minutes of
-- marks per GPU, but after a back-fill (an agent's spool replayed, a bulk load) the table held
-- an hour or more of them at once, and its indexes kept that high-water mark after the job
-- had deleted them (1.15 B per GPU-sample at 1,000 GPUs × 1 h). An hour's partition is dropped
-- once the job has closed its minutes (crates/store/src/blocks/hourly.rs).
--
-- Marks of hours without a partition go to the DEFAULT partition, the table as it was.

ALTER TABLE rollup_pending RENAME TO rollup_pending_default;
ALTER TABLE rollup_pending_default RENAME CONSTRAINT rollup_pending_pkey TO rollup_pending_default_pkey;
ALTER INDEX rollup_pending_minute RENAME TO rollup_pending_default_minute;
CREATE TABLE rollup_pending (LIKE rollup_pending_default INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMMENTS)
    PARTITION BY RANGE (minute_ms);
ALTER TABLE rollup_pending ADD PRIMARY KEY (gpu_id, minute_ms);
CREATE INDEX rollup_pending_minute ON rollup_pending (minute_ms);
ALTER TABLE rollup_pending ATTACH PARTITION rollup_pending_default DEFAULT;
