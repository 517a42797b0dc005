-- 1-minute rollups at rest in blocks (issue 21, part 3): once an hour of a GPU is closed (the
-- same hours the sealing job seals), its `rollups_1m` rows move into one row here: the
-- minutes encoded column by column (format: crates/store/src/blocks/minutes.rs), a few kB
-- instead of sixty rows of ~370 B. Reads merge blocks and rows; the rollup job unpacks an
-- hour again before it rewrites one of its minutes (a late sample).
CREATE TABLE rollup_blocks (
    gpu_id INTEGER NOT NULL,
    -- Start of the hour (the minutes are in [start_ms, start_ms + 1 h)).
    start_ms INTEGER NOT NULL,
    -- Minutes in the block.
    n INTEGER NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (gpu_id, start_ms)
);
-- Retention deletes the hours older than the 1-minute rollups are kept.
CREATE INDEX rollup_blocks_start ON rollup_blocks (start_ms);
