-- Ids are never reused: every id column here is a BIGSERIAL, whose sequence only moves
-- forward, so a deleted rule's or channel's id is never given to a newcomer (SQLite needed its
-- tables rebuilt with AUTOINCREMENT for the same guarantee: migrations/sqlite/0009). What the
-- rows pointing at a deleted rule or channel mean is recorded on the columns.
COMMENT ON COLUMN alerts.rule_id IS 'The rule that raised the alert; it may have been deleted since (the API then says rule_deleted: true). Never reused.';
COMMENT ON COLUMN alert_deliveries.channel_id IS 'The channel the attempt went to; it may have been deleted since (the API then says channel_deleted: true). Never reused.';

-- Back-fill: the newest sample of each GPU that arrived live (at most an hour after its
-- timestamp; fleetlens_store::LIVE_MS). A GPU that only ever sent older samples (a replayed
-- trace) is paid only over the span it reported and never counts as offline. GPUs already
-- here were live.
ALTER TABLE gpus ADD COLUMN last_live_ms BIGINT NOT NULL DEFAULT 0;
UPDATE gpus SET last_live_ms = last_seen_ms;
