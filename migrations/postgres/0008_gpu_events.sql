-- What happened to GPUs between samples, as agents saw it: XID errors from the driver, a GPU
-- that stopped answering, and one that answers again. A repeated delivery of one event (an
-- agent retrying a batch) is stored once.
CREATE TABLE gpu_events (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    gpu_uuid TEXT NOT NULL,
    host TEXT NOT NULL,
    ts_ms BIGINT NOT NULL,
    kind TEXT NOT NULL,
    xid BIGINT,
    message TEXT,
    received_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX gpu_events_once ON gpu_events (org_id, gpu_uuid, ts_ms, kind, COALESCE(xid, -1));
CREATE INDEX gpu_events_org_time ON gpu_events (org_id, ts_ms);
