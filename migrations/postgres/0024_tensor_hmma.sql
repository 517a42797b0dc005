-- The GPM HMMA tensor pipe (FP16/BF16 matrix multiply-accumulate on the tensor cores), % busy:
-- one new signal (docs/DEVELOPING.md, "Adding a GPU signal"). NULL where it was not measured,
-- which includes every sample stored before this migration.
ALTER TABLE samples ADD COLUMN tensor_hmma_active_pct DOUBLE PRECISION;
