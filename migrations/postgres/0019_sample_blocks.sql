-- Raw samples at rest (issue 21): the samples of one GPU over one hour, sealed into one
-- compressed column block (format: crates/store/src/blocks/format.rs). `samples` keeps the
-- open rows: those not sealed yet, and late ones for an hour sealed before. Rows and blocks
-- are moved by the sealing job, which also converts the rows stored before this migration.
-- Range-partitioned by UTC day on start_ms: the sealing job creates each day's partition
-- (sample_blocks_day_<days since 1970-01-01>) before its first block, and retention detaches
-- and drops whole days.
CREATE TABLE sample_blocks (
    gpu_id BIGINT NOT NULL,
    start_ms BIGINT NOT NULL,
    -- Exclusive end of the span (start_ms + 1 h).
    end_ms BIGINT NOT NULL,
    -- Samples in the block.
    n INTEGER NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (gpu_id, start_ms)
) PARTITION BY RANGE (start_ms);
-- Compressed already: EXTERNAL keeps TOAST from trying pglz on it again (partitions created
-- later inherit the column's storage).
ALTER TABLE sample_blocks ALTER COLUMN payload SET STORAGE EXTERNAL;
