-- System kinds: a system is an SSH host ("ssh", every existing row) or an S3 bucket ("s3") at an
-- endpoint URL, in a region, optionally under a key prefix, addressed path-style or not.
-- An S3 system's credential row holds the access key id in username, "s3" in key_type, and the
-- sealed JSON of the keys.

-- +goose Up
ALTER TABLE systems ADD COLUMN kind TEXT NOT NULL DEFAULT 'ssh';
ALTER TABLE systems ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';
ALTER TABLE systems ADD COLUMN region TEXT NOT NULL DEFAULT '';
ALTER TABLE systems ADD COLUMN bucket TEXT NOT NULL DEFAULT '';
ALTER TABLE systems ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
ALTER TABLE systems ADD COLUMN path_style INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE systems DROP COLUMN path_style;
ALTER TABLE systems DROP COLUMN prefix;
ALTER TABLE systems DROP COLUMN bucket;
ALTER TABLE systems DROP COLUMN region;
ALTER TABLE systems DROP COLUMN endpoint;
ALTER TABLE systems DROP COLUMN kind;
