//! The `rolter` command.

use clap::{Parser, Subcommand};

use rolter::{config, control, demo, serve};
use rolter_fake_llm as fake_llm;

// jemalloc rather than glibc's malloc: the request path allocates and frees
// small buffers on every worker thread; see Cargo.toml. The `heap-profile`
// build keeps the system's, which valgrind can follow.
#[cfg(not(feature = "heap-profile"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: freed pages stay with the
/// process until `rolter::allocator`'s purge gives them back (its decay
/// returned them after every request that churned large buffers).
/// `_RJEM_MALLOC_CONF` in the environment still overrides it.
#[cfg(not(feature = "heap-profile"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Option<&'static std::ffi::c_char> =
    // SAFETY: a pointer to the first byte of a static NUL-terminated string.
    Some(unsafe { &*c"dirty_decay_ms:-1".as_ptr() });

#[derive(Parser)]
#[command(
    name = "rolter",
    version,
    about = "An LLM inference gateway on Pingora"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (Pingora's -c, -u, -d, -t keep their meaning).
    Serve(serve::ServeArgs),
    /// Validate rolter.toml and exit non-zero with the reasons, like `nginx -t`.
    Check {
        #[arg(long, value_name = "FILE", default_value = "conf/rolter.toml")]
        config: std::path::PathBuf,
    },
    /// Run an OpenAI-compatible fake engine (tests, demos, load tests).
    FakeLlm(Box<fake_llm::FakeLlmArgs>),
    /// Run three fake engines and the gateway on the embedded demo configuration.
    Demo(demo::DemoArgs),
    /// Apply migrations/ to the control plane's PostgreSQL database (a second run is a no-op).
    Migrate(control::store::MigrateArgs),
    /// Print the admin listener's OpenAPI document (what `GET /openapi.json` serves).
    Openapi,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let code = match Cli::parse().command {
        Command::Serve(args) => serve::run(args),
        Command::Check { config } => check(&config),
        Command::FakeLlm(args) => fake_llm::run(*args),
        Command::Demo(args) => demo::run(args),
        Command::Migrate(args) => control::store::run_migrate(args),
        Command::Openapi => {
            println!("{}", rolter::admin::openapi::document());
            0
        }
    };
    std::process::exit(code);
}

fn check(path: &std::path::Path) -> i32 {
    match config::load(path) {
        Ok(config) => {
            for warning in &config.warnings {
                eprintln!("warning: {warning}");
            }
            println!(
                "rolter: configuration file {} test is successful ({} providers, {} routes)",
                path.display(),
                config.providers.len(),
                config.routes.len()
            );
            0
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("rolter: configuration file {} test failed", path.display());
            1
        }
    }
}
