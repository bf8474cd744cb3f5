//! The harness every workload shares: start a `herald serve` child ([`server`]), sample CPU
//! per process and per server thread ([`cpu`]), limit the CPU of its matching cells ([`cgroup`]), wait for a quiet machine ([`quiet`]), record
//! latency histograms per interval ([`record`]), draw SVG charts ([`chart`]), search a capacity
//! ([`search`]), and a lean HTTP/1.1 load client ([`loadgen`]).

pub mod cgroup;
pub mod chart;
pub mod cpu;
pub mod loadgen;
pub mod quiet;
pub mod record;
pub mod search;
pub mod server;

pub use herald_db::Durability;
pub use server::durability_name;

/// How long the benchmarks' HTTP clients keep an idle pooled connection (see
/// [`herald::CLIENT_POOL_IDLE`]: under the server's header timeout, so a client never reuses a
/// connection the server is closing).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    herald::http_client_builder()
}

/// An HTTP client for talking to the server under test.
pub fn http_client() -> reqwest::Client {
    herald::http_client()
}

/// `1234567` -> `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(400_000), "400,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
