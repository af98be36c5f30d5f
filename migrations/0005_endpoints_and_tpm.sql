-- Issue 19: route endpoint allow lists and token rate limits.

-- A route's or provider group's endpoint allow list (`endpoints` in
-- rolter.toml): the API endpoints its requests may use, by name; NULL is
-- every endpoint. The names are checked where every configuration is
-- validated, not here.
ALTER TABLE routes ADD COLUMN endpoints TEXT[];
ALTER TABLE provider_groups ADD COLUMN endpoints TEXT[];

-- An API key's tokens per minute (`tpm`), prompt and completion together.
ALTER TABLE api_keys ADD COLUMN tpm BIGINT
    CONSTRAINT api_keys_tpm_range CHECK (tpm >= 0);
