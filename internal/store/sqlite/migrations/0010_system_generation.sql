-- The system generation: one counter (counters.system_generation), increased in the same transaction as every insert, update
-- or delete of a system or a credential, by triggers, so whoever writes (this process, another
-- process on the same file, an operator's SQL) moves it. GetSystemCredential caches what it read
-- under the generation of that read and uses an entry only while the generation is unchanged
-- (store.SystemCache).

-- +goose Up
INSERT INTO counters (name, value) VALUES ('system_generation', 0);

-- +goose StatementBegin
CREATE TRIGGER systems_generation_insert AFTER INSERT ON systems
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'system_generation'; END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER systems_generation_update AFTER UPDATE ON systems
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'system_generation'; END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER systems_generation_delete AFTER DELETE ON systems
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'system_generation'; END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER credentials_generation_insert AFTER INSERT ON credentials
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'system_generation'; END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER credentials_generation_update AFTER UPDATE ON credentials
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'system_generation'; END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER credentials_generation_delete AFTER DELETE ON credentials
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'system_generation'; END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER credentials_generation_delete;
DROP TRIGGER credentials_generation_update;
DROP TRIGGER credentials_generation_insert;
DROP TRIGGER systems_generation_delete;
DROP TRIGGER systems_generation_update;
DROP TRIGGER systems_generation_insert;
DELETE FROM counters WHERE name = 'system_generation';
