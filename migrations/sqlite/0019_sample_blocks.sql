-- Raw samples at rest (issue 21): the samples of one GPU over one hour, sealed into one
-- compressed column block (format: crates/store/src/blocks/format.rs). `samples` keeps the
-- open rows: those not sealed yet, and late ones for an hour sealed before. Rows and blocks
-- are moved by the sealing job, which also converts the rows stored before this migration.
-- A rowid table (not WITHOUT ROWID): a block is tens of kilobytes, overflow pages belong
-- behind a small b-tree entry.
CREATE TABLE sample_blocks (
    gpu_id INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    -- Exclusive end of the span (start_ms + 1 h).
    end_ms INTEGER NOT NULL,
    -- Samples in the block.
    n INTEGER NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (gpu_id, start_ms)
);
