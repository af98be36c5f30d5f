//! `[[providers]]`: names, slugs, base URLs, upstream keys.

use super::*;

#[test]
fn provider_name_and_base_url_are_required() {
    let text =
        "[[providers]]\nslug = \"a\"\n\n[[providers]]\nname = \" \"\nbase_url = \"http://h\"\n";
    assert_eq!(
        located(&errors(text)),
        [
            ("providers[0].name", Some(1), "is required"),
            ("providers[0].base_url", Some(1), "is required"),
            ("providers[1].name", Some(5), "must not be empty"),
        ]
    );
}

#[test]
fn slug_is_derived_from_the_name() {
    let config = ok("[[providers]]\nname = \"Edge GPU #1 (east)\"\nbase_url = \"http://h\"\n");
    assert_eq!(config.providers[0].slug, "edge-gpu-1-east");
    assert_eq!(config.providers[0].name, "Edge GPU #1 (east)");
}

#[test]
fn explicit_slug_must_match_the_pattern() {
    let text = "[[providers]]\nname = \"a\"\nslug = \"GPU_A\"\nbase_url = \"http://h\"\n";
    let error = only_error(text);
    assert_eq!(field(&error), "providers[0].slug");
    assert_eq!(error.line, Some(3));
    assert!(error.message.contains("not a valid slug"), "{error}");
}

#[test]
fn name_without_letters_or_digits_needs_an_explicit_slug() {
    let error = only_error("[[providers]]\nname = \"???\"\nbase_url = \"http://h\"\n");
    assert_eq!(field(&error), "providers[0].name");
    assert!(error.message.contains("cannot derive a slug"), "{error}");
    let config = ok("[[providers]]\nname = \"???\"\nslug = \"q\"\nbase_url = \"http://h\"\n");
    assert_eq!(config.providers[0].slug, "q");
}

#[test]
fn slugs_must_be_unique_explicit_or_derived() {
    let text = "[[providers]]\nname = \"GPU A\"\nbase_url = \"http://h\"\n\n[[providers]]\nname = \"gpu a\"\nbase_url = \"http://h\"\n\n[[providers]]\nname = \"c\"\nslug = \"gpu-a\"\nbase_url = \"http://h\"\n";
    let errors = errors(text);
    let got: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (field(e), e.line)).collect();
    assert_eq!(
        got,
        [
            ("providers[1].name", Some(6)),
            ("providers[2].slug", Some(11))
        ]
    );
    assert!(
        errors[0].message.contains("derived from the name"),
        "{}",
        errors[0]
    );
    assert!(errors[1].message.contains("already used by providers[0]"));
}

#[test]
fn provider_names_must_be_unique() {
    let text = "[[providers]]\nname = \"a\"\nbase_url = \"http://h\"\n[[providers]]\nname = \"a\"\nslug = \"b\"\nbase_url = \"http://h\"\n";
    let error = only_error(text);
    assert_eq!(field(&error), "providers[1].name");
    assert_eq!(error.line, Some(5));
}

#[test]
fn base_url_errors_name_the_field_and_line() {
    let text = "[[providers]]\nname = \"a\"\nbase_url = \"http://10.0.0.1:8000/v1\"\n";
    let error = only_error(text);
    assert_eq!(field(&error), "providers[0].base_url");
    assert_eq!(error.line, Some(3));
    assert!(
        error.message.contains("drop the trailing \"/v1\""),
        "{error}"
    );

    let error = only_error("[[providers]]\nname = \"a\"\nbase_url = \"10.0.0.1:8000\"\n");
    assert!(error.message.contains("http:// or https://"), "{error}");
}

#[test]
fn base_url_keeps_port_and_prefix() {
    let config =
        ok("[[providers]]\nname = \"a\"\nbase_url = \"https://gw.example.com:8443/team/\"\n");
    let url = &config.providers[0].base_url;
    assert_eq!(
        (url.tls, url.host.as_str(), url.port),
        (true, "gw.example.com", 8443)
    );
    assert_eq!(url.path_prefix, "/team");
    assert_eq!(url.to_string(), "https://gw.example.com:8443/team");
}

#[test]
fn upstream_key_comes_from_the_named_environment_variable() {
    let text = "[[providers]]\nname = \"a\"\nbase_url = \"http://h\"\napi_key_env = \"A_KEY\"\n";
    let config = parse(FILE, text, &env_of(&[("A_KEY", "sk-123")])).unwrap();
    assert_eq!(config.providers[0].api_key.as_deref(), Some("sk-123"));

    let error = only_error(text);
    assert_eq!(field(&error), "providers[0].api_key_env");
    assert_eq!(error.line, Some(4));
    assert_eq!(error.message, "environment variable A_KEY is not set");

    let errors = parse(FILE, text, &env_of(&[("A_KEY", "")])).unwrap_err();
    assert_eq!(errors.0[0].message, "environment variable A_KEY is empty");
    let errors = parse(FILE, text, &env_of(&[("A_KEY", "sk\n")])).unwrap_err();
    assert!(errors.0[0].message.contains("control characters"));
    assert!(
        !errors.to_string().contains("sk"),
        "secret leaked: {errors}"
    );
}

#[test]
fn environment_variable_names_are_checked_before_lookup() {
    let text = "[[providers]]\nname = \"a\"\nbase_url = \"http://h\"\napi_key_env = \"A=B\"\n";
    let error = only_error(text);
    assert!(
        error.message.contains("not an environment variable name"),
        "{error}"
    );
}

#[test]
fn provider_debug_redacts_the_upstream_key() {
    let text = "[[providers]]\nname = \"a\"\nbase_url = \"http://h\"\napi_key_env = \"A_KEY\"\n";
    let config = parse(FILE, text, &env_of(&[("A_KEY", "sk-very-secret")])).unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("sk-very-secret"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
}

#[test]
fn health_path_must_start_with_a_slash() {
    let text = "[[providers]]\nname = \"a\"\nbase_url = \"http://h\"\nhealth_path = \"health\"\n";
    let error = only_error(text);
    assert_eq!(field(&error), "providers[0].health_path");
    assert_eq!(error.line, Some(4));
    let config =
        ok("[[providers]]\nname = \"a\"\nbase_url = \"http://h\"\nhealth_path = \"/health\"\n");
    assert_eq!(config.providers[0].health_path, "/health");
}

#[test]
fn max_loras_defaults_to_eight_and_is_bounded() {
    let provider =
        |extra: &str| format!("[[providers]]\nname = \"a\"\nbase_url = \"http://h\"\n{extra}");
    assert_eq!(ok(&provider("")).providers[0].max_loras, 8);
    assert_eq!(ok(&provider("max_loras = 1\n")).providers[0].max_loras, 1);
    let config = ok(&provider("max_loras = 1024\n"));
    assert_eq!(config.providers[0].max_loras, 1024);
    assert!(format!("{config:?}").contains("max_loras: 1024"));
    for bad in [0, 1025, i64::MAX] {
        let error = only_error(&provider(&format!("max_loras = {bad}\n")));
        assert_eq!(field(&error), "providers[0].max_loras");
        assert_eq!(error.line, Some(4));
        assert_eq!(
            error.message,
            format!("must be between 1 and 1024 (got {bad}); set it to the engine's --max-loras")
        );
    }
    let error = only_error(&provider("max_loras = -1\n"));
    assert_eq!(field(&error), "providers[0].max_loras");
}
