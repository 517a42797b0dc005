-- Jobs that report their model throughput, for MFU: achieved model FLOP/s over a time range
-- on a set of GPUs, at one precision.
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    gpu_uuids TEXT NOT NULL,
    from_ms INTEGER NOT NULL,
    to_ms INTEGER NOT NULL,
    precision TEXT NOT NULL,
    achieved_flops_per_s REAL NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX jobs_org_time ON jobs (org_id, to_ms);
