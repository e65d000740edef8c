//! Pending approvals and the audit log in SQL: [`SqliteApprovalStore`] and [`PostgresApprovalStore`], next to
//! the persistence crate's call records in the same SQLite file or PostgreSQL pool.
//!
//! The tables are this crate's: its migration (`tower-chat-approval/0001_tables`) creates them through the
//! persistence crate's migration runner when a store is built. Databases created before the tables moved here
//! already have them (from the retired `tower-chat-persistence/0002_approvals`); the migration only creates what
//! is missing, so they are used as they are.

#[cfg(feature = "postgres")]
mod postgres;
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::PostgresApprovalStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteApprovalStore;
