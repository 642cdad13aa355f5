-- Transfers, their items and the finished byte ranges of large files.
-- Times are INTEGER Unix microseconds (UTC).

-- +goose Up
CREATE TABLE transfers (
    id            TEXT    PRIMARY KEY,
    owner         TEXT    NOT NULL,
    idem_key      TEXT,
    request       TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    error         TEXT    NOT NULL DEFAULT '',
    src_system    TEXT    NOT NULL,
    src_path      TEXT    NOT NULL,
    dst_system    TEXT    NOT NULL,
    dst_path      TEXT    NOT NULL,
    recursive     INTEGER NOT NULL,
    sync          TEXT    NOT NULL,
    verify        TEXT    NOT NULL,
    streams_req   INTEGER NOT NULL,
    streams       INTEGER NOT NULL DEFAULT 0,
    chunk_size    INTEGER NOT NULL,
    same_system   INTEGER NOT NULL,
    planned       INTEGER NOT NULL DEFAULT 0,
    bytes_total   INTEGER NOT NULL DEFAULT 0,
    bytes_done    INTEGER NOT NULL DEFAULT 0,
    files_total   INTEGER NOT NULL DEFAULT 0,
    files_done    INTEGER NOT NULL DEFAULT 0,
    files_failed  INTEGER NOT NULL DEFAULT 0,
    files_skipped INTEGER NOT NULL DEFAULT 0,
    bytes_read    INTEGER NOT NULL DEFAULT 0,
    rate          REAL    NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    started_at    INTEGER,
    finished_at   INTEGER,
    deadline      INTEGER NOT NULL,
    lease_owner   TEXT    NOT NULL DEFAULT '',
    lease_until   INTEGER NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX transfers_owner_idem ON transfers (owner, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX transfers_owner_created ON transfers (owner, created_at DESC);
CREATE INDEX transfers_status_lease ON transfers (status, lease_until);

CREATE TABLE transfer_items (
    transfer_id TEXT    NOT NULL REFERENCES transfers (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    kind        TEXT    NOT NULL,
    src         TEXT    NOT NULL,
    dst         TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    mtime       INTEGER NOT NULL,
    mode        INTEGER NOT NULL,
    link_target TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL,
    bytes_done  INTEGER NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 0,
    error       TEXT    NOT NULL DEFAULT '',
    sha256      TEXT    NOT NULL DEFAULT '',
    staged      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (transfer_id, seq)
) WITHOUT ROWID;

CREATE TABLE transfer_ranges (
    transfer_id TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    idx         INTEGER NOT NULL,
    PRIMARY KEY (transfer_id, seq, idx),
    FOREIGN KEY (transfer_id, seq) REFERENCES transfer_items (transfer_id, seq) ON DELETE CASCADE
) WITHOUT ROWID;

-- +goose Down
DROP TABLE transfer_ranges;
DROP TABLE transfer_items;
DROP INDEX transfers_status_lease;
DROP INDEX transfers_owner_created;
DROP INDEX transfers_owner_idem;
DROP TABLE transfers;
