-- Issue 20: prefill/decode disaggregation.

-- A route's `disaggregation` table (protocol, prefill and decode pools,
-- their strategies, min_prefill_tokens) as written in rolter.toml; NULL is
-- a route served whole by `targets`. Its fields are checked where every
-- configuration is validated, not here.
ALTER TABLE routes ADD COLUMN disaggregation JSONB;

-- A provider's SGLang bootstrap server port, read for the prefill engines
-- of an SGLang disaggregated route.
ALTER TABLE providers ADD COLUMN bootstrap_port INTEGER
    CONSTRAINT providers_bootstrap_port_range CHECK (bootstrap_port BETWEEN 1 AND 65535);
