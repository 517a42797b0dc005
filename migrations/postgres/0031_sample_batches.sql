-- Open samples as per-batch blocks (issue 21; docs/SCALING.md "The write path"). A row of
-- `samples` costs PostgreSQL a heap tuple, a primary-key entry and their WAL per sample: half of
-- what a sample cost on the ingest benchmark. A batch's samples of one GPU and one minute are
-- now one row of `sample_batches`, its columns as arrays in time order (`ts` ascending, the other
-- arrays aligned with it; a process list or allocation absent is a NULL element). The store
-- keeps each GPU's blocks disjoint in time: a batch that meets a stored sample or block of its
-- GPU turns those blocks back into `samples` rows and is written as rows, which the primary key
-- checks, as before (crates/store/src/pg_batches.rs). Sealing deletes an hour's blocks and rows
-- together. A block never crosses a minute: the rollup job reads a minute from its own blocks,
-- `first_ts` partitions blocks by hour like `samples` (crates/store/src/blocks/hourly.rs), and
-- `last_ts` is below `first_ts + 1 min`.

CREATE TABLE sample_batches (
    gpu_id BIGINT NOT NULL,
    first_ts BIGINT NOT NULL,
    last_ts BIGINT NOT NULL,
    ts BIGINT[] NOT NULL,
    vals BYTEA[] NOT NULL,
    processes TEXT[] NOT NULL,
    allocations TEXT[] NOT NULL
) PARTITION BY RANGE (first_ts);
-- The arrays are TOASTed (a minute of a GPU is kilobytes): compressed with lz4 where the server
-- has it, which costs a fraction of the default pglz's CPU both ways (ingest compresses every
-- block; the rollup job and reads decompress them). Set before any partition exists, so that
-- every partition inherits it.
DO $$
BEGIN
    ALTER TABLE sample_batches ALTER COLUMN ts SET COMPRESSION lz4, ALTER COLUMN vals SET COMPRESSION lz4,
        ALTER COLUMN processes SET COMPRESSION lz4, ALTER COLUMN allocations SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this PostgreSQL has no lz4: sample_batches keeps the default compression';
END
$$;
CREATE TABLE sample_batches_default PARTITION OF sample_batches DEFAULT;
CREATE INDEX sample_batches_gpu_first ON sample_batches (gpu_id, first_ts);

-- One GPU's open samples (rows and blocks) with p_from <= ts_ms < p_to. Written as one SELECT
-- so the planner inlines it into the calling query: the block side is an index range on
-- (gpu_id, first_ts) (a block overlapping the range starts after p_from - 1 min; `greatest` keeps
-- that subtraction in range for any p_from), then only the blocks found are unnested.
CREATE FUNCTION open_samples(p_gpu BIGINT, p_from BIGINT, p_to BIGINT)
RETURNS TABLE (gpu_id BIGINT, ts_ms BIGINT, vals BYTEA, processes TEXT, allocations TEXT)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT s.gpu_id, s.ts_ms, s.vals, s.processes, s.allocations FROM samples s
    WHERE s.gpu_id = p_gpu AND s.ts_ms >= p_from AND s.ts_ms < p_to
    UNION ALL
    SELECT b.gpu_id, u.ts_ms, u.vals, u.processes, u.allocations
    FROM sample_batches b, unnest(b.ts, b.vals, b.processes, b.allocations) AS u(ts_ms, vals, processes, allocations)
    WHERE b.gpu_id = p_gpu AND b.first_ts < p_to AND b.first_ts > greatest(p_from, -9223372036000000000) - 60000 AND b.last_ts >= p_from
      AND u.ts_ms >= p_from AND u.ts_ms < p_to
$$;

-- Every GPU's open samples with p_from <= ts_ms < p_to (an organisation's process lists).
CREATE FUNCTION open_samples_between(p_from BIGINT, p_to BIGINT)
RETURNS TABLE (gpu_id BIGINT, ts_ms BIGINT, vals BYTEA, processes TEXT, allocations TEXT)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT s.gpu_id, s.ts_ms, s.vals, s.processes, s.allocations FROM samples s
    WHERE s.ts_ms >= p_from AND s.ts_ms < p_to
    UNION ALL
    SELECT b.gpu_id, u.ts_ms, u.vals, u.processes, u.allocations
    FROM sample_batches b, unnest(b.ts, b.vals, b.processes, b.allocations) AS u(ts_ms, vals, processes, allocations)
    WHERE b.first_ts < p_to AND b.first_ts > greatest(p_from, -9223372036000000000) - 60000 AND b.last_ts >= p_from
      AND u.ts_ms >= p_from AND u.ts_ms < p_to
$$;

-- Every open sample, one row each, for tools and tests that look at storage (SQLite has the
-- same view over its rows).
CREATE VIEW open_sample_rows AS
    SELECT s.gpu_id, s.ts_ms, s.vals, s.processes, s.allocations FROM samples s
    UNION ALL
    SELECT b.gpu_id, u.ts_ms, u.vals, u.processes, u.allocations
    FROM sample_batches b, unnest(b.ts, b.vals, b.processes, b.allocations) AS u(ts_ms, vals, processes, allocations);
