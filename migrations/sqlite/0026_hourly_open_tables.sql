-- PostgreSQL partitions its open tables (`samples`, `rollups_1m`) by hour in this version
-- (see migrations/postgres/0026_hourly_open_tables.sql). SQLite needs nothing: the pages of
-- deleted rows go to the file's free list, where the next rows reuse them. The file keeps the
-- version numbers of both databases in step.
SELECT 1;
