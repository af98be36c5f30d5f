-- What each gateway last reported of its live state (its `/admin/routes`
-- answer and its last reload), for the control node's fleet view. Like
-- adaptive_routing_telemetry this is not configuration: no version bump, no
-- audit row, and old rows are pruned.
CREATE TABLE gateway_state (
    node_id TEXT PRIMARY KEY,
    state JSONB NOT NULL
        CONSTRAINT gateway_state_object CHECK (jsonb_typeof(state) = 'object'),
    -- How often the gateway pushes, to tell a late report from a fresh one.
    interval_ms BIGINT NOT NULL,
    reported_at TIMESTAMPTZ NOT NULL
);
