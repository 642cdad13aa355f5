-- See ../sqlite/0002_retrying.sql.

-- +goose Up
ALTER TABLE transfers ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE transfers ADD COLUMN next_attempt_at BIGINT;

-- +goose Down
ALTER TABLE transfers DROP COLUMN next_attempt_at;
ALTER TABLE transfers DROP COLUMN retries;
