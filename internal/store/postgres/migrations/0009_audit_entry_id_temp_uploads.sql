-- Audit entries carry an id (entry_id), unique where set, so an entry written twice — replayed
-- from an instance's audit spool after a crash, or retried after a commit whose answer was lost —
-- is stored once (INSERT … ON CONFLICT DO NOTHING). Entries without one (older rows, loaded
-- dumps) keep NULL, which a unique index does not compare.
-- The temporary-name ledger also records S3 multipart uploads a request is writing: bucket and
-- upload_id are set (name is the upload's path in the system), so a lapsed one is aborted.

-- +goose Up
ALTER TABLE audit_log ADD COLUMN entry_id TEXT;
CREATE UNIQUE INDEX audit_log_entry_id ON audit_log (entry_id);
ALTER TABLE temp_files ADD COLUMN bucket TEXT NOT NULL DEFAULT '';
ALTER TABLE temp_files ADD COLUMN upload_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE temp_files DROP COLUMN upload_id;
ALTER TABLE temp_files DROP COLUMN bucket;
DROP INDEX audit_log_entry_id;
ALTER TABLE audit_log DROP COLUMN entry_id;
