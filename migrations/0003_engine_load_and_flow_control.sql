-- A provider's engine-reported load (`[providers.engine_metrics]`, a JSON
-- object like kv_events and lmcache) and its per-node concurrency limit
-- (`max_concurrency`); an API key's flow-control priority band.
ALTER TABLE providers
    ADD COLUMN max_concurrency BIGINT
        CONSTRAINT providers_max_concurrency_range CHECK (max_concurrency >= 0),
    ADD COLUMN engine_metrics JSONB
        CONSTRAINT providers_engine_metrics_object CHECK (jsonb_typeof(engine_metrics) = 'object');
ALTER TABLE api_keys
    ADD COLUMN priority BIGINT;
