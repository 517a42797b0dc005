-- Alerting: rules, channels, silences, alert instances with their engine state, the durable
-- notification outbox and its delivery log. Times are Unix milliseconds; JSON is TEXT.

CREATE TABLE alert_rules (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    condition TEXT NOT NULL,
    for_s BIGINT NOT NULL DEFAULT 0,
    keep_firing_for_s BIGINT NOT NULL DEFAULT 0,
    repeat_interval_s BIGINT NOT NULL DEFAULT 0,
    severity TEXT NOT NULL,
    labels TEXT NOT NULL DEFAULT '{}',
    description TEXT NOT NULL DEFAULT '',
    advice TEXT NOT NULL DEFAULT '',
    channels TEXT NOT NULL DEFAULT '[]',
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    builtin TEXT,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    UNIQUE (org_id, name)
);

-- Which shipped rules an organisation has been given (so a deleted one does not come back).
CREATE TABLE alert_default_seeds (
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    key TEXT NOT NULL,
    seeded_ms BIGINT NOT NULL,
    PRIMARY KEY (org_id, key)
);

CREATE TABLE notification_channels (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    url TEXT NOT NULL,
    is_default BOOLEAN NOT NULL DEFAULT FALSE,
    min_interval_ms BIGINT NOT NULL DEFAULT 0,
    -- Rate limit and back-pressure: no message to this channel before this time.
    next_send_ms BIGINT NOT NULL DEFAULT 0,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    UNIQUE (org_id, name)
);

CREATE TABLE alert_silences (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    matchers TEXT NOT NULL,
    starts_at_ms BIGINT NOT NULL,
    ends_at_ms BIGINT NOT NULL,
    comment TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL DEFAULT '',
    created_ms BIGINT NOT NULL
);
CREATE INDEX alert_silences_org_end ON alert_silences (org_id, ends_at_ms);

-- One row per alert instance: pending, then firing, then resolved. At most one open
-- (pending or firing) instance per rule and GPU.
CREATE TABLE alerts (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    rule_id BIGINT NOT NULL,
    gpu_id BIGINT NOT NULL,
    status TEXT NOT NULL,
    active_since_ms BIGINT NOT NULL,
    fired_at_ms BIGINT,
    resolved_at_ms BIGINT,
    last_match_ms BIGINT NOT NULL,
    last_eval_ms BIGINT NOT NULL,
    rule_name TEXT NOT NULL,
    severity TEXT NOT NULL,
    labels TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    details TEXT NOT NULL DEFAULT '{}',
    silenced_by BIGINT,
    notified_firing BOOLEAN NOT NULL DEFAULT FALSE,
    last_notified_ms BIGINT,
    repeat_seq BIGINT NOT NULL DEFAULT 0,
    updated_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX alerts_one_open ON alerts (rule_id, gpu_id) WHERE status IN ('pending', 'firing');
CREATE INDEX alerts_org_status ON alerts (org_id, status, id);
CREATE INDEX alerts_gpu ON alerts (gpu_id, id);

-- The alert engine's position per GPU: samples up to last_ts_ms are evaluated; the GPU's
-- workload state (per sample) and since when, for `state` and `duration_in_state_s`.
CREATE TABLE alert_gpu_cursors (
    gpu_id BIGINT PRIMARY KEY,
    org_id BIGINT NOT NULL,
    last_ts_ms BIGINT NOT NULL,
    state TEXT NOT NULL,
    state_since_ms BIGINT NOT NULL,
    interval_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);

-- Host labels sent by the agents (team, …), for alert labels and silences.
CREATE TABLE alert_host_labels (
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    host TEXT NOT NULL,
    labels TEXT NOT NULL,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (org_id, host)
);

-- Durable outbox: one row per message to send. (alert, channel, kind, seq) is unique, so a
-- transition is enqueued at most once however often it is evaluated; a sender claims a row
-- with a lease before it sends.
CREATE TABLE alert_outbox (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL,
    alert_id BIGINT,
    channel_id BIGINT NOT NULL,
    kind TEXT NOT NULL,
    seq BIGINT NOT NULL DEFAULT 0,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until_ms BIGINT,
    last_error TEXT,
    last_status_code BIGINT,
    created_ms BIGINT NOT NULL,
    delivered_ms BIGINT,
    UNIQUE (alert_id, channel_id, kind, seq)
);
CREATE INDEX alert_outbox_open ON alert_outbox (channel_id, id) WHERE status IN ('pending', 'sending');
CREATE INDEX alert_outbox_alert ON alert_outbox (alert_id);

-- Every attempt to deliver, and every notification held back by a silence.
CREATE TABLE alert_deliveries (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL,
    outbox_id BIGINT,
    alert_id BIGINT,
    channel_id BIGINT NOT NULL,
    kind TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    status_code BIGINT,
    error TEXT,
    duration_ms BIGINT
);
CREATE INDEX alert_deliveries_channel ON alert_deliveries (channel_id, id);
CREATE INDEX alert_deliveries_alert ON alert_deliveries (alert_id, id);

-- Leases for jobs one replica runs at a time (the alert engine).
CREATE TABLE job_leases (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    until_ms BIGINT NOT NULL
);
