//! `[[api_keys]]` and `[[admin_tokens]]`.

use sha2::{Digest, Sha256};

use super::*;

#[test]
fn api_key_sha256_is_accepted_and_stored_as_digest() {
    let digest = Sha256::digest(b"sk-caller");
    let text = format!(
        "[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{}\"\n",
        hex::encode_upper(digest)
    );
    assert_eq!(
        ok(&text).api_keys[0].digest,
        SecretDigest::Sha256(digest.into())
    );
}

#[test]
fn bad_key_sha256_is_rejected() {
    for bad in ["abc", &"zz".repeat(32), &"a".repeat(65)] {
        let text = format!("[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{bad}\"\n");
        let error = only_error(&text);
        assert_eq!(field(&error), "api_keys[0].key_sha256");
        assert_eq!(error.line, Some(3));
        assert!(
            error.message.starts_with("must be 64 hexadecimal digits"),
            "{error}"
        );
    }
}

#[test]
fn api_key_needs_exactly_one_source() {
    let text = "[[api_keys]]\nname = \"k\"\n\n[[api_keys]]\nname = \"j\"\nkey_env = \"K\"\nkey_sha256 = \"00\"\n";
    let errors = errors(text);
    let got: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (field(e), e.line)).collect();
    assert_eq!(got, [("api_keys[0]", Some(1)), ("api_keys[1]", Some(4))]);
    assert_eq!(
        errors[0].message,
        "set one of key_env, key_sha256 or key_salted"
    );
    assert_eq!(
        errors[1].message,
        "set exactly one of key_env, key_sha256 and key_salted, not key_env and key_sha256"
    );
}

#[test]
fn api_key_from_a_missing_variable_names_it() {
    let error = only_error("[[api_keys]]\nname = \"k\"\nkey_env = \"TEAM_KEY\"\n");
    assert_eq!(field(&error), "api_keys[0].key_env");
    assert_eq!(error.message, "environment variable TEAM_KEY is not set");
}

#[test]
fn two_api_keys_with_one_digest_are_rejected() {
    let digest = hex::encode(Sha256::digest(b"shared"));
    let text = format!(
        "[[api_keys]]\nname = \"a\"\nkey_env = \"A\"\n\n[[api_keys]]\nname = \"b\"\nkey_sha256 = \"{digest}\"\n"
    );
    let errors = parse(FILE, &text, &env_of(&[("A", "shared")]))
        .unwrap_err()
        .0;
    assert_eq!(errors.len(), 1);
    assert_eq!(field(&errors[0]), "api_keys[1].key_sha256");
    assert!(errors[0].message.contains("same key as api_keys[0]"));
}

#[test]
fn api_key_names_must_be_unique() {
    let text = "[[api_keys]]\nname = \"a\"\nkey_sha256 = \"".to_string()
        + &"0".repeat(64)
        + "\"\n[[api_keys]]\nname = \"a\"\nkey_sha256 = \""
        + &"1".repeat(64)
        + "\"\n";
    let error = only_error(&text);
    assert_eq!(field(&error), "api_keys[1].name");
    assert_eq!(error.line, Some(5));
}

#[test]
fn api_key_scopes_must_name_configured_routes_and_providers() {
    let zeros = "0".repeat(64);
    let text = with_providers(&format!(
        "[[routes]]\nmodel = \"m\"\ntargets = [{{ provider = \"gpu-a\" }}]\n\n[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{zeros}\"\nmodels = [\"m\", \"nope\"]\nproviders = [\"gpu-b\", \"gpu-q\"]\n"
    ));
    let errors = errors(&text);
    assert_eq!(
        fields(&errors),
        [
            (
                "api_keys[0].models[1]",
                "unknown model \"nope\": not a route's model nor a provider group's slug (known: m)"
            ),
            (
                "api_keys[0].providers[1]",
                "unknown provider \"gpu-q\" (known: gpu-a, gpu-b)"
            ),
        ]
    );
    assert_eq!(errors[0].line, line(&text, "models ="));

    let text = text.replace(", \"nope\"", "").replace(", \"gpu-q\"", "");
    let key = &ok(&text).api_keys[0];
    assert_eq!(key.models, ["m"]);
    assert_eq!(key.providers, ["gpu-b"]);
}

#[test]
fn api_key_scope_on_a_failed_route_does_not_add_noise() {
    let zeros = "0".repeat(64);
    let text = with_providers(&format!(
        "[[routes]]\nmodel = \"m\"\nstrategy = \"bogus\"\ntargets = [{{ provider = \"gpu-a\" }}]\n\n[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{zeros}\"\nmodels = [\"m\"]\n"
    ));
    assert_eq!(field(&only_error(&text)), "routes[0].strategy");
}

#[test]
fn api_key_limits_default_to_unlimited() {
    let zeros = "0".repeat(64);
    let ones = "1".repeat(64);
    let text = format!(
        "[[api_keys]]\nname = \"open\"\nkey_sha256 = \"{zeros}\"\n\n[[api_keys]]\nname = \"capped\"\nkey_sha256 = \"{ones}\"\nrpm = 600\ntpm = 250000\nmax_concurrent = 4294967295\n"
    );
    let keys = ok(&text).api_keys;
    assert_eq!(
        (keys[0].rpm, keys[0].tpm, keys[0].max_concurrent),
        (0, 0, 0)
    );
    assert_eq!(
        (keys[1].rpm, keys[1].tpm, keys[1].max_concurrent),
        (600, 250_000, u32::MAX)
    );
    assert!(format!("{:?}", keys[1]).contains("rpm: 600"));
}

#[test]
fn api_key_limits_are_bounded_integers() {
    let zeros = "0".repeat(64);
    for (limit, bad) in [
        ("rpm", "-1"),
        ("max_concurrent", "4294967296"),
        ("rpm", "1.5"),
        ("tpm", "-5"),
        ("tpm", "1000000000001"),
    ] {
        let text =
            format!("[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{zeros}\"\n{limit} = {bad}\n");
        let error = only_error(&text);
        assert_eq!(field(&error), format!("api_keys[0].{limit}"));
        assert_eq!(error.line, Some(4));
    }
}

#[test]
fn admin_token_role_defaults_to_viewer_and_orders_by_privilege() {
    let text = "[[admin_tokens]]\nname = \"v\"\ntoken_env = \"V\"\n\n[[admin_tokens]]\nname = \"a\"\ntoken_env = \"A\"\nrole = \"admin\"\n";
    let config = parse(FILE, text, &env_of(&[("V", "v-token"), ("A", "a-token")])).unwrap();
    assert_eq!(config.admin_tokens[0].role, AdminRole::Viewer);
    assert_eq!(config.admin_tokens[1].role, AdminRole::Admin);
    assert_eq!(
        config.admin_tokens[0].digest,
        SecretDigest::Sha256(Sha256::digest(b"v-token").into())
    );
    assert!(AdminRole::Viewer < AdminRole::Admin && AdminRole::Admin < AdminRole::Superadmin);
    assert!(!format!("{config:?}").contains("a-token"));
}

#[test]
fn admin_token_errors_name_their_fields() {
    let text = "[[admin_tokens]]\nname = \"ops\"\ntoken_env = \"OPS\"\nrole = \"root\"\n\n[[admin_tokens]]\nname = \"x\"\ntoken_sha256 = \"12\"\n";
    let errors = errors(text);
    let got: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (field(e), e.line)).collect();
    assert_eq!(
        got,
        [
            ("admin_tokens[0].token_env", Some(3)),
            ("admin_tokens[0].role", Some(4)),
            ("admin_tokens[1].token_sha256", Some(8)),
        ]
    );
    assert_eq!(errors[0].message, "environment variable OPS is not set");
    assert!(errors[1].message.contains("unknown role \"root\""));
}

// ---- salted digests of generated keys -------------------------------------

/// `[[api_keys]]` (or another list) with one salted entry.
fn salted_entry(list: &str, what: &str, name: &str, id: &str, salt: &str, sha256: &str) -> String {
    format!(
        "[[{list}]]\nname = \"{name}\"\n{what}_salted = {{ id = \"{id}\", salt = \"{salt}\", sha256 = \"{sha256}\" }}\n"
    )
}

const ID: &str = "0123456789abcdef";

fn salt_hex() -> String {
    "5a".repeat(SALT_LEN)
}

fn sha_hex() -> String {
    "ab".repeat(32)
}

#[test]
fn api_key_salted_is_accepted_and_stored_as_a_salted_digest() {
    let text = salted_entry("api_keys", "key", "k", ID, &salt_hex(), &sha_hex());
    assert_eq!(
        ok(&text).api_keys[0].digest,
        SecretDigest::Salted {
            id: ID.into(),
            salt: vec![0x5a; SALT_LEN],
            sha256: [0xab; 32],
        }
    );
}

#[test]
fn generated_key_written_with_set_digest_verifies_after_validation() {
    let (key, digest) = new_secret(API_KEY_PREFIX);
    let (token, token_digest) = new_secret(ADMIN_TOKEN_PREFIX);
    let mut document = file::ConfigFile::default();
    let mut key_table = file::ApiKeyTable {
        name: Some("generated".into()),
        key_env: Some("IGNORED".into()),
        ..Default::default()
    };
    key_table.set_digest(&digest);
    assert_eq!(key_table.key_env, None);
    document.api_keys.push(key_table);
    let mut token_table = file::AdminTokenTable {
        name: Some("dashboard".into()),
        ..Default::default()
    };
    token_table.set_digest(&token_digest);
    document.admin_tokens.push(token_table);

    let config = parse_document(FILE, &document, &no_env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.api_keys[0].digest, digest);
    assert!(config.api_keys[0].digest.verify(key.as_bytes()));
    assert!(config.admin_tokens[0].digest.verify(token.as_bytes()));
    assert!(!config.admin_tokens[0].digest.verify(key.as_bytes()));
    let shown = format!("{config:?}");
    assert!(!shown.contains(&key[20..]) && !shown.contains(&token[20..]));

    // A plain digest goes to `*_sha256`.
    let mut table = file::ApiKeyTable::default();
    table.set_digest(&SecretDigest::Sha256([7; 32]));
    assert_eq!(table.key_sha256, Some("07".repeat(32)));
    assert_eq!(table.key_salted, None);
}

#[test]
fn salted_digest_fields_are_required_and_checked() {
    let text = "[[api_keys]]\nname = \"k\"\nkey_salted = { salt = \"12\", sha256 = \"xyz\" }\n";
    assert_eq!(
        located(&errors(text)),
        [
            ("api_keys[0].key_salted.id", Some(3), "is required"),
            (
                "api_keys[0].key_salted.salt",
                Some(3),
                "must be 32 hexadecimal digits (16 bytes of salt); got 2 characters"
            ),
            (
                "api_keys[0].key_salted.sha256",
                Some(3),
                "must be 64 hexadecimal digits (the SHA-256 of the salt and the key); got 3 characters, not all hexadecimal"
            ),
        ]
    );
    for bad_id in [
        "0123456789ABCDEF",
        "0123456789abcde",
        "0123456789abcdef0",
        "rk-0123456789abcd",
    ] {
        let error = only_error(&salted_entry(
            "api_keys",
            "key",
            "k",
            bad_id,
            &salt_hex(),
            &sha_hex(),
        ));
        assert_eq!(field(&error), "api_keys[0].key_salted.id");
        assert_eq!(
            error.message,
            format!("{bad_id:?} is not a generated key's id: 16 lowercase hexadecimal digits, the <id> of rk-<id>-<secret>")
        );
    }
    let error = only_error(&salted_entry(
        "admin_tokens",
        "token",
        "t",
        "x",
        &salt_hex(),
        &sha_hex(),
    ));
    assert!(
        error.message.ends_with("the <id> of rt-<id>-<secret>"),
        "{error}"
    );
    let error = only_error("[[api_keys]]\nname = \"k\"\nkey_salted = { id = \"0123456789abcdef\", salt = \"00\", sha256 = \"00\", pepper = \"00\" }\n");
    assert_eq!(field(&error), "api_keys[0].key_salted.pepper");
}

#[test]
fn exactly_one_secret_source_counts_the_salted_one() {
    let text = format!(
        "[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{}\"\nkey_salted = {{ id = \"{ID}\", salt = \"{}\", sha256 = \"{}\" }}\n\n[[admin_tokens]]\nname = \"t\"\ntoken_env = \"T\"\ntoken_sha256 = \"{}\"\ntoken_salted = {{ id = \"{ID}\" }}\n",
        "0".repeat(64), salt_hex(), sha_hex(), "0".repeat(64)
    );
    assert_eq!(
        fields(&errors(&text)),
        [
            (
                "api_keys[0]",
                "set exactly one of key_env, key_sha256 and key_salted, not key_sha256 and key_salted"
            ),
            (
                "admin_tokens[0]",
                "set exactly one of token_env, token_sha256 and token_salted, not token_env and token_sha256 and token_salted"
            ),
        ]
    );
    let error = only_error("[[admin_tokens]]\nname = \"t\"\n");
    assert_eq!(
        error.message,
        "set one of token_env, token_sha256 or token_salted"
    );
}

#[test]
fn salted_ids_are_unique_within_a_list() {
    let other_salt = "01".repeat(SALT_LEN);
    let text = [
        salted_entry("api_keys", "key", "a", ID, &salt_hex(), &sha_hex()),
        salted_entry("api_keys", "key", "b", ID, &other_salt, &"cd".repeat(32)),
        salted_entry("admin_tokens", "token", "t", ID, &salt_hex(), &sha_hex()),
        salted_entry("admin_tokens", "token", "u", ID, &other_salt, &sha_hex()),
    ]
    .join("\n");
    assert_eq!(
        fields(&errors(&text)),
        [
            (
                "api_keys[1].key_salted.id",
                "id \"0123456789abcdef\" is already used by api_keys[0]; every generated key has its own id"
            ),
            (
                "admin_tokens[1].token_salted.id",
                "id \"0123456789abcdef\" is already used by admin_tokens[0]; every generated token has its own id"
            ),
        ]
    );
    // An API key and an admin token may share an id: their prefixes differ.
    let text = [
        salted_entry("api_keys", "key", "a", ID, &salt_hex(), &sha_hex()),
        salted_entry("admin_tokens", "token", "t", ID, &salt_hex(), &sha_hex()),
    ]
    .join("\n");
    assert_eq!(ok(&text).admin_tokens[0].digest.id(), Some(ID));
}

#[test]
fn api_key_priority_defaults_to_zero_and_is_bounded_both_ways() {
    let zeros = "0".repeat(64);
    let key = |priority: &str| {
        format!("[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{zeros}\"\n{priority}")
    };
    assert_eq!(ok(&key("")).api_keys[0].priority, 0);
    assert_eq!(ok(&key("priority = -3\n")).api_keys[0].priority, -3);
    assert_eq!(ok(&key("priority = 1000\n")).api_keys[0].priority, 1_000);
    for bad in ["1001", "-1001", "9223372036854775807"] {
        let error = only_error(&key(&format!("priority = {bad}\n")));
        assert_eq!(field(&error), "api_keys[0].priority");
        assert_eq!(error.line, Some(4));
        assert!(
            error.message.contains("between -1000 and 1000"),
            "{}",
            error.message
        );
    }
}

#[test]
fn rate_limits_share_counters_through_a_redis_url() {
    assert_eq!(ok("").rate_limits.redis, None);
    let config =
        ok("[rate_limits]\nredis_url = \"redis://127.0.0.1:6379/2\"\nredis_timeout_ms = 20\n");
    let redis = config.rate_limits.redis.unwrap();
    assert_eq!(redis.url, "redis://127.0.0.1:6379/2");
    assert_eq!(redis.timeout, std::time::Duration::from_millis(20));
    assert_eq!(redis.key_prefix, "rolter:limits:");

    let text = "[rate_limits]\nredis_url_env = \"LIMITS_REDIS\"\n";
    let config = parse(
        FILE,
        text,
        &env_of(&[("LIMITS_REDIS", "redis://:pw@10.0.0.9:6380")]),
    )
    .unwrap();
    let redis = config.rate_limits.redis.as_ref().unwrap();
    assert_eq!(redis.url, "redis://:pw@10.0.0.9:6380");
    assert!(
        !format!("{config:?}").contains("pw@"),
        "the password is never printed"
    );

    for (text, at, needle) in [
        (
            "redis_url = \"http://127.0.0.1:6379\"",
            "rate_limits.redis_url",
            "redis://",
        ),
        (
            "redis_url = \"rediss://cache:6380\"",
            "rate_limits.redis_url",
            "TLS",
        ),
        (
            "redis_url = \"redis://h:1\"\nredis_url_env = \"X\"",
            "rate_limits.redis_url_env",
            "not both",
        ),
        (
            "redis_url = \"redis://h:1\"\nredis_timeout_ms = 0",
            "rate_limits.redis_timeout_ms",
            "milliseconds",
        ),
        (
            "redis_url = \"redis://h:1\"\nredis_key_prefix = \"a b\"",
            "rate_limits.redis_key_prefix",
            "spaces",
        ),
    ] {
        let error = only_error(&format!("[rate_limits]\n{text}\n"));
        assert_eq!(field(&error), at, "{text}");
        assert!(error.message.contains(needle), "{text}: {}", error.message);
    }
    let warning = only_warning("[rate_limits]\nredis_timeout_ms = 10\n");
    assert_eq!(field(&warning), "rate_limits.redis_timeout_ms");
}

#[test]
fn tracing_needs_an_http_endpoint_and_a_ratio_between_0_and_1() {
    assert_eq!(ok("").tracing, None);
    let config =
        ok("[tracing]\notlp_endpoint = \"http://otel:4318/v1/traces\"\nsampling_ratio = 0.25\n");
    let tracing = config.tracing.unwrap();
    assert_eq!(tracing.otlp_endpoint, "http://otel:4318/v1/traces");
    assert_eq!(tracing.sampling_ratio(), 0.25);
    assert_eq!(tracing.service_name, "rolter");
    assert_eq!(tracing.max_queued_spans, 4096);
    for (text, at) in [
        ("sampling_ratio = 1.0", "tracing.otlp_endpoint"),
        ("otlp_endpoint = \"otel:4318\"", "tracing.otlp_endpoint"),
        (
            "otlp_endpoint = \"http://o/v1/traces\"\nsampling_ratio = 1.5",
            "tracing.sampling_ratio",
        ),
        (
            "otlp_endpoint = \"http://o/v1/traces\"\nmax_queued_spans = 0",
            "tracing.max_queued_spans",
        ),
        (
            "otlp_endpoint = \"http://o/v1/traces\"\nservice_name = \" \"",
            "tracing.service_name",
        ),
    ] {
        let error = only_error(&format!("[tracing]\n{text}\n"));
        assert_eq!(field(&error), at, "{text}");
    }
}
