//! `[tracing]`: where spans go and how many.

use super::super::endpoint;
use super::super::{file, TracingConfig};
use super::eligibility::Unit;
use super::Validator;

impl Validator<'_> {
    pub(super) fn tracing(&mut self, table: file::TracingTable) -> Option<TracingConfig> {
        let errors_before = self.errors.len();
        let otlp_endpoint = self.required("tracing.otlp_endpoint", table.otlp_endpoint);
        if let Some(written) = &otlp_endpoint {
            if let Err(error) = endpoint::check_http(written) {
                self.error("tracing.otlp_endpoint", error.to_string());
            }
        }
        let ratio = table.sampling_ratio.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&ratio) {
            self.error(
                "tracing.sampling_ratio",
                format!("must be between 0 and 1 (got {ratio}); 0.1 keeps one trace in ten"),
            );
        }
        let service_name = table
            .service_name
            .unwrap_or_else(|| file::DEFAULT_TRACING_SERVICE_NAME.to_string());
        if service_name.trim().is_empty() {
            self.error("tracing.service_name", "must not be empty");
        }
        let max_queued_spans = self
            .bounded(
                "tracing.max_queued_spans",
                table.max_queued_spans,
                file::DEFAULT_TRACING_MAX_QUEUED_SPANS,
                file::MAX_TRACING_MAX_QUEUED_SPANS,
                Unit::Count,
            )
            .unwrap_or(file::DEFAULT_TRACING_MAX_QUEUED_SPANS);
        if self.errors.len() > errors_before {
            return None;
        }
        Some(TracingConfig {
            otlp_endpoint: otlp_endpoint?.trim().to_string(),
            sampling_ppm: (ratio * 1_000_000.0).round() as u32,
            service_name,
            // Within 1..=1000000: fits.
            max_queued_spans: max_queued_spans as usize,
        })
    }
}
