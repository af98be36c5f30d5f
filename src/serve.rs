//! `rolter serve`: the gateway as a Pingora server.
//!
//! Pingora's own flags keep their meaning: `-c` its YAML configuration, `-u`
//! take over the listening sockets of a running instance (zero-downtime
//! upgrade; the old one gets SIGQUIT), `-d` daemonize, `-t` test the
//! configuration and exit (rolter.toml included).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pingora::prelude::Opt;
use pingora::proxy::http_proxy_service_with_name;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::admin::AdminApp;
use crate::config::{self, Config};
use crate::health::HealthChecker;
use crate::kv_events::{KvEventService, SERVICE_NAME};
use crate::lmcache::OccupancyPoller;
use crate::proxy::Gateway;
use crate::signals::SignalService;
use crate::state::GatewayState;

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
    let server_conf = Arc::clone(&server.configuration);
    let mut proxy = http_proxy_service_with_name(
        &server_conf,
        Gateway::new(Arc::clone(&state)),
        "rolter proxy",
    );
    for addr in &snapshot.config.server.listen {
        proxy.add_tcp(addr);
    }
    let mut admin = Service::new(
        "rolter admin".to_string(),
        AdminApp::new(Arc::clone(&state)),
    );
    admin.add_tcp(&snapshot.config.server.admin_listen);
    log::info!(
        "rolter {} serving {} routes on {} (admin {})",
        env!("CARGO_PKG_VERSION"),
        snapshot.routes().len(),
        snapshot.config.server.listen.join(", "),
        snapshot.config.server.admin_listen,
    );
    drop(snapshot);

    server.add_service(proxy);
    server.add_service(admin);
    server.add_service(background_service(
        "health checks",
        HealthChecker::new(Arc::clone(&state)),
    ));
    server.add_service(background_service(
        SERVICE_NAME,
        KvEventService::new(Arc::clone(&state), Arc::clone(&state.learned.kv)),
    ));
    server.add_service(background_service(
        "lmcache poller",
        OccupancyPoller::new(Arc::clone(&state)),
    ));
    server.add_service(background_service("signals", SignalService::new(state)));
    server.run_forever()
}
