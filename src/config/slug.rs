//! Provider slugs: the identifiers of `<slug>/<model>` addresses, metrics
//! labels and the `x-rolter-target` header. A slug is a DNS label without
//! uppercase: `^[a-z0-9][a-z0-9-]{0,62}$`.

/// Longest slug, in bytes (slugs are ASCII): a DNS label's limit.
pub const MAX_SLUG_LEN: usize = 63;

/// The slug a provider gets when its table sets none: `name` lowercased,
/// every run of characters outside `[a-z0-9]` turned into one '-', leading
/// and trailing '-' trimmed, then cut to 63 characters. The result is empty
/// when `name` has no ASCII letter or digit; validation rejects that.
pub fn derive_slug(name: &str) -> String {
    let mut slug = String::with_capacity(name.len().min(MAX_SLUG_LEN));
    let mut pending_dash = false;
    for c in name.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            // A dash is only written between two kept characters, which
            // trims both ends.
            if pending_dash && !slug.is_empty() {
                slug.push('-');
            }
            pending_dash = false;
            slug.push(c);
        } else {
            pending_dash = true;
        }
    }
    slug.truncate(MAX_SLUG_LEN);
    slug
}

/// Whether `slug` matches `^[a-z0-9][a-z0-9-]{0,62}$`.
pub fn is_valid_slug(slug: &str) -> bool {
    let bytes = slug.as_bytes();
    match bytes.split_first() {
        None => false,
        Some((first, rest)) => {
            bytes.len() <= MAX_SLUG_LEN
                && (first.is_ascii_lowercase() || first.is_ascii_digit())
                && rest
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derive_slug_lowercases_and_collapses_separators() {
        assert_eq!(derive_slug("Edge fleet"), "edge-fleet");
        assert_eq!(derive_slug("GPU  A__(east)"), "gpu-a-east");
        assert_eq!(derive_slug("gpu-a"), "gpu-a");
        assert_eq!(derive_slug("Qwen/Qwen3-8B"), "qwen-qwen3-8b");
    }

    #[test]
    fn derive_slug_trims_dashes_at_both_ends() {
        assert_eq!(derive_slug("  --Big Box!-- "), "big-box");
        assert_eq!(derive_slug("Émile's GPU"), "mile-s-gpu");
    }

    #[test]
    fn derive_slug_is_empty_without_ascii_alphanumerics() {
        assert_eq!(derive_slug("!!! ---"), "");
        assert_eq!(derive_slug("日本"), "");
        assert_eq!(derive_slug(""), "");
    }

    #[test]
    fn derive_slug_truncates_to_63_characters() {
        let slug = derive_slug(&"a".repeat(100));
        assert_eq!(slug.len(), 63);
        assert!(is_valid_slug(&slug));
    }

    #[test]
    fn derived_slugs_are_valid_when_not_empty() {
        for name in ["x", "A b C", "9-lives", "a".repeat(62).as_str(), "--x--y--"] {
            assert!(is_valid_slug(&derive_slug(name)), "{name}");
        }
    }

    #[test]
    fn slug_pattern_is_enforced() {
        assert!(is_valid_slug("gpu-a"));
        assert!(is_valid_slug("0"));
        assert!(is_valid_slug(&"b".repeat(63)));
        assert!(!is_valid_slug(""));
        assert!(!is_valid_slug("-gpu"));
        assert!(!is_valid_slug("GPU"));
        assert!(!is_valid_slug("gpu_a"));
        assert!(!is_valid_slug("gpu/a"));
        assert!(!is_valid_slug(&"b".repeat(64)));
    }
}
