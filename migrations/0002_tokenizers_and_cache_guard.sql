-- A route's or provider group's model directory for routing tokenization
-- (`tokenizer`, `tokenizer_budget_kib` in rolter.toml; the directory is a
-- path on the gateways, each gateway checks it when it validates) and
-- cache_aware's load guard (`cache_guard = { min_load, load_ratio }`).
ALTER TABLE routes
    ADD COLUMN tokenizer TEXT,
    ADD COLUMN tokenizer_budget_kib BIGINT
        CONSTRAINT routes_tokenizer_budget_range CHECK (tokenizer_budget_kib BETWEEN 0 AND 4294967295),
    ADD COLUMN cache_guard_min_load BIGINT
        CONSTRAINT routes_cache_guard_min_load_range CHECK (cache_guard_min_load >= 0),
    ADD COLUMN cache_guard_load_ratio DOUBLE PRECISION;
ALTER TABLE provider_groups
    ADD COLUMN tokenizer TEXT,
    ADD COLUMN tokenizer_budget_kib BIGINT
        CONSTRAINT provider_groups_tokenizer_budget_range CHECK (tokenizer_budget_kib BETWEEN 0 AND 4294967295),
    ADD COLUMN cache_guard_min_load BIGINT
        CONSTRAINT provider_groups_cache_guard_min_load_range CHECK (cache_guard_min_load >= 0),
    ADD COLUMN cache_guard_load_ratio DOUBLE PRECISION;
