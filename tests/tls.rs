//! TLS and HTTP/2 at the edge, and TLS to upstreams, with a CA made at test
//! time. The client is curl (with nghttp2), as an operator would test.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use support::*;

/// A certificate authority made for one test.
struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    dir: PathBuf,
}

impl TestCa {
    fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        TestCa {
            cert,
            key,
            dir: dir.to_path_buf(),
        }
    }

    fn pem_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }

    /// Writes a leaf certificate for `names` to `<file>.crt` / `<file>.key`.
    fn issue(&self, file: &str, names: &[&str], common_name: &str) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let cert_path = self.dir.join(format!("{file}.crt"));
        let key_path = self.dir.join(format!("{file}.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}

fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl must be installed")
}

fn tls_section(listen: &str, certs: &[(PathBuf, PathBuf)]) -> String {
    let entries: Vec<String> = certs
        .iter()
        .map(|(c, k)| {
            format!(
                "{{ cert_path = \"{}\", key_path = \"{}\" }}",
                c.display(),
                k.display()
            )
        })
        .collect();
    format!(
        "[[server.tls]]\nlisten = \"{listen}\"\ncertificates = [{}]\n\n",
        entries.join(", ")
    )
}

fn chat_json(model: &str, stream: bool) -> String {
    format!(
        r#"{{"model":"{model}","max_tokens":6,"stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

struct TlsGateway {
    gateway: Gateway,
    tls_port: u16,
    ca: TestCa,
    _engine: FakeEngine,
}

async fn tls_gateway(token_delay_ms: &str) -> TlsGateway {
    let dir = tempfile::tempdir().unwrap().keep();
    let ca = TestCa::new(&dir, "ca");
    let api = ca.issue("api", &["api.rolter.test"], "api v1");
    let other = ca.issue("other", &["other.rolter.test"], "other v1");
    let engine = FakeEngine::start("e", &["--token-delay-ms", token_delay_ms]);
    let tls_port = free_port();
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[health]\nenabled = false\n",
        tls_section(&format!("127.0.0.1:{tls_port}"), &[api, other]),
        provider("e", &engine.url()),
    );
    TlsGateway {
        gateway: Gateway::start(&config).await,
        tls_port,
        ca,
        _engine: engine,
    }
}

impl TlsGateway {
    fn resolve(&self, host: &str) -> String {
        format!("{host}:{}:127.0.0.1", self.tls_port)
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.tls_port)
    }
}

/// The subject line curl prints for the server certificate.
fn served_subject(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .find(|l| l.contains("subject:"))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_the_certificate_the_client_names() {
    let tls = tls_gateway("0").await;
    let ca = tls.ca.pem_path("ca");
    for (host, subject) in [
        ("api.rolter.test", "api v1"),
        ("other.rolter.test", "other v1"),
    ] {
        let output = tokio::task::block_in_place(|| {
            curl(&[
                "-v",
                "--cacert",
                ca.to_str().unwrap(),
                "--resolve",
                &tls.resolve(host),
                &tls.url(host, "/v1/models"),
            ])
        });
        assert!(
            output.status.success(),
            "{host}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            served_subject(&output).contains(subject),
            "{}",
            served_subject(&output)
        );
        assert!(String::from_utf8_lossy(&output.stdout).contains("\"chat\""));
    }
    // An unknown name gets the first (default) certificate, which curl rejects.
    let output = tokio::task::block_in_place(|| {
        curl(&[
            "--cacert",
            ca.to_str().unwrap(),
            "--resolve",
            &tls.resolve("unknown.rolter.test"),
            &tls.url("unknown.rolter.test", "/v1/models"),
        ])
    });
    assert!(!output.status.success());
    drop(tls.gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_over_tls_and_h2c_stream_chat_completions() {
    let tls = tls_gateway("30").await;
    let ca = tls.ca.pem_path("ca");
    let host = "api.rolter.test";
    let body = chat_json("chat", true);
    let output = tokio::task::block_in_place(|| {
        curl(&[
            "--http2",
            "-N",
            "-w",
            "\nversion=%{http_version}",
            "--cacert",
            ca.to_str().unwrap(),
            "--resolve",
            &tls.resolve(host),
            "-H",
            "content-type: application/json",
            "-d",
            &body,
            &tls.url(host, "/v1/chat/completions"),
        ])
    });
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("version=2"), "{text}");
    assert!(text.contains("data: [DONE]"), "{text}");
    assert!(text.matches("\"content\":\"").count() >= 6, "{text}");

    // h2c: HTTP/2 with prior knowledge on the plaintext port.
    let output = tokio::task::block_in_place(|| {
        curl(&[
            "--http2-prior-knowledge",
            "-N",
            "-w",
            "\nversion=%{http_version}",
            "-H",
            "content-type: application/json",
            "-d",
            &body,
            &tls.gateway.url("/v1/chat/completions"),
        ])
    });
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("version=2"), "{text}");
    assert!(text.contains("data: [DONE]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_replaced_on_disk_is_served_after_reload_without_cutting_streams() {
    let tls = tls_gateway("25").await;
    let ca = tls.ca.pem_path("ca");
    let host = "api.rolter.test";
    // A long stream over TLS, open across the swap.
    let body = chat_json("chat", true).replace("\"max_tokens\":6", "\"max_tokens\":80");
    let stream = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--max-time",
            "30",
            "-N",
            "--cacert",
        ])
        .arg(&ca)
        .args([
            "--resolve",
            &tls.resolve(host),
            "-H",
            "content-type: application/json",
            "-d",
        ])
        .arg(&body)
        .arg(tls.url(host, "/v1/chat/completions"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Replace the certificate files in place, then reload.
    tls.ca.issue("api", &["api.rolter.test"], "api v2");
    let (status, reload) = tls.gateway.reload().await;
    assert_eq!(status, 200, "{reload}");

    let output = tokio::task::block_in_place(|| {
        curl(&[
            "-v",
            "--cacert",
            ca.to_str().unwrap(),
            "--resolve",
            &tls.resolve(host),
            &tls.url(host, "/v1/models"),
        ])
    });
    assert!(output.status.success());
    assert!(
        served_subject(&output).contains("api v2"),
        "{}",
        served_subject(&output)
    );

    let streamed = tokio::task::spawn_blocking(move || stream.wait_with_output().unwrap())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&streamed.stdout);
    assert!(
        streamed.status.success(),
        "{}",
        String::from_utf8_lossy(&streamed.stderr)
    );
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "the open stream was cut: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_verified_against_the_configured_ca() {
    // The "engine" behind TLS: a second rolter terminating TLS for a fake engine.
    let tls = tls_gateway("0").await;
    let dir = tempfile::tempdir().unwrap();
    let other_ca = TestCa::new(dir.path(), "unrelated-ca");
    let localhost = tls.ca.issue("localhost", &["localhost"], "localhost");
    let back_port = free_port();
    let engine = FakeEngine::start("deep", &[]);
    let back_config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"deep\" }}]\n\n[health]\nenabled = false\n",
        tls_section(&format!("127.0.0.1:{back_port}"), &[localhost]),
        provider("deep", &engine.url()),
    );
    let back = Gateway::start(&back_config).await;
    let front_config = format!(
        "[[providers]]\nname = \"trusted\"\nbase_url = \"https://localhost:{back_port}\"\nca_file = \"{}\"\n\n[[providers]]\nname = \"untrusted\"\nbase_url = \"https://localhost:{back_port}\"\nca_file = \"{}\"\n\n[[routes]]\nmodel = \"good\"\ntargets = [{{ provider = \"trusted\", model = \"chat\" }}]\n\n[[routes]]\nmodel = \"bad\"\ntargets = [{{ provider = \"untrusted\", model = \"chat\" }}]\n\n[health]\nenabled = false\n",
        tls.ca.pem_path("ca").display(),
        other_ca.pem_path("unrelated-ca").display(),
    );
    let front = Gateway::start(&front_config).await;

    let response = front.chat("good", "over tls").await;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["fake"]["engine"], "deep");

    let response = front.chat("bad", "over tls").await;
    assert_eq!(response.status(), 502);
    let body: serde_json::Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap().to_lowercase();
    assert!(
        message.contains("cert") || message.contains("tls") || message.contains("handshake"),
        "{message}"
    );
    drop(back);
}
