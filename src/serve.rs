//! `rolter serve`: the gateway as a Pingora server.
//!
//! Pingora's own flags keep their meaning: `-c` its YAML configuration, `-u`
//! take over the listening sockets of a running instance (zero-downtime
//! upgrade; the old one gets SIGQUIT), `-d` daemonize, `-t` test the
//! configuration and exit (rolter.toml included).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pingora::apps::HttpServerOptions;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::prelude::Opt;
use pingora::proxy::{http_proxy, HttpProxy};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::admin::AdminApp;
use crate::config::Role;
use crate::config::{self, Config};
use crate::control::node::ControlNode;
use crate::control::service::ControlPlaneService;
use crate::downstream::EdgeApp;
use crate::engine_metrics::EngineMetricsPoller;
use crate::fleet::poller::SnapshotPoller;
use crate::fleet::telemetry::TelemetryPusher;
use crate::health::HealthChecker;
use crate::kv_events::{sources_of, KvEventService, SERVICE_NAME};
use crate::lmcache::OccupancyPoller;
use crate::proxy::Gateway;
use crate::reload::Reloader;
use crate::signals::SignalService;
use crate::state::GatewayState;
use crate::tls::NoAcceptCallbacks;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub pingora: Opt,
    /// rolter's configuration: providers, routes, keys.
    #[arg(long, value_name = "FILE", default_value = "conf/rolter.toml")]
    pub config: PathBuf,
}

/// Validates, then serves until Pingora stops. Returns the exit code.
pub fn run(args: ServeArgs) -> i32 {
    let config = match config::load(&args.config) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!(
                "rolter: configuration file {} test failed",
                args.config.display()
            );
            return 1;
        }
    };
    let testing = args.pingora.test;
    let server = match Server::new(Some(args.pingora)) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("rolter: Pingora configuration: {e}");
            return 1;
        }
    };
    serve(server, config, &args.config, testing)
}

/// HTTP options of the proxy listeners. HTTP/2 with prior knowledge (h2c)
/// shares the plaintext ports with HTTP/1.1: Pingora tells them apart by the
/// connection preface.
///
/// An HTTP/2 connection idle (no stream) for `keepalive_timeout_secs` is
/// closed; zero leaves idle HTTP/2 connections open (Pingora would close a
/// connection before its first stream). Read at start only. The HTTP/1
/// limits live in `EdgeApp` (`downstream.rs`), not here: Pingora's
/// `keepalive_request_limit` would be applied by the connection loop that
/// `EdgeApp` replaces.
fn proxy_server_options(config: &Config) -> HttpServerOptions {
    let mut options = HttpServerOptions::default();
    options.h2c = true;
    let keepalive = config.server.keepalive_timeout;
    options.h2_idle_timeout = (!keepalive.is_zero()).then_some(keepalive);
    options
}

/// The proxy: plaintext listeners (HTTP/1.1 and h2c) and TLS listeners,
/// inside the client connection limits.
fn proxy_service(
    server: &Server,
    state: &Arc<GatewayState>,
) -> Result<Service<EdgeApp<HttpProxy<Gateway>>>, String> {
    let snapshot = state.snapshot();
    let mut proxy_app = http_proxy(&server.configuration, Gateway::new(Arc::clone(state)));
    proxy_app.server_options = Some(proxy_server_options(&snapshot.config));
    // Client connection limits and timeouts around Pingora's HTTP app.
    let mut proxy = Service::new(
        "rolter proxy".to_string(),
        EdgeApp::new(proxy_app, Arc::clone(state)),
    );
    for addr in &snapshot.config.server.listen {
        proxy.add_listener(ListenerConfig::tcp(addr.as_str()).l4_buffer(client_buffers()));
    }
    // TLS listeners: rustls, TLS 1.2 and 1.3, certificates chosen by SNI and
    // reloadable (see `tls.rs`), HTTP/2 by ALPN.
    for resolver in state.tls.resolvers() {
        let mut settings = TlsSettings::with_callbacks(Box::new(NoAcceptCallbacks))
            .map_err(|e| format!("TLS listener {}: {e}", resolver.listen()))?;
        settings.set_cert_resolver(Arc::clone(resolver) as _);
        settings.enable_h2();
        proxy.add_listener(
            ListenerConfig::tcp(resolver.listen())
                .tls(settings)
                .l4_buffer(client_buffers()),
        );
    }
    Ok(proxy)
}

/// Client sockets read straight into Pingora's own header and body buffers.
/// Pingora's default puts a 64 KiB read buffer under them on every client
/// connection, which saves no system call here (a header read is small, a
/// body read is as large as the buffer) and was a third of the heap of an
/// open SSE stream (load-tests/gateway_profile.py, massif).
fn client_buffers() -> L4BufferSettings {
    L4BufferSettings::default().read(0)
}

/// Runs the gateway with a generated Pingora configuration (`rolter demo`).
pub fn run_with_conf(conf: ServerConf, config: Config, config_path: &Path) -> i32 {
    let server = Server::new_with_opt_and_conf(Some(Opt::default()), conf);
    serve(server, config, config_path, false)
}

fn serve(mut server: Server, config: Config, config_path: &Path, testing: bool) -> i32 {
    let state = match GatewayState::from_config(config, config_path) {
        Ok(state) => state,
        Err(e) => {
            for line in e.lines() {
                eprintln!("{line}");
            }
            eprintln!(
                "rolter: configuration file {} test failed",
                config_path.display()
            );
            return 1;
        }
    };
    if testing {
        println!(
            "rolter: configuration file {} test is successful",
            config_path.display()
        );
    }
    // With -t this exits after checking Pingora's side; with -u it takes
    // over the old instance's sockets.
    server.bootstrap();
    // Pingora writes the pid file only when it daemonizes; a foreground
    // gateway writes it here, so `kill -QUIT $(cat pid_file)` works either way.
    if !server.configuration.daemon {
        let pid_file = &server.configuration.pid_file;
        if let Err(e) = std::fs::write(pid_file, format!("{}\n", std::process::id())) {
            log::warn!("cannot write the pid file {pid_file}: {e}");
        }
    }

    let snapshot = state.snapshot();
    let role = snapshot.config.server.role;
    let reloader = match (role, &snapshot.config.control_plane) {
        (Role::Control, Some(control)) => Reloader::Control(ControlNode::new(
            Arc::clone(&state),
            config_path,
            control.database_url.clone().unwrap_or_default(),
        )),
        _ => Reloader::File(Arc::clone(&state)),
    };
    // A control node serves the control plane, not inference traffic.
    if role != Role::Control {
        match proxy_service(&server, &state) {
            Ok(proxy) => {
                server.add_service(proxy);
            }
            Err(e) => {
                eprintln!("rolter: {e}");
                return 1;
            }
        }
    }
    let mut admin = Service::new(
        "rolter admin".to_string(),
        AdminApp::new(Arc::clone(&state), reloader.clone()),
    );
    admin.add_tcp(&snapshot.config.server.admin_listen);
    let tls_listen: Vec<&str> = state.tls.resolvers().iter().map(|r| r.listen()).collect();
    log::info!(
        "rolter {} ({}) serving {} routes on {}{} (admin {})",
        env!("CARGO_PKG_VERSION"),
        role.as_str(),
        snapshot.routes().len(),
        if role == Role::Control {
            "no proxy listener".to_string()
        } else {
            snapshot.config.server.listen.join(", ")
        },
        if tls_listen.is_empty() {
            String::new()
        } else {
            format!(", TLS {}", tls_listen.join(", "))
        },
        snapshot.config.server.admin_listen,
    );
    drop(snapshot);

    server.add_service(admin);
    match &reloader {
        Reloader::Control(control) => {
            server.add_service(background_service(
                "control plane",
                ControlPlaneService::new(Arc::clone(control)),
            ));
        }
        Reloader::File(_) => {
            // Each service reads the running snapshot through a closure, so
            // none of them depends on the state it is wired to.
            let running = Arc::clone(&state);
            server.add_service(background_service(
                "health checks",
                HealthChecker::new(
                    Box::new(move || running.snapshot().probe_plan()),
                    Arc::clone(&state.metrics),
                    state.changes(),
                ),
            ));
            let running = Arc::clone(&state);
            server.add_service(background_service(
                SERVICE_NAME,
                KvEventService::with_sources(
                    Arc::clone(&state.learned.kv),
                    Box::new(move || {
                        let snapshot = running.snapshot();
                        (snapshot.version, sources_of(&snapshot.config))
                    }),
                    state.changes(),
                ),
            ));
            let running = Arc::clone(&state);
            server.add_service(background_service(
                "lmcache poller",
                OccupancyPoller::new(
                    Box::new(move || {
                        let snapshot = running.snapshot();
                        let signals = snapshot
                            .config
                            .providers
                            .iter()
                            .filter_map(|p| Some((p.slug.clone(), p.lmcache.clone()?)))
                            .collect();
                        (snapshot.version, signals)
                    }),
                    Arc::clone(&state.learned.occupancy),
                    state.changes(),
                ),
            ));
            let running = Arc::clone(&state);
            server.add_service(background_service(
                "engine metrics poller",
                EngineMetricsPoller::new(
                    Box::new(move || {
                        let snapshot = running.snapshot();
                        let providers = snapshot
                            .config
                            .providers
                            .iter()
                            .map(|p| (p.slug.clone(), p.engine_metrics.clone()))
                            .collect();
                        (snapshot.version, providers)
                    }),
                    Arc::clone(&state.learned.tracker),
                    state.changes(),
                ),
            ));
            server.add_service(background_service(
                "trace export",
                crate::traces::TraceExportService::new(
                    Arc::clone(&state.traces),
                    Arc::clone(&state.metrics),
                ),
            ));
            let running = Arc::clone(&state);
            server.add_service(background_service(
                "shared rate limits",
                crate::rate_limit::SharedLimitsService::new(
                    Arc::clone(&state.learned.rate_limits.shared),
                    Box::new(move || running.snapshot().config.rate_limits.redis.clone()),
                    Arc::clone(&state.metrics),
                    state.changes(),
                ),
            ));
            server.add_service(background_service(
                "flow control",
                crate::flow_control::Dispatcher::new(Arc::clone(&state.learned.flow)),
            ));
            let running = Arc::clone(&state);
            server.add_service(background_service(
                crate::access_log::SERVICE_NAME,
                crate::access_log::AccessLogWriter::new(
                    Arc::clone(&state.access_log),
                    Box::new(move || {
                        let server = &running.snapshot().config.server;
                        (server.access_log.clone(), server.access_log_format)
                    }),
                    Arc::clone(&state.metrics),
                    state.changes(),
                ),
            ));
            server.add_service(background_service(
                "history",
                crate::admin::history::HistorySampler::new(Arc::clone(&state)),
            ));
            server.add_service(background_service(
                "failure log summary",
                crate::tracker::FailureLogSummary::new(Arc::clone(&state.learned.tracker)),
            ));
            if role == Role::Gateway {
                server.add_service(background_service(
                    "fleet snapshot poller",
                    SnapshotPoller::new(Arc::clone(&state)),
                ));
                server.add_service(background_service(
                    "adaptive telemetry",
                    TelemetryPusher::new(Arc::clone(&state)),
                ));
            }
        }
    }
    server.add_service(background_service(
        "signals",
        SignalService::new(state, reloader),
    ));
    server.add_service(background_service(
        "allocator purge",
        crate::allocator::PurgeService,
    ));
    server.run_forever()
}
