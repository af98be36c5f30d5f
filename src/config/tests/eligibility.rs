//! `[health]`, `[breaker]` and `[parking]`: the defaults of docs/design/defaults.md, the
//! bounds of every field, and the two rules that tie fields together.

use super::*;

/// Every error of `text` as `(field, line, message)`.
fn reported(text: &str) -> Vec<(String, Option<usize>, String)> {
    errors(text)
        .into_iter()
        .map(|e| (field(&e).to_owned(), e.line, e.message))
        .collect()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn empty_sections_get_the_decisions_md_defaults() {
    let config = ok("[health]\n\n[breaker]\n\n[parking]\n");
    let health = Health {
        enabled: true,
        interval: secs(10),
        timeout: secs(2),
        unhealthy_after: 3,
        healthy_after: 2,
    };
    let breaker = Breaker {
        enabled: true,
        failure_threshold: 5,
        open: secs(30),
    };
    let parking = Parking {
        base: secs(5),
        max: secs(300),
    };
    assert_eq!(config.health, health);
    assert_eq!(config.breaker, breaker);
    assert_eq!(config.parking, parking);
    // The types' own defaults are the same numbers.
    assert_eq!(
        (Health::default(), Breaker::default(), Parking::default()),
        (health, breaker, parking)
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn full_sections_are_taken_as_written_at_their_bounds() {
    let config = ok(r#"
[health]
enabled = false
interval_secs = 3600
timeout_secs = 3599
unhealthy_after = 100
healthy_after = 1

[breaker]
enabled = false
failure_threshold = 1000
open_secs = 1

[parking]
base_secs = 3600
max_secs = 86400
"#);
    assert_eq!(
        config.health,
        Health {
            enabled: false,
            interval: secs(3600),
            timeout: secs(3599),
            unhealthy_after: 100,
            healthy_after: 1,
        }
    );
    assert_eq!(
        config.breaker,
        Breaker {
            enabled: false,
            failure_threshold: 1000,
            open: secs(1),
        }
    );
    assert_eq!(
        config.parking,
        Parking {
            base: secs(3600),
            max: secs(86400),
        }
    );

    let config = ok("[health]\ninterval_secs = 2\ntimeout_secs = 1\nunhealthy_after = 1\nhealthy_after = 100\n\n[breaker]\nfailure_threshold = 1\nopen_secs = 3600\n\n[parking]\nbase_secs = 1\nmax_secs = 1\n");
    assert_eq!(
        (config.health.interval, config.health.timeout),
        (secs(2), secs(1))
    );
    assert_eq!(config.breaker.failure_threshold, 1);
    assert_eq!(config.breaker.open, secs(3600));
    assert_eq!(
        config.parking,
        Parking {
            base: secs(1),
            max: secs(1)
        }
    );
}

#[test]
fn health_interval_must_be_between_one_second_and_an_hour() {
    let error = only_error("[health]\ninterval_secs = 0\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:2: health.interval_secs: must be between 1 and 3600 seconds (got 0)"
    );
    // The default written in milliseconds.
    let error = only_error("[health]\ninterval_secs = 10000\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:2: health.interval_secs: must be between 1 and 3600 seconds (got 10000); the unit is seconds, not milliseconds"
    );
}

#[test]
fn health_timeout_must_be_at_least_one_second() {
    let error = only_error("[health]\ntimeout_secs = 0\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:2: health.timeout_secs: must be at least 1 second (got 0)"
    );
}

#[test]
fn health_timeout_must_be_below_the_interval() {
    // Both written: reported at the timeout, naming both.
    let error = only_error("[health]\ninterval_secs = 5\ntimeout_secs = 5\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:3: health.timeout_secs: must be less than health.interval_secs (got timeout_secs = 5, interval_secs = 5): a probe must end before the next one starts"
    );
    // The interval left at its default: said so.
    let error = only_error("[health]\ntimeout_secs = 2000\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:2: health.timeout_secs: must be less than health.interval_secs (got timeout_secs = 2000, interval_secs = 10 by default): a probe must end before the next one starts"
    );
    // Only the interval written: reported there.
    let error = only_error("[health]\nenabled = true\ninterval_secs = 2\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:3: health.interval_secs: must be greater than health.timeout_secs (got interval_secs = 2, timeout_secs = 2 by default): a probe must end before the next one starts"
    );
    // Switched off, the section is still checked: it will be switched on.
    let error = only_error("[health]\nenabled = false\ninterval_secs = 1\n");
    assert_eq!(field(&error), "health.interval_secs");
}

#[test]
fn health_thresholds_must_be_between_1_and_100() {
    let text = "[health]\nunhealthy_after = 0\nhealthy_after = 101\n";
    assert_eq!(
        reported(text),
        [
            (
                "health.unhealthy_after".to_owned(),
                Some(2),
                "must be between 1 and 100 (got 0)".to_owned()
            ),
            (
                "health.healthy_after".to_owned(),
                Some(3),
                "must be between 1 and 100 (got 101)".to_owned()
            ),
        ]
    );
    // Beyond u32 is a range error too, not a type error.
    let error = only_error("[health]\nhealthy_after = 4294967296\n");
    assert_eq!(error.message, "must be between 1 and 100 (got 4294967296)");
}

#[test]
fn breaker_failure_threshold_must_be_between_1_and_1000() {
    for (written, message) in [
        ("0", "must be between 1 and 1000 (got 0)"),
        ("1001", "must be between 1 and 1000 (got 1001)"),
    ] {
        let error = only_error(&format!("[breaker]\nfailure_threshold = {written}\n"));
        assert_eq!(field(&error), "breaker.failure_threshold");
        assert_eq!(error.line, Some(2));
        assert_eq!(error.message, message);
    }
}

#[test]
fn breaker_open_secs_must_be_between_one_second_and_an_hour() {
    let text = "[breaker]\nenabled = true\nopen_secs = 0\n";
    assert_eq!(
        reported(text),
        [(
            "breaker.open_secs".to_owned(),
            Some(3),
            "must be between 1 and 3600 seconds (got 0)".to_owned()
        )]
    );
    let error = only_error("[breaker]\nopen_secs = 30000\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:2: breaker.open_secs: must be between 1 and 3600 seconds (got 30000); the unit is seconds, not milliseconds"
    );
}

#[test]
fn parking_durations_are_bounded() {
    let text = "[parking]\nbase_secs = 0\nmax_secs = 300000\n";
    assert_eq!(
        reported(text),
        [
            (
                "parking.base_secs".to_owned(),
                Some(2),
                "must be between 1 and 3600 seconds (got 0)".to_owned()
            ),
            (
                "parking.max_secs".to_owned(),
                Some(3),
                "must be between 1 and 86400 seconds (got 300000); the unit is seconds, not milliseconds".to_owned()
            ),
        ]
    );
    let error = only_error("[parking]\nbase_secs = 5000\nmax_secs = 86400\n");
    assert_eq!(
        error.message,
        "must be between 1 and 3600 seconds (got 5000); the unit is seconds, not milliseconds"
    );
}

#[test]
fn parking_max_must_not_be_below_base() {
    let error = only_error("[parking]\nbase_secs = 5\nmax_secs = 4\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:3: parking.max_secs: must be at least parking.base_secs (got max_secs = 4, base_secs = 5): the cap cannot be shorter than the base"
    );
    let error = only_error("[parking]\nmax_secs = 4\n");
    assert_eq!(
        error.message,
        "must be at least parking.base_secs (got max_secs = 4, base_secs = 5 by default): the cap cannot be shorter than the base"
    );
    // Only the base written, above the default cap: reported there.
    let error = only_error("[parking]\nbase_secs = 600\n");
    assert_eq!(
        error.to_string(),
        "conf/rolter.toml:2: parking.base_secs: must be at most parking.max_secs (got base_secs = 600, max_secs = 300 by default): the cap cannot be shorter than the base"
    );
}

#[test]
fn a_field_out_of_bounds_is_not_also_judged_against_its_pair() {
    let text =
        "[health]\ninterval_secs = 0\ntimeout_secs = 2\n\n[parking]\nbase_secs = 5\nmax_secs = 0\n";
    let fields: Vec<String> = reported(text).into_iter().map(|(f, _, _)| f).collect();
    assert_eq!(fields, ["health.interval_secs", "parking.max_secs"]);
}

#[test]
fn unknown_keys_and_wrong_types_name_the_field() {
    let error = only_error("[health]\ninterval_ms = 10000\n");
    assert_eq!(field(&error), "health.interval_ms");
    assert_eq!(error.line, Some(2));
    assert!(
        error.message.contains("unknown field `interval_ms`"),
        "{error}"
    );

    for text in [
        "[breaker]\nopen_secs = \"30s\"\n",
        "[breaker]\nopen_secs = 1.5\n",
        "[breaker]\nopen_secs = -1\n",
    ] {
        let error = only_error(text);
        assert_eq!(field(&error), "breaker.open_secs", "{text}");
        assert_eq!(error.line, Some(2));
    }
    let error = only_error("[parking]\nenabled = true\n");
    assert_eq!(field(&error), "parking.enabled");
}

// ---- [saturation], [flow_control], api_keys.priority ---------------------------

#[test]
fn saturation_and_flow_control_default_to_llm_ds_thresholds_and_off() {
    let config = ok("");
    assert_eq!(config.saturation.max_waiting, 5);
    assert_eq!(config.saturation.max_kv_usage(), 0.8);
    assert!(!config.flow_control.enabled);
    assert_eq!(config.flow_control.max_queued, 1_000);
    assert_eq!(config.flow_control.max_wait, Duration::from_secs(30));
    let set = ok("[saturation]\nmax_waiting = 12\nmax_kv_usage = 0.95\n\n[flow_control]\nenabled = true\nmax_queued = 50\nmax_wait_secs = 5\n");
    assert_eq!(set.saturation.max_waiting, 12);
    assert_eq!(set.saturation.max_kv_usage_milli, 950);
    assert!(set.flow_control.enabled);
    assert_eq!(set.flow_control.max_queued, 50);
    assert_eq!(set.flow_control.max_wait, Duration::from_secs(5));
}

#[test]
fn saturation_and_flow_control_refuse_what_cannot_mean_anything() {
    for (text, field, says) in [
        (
            "[saturation]\nmax_kv_usage = 80\n",
            "saturation.max_kv_usage",
            "0.8 for 80 percent",
        ),
        (
            "[saturation]\nmax_kv_usage = 0.0\n",
            "saturation.max_kv_usage",
            "above 0 and at most 1",
        ),
        (
            "[saturation]\nmax_kv_usage = nan\n",
            "saturation.max_kv_usage",
            "above 0 and at most 1",
        ),
        (
            "[saturation]\nmax_waiting = 0\n",
            "saturation.max_waiting",
            "between 1 and",
        ),
        (
            "[flow_control]\nmax_queued = 0\n",
            "flow_control.max_queued",
            "between 1 and",
        ),
        (
            "[flow_control]\nmax_wait_secs = 30000\n",
            "flow_control.max_wait_secs",
            "not milliseconds",
        ),
    ] {
        let error = only_error(text);
        assert_eq!(error.field.as_deref(), Some(field), "{text}");
        assert_eq!(error.line, Some(2), "{text}");
        assert!(error.message.contains(says), "{text}: {}", error.message);
    }
}

#[test]
fn flow_control_without_anything_that_saturates_is_warned_about() {
    let provider = "[[providers]]\nname = \"gpu-a\"\nbase_url = \"http://10.0.0.11:8000\"\n";
    let text = format!("{provider}\n[flow_control]\nenabled = true\n");
    let warning = only_warning(&text);
    assert_eq!(warning.field.as_deref(), Some("flow_control.enabled"));
    assert_eq!(warning.line, line(&text, "enabled = true"));
    assert!(
        warning.message.contains("no engine is ever saturated"),
        "{}",
        warning.message
    );
    let limited = format!("{provider}max_concurrency = 4\n\n[flow_control]\nenabled = true\n");
    assert!(warnings(&limited).is_empty());
}
