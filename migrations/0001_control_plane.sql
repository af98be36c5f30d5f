-- The control plane's database: the fleet's configuration rows (what
-- rolter.toml would say, for everything the dashboard and the control API
-- manage), the adaptive-routing policy, what the nodes report, and the
-- audit log.
--
-- Configuration columns mirror the rolter.toml tables field for field: a
-- NULL is a field left unset, which validation fills with its default, so
-- a row reads back exactly as it was written. Nothing here checks what
-- validation checks (slug patterns, URLs, strategy names, references to
-- providers that may live in rolter.toml): the control API validates the
-- whole document before it writes. The constraints below are the ones that
-- keep the rows themselves coherent.
--
-- Applied by `rolter migrate` and at control-node start; sqlx's
-- `_sqlx_migrations` table makes a second run a no-op.

-- One row: the configuration version. Every configuration write bumps it in
-- its own transaction, so a gateway polling `?version=N` sees each change
-- exactly once, with everything that change wrote.
CREATE TABLE config_version (
    singleton  BOOLEAN PRIMARY KEY DEFAULT TRUE CONSTRAINT config_version_singleton CHECK (singleton),
    version    BIGINT NOT NULL CONSTRAINT config_version_positive CHECK (version >= 1),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO config_version (singleton, version) VALUES (TRUE, 1);

-- [[providers]]. kv_events and lmcache hold their tables as JSON objects
-- (the reference implementation left them out of its database; we keep
-- them, decisions.md).
CREATE TABLE providers (
    slug        TEXT PRIMARY KEY,
    name        TEXT NOT NULL CONSTRAINT providers_name_key UNIQUE,
    base_url    TEXT NOT NULL,
    api_key_env TEXT,
    health_path TEXT,
    ca_file     TEXT,
    tls_verify  BOOLEAN,
    max_loras   BIGINT CONSTRAINT providers_max_loras_range CHECK (max_loras >= 0),
    kv_events   JSONB CONSTRAINT providers_kv_events_object CHECK (jsonb_typeof(kv_events) = 'object'),
    lmcache     JSONB CONSTRAINT providers_lmcache_object CHECK (jsonb_typeof(lmcache) = 'object'),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- [[routes]] and their targets, in order. A target names a provider by
-- slug or name, possibly one defined in rolter.toml: no foreign key.
CREATE TABLE routes (
    model      TEXT PRIMARY KEY,
    strategy   TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE route_targets (
    route    TEXT NOT NULL REFERENCES routes (model) ON DELETE CASCADE ON UPDATE CASCADE,
    position INTEGER NOT NULL CONSTRAINT route_targets_position_range CHECK (position >= 0),
    provider TEXT NOT NULL,
    model    TEXT,
    weight   BIGINT CONSTRAINT route_targets_weight_range CHECK (weight BETWEEN 0 AND 4294967295),
    PRIMARY KEY (route, position)
);

-- [[provider_groups]] and their members, in order. A member without a
-- model is passthrough.
CREATE TABLE provider_groups (
    slug       TEXT PRIMARY KEY,
    name       TEXT NOT NULL CONSTRAINT provider_groups_name_key UNIQUE,
    strategy   TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE provider_group_members (
    group_slug TEXT NOT NULL REFERENCES provider_groups (slug) ON DELETE CASCADE ON UPDATE CASCADE,
    position   INTEGER NOT NULL CONSTRAINT provider_group_members_position_range CHECK (position >= 0),
    provider   TEXT NOT NULL,
    model      TEXT,
    weight     BIGINT CONSTRAINT provider_group_members_weight_range CHECK (weight BETWEEN 0 AND 4294967295),
    PRIMARY KEY (group_slug, position)
);

-- [[catalog]]: prices per million tokens.
CREATE TABLE catalog (
    model           TEXT PRIMARY KEY,
    input_per_mtok  DOUBLE PRECISION NOT NULL,
    output_per_mtok DOUBLE PRECISION NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- [[api_keys]]: callers of the proxy. The key itself is never stored: its
-- public id, a random salt and SHA-256(salt || key), all hex.
CREATE TABLE api_keys (
    name           TEXT PRIMARY KEY,
    key_id         TEXT NOT NULL CONSTRAINT api_keys_key_id_key UNIQUE,
    salt           TEXT NOT NULL,
    key_hash       TEXT NOT NULL,
    models         TEXT[] NOT NULL DEFAULT '{}',
    providers      TEXT[] NOT NULL DEFAULT '{}',
    rpm            BIGINT CONSTRAINT api_keys_rpm_range CHECK (rpm BETWEEN 0 AND 4294967295),
    max_concurrent BIGINT CONSTRAINT api_keys_max_concurrent_range CHECK (max_concurrent BETWEEN 0 AND 4294967295),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- [[admin_tokens]]: callers of the admin and control API, stored like API
-- keys.
CREATE TABLE admin_tokens (
    name       TEXT PRIMARY KEY,
    token_id   TEXT NOT NULL CONSTRAINT admin_tokens_token_id_key UNIQUE,
    salt       TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    role       TEXT NOT NULL CONSTRAINT admin_tokens_role_known CHECK (role IN ('viewer', 'admin', 'superadmin')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- [adaptive_routing]: exactly one row, the deployment-wide policy, stored
-- as sanitized (weights >= 0, exploration in [0, 0.5]). The defaults are
-- the specification's (load-balancing.md).
CREATE TABLE adaptive_routing_policy (
    singleton         BOOLEAN PRIMARY KEY DEFAULT TRUE CONSTRAINT adaptive_routing_policy_singleton CHECK (singleton),
    enabled           BOOLEAN NOT NULL DEFAULT FALSE,
    latency_weight    DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    cost_weight       DOUBLE PRECISION NOT NULL DEFAULT 0.5,
    load_weight       DOUBLE PRECISION NOT NULL DEFAULT 0.25,
    exploration_ratio DOUBLE PRECISION NOT NULL DEFAULT 0.05,
    min_samples       BIGINT NOT NULL DEFAULT 50 CONSTRAINT adaptive_routing_policy_min_samples_range CHECK (min_samples >= 0),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_by        TEXT
);
INSERT INTO adaptive_routing_policy (singleton) VALUES (TRUE);

-- The newest adaptive-routing sample per (node, model), pushed every 15 s
-- by each gateway; pruned after an hour.
CREATE TABLE adaptive_routing_telemetry (
    node_id     TEXT NOT NULL,
    model       TEXT NOT NULL,
    sample      JSONB NOT NULL,
    reported_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, model)
);
CREATE INDEX adaptive_routing_telemetry_reported_at ON adaptive_routing_telemetry (reported_at);

-- The cluster inventory: every node that polled for a snapshot.
CREATE TABLE cluster_nodes (
    node_id          TEXT PRIMARY KEY,
    role             TEXT NOT NULL,
    config_version   BIGINT,
    address          TEXT,
    software_version TEXT,
    first_seen       TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen        TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Who changed what. `version` is the configuration version the change
-- produced; `details` never holds a secret.
CREATE TABLE audit_log (
    id      BIGSERIAL PRIMARY KEY,
    at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    subject TEXT NOT NULL,
    details JSONB NOT NULL DEFAULT '{}',
    version BIGINT
);
CREATE INDEX audit_log_at ON audit_log (at);
