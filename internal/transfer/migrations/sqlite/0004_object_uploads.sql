-- The uploads of transfers with an object-storage end (see object.go): one per file being
-- written, with the id the storage backend gave it (an S3 multipart upload id, or the SFTP
-- backend's temporary file name), the part size the file was cut into, the source's version
-- when it started, and how far the whole-file SHA-256 has been computed in order (the
-- marshaled hash state after hash_off bytes), so that a resumed run neither resends finished
-- parts nor re-reads the prefix already hashed. transfer_parts are the finished parts with
-- their ETag and SHA-256 (hex), confirmed against the server on resume. The engine's reaper
-- aborts the uploads of finished or abandoned transfers from these rows only: never an upload
-- that sshapi did not start.

-- +goose Up
CREATE TABLE transfer_uploads (
    transfer_id TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    upload_id   TEXT    NOT NULL,
    dst         TEXT    NOT NULL,
    part_size   INTEGER NOT NULL,
    src_etag    TEXT    NOT NULL DEFAULT '',
    hash_off    INTEGER NOT NULL DEFAULT 0,
    hash_state  BLOB,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (transfer_id, seq),
    FOREIGN KEY (transfer_id, seq) REFERENCES transfer_items (transfer_id, seq) ON DELETE CASCADE
);

CREATE INDEX transfer_uploads_created ON transfer_uploads (created_at);

CREATE TABLE transfer_parts (
    transfer_id TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    part        INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    etag        TEXT    NOT NULL DEFAULT '',
    sha256      TEXT    NOT NULL,
    PRIMARY KEY (transfer_id, seq, part),
    FOREIGN KEY (transfer_id, seq) REFERENCES transfer_uploads (transfer_id, seq) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE transfer_parts;
DROP TABLE transfer_uploads;
