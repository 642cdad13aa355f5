-- Sharing: grants of paths to users, groups or every signed-in user; pre-authenticated links
-- (only a hash of their secret); provenance columns of the audit log; operator switches.

-- +goose Up
CREATE TABLE grants (
    id         TEXT        PRIMARY KEY,
    owner      TEXT        NOT NULL,
    system_id  TEXT        NOT NULL,
    principal  TEXT        NOT NULL,
    path       TEXT        NOT NULL,
    access     TEXT        NOT NULL,
    expires_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL,
    FOREIGN KEY (owner, system_id) REFERENCES systems (owner, id) ON DELETE CASCADE
);
CREATE INDEX grants_system ON grants (owner, system_id);
CREATE INDEX grants_principal ON grants (principal);

CREATE TABLE links (
    id          TEXT        PRIMARY KEY,
    owner       TEXT        NOT NULL,
    system_id   TEXT        NOT NULL,
    path        TEXT        NOT NULL,
    access      TEXT        NOT NULL,
    secret_hash BYTEA       NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    max_uses    BIGINT      NOT NULL DEFAULT 0,
    uses        BIGINT      NOT NULL DEFAULT 0,
    created_at  TIMESTAMPTZ NOT NULL,
    FOREIGN KEY (owner, system_id) REFERENCES systems (owner, id) ON DELETE CASCADE
);
CREATE INDEX links_system ON links (owner, system_id);

ALTER TABLE audit_log ADD COLUMN system_owner TEXT   NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN paths        TEXT[] NOT NULL DEFAULT '{}';
ALTER TABLE audit_log ADD COLUMN status       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN bytes        BIGINT NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN request_id   TEXT   NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN link_id      TEXT   NOT NULL DEFAULT '';
CREATE INDEX audit_log_system_owner ON audit_log (system_owner, seq DESC);
CREATE INDEX audit_log_time ON audit_log (time);

CREATE TABLE disabled (
    owner     TEXT NOT NULL,
    system_id TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (owner, system_id)
);

-- The groups each user's token last carried (for transfers judged on any instance).
CREATE TABLE user_groups (
    username TEXT PRIMARY KEY,
    groups   TEXT[] NOT NULL DEFAULT '{}'
);

-- +goose Down
DROP TABLE user_groups;
DROP TABLE disabled;
DROP INDEX audit_log_time;
DROP INDEX audit_log_system_owner;
ALTER TABLE audit_log DROP COLUMN link_id;
ALTER TABLE audit_log DROP COLUMN request_id;
ALTER TABLE audit_log DROP COLUMN bytes;
ALTER TABLE audit_log DROP COLUMN status;
ALTER TABLE audit_log DROP COLUMN paths;
ALTER TABLE audit_log DROP COLUMN system_owner;
DROP TABLE links;
DROP TABLE grants;
