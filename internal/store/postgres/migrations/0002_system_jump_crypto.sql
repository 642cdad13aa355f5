-- Jump hosts and per-system SSH algorithms (see the SQLite migration of the same number).

-- +goose Up
ALTER TABLE systems ADD COLUMN jump TEXT NOT NULL DEFAULT '';
ALTER TABLE systems ADD COLUMN ciphers TEXT[] NOT NULL DEFAULT '{}';
ALTER TABLE systems ADD COLUMN key_exchanges TEXT[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE systems DROP COLUMN key_exchanges;
ALTER TABLE systems DROP COLUMN ciphers;
ALTER TABLE systems DROP COLUMN jump;
