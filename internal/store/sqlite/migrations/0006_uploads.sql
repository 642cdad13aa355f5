-- Resumable (tus) uploads in progress: the committed offset and SHA-256 state of each hidden
-- part file, and a lease so that one request at a time, on any instance, writes it. Times are
-- Unix microseconds.

-- +goose Up
CREATE TABLE uploads (
    id           TEXT    PRIMARY KEY,
    owner        TEXT    NOT NULL,
    system_ref   TEXT    NOT NULL,
    system_owner TEXT    NOT NULL,
    system_id    TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    dest         TEXT    NOT NULL,
    part_name    TEXT    NOT NULL,
    length       INTEGER NOT NULL,
    committed    INTEGER NOT NULL DEFAULT 0,
    hash_state   BLOB    NOT NULL,
    sha256       TEXT    NOT NULL DEFAULT '',
    overwrite    INTEGER NOT NULL DEFAULT 0,
    parents      INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    lease_token  TEXT    NOT NULL DEFAULT '',
    lease_until  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX uploads_owner ON uploads (owner, expires_at);
CREATE INDEX uploads_expires ON uploads (expires_at);

-- +goose Down
DROP TABLE uploads;
