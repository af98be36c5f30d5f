//! Configuration errors, printed the way `nginx -t` prints them:
//! `conf/rolter.toml:12: routes[1].targets[0].provider: unknown provider "gpu-z"`.
//!
//! The line and the field are optional: a file that cannot be read has
//! neither, a TOML syntax error has a line but no field.

use std::fmt;

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file as it was named to [`crate::config::load`] or
    /// [`crate::config::parse`].
    pub file: String,
    /// 1-based line the problem was found on, when it could be located.
    pub line: Option<usize>,
    /// Field path such as `routes[1].targets[0].provider`, when the problem
    /// belongs to one field or table.
    pub field: Option<String>,
    /// What is wrong, never containing a secret's value.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in one configuration file, in file order. Never empty
/// when returned as an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The errors, in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }
}

impl fmt::Display for ConfigErrors {
    /// One error per line, no trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> Self {
        ConfigErrors(vec![error])
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_has_file_line_field_and_message() {
        let error = ConfigError {
            file: "conf/rolter.toml".into(),
            line: Some(12),
            field: Some("routes[1].targets[0].provider".into()),
            message: "unknown provider \"gpu-z\" (known: gpu-a, gpu-b)".into(),
        };
        assert_eq!(
            error.to_string(),
            "conf/rolter.toml:12: routes[1].targets[0].provider: unknown provider \"gpu-z\" (known: gpu-a, gpu-b)"
        );
    }

    #[test]
    fn display_omits_unknown_line_and_field() {
        let error = ConfigError {
            file: "rolter.toml".into(),
            line: None,
            field: None,
            message: "cannot read file: not found".into(),
        };
        assert_eq!(
            error.to_string(),
            "rolter.toml: cannot read file: not found"
        );
    }

    #[test]
    fn errors_display_one_per_line() {
        let one = ConfigError {
            file: "a.toml".into(),
            line: Some(1),
            field: None,
            message: "first".into(),
        };
        let two = ConfigError {
            line: Some(2),
            message: "second".into(),
            ..one.clone()
        };
        assert_eq!(
            ConfigErrors(vec![one, two]).to_string(),
            "a.toml:1: first\na.toml:2: second"
        );
    }
}
