-- A run that cannot progress says why: retries counts waits for a retry, next_attempt_at
-- (Unix microseconds) is when the next one starts; the transfer's status is then 'retrying'
-- and error holds the last error.

-- +goose Up
ALTER TABLE transfers ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE transfers ADD COLUMN next_attempt_at INTEGER;

-- +goose Down
ALTER TABLE transfers DROP COLUMN next_attempt_at;
ALTER TABLE transfers DROP COLUMN retries;
