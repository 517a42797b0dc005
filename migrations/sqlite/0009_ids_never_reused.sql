-- Ids are never reused. Without AUTOINCREMENT SQLite gives a new row max(id) + 1, so deleting
-- the newest rule, channel, team or user handed its id to the next one created: alerts,
-- silences (`rule = 9`) and delivery logs of the deleted row then attached to a newcomer.
-- Every table whose rows can be deleted is rebuilt with AUTOINCREMENT, keeping its rows and
-- ids (sqlite_sequence starts at the highest id kept). PostgreSQL's BIGSERIAL never reuses.
--
-- SQLite's procedure for rebuilding a table (new table, copy, drop the old one, rename)
-- needs foreign keys off, or dropping `teams` would run the ON DELETE actions of
-- team_members, api_keys and gpus: SqliteStore::open runs the migrations on a connection
-- with foreign keys off, and checks them (PRAGMA foreign_key_check) afterwards.

CREATE TABLE alert_rules__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    condition TEXT NOT NULL,
    for_s INTEGER NOT NULL DEFAULT 0,
    keep_firing_for_s INTEGER NOT NULL DEFAULT 0,
    repeat_interval_s INTEGER NOT NULL DEFAULT 0,
    severity TEXT NOT NULL,
    labels TEXT NOT NULL DEFAULT '{}',
    description TEXT NOT NULL DEFAULT '',
    advice TEXT NOT NULL DEFAULT '',
    channels TEXT NOT NULL DEFAULT '[]',
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    builtin TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    UNIQUE (org_id, name)
);
INSERT INTO alert_rules__autoinc (id, org_id, name, condition, for_s, keep_firing_for_s, repeat_interval_s, severity, labels, description, advice, channels, enabled, builtin, created_ms, updated_ms)
    SELECT id, org_id, name, condition, for_s, keep_firing_for_s, repeat_interval_s, severity, labels, description, advice, channels, enabled, builtin, created_ms, updated_ms FROM alert_rules;
DROP TABLE alert_rules;
ALTER TABLE alert_rules__autoinc RENAME TO alert_rules;

CREATE TABLE notification_channels__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    url TEXT NOT NULL,
    is_default BOOLEAN NOT NULL DEFAULT FALSE,
    min_interval_ms INTEGER NOT NULL DEFAULT 0,
    -- Rate limit and back-pressure: no message to this channel before this time.
    next_send_ms INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    UNIQUE (org_id, name)
);
INSERT INTO notification_channels__autoinc (id, org_id, name, kind, url, is_default, min_interval_ms, next_send_ms, created_ms, updated_ms)
    SELECT id, org_id, name, kind, url, is_default, min_interval_ms, next_send_ms, created_ms, updated_ms FROM notification_channels;
DROP TABLE notification_channels;
ALTER TABLE notification_channels__autoinc RENAME TO notification_channels;

CREATE TABLE alert_silences__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    matchers TEXT NOT NULL,
    starts_at_ms INTEGER NOT NULL,
    ends_at_ms INTEGER NOT NULL,
    comment TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL DEFAULT '',
    created_ms INTEGER NOT NULL
);
INSERT INTO alert_silences__autoinc (id, org_id, matchers, starts_at_ms, ends_at_ms, comment, created_by, created_ms)
    SELECT id, org_id, matchers, starts_at_ms, ends_at_ms, comment, created_by, created_ms FROM alert_silences;
DROP TABLE alert_silences;
ALTER TABLE alert_silences__autoinc RENAME TO alert_silences;
CREATE INDEX alert_silences_org_end ON alert_silences (org_id, ends_at_ms);

CREATE TABLE alerts__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    rule_id INTEGER NOT NULL,
    gpu_id INTEGER NOT NULL,
    status TEXT NOT NULL,
    active_since_ms INTEGER NOT NULL,
    fired_at_ms INTEGER,
    resolved_at_ms INTEGER,
    last_match_ms INTEGER NOT NULL,
    last_eval_ms INTEGER NOT NULL,
    rule_name TEXT NOT NULL,
    severity TEXT NOT NULL,
    labels TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    details TEXT NOT NULL DEFAULT '{}',
    silenced_by INTEGER,
    notified_firing BOOLEAN NOT NULL DEFAULT FALSE,
    last_notified_ms INTEGER,
    repeat_seq INTEGER NOT NULL DEFAULT 0,
    updated_ms INTEGER NOT NULL
);
INSERT INTO alerts__autoinc (id, org_id, rule_id, gpu_id, status, active_since_ms, fired_at_ms, resolved_at_ms, last_match_ms, last_eval_ms, rule_name, severity, labels, fingerprint, summary, details, silenced_by, notified_firing, last_notified_ms, repeat_seq, updated_ms)
    SELECT id, org_id, rule_id, gpu_id, status, active_since_ms, fired_at_ms, resolved_at_ms, last_match_ms, last_eval_ms, rule_name, severity, labels, fingerprint, summary, details, silenced_by, notified_firing, last_notified_ms, repeat_seq, updated_ms FROM alerts;
DROP TABLE alerts;
ALTER TABLE alerts__autoinc RENAME TO alerts;
CREATE UNIQUE INDEX alerts_one_open ON alerts (rule_id, gpu_id) WHERE status IN ('pending', 'firing');
CREATE INDEX alerts_org_status ON alerts (org_id, status, id);
CREATE INDEX alerts_gpu ON alerts (gpu_id, id);

CREATE TABLE alert_outbox__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL,
    alert_id INTEGER,
    channel_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until_ms INTEGER,
    last_error TEXT,
    last_status_code INTEGER,
    created_ms INTEGER NOT NULL,
    delivered_ms INTEGER,
    UNIQUE (alert_id, channel_id, kind, seq)
);
INSERT INTO alert_outbox__autoinc (id, org_id, alert_id, channel_id, kind, seq, payload, status, attempts, next_attempt_ms, lease_owner, lease_until_ms, last_error, last_status_code, created_ms, delivered_ms)
    SELECT id, org_id, alert_id, channel_id, kind, seq, payload, status, attempts, next_attempt_ms, lease_owner, lease_until_ms, last_error, last_status_code, created_ms, delivered_ms FROM alert_outbox;
DROP TABLE alert_outbox;
ALTER TABLE alert_outbox__autoinc RENAME TO alert_outbox;
CREATE INDEX alert_outbox_open ON alert_outbox (channel_id, id) WHERE status IN ('pending', 'sending');
CREATE INDEX alert_outbox_alert ON alert_outbox (alert_id);

CREATE TABLE alert_deliveries__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL,
    outbox_id INTEGER,
    alert_id INTEGER,
    channel_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    status_code INTEGER,
    error TEXT,
    duration_ms INTEGER
);
INSERT INTO alert_deliveries__autoinc (id, org_id, outbox_id, alert_id, channel_id, kind, attempt, at_ms, outcome, status_code, error, duration_ms)
    SELECT id, org_id, outbox_id, alert_id, channel_id, kind, attempt, at_ms, outcome, status_code, error, duration_ms FROM alert_deliveries;
DROP TABLE alert_deliveries;
ALTER TABLE alert_deliveries__autoinc RENAME TO alert_deliveries;
CREATE INDEX alert_deliveries_channel ON alert_deliveries (channel_id, id);
CREATE INDEX alert_deliveries_alert ON alert_deliveries (alert_id, id);

CREATE TABLE jobs__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    gpu_uuids TEXT NOT NULL,
    from_ms INTEGER NOT NULL,
    to_ms INTEGER NOT NULL,
    precision TEXT NOT NULL,
    achieved_flops_per_s REAL NOT NULL,
    created_ms INTEGER NOT NULL
);
INSERT INTO jobs__autoinc (id, org_id, name, gpu_uuids, from_ms, to_ms, precision, achieved_flops_per_s, created_ms)
    SELECT id, org_id, name, gpu_uuids, from_ms, to_ms, precision, achieved_flops_per_s, created_ms FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs__autoinc RENAME TO jobs;
CREATE INDEX jobs_org_time ON jobs (org_id, to_ms);

CREATE TABLE gpu_events__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    gpu_uuid TEXT NOT NULL,
    host TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    xid INTEGER,
    message TEXT,
    received_ms INTEGER NOT NULL
);
INSERT INTO gpu_events__autoinc (id, org_id, gpu_uuid, host, ts_ms, kind, xid, message, received_ms)
    SELECT id, org_id, gpu_uuid, host, ts_ms, kind, xid, message, received_ms FROM gpu_events;
DROP TABLE gpu_events;
ALTER TABLE gpu_events__autoinc RENAME TO gpu_events;
CREATE UNIQUE INDEX gpu_events_once ON gpu_events (org_id, gpu_uuid, ts_ms, kind, COALESCE(xid, -1));
CREATE INDEX gpu_events_org_time ON gpu_events (org_id, ts_ms);

CREATE TABLE api_keys__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    prefix TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    last_used_ms INTEGER,
    revoked_ms INTEGER
, user_id INTEGER REFERENCES users(id) ON DELETE SET NULL, team_id INTEGER REFERENCES teams(id) ON DELETE SET NULL);
INSERT INTO api_keys__autoinc (id, org_id, name, prefix, key_hash, scopes, created_ms, last_used_ms, revoked_ms, user_id, team_id)
    SELECT id, org_id, name, prefix, key_hash, scopes, created_ms, last_used_ms, revoked_ms, user_id, team_id FROM api_keys;
DROP TABLE api_keys;
ALTER TABLE api_keys__autoinc RENAME TO api_keys;
CREATE INDEX api_keys_org ON api_keys (org_id);

CREATE TABLE teams__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    UNIQUE (org_id, name)
);
INSERT INTO teams__autoinc (id, org_id, name, created_ms)
    SELECT id, org_id, name, created_ms FROM teams;
DROP TABLE teams;
ALTER TABLE teams__autoinc RENAME TO teams;

CREATE TABLE users__autoinc (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    email TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    last_login_ms INTEGER,
    disabled_ms INTEGER
);
INSERT INTO users__autoinc (id, org_id, email, name, password_hash, role, created_ms, updated_ms, last_login_ms, disabled_ms)
    SELECT id, org_id, email, name, password_hash, role, created_ms, updated_ms, last_login_ms, disabled_ms FROM users;
DROP TABLE users;
ALTER TABLE users__autoinc RENAME TO users;
CREATE INDEX users_org ON users (org_id);

-- Back-fill: the newest sample of each GPU that arrived live (at most an hour after its
-- timestamp; fleetlens_store::LIVE_MS). A GPU that only ever sent older samples (a replayed
-- trace) is paid only over the span it reported and never counts as offline. GPUs already
-- here were live.
ALTER TABLE gpus ADD COLUMN last_live_ms INTEGER NOT NULL DEFAULT 0;
UPDATE gpus SET last_live_ms = last_seen_ms;
