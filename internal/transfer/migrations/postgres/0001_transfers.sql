-- Transfers, their items and the finished byte ranges of large files (PostgreSQL; mirrors
-- ../sqlite/0001_transfers.sql). Times are BIGINT Unix microseconds (UTC).

-- +goose Up
CREATE TABLE transfers (
    id            TEXT             PRIMARY KEY,
    owner         TEXT             NOT NULL,
    idem_key      TEXT,
    request       TEXT             NOT NULL,
    status        TEXT             NOT NULL,
    error         TEXT             NOT NULL DEFAULT '',
    src_system    TEXT             NOT NULL,
    src_path      TEXT             NOT NULL,
    dst_system    TEXT             NOT NULL,
    dst_path      TEXT             NOT NULL,
    recursive     BOOLEAN          NOT NULL,
    sync          TEXT             NOT NULL,
    verify        TEXT             NOT NULL,
    streams_req   INTEGER          NOT NULL,
    streams       INTEGER          NOT NULL DEFAULT 0,
    chunk_size    BIGINT           NOT NULL,
    same_system   BOOLEAN          NOT NULL,
    planned       BOOLEAN          NOT NULL DEFAULT FALSE,
    bytes_total   BIGINT           NOT NULL DEFAULT 0,
    bytes_done    BIGINT           NOT NULL DEFAULT 0,
    files_total   BIGINT           NOT NULL DEFAULT 0,
    files_done    BIGINT           NOT NULL DEFAULT 0,
    files_failed  BIGINT           NOT NULL DEFAULT 0,
    files_skipped BIGINT           NOT NULL DEFAULT 0,
    bytes_read    BIGINT           NOT NULL DEFAULT 0,
    rate          DOUBLE PRECISION NOT NULL DEFAULT 0,
    attempts      INTEGER          NOT NULL DEFAULT 0,
    created_at    BIGINT           NOT NULL,
    started_at    BIGINT,
    finished_at   BIGINT,
    deadline      BIGINT           NOT NULL,
    lease_owner   TEXT             NOT NULL DEFAULT '',
    lease_until   BIGINT           NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX transfers_owner_idem ON transfers (owner, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX transfers_owner_created ON transfers (owner, created_at DESC);
CREATE INDEX transfers_status_lease ON transfers (status, lease_until);

CREATE TABLE transfer_items (
    transfer_id TEXT    NOT NULL REFERENCES transfers (id) ON DELETE CASCADE,
    seq         BIGINT  NOT NULL,
    kind        TEXT    NOT NULL,
    src         TEXT    NOT NULL,
    dst         TEXT    NOT NULL,
    size        BIGINT  NOT NULL,
    mtime       BIGINT  NOT NULL,
    mode        BIGINT  NOT NULL,
    link_target TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL,
    bytes_done  BIGINT  NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 0,
    error       TEXT    NOT NULL DEFAULT '',
    sha256      TEXT    NOT NULL DEFAULT '',
    staged      BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (transfer_id, seq)
);

CREATE TABLE transfer_ranges (
    transfer_id TEXT    NOT NULL,
    seq         BIGINT  NOT NULL,
    idx         INTEGER NOT NULL,
    PRIMARY KEY (transfer_id, seq, idx),
    FOREIGN KEY (transfer_id, seq) REFERENCES transfer_items (transfer_id, seq) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE transfer_ranges;
DROP TABLE transfer_items;
DROP TABLE transfers;
