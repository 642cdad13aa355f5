-- See ../sqlite/0003_slow_runs.sql.

-- +goose Up
ALTER TABLE transfers ADD COLUMN slow_runs INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE transfers DROP COLUMN slow_runs;
