-- slow_runs counts the runs of a transfer that ended below transfer.min_rate and were re-queued,
-- so that the limit (transfer.slow_retries) holds across restarts and instances.

-- +goose Up
ALTER TABLE transfers ADD COLUMN slow_runs INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE transfers DROP COLUMN slow_runs;
