-- Per-organisation settings as JSON documents (prices, classifier thresholds, …).
CREATE TABLE org_settings (
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (org_id, key)
);
