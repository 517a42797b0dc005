-- Each GPU's ingest sequence: one more for every committed ingest transaction that wrote the
-- GPU (its registry row is upserted there). A reader that keeps the batches it was handed in
-- memory (the alert engine, on the replica that stored them) knows it holds every batch since
-- its last read when it holds each number up to this one, and reads the database otherwise.
ALTER TABLE gpus ADD COLUMN ingest_seq BIGINT NOT NULL DEFAULT 0;
