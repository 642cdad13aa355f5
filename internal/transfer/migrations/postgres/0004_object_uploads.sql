-- See ../sqlite/0004_object_uploads.sql.

-- +goose Up
CREATE TABLE transfer_uploads (
    transfer_id TEXT    NOT NULL,
    seq         BIGINT  NOT NULL,
    upload_id   TEXT    NOT NULL,
    dst         TEXT    NOT NULL,
    part_size   BIGINT  NOT NULL,
    src_etag    TEXT    NOT NULL DEFAULT '',
    hash_off    BIGINT  NOT NULL DEFAULT 0,
    hash_state  BYTEA,
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (transfer_id, seq),
    FOREIGN KEY (transfer_id, seq) REFERENCES transfer_items (transfer_id, seq) ON DELETE CASCADE
);

CREATE INDEX transfer_uploads_created ON transfer_uploads (created_at);

CREATE TABLE transfer_parts (
    transfer_id TEXT    NOT NULL,
    seq         BIGINT  NOT NULL,
    part        INTEGER NOT NULL,
    size        BIGINT  NOT NULL,
    etag        TEXT    NOT NULL DEFAULT '',
    sha256      TEXT    NOT NULL,
    PRIMARY KEY (transfer_id, seq, part),
    FOREIGN KEY (transfer_id, seq) REFERENCES transfer_uploads (transfer_id, seq) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE transfer_parts;
DROP TABLE transfer_uploads;
