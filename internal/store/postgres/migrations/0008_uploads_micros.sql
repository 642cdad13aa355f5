-- Resumable uploads' times become Unix microseconds, as on SQLite, so the table's queries are
-- written once for both drivers (store.SQLUploads).

-- +goose Up
ALTER TABLE uploads ALTER COLUMN created_at TYPE BIGINT USING (extract(epoch FROM created_at) * 1000000)::BIGINT;
ALTER TABLE uploads ALTER COLUMN expires_at TYPE BIGINT USING (extract(epoch FROM expires_at) * 1000000)::BIGINT;
ALTER TABLE uploads ALTER COLUMN lease_until DROP DEFAULT;
ALTER TABLE uploads ALTER COLUMN lease_until TYPE BIGINT USING (extract(epoch FROM lease_until) * 1000000)::BIGINT;
ALTER TABLE uploads ALTER COLUMN lease_until SET DEFAULT 0;

-- +goose Down
ALTER TABLE uploads ALTER COLUMN created_at TYPE TIMESTAMPTZ USING to_timestamp(created_at / 1000000.0);
ALTER TABLE uploads ALTER COLUMN expires_at TYPE TIMESTAMPTZ USING to_timestamp(expires_at / 1000000.0);
ALTER TABLE uploads ALTER COLUMN lease_until DROP DEFAULT;
ALTER TABLE uploads ALTER COLUMN lease_until TYPE TIMESTAMPTZ USING to_timestamp(lease_until / 1000000.0);
ALTER TABLE uploads ALTER COLUMN lease_until SET DEFAULT 'epoch';
