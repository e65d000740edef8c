//! The local services a test needs (PostgreSQL, Redis), found in the environment or skipped visibly.

/// The PostgreSQL URL in `DATABASE_URL`, or `None` after a visible `SKIPPED` line (a failure under CI).
pub fn database_url() -> Option<String> {
    tower_chat::test_server::service_url("DATABASE_URL")
}

/// The Redis URL in `REDIS_URL`, or `None` after a visible `SKIPPED` line (a failure under CI).
pub fn redis_url() -> Option<String> {
    tower_chat::test_server::service_url("REDIS_URL")
}
