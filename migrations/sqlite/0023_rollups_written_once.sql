-- Rollups written once (issue 21, part 3): ingest no longer merges each batch into the minute,
-- hour and day rows; it marks the minutes it added samples to, and the rollup job
-- (crates/store/src/rollup_close.rs) writes each marked minute from its raw samples once the
-- minute has closed, then its hour and day. Reads add the marked (open) minutes computed from
-- the raw rows, so answers stay current.

-- Minutes with samples not yet in rollups_1m: (GPU, start of the minute).
CREATE TABLE rollup_pending (
    gpu_id INTEGER NOT NULL,
    minute_ms INTEGER NOT NULL,
    PRIMARY KEY (gpu_id, minute_ms)
) WITHOUT ROWID;
CREATE INDEX rollup_pending_minute ON rollup_pending (minute_ms);

-- The data-quality flags of a stored sample (bits by fleetlens_core::QualityFlag::index), for
-- the samples that had any: the job counts them into the minute's q_* columns. Rare, so a table
-- of its own rather than a column of every sample; kept as long as the raw samples.
CREATE TABLE sample_flags (
    gpu_id INTEGER NOT NULL,
    ts_ms INTEGER NOT NULL,
    flags INTEGER NOT NULL,
    PRIMARY KEY (gpu_id, ts_ms)
) WITHOUT ROWID;
