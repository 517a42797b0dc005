-- PostgreSQL partitions the marks of minutes waiting for the rollup job (`rollup_pending`) by
-- hour in this version (see migrations/postgres/0027_hourly_rollup_marks.sql). SQLite needs
-- nothing: the pages of deleted rows go to the file's free list. The file keeps the version
-- numbers of both databases in step.
SELECT 1;
