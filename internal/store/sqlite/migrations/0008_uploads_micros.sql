-- PostgreSQL's 0008 turns the uploads table's times into Unix microseconds, which they already
-- are here; this keeps the two drivers' migration versions equal.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
