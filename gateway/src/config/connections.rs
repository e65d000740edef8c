//! `--header-timeout`, `--body-timeout`, `--idle-timeout`, `--write-timeout`, `--max-connections`,
//! `--max-in-flight`, `--max-in-flight-per-key`, `--max-media-in-flight`: what the edge (`edge::serve`,
//! `edge::in_flight`) allows connections and requests.

use std::time::Duration;

/// Connection and concurrency limits. [`Default`] gives the command line's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `--header-timeout SECS`: from a request's first byte to its complete head (default 10).
    pub header_timeout: Duration,
    /// `--body-timeout SECS`: how long a request body may go without a byte arriving, from the head on
    /// (default 30).
    pub body_timeout: Duration,
    /// `--idle-timeout SECS`: how long a connection may stay open with no request in flight, no response being
    /// written and no byte of a new request received (default 60).
    pub idle_timeout: Duration,
    /// `--write-timeout SECS`: how long a response may wait to write its next byte (over HTTP/2: its next
    /// 16 KiB piece) because the client is not reading; past it the connection is closed (default 30).
    pub write_timeout: Duration,
    /// `--max-connections N`: open connections; more are answered `503` and closed (default 16384; lowered at
    /// start to what the open-files limit allows).
    pub max_connections: usize,
    /// `--max-in-flight N`: requests being handled, streaming responses included; more get `503` with
    /// `Retry-After` (default 4096).
    pub max_in_flight: usize,
    /// `--max-in-flight-per-key N`: requests in flight per caller (gateway key); more get `429` with
    /// `Retry-After` (default 256).
    pub max_in_flight_per_key: usize,
    /// `--max-media-in-flight BYTES`: the decoded media (images, audio, files) of all requests in flight
    /// together; a request that would pass it gets `503` with `Retry-After` (default 256 MiB). A request's media
    /// is held from its parsing to its response's last byte, as its base64 (counted here by its decoded size):
    /// this bounds that memory.
    pub max_media_in_flight: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_connections: 16_384,
            max_in_flight: 4096,
            max_in_flight_per_key: 256,
            max_media_in_flight: 256 << 20,
        }
    }
}
