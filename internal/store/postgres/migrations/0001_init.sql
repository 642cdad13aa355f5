-- Initial schema on PostgreSQL: systems, sealed credentials, audit log.

-- +goose Up
CREATE TABLE systems (
    owner                 TEXT        NOT NULL,
    id                    TEXT        NOT NULL,
    host                  TEXT        NOT NULL,
    port                  INTEGER     NOT NULL,
    host_keys             TEXT[]      NOT NULL DEFAULT '{}',
    host_key_fingerprints TEXT[]      NOT NULL DEFAULT '{}',
    trust_on_first_use    BOOLEAN     NOT NULL DEFAULT false,
    max_sessions          INTEGER     NOT NULL DEFAULT 0,
    root_dir              TEXT        NOT NULL DEFAULT '',
    description           TEXT        NOT NULL DEFAULT '',
    created_at            TIMESTAMPTZ NOT NULL,
    updated_at            TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (owner, id)
);

CREATE TABLE credentials (
    owner                  TEXT        NOT NULL,
    system_id              TEXT        NOT NULL,
    username               TEXT        NOT NULL,
    key_type               TEXT        NOT NULL,
    public_key_fingerprint TEXT        NOT NULL,
    certificate            TEXT        NOT NULL DEFAULT '',
    sealed_key_id          TEXT        NOT NULL,
    sealed_wrapped_key     BYTEA       NOT NULL,
    sealed_ciphertext      BYTEA       NOT NULL,
    generation             BIGINT      NOT NULL,
    created_at             TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (owner, system_id),
    FOREIGN KEY (owner, system_id) REFERENCES systems (owner, id) ON DELETE CASCADE
);

-- Credential generations never repeat, even after a delete and re-create.
CREATE SEQUENCE credential_generation;

CREATE TABLE audit_log (
    seq       BIGSERIAL   PRIMARY KEY,
    time      TIMESTAMPTZ NOT NULL,
    owner     TEXT        NOT NULL,
    action    TEXT        NOT NULL,
    system_id TEXT        NOT NULL DEFAULT '',
    detail    TEXT        NOT NULL DEFAULT ''
);

CREATE INDEX audit_log_owner_time ON audit_log (owner, time DESC, seq DESC);

-- +goose Down
DROP INDEX audit_log_owner_time;
DROP TABLE audit_log;
DROP SEQUENCE credential_generation;
DROP TABLE credentials;
DROP TABLE systems;
