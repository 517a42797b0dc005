-- Open sample rows keep their measurements in one binary column, `vals`
-- (crates/store/src/row_values.rs), instead of one column per signal: every column of a row
-- costs on each write (COPY parses each field) and read (each is sent back), and the rows were
-- ~300 bytes for ~22 values of a few significant digits.
--
-- The server fills `vals` of the rows already stored from their columns right after this
-- migration (crates/store/src/row_values.rs, `legacy`); migration 0029 then drops the columns.
ALTER TABLE samples ADD COLUMN vals BYTEA;
