-- Acting on waste (issue 24). Job runs: the jobs seen on GPUs (a Slurm job, a pod, a
-- container, or a lone process), from their processes' owners; a run ends when its processes
-- leave its GPUs or a client says so, and its report card (JSON) is computed once, then.
CREATE TABLE job_runs (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    run_key TEXT NOT NULL,
    host TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '{}',
    gpu_uuids TEXT NOT NULL DEFAULT '[]',
    first_ms INTEGER NOT NULL,
    last_ms INTEGER NOT NULL,
    end_requested_ms INTEGER,
    ended_ms INTEGER,
    end_reason TEXT,
    team_id INTEGER,
    card TEXT,
    notified_channel_id INTEGER,
    updated_ms INTEGER NOT NULL
);
-- At most one open run per key: sightings of a running job extend it.
CREATE UNIQUE INDEX job_runs_open ON job_runs (org_id, run_key) WHERE ended_ms IS NULL;
CREATE INDEX job_runs_org_time ON job_runs (org_id, last_ms);

-- Where report cards go: per team (NULL: any) and owner (NULL: anyone), to a notification
-- channel, when the job is big and wasteful enough.
CREATE TABLE report_routes (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    team_id INTEGER,
    owner TEXT,
    channel_id INTEGER NOT NULL,
    min_gpu_hours REAL NOT NULL,
    min_waste_pct REAL NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX report_routes_org ON report_routes (org_id);

-- Idle-reclaim policies: a state held for `for_s`, a notice to the owner, `grace_s`, then an
-- action: a webhook to the site's automation, or SIGTERM by the agent of an opted-in host.
CREATE TABLE reclaim_policies (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    for_s INTEGER NOT NULL,
    grace_s INTEGER NOT NULL,
    action TEXT NOT NULL,
    action_channel_id INTEGER,
    notice_channel_id INTEGER,
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    UNIQUE (org_id, name)
);

-- One reclaim of one GPU by one policy, from its notice to its action or cancellation.
CREATE TABLE reclaims (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    policy_id INTEGER NOT NULL,
    gpu_uuid TEXT NOT NULL,
    host TEXT NOT NULL,
    run_key TEXT NOT NULL,
    pid INTEGER NOT NULL,
    owner TEXT NOT NULL DEFAULT '{}',
    state_since_ms INTEGER NOT NULL,
    noticed_ms INTEGER NOT NULL,
    snoozed_until_ms INTEGER,
    acted_ms INTEGER,
    closed_ms INTEGER,
    status TEXT NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX reclaims_open ON reclaims (policy_id, gpu_uuid) WHERE closed_ms IS NULL;
CREATE INDEX reclaims_org ON reclaims (org_id, noticed_ms);

-- Every step of every reclaim: who, what, when, and the money the GPU had held by then.
CREATE TABLE reclaim_log (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    reclaim_id INTEGER NOT NULL,
    step TEXT NOT NULL,
    actor TEXT NOT NULL,
    dollars_held REAL,
    at_ms INTEGER NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX reclaim_log_org ON reclaim_log (org_id, id);

-- Kill requests for agents of opted-in hosts (`--allow-reclaim-kill`), which poll for them.
CREATE TABLE agent_commands (
    id INTEGER PRIMARY KEY,
    org_id INTEGER NOT NULL REFERENCES orgs(id),
    host TEXT NOT NULL,
    reclaim_id INTEGER NOT NULL,
    gpu_uuid TEXT NOT NULL,
    pid INTEGER NOT NULL,
    owner_user TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    taken_ms INTEGER,
    done_ms INTEGER,
    result TEXT
);
CREATE INDEX agent_commands_host ON agent_commands (org_id, host, done_ms);
