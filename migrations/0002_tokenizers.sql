-- A route's or provider group's model directory for routing tokenization
-- (`tokenizer`, `tokenizer_budget_kib` in rolter.toml). The directory is a
-- path on the gateways; each gateway checks it when it validates.
ALTER TABLE routes
    ADD COLUMN tokenizer TEXT,
    ADD COLUMN tokenizer_budget_kib BIGINT
        CONSTRAINT routes_tokenizer_budget_range CHECK (tokenizer_budget_kib BETWEEN 0 AND 4294967295);
ALTER TABLE provider_groups
    ADD COLUMN tokenizer TEXT,
    ADD COLUMN tokenizer_budget_kib BIGINT
        CONSTRAINT provider_groups_tokenizer_budget_range CHECK (tokenizer_budget_kib BETWEEN 0 AND 4294967295);
