-- Resumable (tus) uploads in progress: the committed offset and SHA-256 state of each hidden
-- part file, and a lease so that one request at a time, on any instance, writes it.

-- +goose Up
CREATE TABLE uploads (
    id           TEXT        PRIMARY KEY,
    owner        TEXT        NOT NULL,
    system_ref   TEXT        NOT NULL,
    system_owner TEXT        NOT NULL,
    system_id    TEXT        NOT NULL,
    path         TEXT        NOT NULL,
    dest         TEXT        NOT NULL,
    part_name    TEXT        NOT NULL,
    length       BIGINT      NOT NULL,
    committed    BIGINT      NOT NULL DEFAULT 0,
    hash_state   BYTEA       NOT NULL,
    sha256       TEXT        NOT NULL DEFAULT '',
    overwrite    BOOLEAN     NOT NULL DEFAULT FALSE,
    parents      BOOLEAN     NOT NULL DEFAULT FALSE,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    lease_token  TEXT        NOT NULL DEFAULT '',
    lease_until  TIMESTAMPTZ NOT NULL DEFAULT 'epoch'
);
CREATE INDEX uploads_owner ON uploads (owner, expires_at);
CREATE INDEX uploads_expires ON uploads (expires_at);

-- +goose Down
DROP TABLE uploads;
