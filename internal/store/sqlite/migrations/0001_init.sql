-- Initial schema: systems, sealed credentials, audit log.
-- Times are INTEGER Unix microseconds (UTC); string lists are JSON text.

-- +goose Up
CREATE TABLE systems (
    owner                 TEXT    NOT NULL,
    id                    TEXT    NOT NULL,
    host                  TEXT    NOT NULL,
    port                  INTEGER NOT NULL,
    host_keys             TEXT    NOT NULL DEFAULT '[]',
    host_key_fingerprints TEXT    NOT NULL DEFAULT '[]',
    trust_on_first_use    INTEGER NOT NULL DEFAULT 0,
    max_sessions          INTEGER NOT NULL DEFAULT 0,
    root_dir              TEXT    NOT NULL DEFAULT '',
    description           TEXT    NOT NULL DEFAULT '',
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    PRIMARY KEY (owner, id)
) WITHOUT ROWID;

CREATE TABLE credentials (
    owner                  TEXT    NOT NULL,
    system_id              TEXT    NOT NULL,
    username               TEXT    NOT NULL,
    key_type               TEXT    NOT NULL,
    public_key_fingerprint TEXT    NOT NULL,
    certificate            TEXT    NOT NULL DEFAULT '',
    sealed_key_id          TEXT    NOT NULL,
    sealed_wrapped_key     BLOB    NOT NULL,
    sealed_ciphertext      BLOB    NOT NULL,
    generation             INTEGER NOT NULL,
    created_at             INTEGER NOT NULL,
    PRIMARY KEY (owner, system_id),
    FOREIGN KEY (owner, system_id) REFERENCES systems (owner, id) ON DELETE CASCADE
) WITHOUT ROWID;

-- One row per named counter; credential generations come from here so they
-- never repeat, even after a credential or system is deleted and re-created.
CREATE TABLE counters (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO counters (name, value) VALUES ('credential_generation', 0);

CREATE TABLE audit_log (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    time      INTEGER NOT NULL,
    owner     TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    system_id TEXT    NOT NULL DEFAULT '',
    detail    TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX audit_log_owner_time ON audit_log (owner, time DESC, seq DESC);

-- +goose Down
DROP INDEX audit_log_owner_time;
DROP TABLE audit_log;
DROP TABLE counters;
DROP TABLE credentials;
DROP TABLE systems;
