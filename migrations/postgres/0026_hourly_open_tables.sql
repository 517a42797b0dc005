-- The open tables in hourly partitions (issue 21): `samples` (raw rows not sealed yet) and
-- `rollups_1m` (minute rows not packed yet) only ever hold the last hour or two. As plain
-- tables they keep their high-water mark: sealing deletes an hour's rows, and their index
-- pages stay allocated (at 1,000 GPUs one hour of `samples`' primary key is ~117 MB, more than
-- the sealed blocks of that hour). Range-partitioned by hour, an hour's partition is dropped
-- once sealing has emptied it (crates/store/src/blocks/hourly.rs), and its pages go back to
-- the file system.
--
-- Rows of hours without a partition (the hours before this migration, late rows of an hour
-- already dropped, an hour the sealing job did not prepare in time) go to the DEFAULT
-- partition, which is the table as it was: attaching it moves no data.

ALTER TABLE samples RENAME TO samples_default;
ALTER TABLE samples_default RENAME CONSTRAINT samples_pkey TO samples_default_pkey;
CREATE TABLE samples (LIKE samples_default INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMMENTS)
    PARTITION BY RANGE (ts_ms);
ALTER TABLE samples ADD PRIMARY KEY (gpu_id, ts_ms);
ALTER TABLE samples ATTACH PARTITION samples_default DEFAULT;

ALTER TABLE rollups_1m RENAME TO rollups_1m_default;
ALTER TABLE rollups_1m_default RENAME CONSTRAINT rollups_1m_pkey TO rollups_1m_default_pkey;
CREATE TABLE rollups_1m (LIKE rollups_1m_default INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMMENTS)
    PARTITION BY RANGE (bucket_ms);
ALTER TABLE rollups_1m ADD PRIMARY KEY (gpu_id, bucket_ms);
ALTER TABLE rollups_1m ATTACH PARTITION rollups_1m_default DEFAULT;
