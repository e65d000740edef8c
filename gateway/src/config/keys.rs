//! `[keys]`: how the managed keys' table is kept current (see `keys::table`).

use std::time::Duration;

use serde::Deserialize;

/// The `[keys]` table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysSection {
    /// How often, in seconds, the store's version counter is compared when no change was announced (default 5,
    /// at least 1): the backstop for a `NOTIFY` missed while the listening connection was down, and how soon
    /// processes sharing one SQLite file see each other's changes. A long interval leaves PostgreSQL replicas
    /// to their notifications alone.
    pub recheck_seconds: Option<u64>,
}

impl KeysSection {
    /// The default backstop interval.
    pub const DEFAULT_RECHECK: Duration = Duration::from_secs(5);

    /// The backstop interval, or why the table's value is refused (zero).
    pub fn recheck(&self) -> Result<Duration, String> {
        match self.recheck_seconds {
            None => Ok(Self::DEFAULT_RECHECK),
            Some(0) => Err("[keys] recheck_seconds must be at least 1".to_owned()),
            Some(seconds) => Ok(Duration::from_secs(seconds)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recheck_interval_defaults_to_five_seconds_and_refuses_zero() {
        assert_eq!(KeysSection::default().recheck(), Ok(Duration::from_secs(5)));
        let hour = KeysSection {
            recheck_seconds: Some(3600),
        };
        assert_eq!(hour.recheck(), Ok(Duration::from_secs(3600)));
        let zero = KeysSection {
            recheck_seconds: Some(0),
        };
        assert!(zero.recheck().unwrap_err().contains("recheck_seconds"));
    }
}
