//! The client-facing `[server]` settings (TLS listeners, trusted proxies,
//! the access log, connection limits) and upstream TLS on `[[providers]]`.

use std::net::IpAddr;
use std::path::PathBuf;

use super::*;

fn tls_listener(listen: &str, cert: &str, key: &str) -> String {
    format!(
        "[[server.tls]]\nlisten = \"{listen}\"\ncertificates = [\n  {{ cert_path = \"{cert}\", key_path = \"{key}\" }},\n]\n"
    )
}

// ---- [[server.tls]] ----------------------------------------------------------

#[test]
fn tls_listener_keeps_its_address_and_certificates_in_order() {
    let files = tls_files();
    let other_cert = files.dir.path().join("other.pem");
    std::fs::write(&other_cert, "x").unwrap();
    let other_cert = other_cert.to_str().unwrap();
    let text = format!(
        "[[server.tls]]\nlisten = \"0.0.0.0:8443\"\ncertificates = [\n  {{ cert_path = \"{}\", key_path = \"{}\" }},\n  {{ cert_path = \"{other_cert}\", key_path = \"{}\" }},\n]\n\n[[server.tls]]\nlisten = \"[::1]:9443\"\ncertificates = [{{ cert_path = \"{}\", key_path = \"{}\" }}]\n",
        files.cert, files.key, files.key, files.cert, files.key
    );
    let tls = ok(&text).server.tls;
    assert_eq!(tls.len(), 2);
    assert_eq!(tls[0].listen, "0.0.0.0:8443");
    assert_eq!(
        tls[0].certificates,
        [
            Certificate {
                cert_path: PathBuf::from(&files.cert),
                key_path: PathBuf::from(&files.key),
            },
            Certificate {
                cert_path: PathBuf::from(other_cert),
                key_path: PathBuf::from(&files.key),
            },
        ]
    );
    assert_eq!(tls[1].listen, "[::1]:9443");
}

#[test]
fn tls_listener_needs_an_address_and_a_certificate() {
    let text = "[[server.tls]]\n\n[[server.tls]]\nlisten = \"0.0.0.0:8443\"\ncertificates = []\n\n[[server.tls]]\nlisten = \"8443\"\ncertificates = [{ cert_path = \"/x\" }]\n";
    assert_eq!(
        located(&errors(text)),
        [
            ("server.tls[0].listen", Some(1), "is required"),
            ("server.tls[0].certificates", Some(1), "is required"),
            (
                "server.tls[1].certificates",
                Some(5),
                "must name at least one { cert_path, key_path }"
            ),
            (
                "server.tls[2].listen",
                Some(8),
                "\"8443\" is not an ip:port address (e.g. \"0.0.0.0:8443\")"
            ),
            (
                "server.tls[2].certificates[0].cert_path",
                Some(9),
                "cannot read \"/x\": No such file or directory (os error 2)"
            ),
            (
                "server.tls[2].certificates[0].key_path",
                Some(9),
                "is required"
            ),
        ]
    );
}

#[test]
fn missing_or_unreadable_certificate_files_are_named() {
    let files = tls_files();
    let missing = files.dir.path().join("missing.key");
    let missing = missing.to_str().unwrap();
    let text = tls_listener("0.0.0.0:8443", &files.cert, missing);
    let error = only_error(&text);
    assert_eq!(field(&error), "server.tls[0].certificates[0].key_path");
    assert_eq!(error.line, line(&text, "key_path"));
    assert_eq!(
        error.message,
        format!("cannot read {missing:?}: No such file or directory (os error 2)")
    );

    let directory = files.dir.path().to_str().unwrap();
    let error = only_error(&tls_listener("0.0.0.0:8443", directory, &files.key));
    assert_eq!(field(&error), "server.tls[0].certificates[0].cert_path");
    assert_eq!(
        error.message,
        format!("{directory:?} is a directory, not a file")
    );

    let error = only_error(&tls_listener("0.0.0.0:8443", "", &files.key));
    assert_eq!(error.message, "must not be empty");
}

#[test]
fn tls_listener_must_not_overlap_another_listener() {
    let files = tls_files();
    let tls = |listen: &str| tls_listener(listen, &files.cert, &files.key);

    let text = format!(
        "[server]\nlisten = [\"0.0.0.0:8080\", \"0.0.0.0:8443\"]\n\n{}",
        tls("0.0.0.0:8443")
    );
    let error = only_error(&text);
    assert_eq!(field(&error), "server.tls[0].listen");
    assert_eq!(error.line, line(&text, "listen = \"0.0.0.0:8443\""));
    assert_eq!(
        error.message,
        "\"0.0.0.0:8443\" overlaps server.listen[1] = \"0.0.0.0:8443\": both cannot be bound"
    );

    // A wildcard covers every address of its port.
    let error = only_error(&format!(
        "[server]\nlisten = [\"0.0.0.0:8443\"]\n\n{}",
        tls("127.0.0.1:8443")
    ));
    assert!(
        error.message.contains("overlaps server.listen[0]"),
        "{error}"
    );

    let error = only_error(&tls("127.0.0.1:9090"));
    assert_eq!(
        error.message,
        "\"127.0.0.1:9090\" overlaps server.admin_listen = \"127.0.0.1:9090\": both cannot be bound"
    );

    let text = format!("{}\n{}", tls("[::]:8443"), tls("10.0.0.1:8443"));
    let error = only_error(&text);
    assert_eq!(field(&error), "server.tls[1].listen");
    assert_eq!(
        error.message,
        "\"10.0.0.1:8443\" overlaps server.tls[0].listen = \"[::]:8443\": both cannot be bound"
    );

    // Other ports, other addresses, and port 0 (the OS picks) are fine.
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nadmin_listen = \"127.0.0.1:9090\"\n\n{}\n{}\n{}",
        tls("127.0.0.1:0"),
        tls("127.0.0.2:9090"),
        tls("0.0.0.0:8443")
    );
    assert_eq!(ok(&text).server.tls.len(), 3);
}

#[test]
fn tls_listener_rejects_unknown_keys() {
    let error = only_error("[[server.tls]]\nlisten = \"0.0.0.0:8443\"\ncert = \"x\"\n");
    assert_eq!(field(&error), "server.tls[0].cert");
    assert_eq!(error.line, Some(3));
    let error = only_error(
        "[[server.tls]]\nlisten = \"0.0.0.0:8443\"\ncertificates = [{ cert_path = \"a\", keypath = \"b\" }]\n",
    );
    assert_eq!(field(&error), "server.tls[0].certificates[0].keypath");
}

// ---- trusted_proxies -----------------------------------------------------------

#[test]
fn trusted_proxies_take_cidrs_and_bare_addresses() {
    let config =
        ok("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"fd00::/8\", \"192.0.2.7\", \"::1\"]\n");
    let proxies = &config.server.trusted_proxies;
    let shown: Vec<String> = proxies.iter().map(Cidr::to_string).collect();
    assert_eq!(shown, ["10.0.0.0/8", "fd00::/8", "192.0.2.7/32", "::1/128"]);
    let trusted = |ip: &str| {
        let ip: IpAddr = ip.parse().unwrap();
        proxies.iter().any(|cidr| cidr.contains(ip))
    };
    assert!(trusted("10.20.30.40") && trusted("fd00::9") && trusted("192.0.2.7"));
    assert!(trusted("::ffff:10.1.1.1"));
    assert!(!trusted("192.0.2.8") && !trusted("11.0.0.1") && !trusted("::2"));
    assert!(config.warnings.is_empty());
}

#[test]
fn bad_trusted_proxies_are_errors_naming_their_index() {
    let text = "[server]\ntrusted_proxies = [\n  \"10.0.0.0/8\",\n  \"10.0.0.0/33\",\n  \"proxy.internal\",\n]\n";
    assert_eq!(
        located(&errors(text)),
        [
            (
                "server.trusted_proxies[1]",
                Some(4),
                "prefix length \"33\" of \"10.0.0.0/33\" is not a number from 0 to 32"
            ),
            (
                "server.trusted_proxies[2]",
                Some(5),
                "\"proxy.internal\" is not an IP address or CIDR (e.g. \"10.0.0.0/8\", \"fd00::/8\", \"192.0.2.7\")"
            ),
        ]
    );
}

#[test]
fn trusted_proxies_with_host_bits_or_everyone_are_warned() {
    let text = "[server]\ntrusted_proxies = [\"10.0.0.7/8\", \"::/0\"]\n";
    let config = ok(text);
    assert_eq!(config.server.trusted_proxies[0].to_string(), "10.0.0.0/8");
    let messages: Vec<(&str, &str)> = config
        .warnings
        .iter()
        .map(|w| (field(w), w.message.as_str()))
        .collect();
    assert_eq!(
        messages,
        [
            (
                "server.trusted_proxies[0]",
                "\"10.0.0.7/8\" has host bits set and means the network 10.0.0.0/8; write \"10.0.0.7\" for one host"
            ),
            (
                "server.trusted_proxies[1]",
                "\"::/0\" trusts every peer: any client can then set the address rolter logs and limits by"
            ),
        ]
    );
}

// ---- access log ------------------------------------------------------------------

#[test]
fn access_log_is_stdout_off_or_a_file_in_an_existing_directory() {
    let config = ok("[server]\naccess_log = \"off\"\n");
    assert_eq!(config.server.access_log, AccessLog::Off);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let text = format!(
        "[server]\naccess_log = \"{}\"\naccess_log_format = \"combined\"\n",
        path.display()
    );
    let server = ok(&text).server;
    assert_eq!(server.access_log, AccessLog::File(path.clone()));
    assert_eq!(server.access_log_format, AccessLogFormat::Combined);
    assert_eq!(server.access_log_format.as_str(), "combined");
    // A bare name is in the working directory, which exists.
    assert_eq!(
        ok("[server]\naccess_log = \"access.log\"\n")
            .server
            .access_log,
        AccessLog::File("access.log".into())
    );

    let missing = dir.path().join("no-such-dir").join("access.log");
    let error = only_error(&format!(
        "[server]\naccess_log = \"{}\"\n",
        missing.display()
    ));
    assert_eq!(field(&error), "server.access_log");
    assert_eq!(error.line, Some(2));
    assert_eq!(
        error.message,
        format!(
            "the directory {:?} of {:?} does not exist",
            dir.path().join("no-such-dir").display().to_string(),
            missing.display().to_string()
        )
    );

    let error = only_error(&format!(
        "[server]\naccess_log = \"{}\"\n",
        dir.path().display()
    ));
    assert!(
        error.message.ends_with("is a directory, not a file"),
        "{error}"
    );
}

#[test]
fn access_log_lookalikes_of_keywords_are_refused() {
    for lookalike in ["stderr", "STDOUT", "Off", "none", "-"] {
        let error = only_error(&format!("[server]\naccess_log = \"{lookalike}\"\n"));
        assert_eq!(
            error.message,
            format!("{lookalike:?} is not \"stdout\" or \"off\"; for a file of that name, write \"./{lookalike}\"")
        );
    }
    let error = only_error("[server]\naccess_log = \" \"\n");
    assert_eq!(error.message, "must be \"stdout\", \"off\" or a file path");
    assert_eq!(
        ok("[server]\naccess_log = \"./stderr\"\n")
            .server
            .access_log,
        AccessLog::File("./stderr".into())
    );
}

#[test]
fn access_log_format_is_json_or_combined() {
    let error = only_error("[server]\naccess_log_format = \"clf\"\n");
    assert_eq!(field(&error), "server.access_log_format");
    assert_eq!(
        error.message,
        "unknown format \"clf\" (known: json, combined)"
    );
    let warning = only_warning("[server]\naccess_log = \"off\"\naccess_log_format = \"json\"\n");
    assert_eq!(field(&warning), "server.access_log_format");
    assert_eq!(warning.line, Some(3));
    assert_eq!(warning.message, "has no effect: access_log = \"off\"");
}

// ---- connection limits ---------------------------------------------------------

#[test]
fn connection_limits_are_read_with_their_defaults() {
    let server = ok("[server]\nheader_read_timeout_secs = 5\nkeepalive_timeout_secs = 0\nmax_connections = 10000\n").server;
    assert_eq!(server.header_read_timeout, Duration::from_secs(5));
    assert_eq!(server.keepalive_timeout, Duration::ZERO);
    assert_eq!(server.keepalive_requests, 1000);
    assert_eq!(server.max_connections, 10_000);
    let server = ok("[server]\nkeepalive_timeout_secs = 3600\nkeepalive_requests = 0\n").server;
    assert_eq!(server.keepalive_timeout, Duration::from_secs(3600));
    assert_eq!(server.keepalive_requests, 0);
}

#[test]
fn header_read_timeout_is_one_second_to_an_hour() {
    for (value, message) in [
        ("0", "must be between 1 and 3600 seconds (got 0)"),
        (
            "60000",
            "must be between 1 and 3600 seconds (got 60000); the unit is seconds, not milliseconds",
        ),
    ] {
        let error = only_error(&format!("[server]\nheader_read_timeout_secs = {value}\n"));
        assert_eq!(field(&error), "server.header_read_timeout_secs");
        assert_eq!(error.message, message);
    }
    assert_eq!(
        ok("[server]\nheader_read_timeout_secs = 3600\n")
            .server
            .header_read_timeout,
        Duration::from_secs(3600)
    );
}

#[test]
fn keepalive_timeout_is_at_most_an_hour() {
    let error = only_error("[server]\nkeepalive_timeout_secs = 60000\n");
    assert_eq!(field(&error), "server.keepalive_timeout_secs");
    assert_eq!(
        error.message,
        "must be at most 3600 seconds (got 60000); the unit is seconds, not milliseconds; 0 turns keep-alive off"
    );
}

#[test]
fn keepalive_requests_without_keepalive_is_warned() {
    let warning = only_warning("[server]\nkeepalive_timeout_secs = 0\nkeepalive_requests = 10\n");
    assert_eq!(field(&warning), "server.keepalive_requests");
    assert_eq!(
        warning.message,
        "has no effect: keepalive_timeout_secs = 0 closes every connection after one request"
    );
}

#[test]
fn connection_counts_are_u32() {
    for bad in ["-1", "4294967296"] {
        let error = only_error(&format!("[server]\nmax_connections = {bad}\n"));
        assert_eq!(field(&error), "server.max_connections");
        assert_eq!(error.line, Some(2));
    }
}

// ---- upstream TLS ---------------------------------------------------------------

fn provider(base_url: &str, extra: &str) -> String {
    format!("[[providers]]\nname = \"gpu-a\"\nbase_url = \"{base_url}\"\n{extra}")
}

#[test]
fn https_provider_takes_a_ca_file() {
    let files = tls_files();
    let text = provider(
        "https://10.0.0.11",
        &format!("ca_file = \"{}\"\n", files.ca),
    );
    let config = ok(&text);
    assert_eq!(
        config.providers[0].tls,
        UpstreamTls {
            ca_file: Some(PathBuf::from(&files.ca)),
            verify: true,
        }
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn missing_ca_file_is_an_error_naming_it() {
    let text = provider("https://h", "ca_file = \"/nonexistent/ca.pem\"\n");
    let error = only_error(&text);
    assert_eq!(field(&error), "providers[0].ca_file");
    assert_eq!(error.line, Some(4));
    assert_eq!(
        error.message,
        "cannot read \"/nonexistent/ca.pem\": No such file or directory (os error 2)"
    );
}

#[test]
fn verification_off_on_https_is_warned_at_every_start() {
    let text = provider("https://api.example.com:8443", "tls_verify = false\n");
    let config = ok(&text);
    assert!(!config.providers[0].tls.verify);
    let warning = only_warning(&text);
    assert_eq!(field(&warning), "providers[0].tls_verify");
    assert_eq!(warning.line, Some(4));
    assert_eq!(
        warning.message,
        "certificate verification disabled for provider \"gpu-a\": rolter accepts any certificate from api.example.com:8443"
    );

    let files = tls_files();
    let text = provider(
        "https://h",
        &format!("tls_verify = false\nca_file = \"{}\"\n", files.ca),
    );
    let fields: Vec<String> = warnings(&text)
        .iter()
        .map(|w| field(w).to_owned())
        .collect();
    assert_eq!(fields, ["providers[0].tls_verify", "providers[0].ca_file"]);
    assert_eq!(
        warnings(&text)[1].message,
        "has no effect while tls_verify = false"
    );
}

#[test]
fn upstream_tls_settings_on_http_are_warned_as_without_effect() {
    let files = tls_files();
    let text = provider(
        "http://10.0.0.11:8000",
        &format!("ca_file = \"{}\"\ntls_verify = false\n", files.ca),
    );
    let got: Vec<(String, Option<usize>, String)> = warnings(&text)
        .into_iter()
        .map(|w| (field(&w).to_owned(), w.line, w.message))
        .collect();
    assert_eq!(
        got,
        [
            (
                "providers[0].ca_file".to_owned(),
                Some(4),
                "has no effect: base_url is http://; a CA file is read only for https://"
                    .to_owned()
            ),
            (
                "providers[0].tls_verify".to_owned(),
                Some(5),
                "has no effect: base_url is http://, there is no certificate to verify".to_owned()
            ),
        ]
    );
    // The default, written out, is not worth a warning.
    assert!(warnings(&provider("http://h", "tls_verify = true\n")).is_empty());
}

#[test]
fn tls_verify_must_be_a_boolean() {
    let error = only_error(&provider("https://h", "tls_verify = \"no\"\n"));
    assert_eq!(field(&error), "providers[0].tls_verify");
    assert_eq!(error.line, Some(4));
}
