-- Temporary names requests are writing on systems (upload part files, archives being built,
-- extraction directories), recorded before they exist and leased by the writing instance, so
-- one left behind by a killed instance or a lost connection is removed later. Times are Unix
-- microseconds: the table's queries are written once for every driver (store.SQLTemps).

-- +goose Up
CREATE TABLE temp_files (
    id           TEXT   PRIMARY KEY,
    system_owner TEXT   NOT NULL,
    system_id    TEXT   NOT NULL,
    dir          TEXT   NOT NULL,
    name         TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    lease_until  BIGINT NOT NULL
);
CREATE INDEX temp_files_lease ON temp_files (lease_until);

-- +goose Down
DROP TABLE temp_files;
