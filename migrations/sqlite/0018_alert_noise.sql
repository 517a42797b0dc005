-- One problem, one notification (issue 27): inhibition between rules, notification groups per
-- channel, and digest channels.

-- Rules this rule's open alerts hold back (rule keys or names, "*", "state:<state>"), and
-- where: the same gpu, host or job.
ALTER TABLE alert_rules ADD COLUMN inhibits TEXT NOT NULL DEFAULT '[]';
ALTER TABLE alert_rules ADD COLUMN inhibit_scope TEXT NOT NULL DEFAULT 'gpu';
UPDATE alert_rules SET inhibits = '["busy_but_hollow","inefficient"]' WHERE builtin = 'stalled';
UPDATE alert_rules SET inhibits = '["*"]' WHERE builtin = 'agent_offline';
UPDATE alert_rules SET inhibits = '["state:idle"]' WHERE builtin = 'idle_held';

-- The open alert that holds this one's notifications back (null: none).
ALTER TABLE alerts ADD COLUMN inhibited_by INTEGER;

-- How a channel groups its messages, or the digest it gets instead of real-time messages.
ALTER TABLE notification_channels ADD COLUMN group_by TEXT NOT NULL DEFAULT '["rule","owner","host"]';
ALTER TABLE notification_channels ADD COLUMN group_wait_s INTEGER NOT NULL DEFAULT 0;
ALTER TABLE notification_channels ADD COLUMN group_interval_s INTEGER NOT NULL DEFAULT 300;
ALTER TABLE notification_channels ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE notification_channels ADD COLUMN digest_at_min INTEGER NOT NULL DEFAULT 540;
-- End of the period the last digest covered (0: not started yet).
ALTER TABLE notification_channels ADD COLUMN digest_last_ms INTEGER NOT NULL DEFAULT 0;

-- One row per notification group of a channel: its members and what was sent (JSON). At most
-- one open group per (channel, key); every change is a compare-and-set on version.
CREATE TABLE alert_groups (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL,
    channel_id INTEGER NOT NULL,
    group_key TEXT NOT NULL,
    is_open BOOLEAN NOT NULL DEFAULT TRUE,
    state TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX alert_groups_one_open ON alert_groups (channel_id, group_key) WHERE is_open;
