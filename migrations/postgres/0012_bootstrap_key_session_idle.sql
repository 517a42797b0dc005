-- The key made from FLEETLENS_ADMIN_TOKEN is marked, so that a start with another value (or
-- none) revokes it: the variable is the only thing that keeps it alive. Keys made before this
-- marker existed are recognised by the name the server gave them.
ALTER TABLE api_keys ADD COLUMN bootstrap BIGINT NOT NULL DEFAULT 0;
UPDATE api_keys SET bootstrap = 1
 WHERE org_id = 1 AND user_id IS NULL AND name = 'bootstrap admin (FLEETLENS_ADMIN_TOKEN)';

-- When a session was last used (written at most once a minute), for --session-idle-timeout.
ALTER TABLE sessions ADD COLUMN last_seen_ms BIGINT NOT NULL DEFAULT 0;
UPDATE sessions SET last_seen_ms = created_ms;
