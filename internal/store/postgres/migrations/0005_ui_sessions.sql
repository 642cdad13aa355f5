-- The web interface: browser sessions (only the SHA-256 of their id) and pending sign-ins
-- (OpenID Connect authorization requests keyed by the hash of their state; one-time login
-- links keyed by the hash of their secret).

-- +goose Up
CREATE TABLE ui_sessions (
    id_hash      BYTEA       PRIMARY KEY,
    user_id      TEXT        NOT NULL,
    groups       TEXT[]      NOT NULL DEFAULT '{}',
    created_at   TIMESTAMPTZ NOT NULL,
    last_seen_at TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX ui_sessions_user ON ui_sessions (user_id, created_at);
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);

CREATE TABLE ui_login_flows (
    key_hash   BYTEA       PRIMARY KEY,
    kind       TEXT        NOT NULL,
    user_id    TEXT        NOT NULL DEFAULT '',
    data       BYTEA       NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX ui_login_flows_expires ON ui_login_flows (expires_at);

-- +goose Down
DROP TABLE ui_login_flows;
DROP TABLE ui_sessions;
