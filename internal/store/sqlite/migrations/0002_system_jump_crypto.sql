-- Jump hosts and per-system SSH algorithms: a system may name another of its owner's systems
-- as its jump host (OpenSSH ProxyJump), and restrict the ciphers and key exchanges offered.
-- String lists are JSON text, like host_keys.

-- +goose Up
ALTER TABLE systems ADD COLUMN jump TEXT NOT NULL DEFAULT '';
ALTER TABLE systems ADD COLUMN ciphers TEXT NOT NULL DEFAULT '[]';
ALTER TABLE systems ADD COLUMN key_exchanges TEXT NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE systems DROP COLUMN key_exchanges;
ALTER TABLE systems DROP COLUMN ciphers;
ALTER TABLE systems DROP COLUMN jump;
