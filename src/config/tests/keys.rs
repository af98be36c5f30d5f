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
    assert_eq!(ok(&text).api_keys[0].sha256, <[u8; 32]>::from(digest));
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
    assert!(errors[1].message.contains("not both"));
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
    let got: Vec<(&str, &str)> = errors
        .iter()
        .map(|e| (field(e), e.message.as_str()))
        .collect();
    assert_eq!(
        got,
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
        "[[api_keys]]\nname = \"open\"\nkey_sha256 = \"{zeros}\"\n\n[[api_keys]]\nname = \"capped\"\nkey_sha256 = \"{ones}\"\nrpm = 600\nmax_concurrent = 4294967295\n"
    );
    let keys = ok(&text).api_keys;
    assert_eq!((keys[0].rpm, keys[0].max_concurrent), (0, 0));
    assert_eq!((keys[1].rpm, keys[1].max_concurrent), (600, u32::MAX));
    assert!(format!("{:?}", keys[1]).contains("rpm: 600"));
}

#[test]
fn api_key_limits_are_u32() {
    let zeros = "0".repeat(64);
    for (limit, bad) in [
        ("rpm", "-1"),
        ("max_concurrent", "4294967296"),
        ("rpm", "1.5"),
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
        config.admin_tokens[0].sha256,
        <[u8; 32]>::from(Sha256::digest(b"v-token"))
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
