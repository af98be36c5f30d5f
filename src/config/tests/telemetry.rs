//! `[providers.kv_events]` and `[providers.lmcache]`.

use super::*;

fn with_table(table: &str) -> String {
    format!("[[providers]]\nname = \"gpu-a\"\nbase_url = \"http://10.0.0.11:8000\"\n{table}")
}

fn kv(body: &str) -> String {
    with_table(&format!("[providers.kv_events]\n{body}"))
}

fn lmcache(body: &str) -> String {
    with_table(&format!("[providers.lmcache]\n{body}"))
}

// ---- kv_events -----------------------------------------------------------------

#[test]
fn kv_events_needs_only_an_endpoint() {
    let config = ok(&kv("endpoint = \"tcp://10.0.0.11:5557\"\n"));
    assert_eq!(
        config.providers[0].kv_events,
        Some(KvEvents {
            endpoint: "tcp://10.0.0.11:5557".into(),
            replay_endpoint: None,
            topic: String::new(),
            block_size: 16,
            data_parallel_size: 1,
        })
    );
}

#[test]
fn kv_events_endpoints_are_normalized_and_ranks_shift_ports() {
    let text = kv("endpoint = \"TCP://Engine-A:5557\"\nreplay_endpoint = \"tcp://[FD00::11]:6557\"\ntopic = \"kv\"\nblock_size = 32\ndata_parallel_size = 4\n");
    let events = ok(&text).providers[0].kv_events.clone().unwrap();
    assert_eq!(events.endpoint, "tcp://engine-a:5557");
    assert_eq!(
        events.replay_endpoint.as_deref(),
        Some("tcp://[fd00::11]:6557")
    );
    assert_eq!((events.topic.as_str(), events.block_size), ("kv", 32));
    assert_eq!(events.data_parallel_size, 4);
    assert_eq!(events.endpoint_of_rank(0), "tcp://engine-a:5557");
    assert_eq!(events.endpoint_of_rank(3), "tcp://engine-a:5560");
    assert_eq!(
        events.replay_endpoint_of_rank(3).as_deref(),
        Some("tcp://[fd00::11]:6560")
    );
    let no_replay = ok(&kv("endpoint = \"tcp://h:1\"\n")).providers[0]
        .kv_events
        .clone()
        .unwrap();
    assert_eq!(no_replay.replay_endpoint_of_rank(0), None);
}

#[test]
fn kv_events_endpoint_is_required() {
    let text = kv("topic = \"\"\n");
    let error = only_error(&text);
    assert_eq!(field(&error), "providers[0].kv_events.endpoint");
    assert_eq!(error.line, line(&text, "[providers.kv_events]"));
    assert_eq!(error.message, "is required");
}

#[test]
fn kv_events_bind_address_is_refused_with_a_hint() {
    for (bind, port) in [
        ("tcp://*:5557", "5557"),
        ("tcp://0.0.0.0:5557", "5557"),
        ("tcp://[::]:6000", "6000"),
    ] {
        let text = kv(&format!("endpoint = \"{bind}\"\n"));
        let error = only_error(&text);
        assert_eq!(field(&error), "providers[0].kv_events.endpoint");
        assert_eq!(error.line, line(&text, "endpoint ="));
        assert_eq!(
            error.message,
            format!("{bind:?} is the engine's bind address: the engine binds, rolter connects; name the engine's host (e.g. \"tcp://10.0.0.11:{port}\")")
        );
    }
    let error = only_error(&kv(
        "endpoint = \"tcp://h:1\"\nreplay_endpoint = \"tcp://*:5558\"\n",
    ));
    assert_eq!(field(&error), "providers[0].kv_events.replay_endpoint");
}

#[test]
fn kv_events_endpoints_must_be_tcp_host_and_port() {
    for (endpoint, message) in [
        (
            "ipc:///tmp/kv",
            "\"ipc:///tmp/kv\" is not a tcp://host:port endpoint (rolter subscribes over TCP; ipc:// and inproc:// are local to the engine)",
        ),
        ("tcp://h", "\"tcp://h\" has no port: write tcp://host:port"),
        ("tcp://h:0", "port \"0\" is not a number from 1 to 65535"),
        ("tcp://h:65536", "port \"65536\" is not a number from 1 to 65535"),
        ("tcp://:5557", "host \"\" is not a valid host name or IP address"),
    ] {
        let error = only_error(&kv(&format!("endpoint = \"{endpoint}\"\n")));
        assert_eq!(field(&error), "providers[0].kv_events.endpoint");
        assert_eq!(error.message, message);
    }
}

#[test]
fn kv_block_size_is_one_to_1024() {
    assert_eq!(
        ok(&kv("endpoint = \"tcp://h:1\"\nblock_size = 1024\n")).providers[0]
            .kv_events
            .as_ref()
            .unwrap()
            .block_size,
        1024
    );
    for bad in [0, 1025] {
        let text = kv(&format!("endpoint = \"tcp://h:1\"\nblock_size = {bad}\n"));
        let error = only_error(&text);
        assert_eq!(field(&error), "providers[0].kv_events.block_size");
        assert_eq!(error.line, line(&text, "block_size"));
        assert_eq!(
            error.message,
            format!("must be between 1 and 1024 (got {bad}); set it to the engine's --block-size")
        );
    }
}

#[test]
fn data_parallel_size_is_one_to_64() {
    for bad in [0, 65] {
        let error = only_error(&kv(&format!(
            "endpoint = \"tcp://h:1\"\ndata_parallel_size = {bad}\n"
        )));
        assert_eq!(field(&error), "providers[0].kv_events.data_parallel_size");
        assert_eq!(
            error.message,
            format!("must be between 1 and 64 (got {bad})")
        );
    }
}

#[test]
fn every_rank_port_must_fit() {
    let fits = kv("endpoint = \"tcp://h:65472\"\ndata_parallel_size = 64\n");
    assert_eq!(
        ok(&fits).providers[0]
            .kv_events
            .as_ref()
            .unwrap()
            .endpoint_of_rank(63),
        "tcp://h:65535"
    );
    let text = kv("endpoint = \"tcp://h:65530\"\nreplay_endpoint = \"tcp://h:65000\"\ndata_parallel_size = 8\n");
    let error = only_error(&text);
    assert_eq!(field(&error), "providers[0].kv_events.data_parallel_size");
    assert_eq!(
        error.message,
        "8 ranks publish on ports 65530 to 65537 of endpoint \"tcp://h:65530\", past 65535"
    );
}

#[test]
fn replay_ports_must_not_be_live_ports() {
    let error = only_error(&kv(
        "endpoint = \"tcp://h:5557\"\nreplay_endpoint = \"tcp://H:5557\"\n",
    ));
    assert_eq!(field(&error), "providers[0].kv_events.replay_endpoint");
    assert_eq!(
        error.message,
        "\"tcp://h:5557\" is also the live endpoint: the engine's PUB and ROUTER sockets need ports of their own"
    );
    let error = only_error(&kv(
        "endpoint = \"tcp://h:5557\"\nreplay_endpoint = \"tcp://h:5558\"\ndata_parallel_size = 2\n",
    ));
    assert_eq!(
        error.message,
        "the replay ports 5558 to 5559 overlap the live ports 5557 to 5558 (2 ranks each): the engine's PUB and ROUTER sockets need ports of their own"
    );
    // Apart by the rank count, or on another host: fine.
    ok(&kv(
        "endpoint = \"tcp://h:5557\"\nreplay_endpoint = \"tcp://h:5559\"\ndata_parallel_size = 2\n",
    ));
    ok(&kv(
        "endpoint = \"tcp://h:5557\"\nreplay_endpoint = \"tcp://g:5557\"\n",
    ));
}

#[test]
fn kv_events_rejects_unknown_keys() {
    let text = kv("endpoint = \"tcp://h:1\"\nblocksize = 16\n");
    let error = only_error(&text);
    assert_eq!(field(&error), "providers[0].kv_events.blocksize");
    assert_eq!(error.line, line(&text, "blocksize"));
}

#[test]
fn a_bad_kv_events_table_fails_its_provider_without_noise() {
    let text = format!(
        "{}\n[[routes]]\nmodel = \"m\"\ntargets = [{{ provider = \"gpu-a\" }}]\n",
        kv("endpoint = \"tcp://*:1\"\n")
    );
    assert_eq!(field(&only_error(&text)), "providers[0].kv_events.endpoint");
}

// ---- lmcache --------------------------------------------------------------------

#[test]
fn lmcache_needs_only_an_endpoint() {
    let config = ok(&lmcache("endpoint = \"http://10.0.0.11:9000/occupancy\"\n"));
    assert_eq!(
        config.providers[0].lmcache,
        Some(Lmcache {
            endpoint: "http://10.0.0.11:9000/occupancy".into(),
            format: LmcacheFormat::Json,
            poll_interval: Duration::from_secs(2),
            stale_after: Duration::from_secs(10),
        })
    );
}

#[test]
fn lmcache_reads_a_prometheus_gauge() {
    let text = lmcache("endpoint = \"https://lmc.internal/metrics?instance=a\"\nformat = \"prometheus\"\nmetric = \"lmcache:local_cache_usage\"\npoll_interval_secs = 5\nstale_after_secs = 6\n");
    let signal = ok(&text).providers[0].lmcache.clone().unwrap();
    assert_eq!(signal.endpoint, "https://lmc.internal/metrics?instance=a");
    assert_eq!(
        signal.format,
        LmcacheFormat::Prometheus {
            metric: "lmcache:local_cache_usage".into()
        }
    );
    assert_eq!(signal.poll_interval, Duration::from_secs(5));
    assert_eq!(signal.stale_after, Duration::from_secs(6));
}

#[test]
fn lmcache_metric_goes_with_the_prometheus_format_only() {
    let text = lmcache("endpoint = \"http://h\"\nformat = \"prometheus\"\n");
    let error = only_error(&text);
    assert_eq!(field(&error), "providers[0].lmcache.metric");
    assert_eq!(error.message, "is required");

    let text = lmcache("endpoint = \"http://h\"\nmetric = \"occupancy\"\n");
    let error = only_error(&text);
    assert_eq!(field(&error), "providers[0].lmcache.metric");
    assert_eq!(error.line, line(&text, "metric"));
    assert_eq!(
        error.message,
        "is read only with format = \"prometheus\"; remove it or set the format"
    );

    let error = only_error(&lmcache(
        "endpoint = \"http://h\"\nformat = \"prometheus\"\nmetric = \"lmcache-usage\"\n",
    ));
    assert_eq!(
        error.message,
        "\"lmcache-usage\" is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
    );

    let error = only_error(&lmcache("endpoint = \"http://h\"\nformat = \"xml\"\n"));
    assert_eq!(field(&error), "providers[0].lmcache.format");
    assert_eq!(
        error.message,
        "unknown format \"xml\" (known: json, prometheus)"
    );
}

#[test]
fn lmcache_endpoint_is_an_http_url_with_a_host() {
    let error = only_error(&lmcache("format = \"json\"\n"));
    assert_eq!(field(&error), "providers[0].lmcache.endpoint");
    assert_eq!(error.message, "is required");
    for (endpoint, message) in [
        (
            "tcp://h:9000",
            "\"tcp://h:9000\" must start with http:// or https://",
        ),
        ("http:///occupancy", "\"http:///occupancy\" has no host"),
        (
            "http://h/x#y",
            "must not have a fragment (#): it is never sent to the server",
        ),
        ("http://u:p@h/", "must not carry credentials (user@host)"),
        (
            "http://h:99999/",
            "port \"99999\" is not a number from 1 to 65535",
        ),
    ] {
        let error = only_error(&lmcache(&format!("endpoint = \"{endpoint}\"\n")));
        assert_eq!(field(&error), "providers[0].lmcache.endpoint");
        assert_eq!(error.message, message);
    }
}

#[test]
fn lmcache_signal_goes_stale_after_more_than_one_poll() {
    let at = |body: &str| {
        let error = only_error(&lmcache(&format!("endpoint = \"http://h\"\n{body}")));
        (field(&error).to_owned(), error.message)
    };
    assert_eq!(
        at("poll_interval_secs = 0\n"),
        (
            "providers[0].lmcache.poll_interval_secs".into(),
            "must be between 1 and 3600 seconds (got 0)".into()
        )
    );
    assert_eq!(
        at("stale_after_secs = 2\n"),
        (
            "providers[0].lmcache.stale_after_secs".into(),
            "must be greater than poll_interval_secs (got stale_after_secs = 2, poll_interval_secs = 2 by default): a signal must outlive the interval between two polls".into()
        )
    );
    assert_eq!(
        at("poll_interval_secs = 30\n"),
        (
            "providers[0].lmcache.poll_interval_secs".into(),
            "must be less than stale_after_secs (got poll_interval_secs = 30, stale_after_secs = 10 by default): a signal must outlive the interval between two polls".into()
        )
    );
    assert_eq!(
        at("poll_interval_secs = 5000\nstale_after_secs = 9000\n").1,
        "must be between 1 and 3600 seconds (got 5000); the unit is seconds, not milliseconds"
    );
    let config = ok(&lmcache(
        "endpoint = \"http://h\"\npoll_interval_secs = 30\nstale_after_secs = 86400\n",
    ));
    let signal = config.providers[0].lmcache.as_ref().unwrap();
    assert_eq!(signal.stale_after, Duration::from_secs(86_400));
}

#[test]
fn both_signals_can_be_configured_together() {
    let text = with_table(
        "[providers.kv_events]\nendpoint = \"tcp://10.0.0.11:5557\"\n[providers.lmcache]\nendpoint = \"http://10.0.0.11:9000/occupancy\"\n",
    );
    let provider = &ok(&text).providers[0];
    assert!(provider.kv_events.is_some() && provider.lmcache.is_some());
    let debug = format!("{provider:?}");
    assert!(debug.contains("tcp://10.0.0.11:5557"), "{debug}");
}

// ---- engine_metrics, max_concurrency -------------------------------------------

fn engine_metrics(body: &str) -> String {
    with_table(&format!("[providers.engine_metrics]\n{body}"))
}

#[test]
fn engine_metrics_default_to_the_base_urls_metrics_every_half_second() {
    let config = ok(&engine_metrics(""));
    assert_eq!(
        config.providers[0].engine_metrics,
        Some(EngineMetrics {
            endpoint: "http://10.0.0.11:8000/metrics".into(),
            poll_interval: Duration::from_millis(500),
            stale_after: Duration::from_millis(3_000),
        })
    );
    let prefixed = ok("[[providers]]\nname = \"p\"\nbase_url = \"https://gpu.internal/engine-a\"\n[providers.engine_metrics]\n");
    assert_eq!(
        prefixed.providers[0]
            .engine_metrics
            .as_ref()
            .map(|m| m.endpoint.as_str()),
        Some("https://gpu.internal/engine-a/metrics"),
        "the base URL's path prefix is kept, as for every request"
    );
    let off = ok(&engine_metrics(
        "enabled = false\nendpoint = \"http://m:1/metrics\"\n",
    ));
    assert_eq!(off.providers[0].engine_metrics, None);
    assert_eq!(ok(&with_table("")).providers[0].engine_metrics, None);
}

#[test]
fn engine_metrics_bounds_name_the_field_and_its_line() {
    let text = engine_metrics("poll_interval_ms = 10\n");
    let error = only_error(&text);
    assert_eq!(
        error.field.as_deref(),
        Some("providers[0].engine_metrics.poll_interval_ms")
    );
    assert_eq!(error.line, line(&text, "poll_interval_ms"));
    assert!(
        error
            .message
            .contains("between 50 and 60000 milliseconds (got 10)"),
        "{}",
        error.message
    );

    let text = engine_metrics("poll_interval_ms = 1000\nstale_after_ms = 1000\n");
    let error = only_error(&text);
    assert_eq!(
        error.field.as_deref(),
        Some("providers[0].engine_metrics.stale_after_ms")
    );
    assert!(
        error
            .message
            .contains("must be greater than poll_interval_ms"),
        "{}",
        error.message
    );

    let error = only_error(&engine_metrics("poll_interval_ms = 5000\n"));
    assert_eq!(
        error.field.as_deref(),
        Some("providers[0].engine_metrics.poll_interval_ms"),
        "the written field is named when the other is a default"
    );
    assert!(
        error.message.contains("stale_after_ms = 3000 by default"),
        "{}",
        error.message
    );

    let error = only_error(&engine_metrics("endpoint = \"tcp://m:1\"\n"));
    assert_eq!(
        error.field.as_deref(),
        Some("providers[0].engine_metrics.endpoint")
    );
    let error = only_error(&engine_metrics("interval = 5\n"));
    assert!(
        error.message.contains("interval"),
        "unknown fields are refused: {}",
        error.message
    );
}

#[test]
fn max_concurrency_is_a_positive_count() {
    assert_eq!(
        ok(&with_table("max_concurrency = 8\n")).providers[0].max_concurrency,
        Some(8)
    );
    assert_eq!(ok(&with_table("")).providers[0].max_concurrency, None);
    let text = with_table("max_concurrency = 0\n");
    let error = only_error(&text);
    assert_eq!(error.field.as_deref(), Some("providers[0].max_concurrency"));
    assert_eq!(error.line, line(&text, "max_concurrency"));
    assert!(
        error.message.contains("between 1 and 1000000 (got 0)"),
        "{}",
        error.message
    );
}
