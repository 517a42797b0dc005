-- Accounts: teams, users and their sessions; API key owners and teams; team assignment of
-- hosts and GPUs. Every row belongs to one organisation (directly or through its team/user).

CREATE TABLE teams (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    UNIQUE (org_id, name)
);

-- One account per (lower-cased) email across the install, so login needs only the email.
-- password_hash is an argon2id PHC string. role: admin | member | viewer.
CREATE TABLE users (
    id BIGSERIAL PRIMARY KEY,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    email TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    last_login_ms BIGINT,
    disabled_ms BIGINT
);
CREATE INDEX users_org ON users (org_id);

CREATE TABLE team_members (
    team_id BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    PRIMARY KEY (team_id, user_id)
);
CREATE INDEX team_members_user ON team_members (user_id);

-- Dashboard sessions. The cookie holds a 256-bit random token; only its SHA-256 is stored.
-- csrf_token is the session's synchronizer token (sent back in X-CSRF-Token).
CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    csrf_token TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX sessions_expiry ON sessions (expires_ms);

-- The user who created a key (its scopes never exceed that user's role), and the team the
-- hosts that report with it belong to.
ALTER TABLE api_keys ADD COLUMN user_id BIGINT REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE api_keys ADD COLUMN team_id BIGINT REFERENCES teams(id) ON DELETE SET NULL;
CREATE INDEX api_keys_org ON api_keys (org_id);

-- A GPU's team and where it came from: 'gpu' (an admin set it on this GPU), 'host' (an admin
-- set it on its host), 'key' (the team of the API key that reports it), 'label' (the
-- `team` label its agent sends). Precedence in that order.
ALTER TABLE gpus ADD COLUMN team_id BIGINT REFERENCES teams(id) ON DELETE SET NULL;
ALTER TABLE gpus ADD COLUMN team_source TEXT;
CREATE INDEX gpus_org_host ON gpus (org_id, host);
CREATE INDEX gpus_team ON gpus (team_id);

-- An admin's assignment of a host: applies to the GPUs it has now and any it reports later.
CREATE TABLE host_teams (
    org_id BIGINT NOT NULL REFERENCES orgs(id),
    host TEXT NOT NULL,
    team_id BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (org_id, host)
);
