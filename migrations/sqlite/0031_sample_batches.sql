-- PostgreSQL keeps a batch's open samples as per-batch blocks (its migration 0031); SQLite keeps
-- one row per sample. The view gives tools and tests one name for "every open sample, one row
-- each" on both databases.
CREATE VIEW open_sample_rows AS
    SELECT gpu_id, ts_ms, vals, processes, allocations FROM samples;
